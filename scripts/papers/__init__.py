"""Paper checks and studies: small scripts that set mira's parts beside the seed papers' results.

Each runs as ``python -m scripts.papers.NAME`` (``docs/papers.md`` lists them with their
results): ``arithmetic`` (NAU/NMU), ``copying`` (RIMs), ``toy_multitask`` (multiplicative
interactions), ``bench_cores`` (step time per core), ``atari_panel`` and ``atari_probe``
(Atari presets beside a reference, and probes of a run that does not learn), ``lab_scores``
(the lab30 score table). They use the ``mira`` commands' modules; those never import them.
"""
