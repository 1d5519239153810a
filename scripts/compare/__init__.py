"""``mira compare``: declared comparisons of agent variants, from spec to report.

- ``command``: the command line (``add_parser``, ``main``), ``load_spec`` and ``run_compare``;
- ``spec``: the compare file's typed schema (variants, seeds, frames, resources, plan);
- ``trials``, ``trial_runner``, ``pbt``: running the trials (in process or as Ray actors),
  resuming, population-based training;
- ``plan``, ``plan_sections``, ``sequential``: the declared plan, its paired scores and the
  anytime-valid confidence sequences it is read with;
- ``records``, ``curves``, ``health``, ``results_csv``, ``report``, ``report_plots``,
  ``publish``: what a comparison leaves (kept records, learning curves, training health, a
  csv of scores, the Markdown report and its plots, published copies);
- ``param_match``: parameter counts and matching variants' widths.

The bootstrap statistics every run uses live in ``envs/statistics.py``, below this package.
"""
