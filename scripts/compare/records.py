"""A compare's ``keep:`` directory: each finished trial's record, where a lost run cannot take it.

A study's trials run for hours, and their run directories (checkpoints of megabytes each)
live under the ignored ``runs/``; a machine handed back takes them with it. With::

    keep: docs/results/data/study_heads_lab6_trials   # relative to the working directory

every report the compare writes (``--report`` included) copies, for each trial it holds,
what the report and the plan read into ``<keep>/<trial>/``: ``summary.json``,
``eval.json``, ``config.yaml``, ``meta.json`` (paths relative to the working directory, the
``mira`` command that ran, no host: ``portable``) and ``record.json`` (the agent's parameter
count, the checkpoint it was evaluated from, the learning curves the report draws and the
torso monitor's series (``PROBE_TAGS``) as frames and values per TensorBoard tag, and the
training health the report shows), and the compare's ``plan.json`` into ``<keep>/``:
a few kilobytes per trial, meant to be committed with the study. A later run of the same
compare whose trial directory lacks a ``summary.json`` (a new clone, a machine handed back)
copies the record back: the trial counts as finished and evaluated at the frames it
reached, with no checkpoint. A record short of the trial's ``run.total_frames`` is not
restored (there is no checkpoint to extend); that trial trains
from the start and mira says so.

A trial that has neither but has rows in the compare's table (``csv:``, one row per trial
and task, with columns for its ``variant`` or ``trial``, ``seed``, ``frames``, ``task`` and
``score``) gets a record rebuilt from those rows first: its frames and final per-task scores
(and its last-100 training return where the table has it), with no curves, training time or
checkpoint. The report lists such trials apart from the rest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from scripts.compare.trials import RECORD, read_json

KEPT_FILES = ("summary.json", "eval.json", "config.yaml", "meta.json")
TABLE = "none (rebuilt from the compare's table)"  # a rebuilt record's checkpoint
# the curves a report can draw or read a threshold from (scripts/compare/report.py: curve_tag,
# time_to_threshold)
CURVE_TAGS = ("episode_return_mean100", "normalized_score_mean",
              "normalized_score_capped_mean", "wall_time_s")
# what the report's training health reads (health.py); kept as a summary, not curves.
# A tag ending in "/" names a family, one tag per unit (RIMs log each unit's activation
# frequency as ``activation_frequency/<k>``).
HEALTH_TAGS = ("grad_norm", "entropy", "skipped_updates", "activation_frequency/")
# the torso monitor's series (learners/update/monitor.py), kept as curves so that a study can
# date a blind span after its run directories are gone: every ``torso/<layer>/inactive`` and
# ``torso/<layer>/dormant``, ``policy/spread``, and ReDo's recycled units (``redo/<layer>``,
# learners/update/redo.py; none with learner.redo off)
PROBE_TAGS = ("torso/", "policy/spread", "redo/")


def check(spec) -> None:
    """A ConfigError for a compare file (``spec``) whose ``keep:`` cannot work."""
    from learners.config.schema import ConfigError

    if spec.keep and Path(spec.keep).exists() and not Path(spec.keep).is_dir():
        raise ConfigError(f"keep: {spec.keep!r} is a file; name a directory for the trials' "
                          "records")
    if spec.keep and spec.pbt.enabled:
        raise ConfigError("keep: a PBT population's members exchange checkpoints, which a "
                          "kept record does not have; drop keep or pbt")


def bring_back(spec, trials, out: Path, dry_run: bool, elsewhere: bool = False) -> list[str]:
    """Before a compare (``spec``) runs: rebuild from its table, then restore, what is kept.

    With ``dry_run`` nothing is written: one line counts the records a run would restore.
    ``elsewhere`` (``--out`` on the command line): the study's kept records and table are
    read but not written; records the table rebuilds go under ``out``. Returns the lines to
    show.
    """
    if not spec.keep:
        return []
    if dry_run:
        n = sum((Path(spec.keep) / t.slug / "summary.json").is_file()
                and not (t.dir / "summary.json").is_file() for t in trials)
        return [f"{n} trial(s) have kept records in {spec.keep}: the compare restores them when "
                "it runs (listed as new here)"] if n else []
    episodes = spec.evaluate.episodes
    if not elsewhere:
        return (from_table(trials, spec.csv, spec.keep, episodes, spec.plan.score)
                + restore(trials, spec.keep, out, episodes))
    rebuilt = str(out / "records_from_table")
    return (restore(trials, spec.keep, out, episodes)
            + from_table(trials, spec.csv, rebuilt, episodes, spec.plan.score)
            + restore(trials, rebuilt, out, episodes))


def record(run_dir: Path) -> dict | None:
    """``record.json`` of a trial restored from its kept record (None for a trial run here)."""
    return read_json(Path(run_dir) / RECORD)


def keep(trials, keep_dir: str, out: Path, learning_curve, param_count, health,
         probes) -> int:
    """Copy each finished trial's record, and the compare's ``plan.json``, into ``keep_dir``.

    ``trials`` are compare ``Trial``s the report holds (finished, evaluated where the compare
    evaluates); ``out`` the compare's output directory; ``learning_curve(run_dir, tag)``,
    ``param_count(run_dir)``, ``health(run_dir)`` and ``probes(run_dir)`` (``{tag: (frames,
    values)}`` of the ``PROBE_TAGS`` it logged) read a run as the report does
    (``report.py``, which calls this). A trial restored from a record has nothing new
    to keep. Returns how many trial records were written.
    """
    from learners.runtime.run_dir import RunDir

    Path(keep_dir).mkdir(parents=True, exist_ok=True)
    if (out / "plan.json").is_file():  # the plan as declared, its changes and its looks
        shutil.copyfile(out / "plan.json", Path(keep_dir) / "plan.json")
    written = 0
    for t in trials:
        ckpt = RunDir(t.dir).latest_checkpoint()
        if ckpt is None or not (t.dir / "summary.json").is_file():
            continue
        dest = Path(keep_dir) / t.slug
        dest.mkdir(parents=True, exist_ok=True)
        for name in KEPT_FILES:
            if (t.dir / name).is_file():
                (dest / name).write_text(portable(name, (t.dir / name).read_text(), t.dir))
            else:
                (dest / name).unlink(missing_ok=True)
        curves = {}
        series = {tag: learning_curve(t.dir, tag) for tag in CURVE_TAGS} | probes(t.dir)
        for tag, (frames, values) in series.items():
            if len(frames):
                curves[tag] = {"frames": [int(f) for f in frames],
                               "values": [round(float(v), 6) for v in values]}
        (dest / RECORD).write_text(json.dumps(
            {"params": param_count(t.dir), "checkpoint": ckpt.name, "curves": curves,
             "health": health(t.dir)}))
        written += 1
    return written


def portable(name: str, text: str, run_dir: Path) -> str:
    """A kept file's text (``name``: one of ``KEPT_FILES``) with no machine in it.

    The run directory's absolute path becomes relative to the working directory (a run
    directory written before runs saved it so), and ``meta.json`` keeps no host name and no
    command but a ``mira`` one: an older run recorded its process's command line, which for a
    compare's trial is a Ray worker's, with the node's address.
    """
    from learners.runtime.run_dir import relative_path

    text = text.replace(str(Path(run_dir).resolve()), relative_path(run_dir))
    if name != "meta.json":
        return text
    meta = json.loads(text)
    meta.pop("host", None)
    if not str(meta.get("command")).startswith("mira "):
        meta.pop("command", None)
    return json.dumps(meta, indent=2)


def restore(trials, keep_dir: str, out: Path, episodes: int) -> list[str]:
    """Copy kept records back into trial directories that lack a ``summary.json``.

    The kept ``plan.json`` goes back into ``out`` if it has none, so the plan's declaration
    date, changes and looks carry on. ``episodes`` is the compare's evaluation episodes per
    task. Returns one line per trial restored or left to train from the start (its record
    falls short of its ``run.total_frames`` or was evaluated with other episodes: there is
    no checkpoint to extend or evaluate again).
    """
    from learners.runtime.run_dir import RunDir

    lines = []
    if (Path(keep_dir) / "plan.json").is_file() and not (out / "plan.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(keep_dir) / "plan.json", out / "plan.json")
        lines.append(f"plan.json restored from {keep_dir}")
    for t in trials:
        src = Path(keep_dir) / t.slug
        summary = read_json(src / "summary.json")
        if (summary is None or (t.dir / "summary.json").is_file()
                or RunDir(t.dir).latest_checkpoint() is not None):
            continue
        frames, target = summary.get("frames", 0), t.cfg.run.total_frames
        if summary.get("interrupted") or frames < target:
            lines.append(f"{t.slug}: its kept record stops at {frames:,} frames, short of "
                         f"{target:,}, and has no checkpoint to extend: it trains from the start")
            continue
        evaluation = read_json(src / "eval.json")
        had = sorted({task["episodes"] for task in (evaluation or {}).get("tasks", {}).values()})
        if episodes and had != [episodes]:
            lines.append(f"{t.slug}: its kept record was evaluated with {had or 'no'} episode(s) "
                         f"per task, not {episodes}, and has no checkpoint to evaluate again: "
                         "it trains from the start")
            continue
        t.dir.mkdir(parents=True, exist_ok=True)
        for name in (*KEPT_FILES, RECORD):
            if (src / name).is_file():
                shutil.copyfile(src / name, t.dir / name)
        lines.append(f"{t.slug}: restored from its kept record ({frames:,} frames; no "
                     "checkpoint)")
    return lines


def curve(run_dir: Path, tag: str):
    """(frames, values) lists of ``tag`` from a restored trial's record, or None."""
    kept = record(run_dir)
    if kept is None or tag not in kept.get("curves", {}):
        return None
    c = kept["curves"][tag]
    return c["frames"], c["values"]


def _number(text: str):
    """A table cell as a float, or None where it is empty."""
    return None if text in ("", None) else float(text)


def _finished(row: dict, col: dict) -> bool:
    """Whether a table row is a finished trial's: a table without a status says nothing else."""
    return "status" not in col or (row.get(col["status"]) or "finished") == "finished"


def from_table(trials, table, keep_dir: str, episodes: int, plan_score: str) -> list[str]:
    """Rebuild the records of trials that only the compare's table still holds.

    ``table`` is the compare's ``CsvSpec``; ``episodes`` its final evaluation's episodes per
    task (0: the table's task scores are last-100 training returns); ``plan_score`` its plan's
    score (``train`` needs a ``train_return`` column). A trial gets a record when it has no
    kept record, no ``summary.json`` in its run directory, and rows in the table at its
    ``run.total_frames`` or more. The table's other columns (``wall_time_s``,
    ``train_return``, ``return``, ``normalized_score``, the threshold crossing) go into the
    record where it has them, so the table written from the record holds them again. Returns
    one line per record written or trial the table cannot rebuild.
    """
    import csv

    from envs import scores
    from envs.suites import build_suite
    from scripts.compare.param_match import param_count

    missing = [t for t in trials if not (Path(keep_dir) / t.slug / "summary.json").is_file()
               and not (t.dir / "summary.json").is_file()]
    if not missing or not table.path or not Path(table.path).is_file():
        return []
    col = {source: name for name, source in table.columns.items()}
    trial_key = next((k for k in ("trial", "variant") if k in col), None)
    score_key = next((k for k in ("normalized_score", "score", "return") if k in col), None)
    lacking = [k for k, present in (("variant or trial", trial_key), ("seed", "seed" in col),
                                    ("frames", "frames" in col), ("task", "task" in col),
                                    ("score", score_key)) if not present]
    if lacking:
        # Trials not yet run (or running) have no rows: only rows beyond the recorded trials'
        # own can belong to a lost one.
        with open(table.path, newline="") as f:  # the failed and unfinished rows aside
            rows = sum(1 for r in csv.DictReader(f) if _finished(r, col))
        recorded = sum(len(build_suite(t.cfg.env).tasks) for t in trials if t not in missing)
        if rows <= recorded:
            return []
        return [f"{table.path} has {rows - recorded} row(s) beyond the trials with a run "
                f"directory or a kept record, and cannot rebuild them: it has no "
                f"{', '.join(lacking)} column"]
    # The table's `score` is normalised only where every trial's suite has reference scores
    # (scripts/compare/report.py: collect); `normalized_score` and `return` say what they hold.
    suites = {t.slug: build_suite(t.cfg.env).score_suite for t in trials}
    normalised = score_key == "normalized_score" or score_key == "score" and all(
        suite != "none" and scores.has_reference_scores(suite) for suite in suites.values())
    with open(table.path, newline="") as f:
        rows = list(csv.DictReader(f))
    lines = []
    for t in missing:
        name = t.slug if trial_key == "trial" else t.variant
        mine = [r for r in rows if r[col[trial_key]] == name and r[col["seed"]] == str(t.seed)
                and r[col[score_key]] != "" and _finished(r, col)]
        if not mine:
            continue
        frames = {int(r[col["frames"]]) for r in mine}
        if len(frames) != 1 or min(frames) < t.cfg.run.total_frames:
            lines.append(f"{t.slug}: its rows in {table.path} are at {sorted(frames)} frames, "
                         f"not one count of at least {t.cfg.run.total_frames:,}: not rebuilt")
            continue
        (frames,) = frames
        first = mine[0]  # a trial's columns repeat on each of its task rows
        cell = {source: _number(first[col[source]]) if source in col else None
                for source in ("wall_time_s", "train_return", "frames_to_threshold",
                               "minutes_to_threshold")}
        tasks = {r[col["task"]]: float(r[col[score_key]]) for r in mine}
        raw = ({r[col["task"]]: _number(r[col["return"]]) for r in mine} if "return" in col
               else {})
        summary = {"frames": frames, "interrupted": False, "wall_time_s": cell["wall_time_s"],
                   "episode_return_mean": cell["train_return"],
                   "episode_return_mean_per_task": {} if episodes else tasks}
        crossing = cell["frames_to_threshold"]
        minutes = cell["minutes_to_threshold"]
        dest = Path(keep_dir) / t.slug
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "summary.json").write_text(json.dumps(summary, indent=2))
        if episodes:
            (dest / "eval.json").write_text(json.dumps({
                "score": scores.score_name(suites[t.slug]) if normalised else "raw return",
                "checkpoint": TABLE, "aggregates": {},
                "tasks": {task: {"normalized_score": v if normalised else None,
                                 "return_mean": raw.get(task) if normalised else v,
                                 "episodes": episodes} for task, v in tasks.items()}},
                indent=2))
        (dest / RECORD).write_text(json.dumps(
            {"params": param_count(t.cfg), "checkpoint": TABLE, "curves": {},
             "table": str(table.path),
             "threshold": {"frames": None if crossing is None else int(crossing),
                           "wall_time_s": None if minutes is None else minutes * 60}
             if "frames_to_threshold" in col else None}))
        unscored = plan_score == "train" and summary["episode_return_mean"] is None
        lines.append(f"{t.slug}: record rebuilt from {table.path} ({frames:,} frames, final "
                     "scores only" + ("; no train_return column, so the plan has no score "
                                      "for it" if unscored else "") + ")")
    return lines


def code_revisions(run_dir: Path) -> list[dict]:
    """The code a trial trained on: ``[{"frames", "revision"}]``, from its ``meta.json``.

    The revision it started on at frame 0, then each resume's where it differs from the one
    before (``resumed_on``); [] for a trial whose record has no ``meta.json``.
    """
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return []
    out = [{"frames": 0, "revision": meta.get("git_revision", "unknown")}]
    for r in meta.get("resumed_on", []):
        if r.get("git_revision") and r["git_revision"] != out[-1]["revision"]:
            out.append({"frames": int(r.get("frames", 0)), "revision": r["git_revision"]})
    return out


def _short(revision: str) -> str:
    """``0b8f722`` or ``0b8f722-dirty``: a revision as the report prints it."""
    sha, dirty, _ = revision.partition("-dirty")
    return sha[:7] + ("-dirty" if dirty else "")


def code_cell(code: list[dict]) -> str:
    """A trial's code revisions as one table cell: ``0b8f722; 5315e22 from 1.06M``."""
    return "; ".join(_short(c["revision"]) + (f" from {c['frames'] / 1e6:.2f}M" if c["frames"]
                                              else "") for c in code) or "n/a"
