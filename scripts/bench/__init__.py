"""Benchmarks: ``mira bench`` (``command``) and the stage timers it is built from.

- ``command``: the environment, the actors, the learner and the whole pipeline, timed alone
  and together (``mira bench CONFIG``);
- ``env``: raw environment stepping per suite (``python -m scripts.bench.env``);
- ``learner``: the learner's update alone on a synthetic batch
  (``python -m scripts.bench.learner``);
- ``core_time``: core time per process group, and the gap between the parts and the whole;
- ``burst``: replaying a recorded update burst.

Benchmarks print figures; no test times anything.
"""
