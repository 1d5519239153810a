"""A compare's ``csv:`` section: one table of its trials' scores, one row per trial and task.

A study's data file is this table with the columns it names, e.g.::

    csv:
      path: docs/results/data/study_heads_lab6.csv     # relative to the working directory
      columns: {variant: variant, seed: seed, frames: frames, task: task, score: score}

Each column is an output name mapped to what it holds: a trial's ``variant``, ``trial``
(its directory name), ``seed``, ``status`` (below), ``frames`` (reached), ``wall_time_s``,
``train_return`` (its last-100 training return), or with the compare file's ``threshold:``
``frames_to_threshold`` and ``minutes_to_threshold`` (its curve's first crossing; empty if
never); per task of its final evaluation, the ``task``, its
``score`` (the report's: normalised where every trial has a normalised score, else the raw
mean return), ``return`` (raw mean return) or ``normalized_score``; or a dotted key of the
trial's config (``agent.core``, ``env.game``). A compare that evaluates nothing
(``evaluate.episodes: 0``) has the same task columns from each task's last-100 training
return (``score`` and ``return`` both that raw return). A trial with no score gets one row
with the task columns empty, so every trial the report holds is in the table.

A table with a ``status`` column also holds every trial that started and is not in the
report: ``failed`` (it raised or diverged) or ``unfinished`` (short of its frames or its
evaluation when ``--report`` or a look of the plan wrote the table, or left part-way when
the plan's rule decided), one row each with its ``frames`` at its latest checkpoint, its
config keys, and every other column empty. The report's own trials are ``finished`` (a PBT
member the population left short of its frames, ``unfinished``). Without a ``status``
column an empty ``frames_to_threshold`` could not tell "never crossed" from "not there
yet", so those rows are left out. ``mira compare`` writes the table with the report,
``--report`` included; with no trial to report (none finished, or every one failed) there is
no report and no table.

``probes:`` names a second table, of the torso monitor's series (``learner.monitor``;
``records.PROBE_TAGS``: every ``torso/<layer>/inactive`` and ``.../dormant``,
``policy/spread`` and, with ``learner.redo`` on, ``redo/<layer>``), one row per point and tag
of each trial the report holds, with the columns ``variant, seed, frames, tag, value``; it
is read as the report's curves are, from the run directory's event files or the trial's
kept record, and written with the report::

    csv: {path: study.csv, columns: {...}, probes: study_probes.csv}
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

TRIAL_FIELDS = ("variant", "trial", "seed", "status", "frames", "wall_time_s", "train_return",
                "frames_to_threshold", "minutes_to_threshold")
TASK_FIELDS = ("task", "score", "return", "normalized_score")
PROBE_COLUMNS = ("variant", "seed", "frames", "tag", "value")


def _is_config_key(key: str) -> bool:
    """Whether ``key`` names a setting of a training config (options sections take any name).

    The ``env`` section's fields depend on the suite: a key there counts if any suite has it.
    """
    from envs.suites import ENVS
    from learners.config.schema import ExperimentConfig

    section, _, rest = key.partition(".")
    if section == "env":
        return any(_is_field_path(ENVS.get(name).Options(), rest) for name in ENVS)
    return _is_field_path(ExperimentConfig(), key)


def _is_field_path(node, key: str) -> bool:
    """Whether ``key`` is a dotted path of dataclass fields under ``node``."""
    for part in key.split("."):
        if isinstance(node, dict):
            return True  # a component's options: typed only once the component is chosen
        if not dataclasses.is_dataclass(node) or part not in {f.name for f in
                                                               dataclasses.fields(node)}:
            return False
        node = getattr(node, part)
    return True


@dataclass
class CsvSpec:
    """The ``csv:`` section of a compare file (see the module docstring); checked on load."""

    path: str = ""  # the table's file (relative: to the working directory); "": <out>/results.csv
    # output column -> what it holds: a trial or task field (TRIAL_FIELDS, TASK_FIELDS) or a
    # dotted config key
    columns: dict = field(default_factory=dict)
    # a table of the torso monitor's series, a row per probe and tag (PROBE_COLUMNS; relative:
    # to the working directory); "": none
    probes: str = ""

    def __post_init__(self):
        if self.path and not self.columns:
            raise ValueError("csv.path is set but csv.columns is empty: name the columns, e.g. "
                             "{seed: seed, task: task, score: score}")
        for name, source in self.columns.items():
            if not (isinstance(source, str) and (source in TRIAL_FIELDS + TASK_FIELDS
                                                 or ("." in source and _is_config_key(source)))):
                raise ValueError(f"csv.columns.{name}: {source!r} is not one of "
                                 f"{', '.join(TRIAL_FIELDS + TASK_FIELDS)} or a config key "
                                 "(e.g. agent.core)")


def check_columns(spec: CsvSpec, cfgs: list) -> None:
    """Every config-key column names a setting of at least one trial (``cfgs``: their configs).

    On load a key of the ``env`` section passes if any suite has it; here it must be a
    setting of a suite the compare trains on, or its column would be empty on every row.
    """
    from learners.config.schema import ConfigError

    for name, source in spec.columns.items():
        if source in TRIAL_FIELDS + TASK_FIELDS or any(_is_field_path(c, source) for c in cfgs):
            continue
        suites = sorted({c.env.suite for c in cfgs})
        raise ConfigError(f"csv.columns.{name}: {source!r} is not a setting of this compare's "
                          f"trials ({'suite' if len(suites) == 1 else 'suites'} "
                          f"{', '.join(suites)}); its column would be empty")


def _setting(cfg, key: str):
    node = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def rows(res: dict, trials, columns: dict, others=()) -> list[dict]:
    """The table's rows for ``collect``'s results ``res`` and the compare ``trials`` it covers.

    ``others``: the compare trials that started and are not in ``res`` (failed, or unfinished
    as ``res`` lists them), a row each where ``columns`` has a ``status`` column.
    """
    cfgs = {t.slug: t.cfg for t in [*trials, *others]}
    out = []
    crossings = (res.get("threshold") or {}).get("trials", {})
    for r in res["trials"]:
        crossing = crossings.get(r["trial"], {})
        wall = crossing.get("wall_time_s")
        target = (cfgs[r["trial"]].run.total_frames if r["trial"] in cfgs
                  else res.get("target_frames", 0))
        done = r["frames"] >= target  # short of it: a member the PBT population left behind
        trial = {"variant": r["variant"], "trial": r["trial"], "seed": r["seed"],
                 "status": "finished" if done else "unfinished", "frames": r["frames"],
                 "wall_time_s": None if r["wall_time_s"] is None else round(r["wall_time_s"], 1),
                 "train_return": r["train_return_mean100"],
                 "frames_to_threshold": crossing.get("frames"),
                 "minutes_to_threshold": None if wall is None else round(wall / 60, 2)}
        evaluated = (r["eval"] or {}).get("tasks", {})
        for task, score in (r.get("final_tasks") or {None: None}).items():
            e = evaluated.get(task, {})
            values = {**trial, "task": task, "score": score,
                      "return": e.get("return_mean", score if res.get("final") == "training"
                                      else None),
                      "normalized_score": e.get("normalized_score")}
            out.append({name: values[source] if source in values
                        else _setting(cfgs[r["trial"]], source)
                        for name, source in columns.items()})
    if "status" not in columns.values():
        return out
    from scripts.compare.trials import read_json, trained_frames
    for t in others:
        summary = read_json(t.dir / "summary.json") or {}
        failed = t.slug in res.get("failed", {}) or bool(summary.get("diverged"))
        values = {"variant": t.variant, "trial": t.slug, "seed": t.seed,
                  "status": "failed" if failed else "unfinished",
                  "frames": trained_frames(t.dir, "", t.cfg.run.total_frames)
                  or summary.get("frames", 0)}  # a restored record has no checkpoint
        out.append({name: values.get(source) if source in TRIAL_FIELDS + TASK_FIELDS
                    else _setting(t.cfg, source) for name, source in columns.items()})
    return out


def write(out: Path, spec: CsvSpec, res: dict, trials, others=()) -> Path | None:
    """Write the table if ``spec`` names columns; returns its path (None: no table asked for).

    ``others``: as for ``rows``.
    """
    if not spec.columns:
        return None
    path = Path(spec.path) if spec.path else out / "results.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(spec.columns))
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()}
                         for row in rows(res, trials, spec.columns, others))
    return path


def write_probes(spec: CsvSpec, res: dict, trials, probes) -> Path | None:
    """Write the probe table if ``spec`` names one; returns its path (None: none asked for).

    ``res`` is ``collect``'s results (its trials are the rows' trials), ``trials`` the compare
    trials it covers, ``probes(run_dir)`` a trial's ``{tag: (frames, values)}``
    (``curves.probes``). Rows by trial as the report lists them, then tag, then frames.
    """
    if not spec.probes:
        return None
    path = Path(spec.probes)
    path.parent.mkdir(parents=True, exist_ok=True)
    dirs = {t.slug: t.dir for t in trials}
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(PROBE_COLUMNS)
        for r in res["trials"]:
            for tag, (frames, values) in sorted(probes(dirs[r["trial"]]).items()):
                writer.writerows((r["variant"], r["seed"], int(x), tag, round(float(v), 6))
                                 for x, v in zip(frames, values))
    return path
