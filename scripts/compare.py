"""``mira compare COMPARE_FILE``: train variants x seeds on Ray, evaluate them, report.

A compare file (``configs/compare_*.yaml``)::

    name: heads_lab6                  # output: runs/compare/<name>/ (or `out:`, or --out)
    base: configs/impala_lab6.yaml    # training config (relative to this file, else to the cwd)
    overrides: {run.total_frames: 2e5}   # every trial (dotted keys or nested mappings)
    matrix: {agent.head: [linear, multiplicative]}   # the cartesian product = the variants
    variants: [{agent.head: linear},
               {agent.head: multiplicative, agent.head_options: {context: learnt}}]
                                      # or list them (crossed with the matrix when both are given)
    seeds: [0, 1, 2]                  # run.seed; a trial = one variant x one seed (a matrix
                                      # key run.seed means the same)
    plan: {pairs: [[head-multiplicative, head-linear]], bounds: [-10, 110], stop: all seeds}
                                      # the primary comparisons, declared up front
                                      # (scripts/plan.py); every other pair is exploratory
    evaluate: {episodes: 30}          # final evaluation of each trial's last checkpoint
    deterministic: false              # run.deterministic for every trial (replayable runs)
    csv: {path: study.csv, columns: {seed: seed, task: task, score: score}}
                                      # a table of the scores (scripts/results_csv.py)
    keep: study_trials/               # each finished trial's record (scores, curves; no
                                      # checkpoint), restored where a run directory lost it
                                      # (scripts/records.py)
    publish: {path: study, figure: final_scores}
                                      # the report and plots copied to study.md, study.png,
                                      # study_<plot>.png (scripts/publish.py)
    threshold: 18                     # the report's time to a score: each trial's frames and
                                      # training time to its first last-100 training return
                                      # (raw) at or above it
    resources: {cpus_per_trial: 1}
    pbt: {enabled: false}             # population-based training: scripts/pbt.py

The matrix key ``base`` varies the training config itself (``base: [configs/impala_atari.yaml,
configs/ppo_atari.yaml]`` compares learners, each with its own preset). Every trial's config is
validated before anything runs; an error names the variant.

A variant may hold ``match_params: {reference: VARIANT, width: KEY}``: the integer setting KEY
(e.g. ``agent.core_options.hidden_size``) is chosen so that its parameter count is within 2% of
the reference variant's (``scripts/param_match.py``); the report says what it set.
Variants at one seed index share their environment seeds (runners seed their envs from
``run.seed``) and, where their torsos are alike, the torso's initial weights (the agent builds
its torso first, right after the learner seeds torch with ``run.seed``): the primary
comparisons use paired per-seed differences.

Engine: one Ray task per trial (``num_cpus=cpus_per_trial``) runs ``Trainer`` in-process, then
``evaluate_checkpoint``; the driver keeps ``--max-concurrent`` tasks in flight (default: as many
as the cluster's CPUs and GPUs hold) and prints progress read from each trial's ``train.log``.
Not Ray Tune: it needs pandas and pyarrow and brings its own trial directories and checkpoints
for what is a ``ray.wait`` loop over mira's ``RunDir``s. A trial with ``runtime.num_runners`` > 0
starts its runners and learner as actors from its task (they reserve their own CPUs and GPU).
``resources.placement: driver`` (default) pins trial tasks to this node, so run directories land
here; ``spread`` runs them anywhere and needs the output directory on a shared filesystem.

Each trial writes ``<out>/trials/<variant>-seed<k>/``. Re-running the same file skips trials
whose ``summary.json`` says ``interrupted: false`` and ``frames >= run.total_frames`` (and whose
``eval.json`` is of the last checkpoint), resumes those with a checkpoint (``Trainer(...,
resume_from=...)``) and starts the rest; raising ``run.total_frames`` extends finished trials
(their linear learning-rate schedule then ends at the new total unless
``learner.optimizer.lr_decay_frames`` fixed its end).
``scripts/report.py`` then writes ``results.json``, ``report.md`` and the PNG plots.
``--report`` runs nothing and writes them from the trials finished and evaluated so far (a long
compare's interim result; ``report.md`` names the trials it leaves out).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from learners.config import ConfigError, ExperimentConfig, from_dict, load_config, read_yaml
from scripts import plan as plan_mod
from scripts import records
from scripts.pbt import PBTSpec
from scripts.plan import PlanSpec
from scripts.publish import PublishSpec
from scripts.results_csv import CsvSpec, check_columns
from scripts.trial_runner import ResourcesSpec, actor_cpus, run_jobs_on_ray
from scripts.trials import (
    eval_is_current,
    flatten,
    left_out,
    make_job,
    needs_work,
    override,
    progress_line,
    read_json,
    say,
    schedule_notes,
    trained_frames,
    trial_state,
)

AGGREGATES = ("median", "mean", "iqm", "capped_mean")


@dataclass
class EvaluateSpec:
    """The ``evaluate:`` section of a compare file: the final evaluation of every trial."""

    # evaluation episodes per task of each trial's final checkpoint (0 = none); 30 gives per-task
    # means precise enough to compare where evaluation stays a small part of a trial's time
    episodes: int = 30
    num_runners: int = 0  # 0: evaluate in the trial's task; >0: one Ray evaluator actor per task

    def __post_init__(self):
        for key in ("episodes", "num_runners"):
            if getattr(self, key) < 0:
                raise ValueError(f"evaluate.{key} must be 0 or more, got {getattr(self, key)}")


@dataclass
class CompareSpec:
    """A compare file (see the module docstring for its format), as read by ``load_spec``."""

    name: str = ""  # names the output directory runs/compare/<name>
    base: str = ""  # training config (a matrix key `base` overrides it per variant)
    out: str = ""  # output directory; default runs/compare/<name>
    overrides: dict = field(default_factory=dict)  # dotted key -> value, applied to every trial
    matrix: dict = field(default_factory=dict)  # dotted key -> list of values; product = variants
    # explicit variants (mappings of dotted key -> value), crossed with the matrix
    variants: list = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # run.seed of each variant's trials
    aggregate: str = "iqm"  # headline score: median, mean, iqm or capped_mean over seeds x tasks
    evaluate: EvaluateSpec = field(default_factory=EvaluateSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    pbt: PBTSpec = field(default_factory=PBTSpec)  # population-based training (scripts/pbt.py)
    plan: PlanSpec = field(default_factory=PlanSpec)  # primary pairs, stop rule: scripts/plan.py
    deterministic: bool = False  # run.deterministic for every trial: replayable, slower
    csv: CsvSpec = field(default_factory=CsvSpec)  # a table of the scores: scripts/results_csv.py
    # the report and plots copied beside the csv, links rewritten: scripts/publish.py
    publish: PublishSpec = field(default_factory=PublishSpec)
    # a directory (relative to the working directory) keeping each finished trial's record,
    # restored into a run directory that lost it: scripts/records.py
    keep: str = ""
    # a last-100 training return (raw) the curves are read against: the report gives each
    # trial's frames and training time to its first crossing (trials still run their budget)
    threshold: float | None = None


@dataclass
class Trial:
    """One variant x one seed: its settings, config overrides and validated training config."""

    variant: str  # slug of the variant, e.g. "head-linear"
    settings: dict  # matrix key -> value of this variant
    seed: int
    base: str  # absolute path of the training config
    overrides: list[str]
    cfg: ExperimentConfig
    matched: dict | None = None  # what match_params set: {width, value, params, reference, ...}

    @property
    def slug(self) -> str:
        """``<variant>-seed<k>``: the trial's name and the name of its run directory."""
        return f"{self.variant}-seed{self.seed}"

    @property
    def dir(self) -> Path:
        """The trial's run directory, ``run.dir`` (``<out>/trials/<slug>``)."""
        return Path(self.cfg.run.dir)


def _resolve(path: str, near: Path) -> Path:
    for candidate in (near / path, Path(path)):
        if candidate.is_file():
            return candidate.resolve()
    raise ConfigError(f"training config {path!r} not found next to the compare file ({near}) "
                      "or in the cwd")


def _slug(settings: dict) -> str:
    short = [k.split(".")[-1] for k in settings]
    parts = []
    for (key, value), name in zip(settings.items(), short):
        name = key if short.count(name) > 1 else name
        value = Path(value).stem if key == "base" else value
        text = value if isinstance(value, str) else json.dumps(value)
        parts.append(re.sub(r"[^A-Za-z0-9.+=-]+", "-", f"{name}-{text}").strip("-"))
    return "_".join(parts) or "base"


def load_spec(path: str | Path, out: str | None = None) -> tuple[CompareSpec, list[Trial], Path]:
    """Read a compare file and validate every trial's config (nothing runs).

    Returns (spec, trials, output directory).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a directory; give the compare file, e.g. "
                          "configs/compare_heads_lab6.yaml")
    if not path.is_file():
        raise ConfigError(f"compare file {str(path)!r} does not exist")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of compare keys (name, base, variants, "
                          f"seeds, ...) at the top level, got a {type(raw).__name__}")
    spec = from_dict(CompareSpec, raw)
    if "run.seed" in flatten(spec.overrides):
        raise ConfigError("overrides.run.seed would be replaced by each trial's seed; "
                          "list the seeds in `seeds:`")
    if "run.seed" in spec.matrix:  # a seed axis in the matrix is the seeds list, not a variant axis
        seeds = spec.matrix.pop("run.seed")
        if not isinstance(seeds, list) or not seeds:
            raise ConfigError(f"matrix.run.seed: expected a non-empty list of seeds, got {seeds!r}")
        if "seeds" in raw and raw["seeds"] != seeds:
            raise ConfigError(f"seeds are given twice: matrix.run.seed {seeds} and seeds "
                              f"{raw['seeds']}; keep one")
        spec.seeds = seeds
    name = spec.name or path.stem
    out = Path(out or spec.out or Path("runs") / "compare" / name).resolve()
    if spec.aggregate not in AGGREGATES:
        raise ConfigError(
            f"aggregate must be one of {', '.join(AGGREGATES)}, got {spec.aggregate!r}")
    asked = [c for c in spec.csv.columns.values()
             if c in ("frames_to_threshold", "minutes_to_threshold")]
    if asked and spec.threshold is None:
        raise ConfigError(f"csv.columns: {asked[0]} needs a threshold: set `threshold:` (a "
                          "last-100 training return) in the compare file")
    if spec.resources.placement not in ("driver", "spread"):
        raise ConfigError(
            f"resources.placement must be driver or spread, got {spec.resources.placement!r}")
    if not spec.seeds or len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError(f"seeds must be a non-empty list of distinct integers, got {spec.seeds}")
    for key, values in spec.matrix.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"matrix.{key}: expected a non-empty list of values, got {values!r}")
    for i, v in enumerate(spec.variants):
        if not isinstance(v, dict) or not v:
            raise ConfigError(
                f"variants[{i}]: expected a mapping of dotted keys to values, got {v!r}")
    matches = [v.get("match_params") for v in spec.variants] or [None]
    for i, m in enumerate(matches):
        if m is not None and (not isinstance(m, dict) or set(m) != {"reference", "width"}):
            raise ConfigError(f"variants[{i}].match_params: expected {{reference: VARIANT, "
                              f"width: KEY}}, got {m!r}")
    explicit = [flatten({k: x for k, x in v.items() if k != "match_params"})
                for v in spec.variants] or [{}]
    bases = ([spec.base] if spec.base else []) + list(spec.matrix.get("base", [])) + [
        v["base"] for v in explicit if "base" in v]
    for b in bases:
        if not isinstance(b, str) or not b:
            raise ConfigError(f"base: expected the path of a training config, got {b!r}")
    if not spec.base and "base" not in spec.matrix and not all("base" in v for v in explicit):
        raise ConfigError("the compare file needs `base: TRAINING_CONFIG` (or a matrix key `base`)")
    common = [override(k, v) for k, v in flatten(spec.overrides).items()]
    if spec.deterministic:
        common.append("run.deterministic=true")
    trials, slugs = [], set()
    combos = [({**extra, **dict(zip(spec.matrix, combo))}, match)
              for extra, match in zip(explicit, matches)
              for combo in itertools.product(*spec.matrix.values())]
    for settings, _ in combos:
        variant = _slug(settings)
        if variant in slugs:
            raise ConfigError(f"two variants share the directory name {variant!r}; "
                              "make the variants distinct")
        slugs.add(variant)
    matched = _match_params(combos, common, path.parent, spec)
    for settings, _ in combos:
        variant = _slug(settings)
        base = _resolve(str(settings.get("base", spec.base)), path.parent)
        mine = _settings_overrides(settings) + (
            [f"{matched[variant]['width']}={matched[variant]['value']}"]
            if variant in matched else [])
        for seed in spec.seeds:
            where = out / "trials" / f"{variant}-seed{seed}"
            overrides = common + mine + [f"run.seed={seed}", f"run.dir={where}",
                                         f"run.name={name}-{where.name}"]
            try:
                cfg = load_config(base, overrides)
            except ConfigError as e:
                raise ConfigError(f"variant {variant} (seed {seed}): {e}") from None
            trials.append(Trial(variant, settings, seed, str(base), overrides, cfg,
                                matched.get(variant)))
    # Seed-major order (every variant's seed 0, then every variant's seed 1, ...): trials run in
    # this order, so a long compare stopped part-way has every variant at the same seeds.
    trials.sort(key=lambda t: spec.seeds.index(t.seed))
    check_columns(spec.csv, [t.cfg for t in trials])
    records.check(spec)
    if spec.pbt.enabled:
        from scripts.pbt import check

        check(spec, trials)
    plan_mod.check(spec.plan, list(dict.fromkeys(t.variant for t in trials)), spec.seeds,
                   frames_of(trials), spec.evaluate.episodes)
    return spec, trials, out


def frames_of(trials: list[Trial]) -> dict:
    """Variant -> its trials' run.total_frames."""
    return {t.variant: t.cfg.run.total_frames for t in trials}


def _settings_overrides(settings: dict) -> list[str]:
    return [override(k, v) for key, value in settings.items() if key != "base"
            for k, v in flatten({key: value}).items()]


def _match_params(combos: list, common: list[str], near: Path, spec: CompareSpec) -> dict:
    """Variant -> what its ``match_params`` set (``param_match.match_variants``); {} if none asks.

    Configs are those of seed ``seeds[0]`` (the seed changes no shape).
    """
    from scripts.param_match import match_variants

    by_name = {_slug(s): s for s, _ in combos}

    def config(name: str):
        base = str(_resolve(str(by_name[name].get("base", spec.base)), near))
        over = common + _settings_overrides(by_name[name]) + [f"run.seed={spec.seeds[0]}"]
        return base, over, load_config(base, over)

    return match_variants({_slug(s): m for s, m in combos if m}, list(by_name), config)


# ---------------------------------------------------------------- the driver


def primary_now(spec: CompareSpec, trials: list[Trial]) -> list[dict]:
    """The primary pairs' intervals from the ``trials``' files as they are now.

    Only trials finished to their frames count: an interrupted, diverged or failed trial's
    summary holds a score from short of its budget.
    """
    scores: dict = {}
    for t in (t for t in trials if trial_state(t.dir, t.cfg.run.total_frames) == "done"):
        evaluation = (read_json(t.dir / "eval.json")
                      if eval_is_current(t.dir, spec.evaluate.episodes) else None)
        value = plan_mod.trial_score(spec.plan, read_json(t.dir / "summary.json"), evaluation)
        if value is not None:
            scores.setdefault(t.variant, {})[t.seed] = value
    return plan_mod.primary_intervals(spec.plan, scores, spec.seeds)


def _started(trials: list[Trial], slugs) -> list[Trial]:
    """The trials named in ``slugs`` that started: their run directory exists."""
    return [t for t in trials if t.slug in slugs and t.dir.is_dir()]


def _partial_report(spec: CompareSpec, trials: list[Trial], out_dir: Path, status: dict,
                    quiet: bool, failed: dict | None = None) -> dict:
    """The report of the trials finished and evaluated so far, and of those that failed."""
    from scripts.report import write_report

    failed = failed or {}
    episodes = spec.evaluate.episodes
    ready = [t for t in trials if t.slug not in failed and status[t.slug] == "done"
             and (not episodes or eval_is_current(t.dir, episodes))]
    unfinished = [t.slug for t in trials
                  if t.slug not in {r.slug for r in ready} and t.slug not in failed]
    results = None
    if ready:
        results = write_report(out_dir, spec, ready, failed, trials[0].cfg.run.total_frames,
                               unfinished, _started(trials, {*failed, *unfinished}))
    if not quiet:
        shown = left_out(unfinished, [t.slug for t in ready])
        say(f"wrote {out_dir / 'report.md'}: {len(ready)} of {len(trials)} trial(s) finished and "
            f"evaluated" + (f", {len(failed)} failed" if failed else "")
            + (f"; left out: {shown}" if unfinished else "")
            if ready else "no trial is finished and evaluated yet; no report"
            + (f" ({len(failed)} failed: {', '.join(failed)})" if failed else ""))
    return {"out": str(out_dir), "trials": status, "failed": failed, "results": results}


def run_compare(path: str, dry_run: bool = False, max_concurrent: int | None = None,
                out: str | None = None, quiet: bool = False, report_only: bool = False) -> dict:
    """Validate, run every trial, evaluate, report (``report_only``: report, run nothing).

    Returns {"out", "trials": {slug: status}, "failed", "results"}.
    """
    from scripts import pbt as pbt_mod
    from scripts.report import write_report

    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent must be at least 1, got {max_concurrent}")
    spec, trials, out_dir = load_spec(path, out)
    for line in records.bring_back(spec, trials, out_dir, dry_run, out is not None):
        if dry_run or not quiet:
            say(line)
    if out is not None and (spec.publish.path or spec.csv.path or spec.keep):
        # a run elsewhere leaves the study's own files as they are (its records may still
        # come back from them, above)
        left = [f"{name} {path}" for name, path in (
            ("report", spec.publish.path and f"{spec.publish.path}.md"),
            ("table", spec.csv.path), ("records", spec.keep)) if path]
        if not quiet:
            say(f"note: --out is given, so this run leaves the study's {', '.join(left)} as "
                f"they are; its table is {out_dir / 'results.csv'}")
        spec.publish.path, spec.csv.path, spec.keep = "", "", ""
    status = {t.slug: trial_state(t.dir, t.cfg.run.total_frames) for t in trials}
    if dry_run or not quiet:
        say(f"compare {spec.name or Path(path).stem}: {len({t.variant for t in trials})} "
            f"variant(s) x {len(spec.seeds)} seed(s) -> {out_dir}")
        behind = {t.slug: trained_frames(t.dir, status[t.slug], t.cfg.run.total_frames)
                  for t in trials}
        for t in trials if not report_only else ():  # --report: the report lists them
            at = f"  (at {behind[t.slug]:,})" if status[t.slug] == "resume" else ""
            say(f"  {t.slug:40s} {status[t.slug]:7s} {t.cfg.run.total_frames:>12,} frames  "
                f"{Path(t.base).name}{at}")
        say(progress_line(trials, status, behind, spec.plan.stop == "decided"))
        for line in schedule_notes(trials, status):
            say(line)
        for v, m in {t.variant: t.matched for t in trials if t.matched}.items():
            say(f"  {v}: match_params set {m['width']} = {m['value']}: {m['params']:,} parameters,"
                f" {m['params'] / m['reference_params'] - 1:+.2%} from {m['reference']}'s "
                f"{m['reference_params']:,}")
    if dry_run:
        return {"out": str(out_dir), "trials": status, "failed": {}, "results": None}
    out_dir.mkdir(parents=True, exist_ok=True)
    # The plan as first seen, or this run's departures from it (dated; unplanned looks if a
    # report was written before them).
    plan_mod.register(out_dir, plan_mod.record(spec.plan, spec.seeds, frames_of(trials),
                                               spec.evaluate.episodes),
                      plan_mod.settings_of(trials), spec.threshold)
    if report_only:
        return _partial_report(spec, trials, out_dir, status, quiet)
    # Ray is sized for the hungriest trial: a matrix over presets (`base`) mixes runner counts,
    # and a local instance sized for the first would leave a bigger trial's actors waiting forever.
    widest = max((t.cfg for t in trials), key=actor_cpus)
    run_jobs = functools.partial(run_jobs_on_ray, resources=spec.resources,
                                 aggregate=spec.aggregate, cfg=widest,
                                 max_concurrent=max_concurrent, quiet=quiet)
    if spec.pbt.enabled:
        ran, failed = pbt_mod.run_population(spec, trials, out_dir, run_jobs, quiet)
        status.update({t.slug: "trained" if t.slug in ran else "skipped" for t in trials})
    else:
        jobs = [make_job(t, spec, t.cfg.run.total_frames, [], True) for t in trials]
        done = [j for j in jobs if not needs_work(j)]
        for j in done:
            status[j["slug"]] = "skipped"
            if not quiet:
                say(f"skipped  {j['slug']} (finished and evaluated)")
        # "decided": one seed at a time (every variant's trial at that seed), and no further
        # seed once every primary interval excludes "no difference".
        groups = ([[j for j, t in zip(jobs, trials) if t.seed == seed] for seed in spec.seeds]
                  if spec.plan.stop == "decided" else [jobs])
        results, failed = {}, {}
        for i, group in enumerate(groups):
            todo = [j for j in group if needs_work(j)]
            ran, lost = run_jobs(todo)
            results.update(ran)
            failed.update(lost)
            if spec.plan.stop != "decided":
                continue
            # the look after seed i reads seeds 0..i alone: run again on a study decided
            # earlier, it decides at the same seed, and no later seed is read before its look
            looked = [t for t in trials if t.seed in spec.seeds[: i + 1] and t.slug not in failed]
            intervals = primary_now(spec, looked)
            if plan_mod.decided(intervals):
                for j in (j for g in groups[i + 1:] for j in g if needs_work(j)):
                    status[j["slug"]] = "not needed"
                if not quiet and i + 1 < len(groups):
                    say(f"decided after {i + 1} seed(s): every primary interval excludes "
                        f"{intervals[0]['null']:g} (no difference); the other seeds do not run")
                break
            # the rule's look after each seed, with its report; a seed that had nothing to run
            # (finished before this run) brings no new data, so no new look
            if i + 1 < len(groups) and todo:
                if not quiet:
                    for line in plan_mod.interval_lines(intervals):
                        say(line)
                now = {t.slug: trial_state(t.dir, t.cfg.run.total_frames) for t in trials}
                _partial_report(spec, trials, out_dir, now, quiet, failed)
        status.update({s: {"new": "trained", "resume": "resumed", "done": "evaluated"}[r["state"]]
                       for s, r in results.items()})
    status.update({s: "failed" for s in failed})
    ok = [t for t in trials if t.slug not in failed and status[t.slug] != "not needed"]
    left = {*failed, *(s for s, v in status.items() if v == "not needed")}  # started or not
    results = (write_report(out_dir, spec, ok, failed, trials[0].cfg.run.total_frames,
                            started=_started(trials, left))
               if ok else None)
    if not quiet:
        say(f"wrote {out_dir / 'report.md'}, results.json and plots" if ok
            else "every trial failed; no report")
    return {"out": str(out_dir), "trials": status, "failed": failed, "results": results}


# ---------------------------------------------------------------- command line


def _command(args) -> int:
    try:
        result = run_compare(args.config, dry_run=args.dry_run, max_concurrent=args.max_concurrent,
                             out=args.out, report_only=args.report)
    except KeyboardInterrupt:
        return 130
    if result["failed"]:
        say(f"{len(result['failed'])} trial(s) failed: {', '.join(result['failed'])}")
        return 1
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``mira compare`` on the CLI's subparsers."""
    c = subparsers.add_parser(
        "compare", help="train variants x seeds on Ray, evaluate, write a report with plots")
    c.add_argument("config", metavar="COMPARE_FILE",
                   help="compare YAML, e.g. configs/compare_heads_lab6.yaml")
    c.add_argument("--dry-run", action="store_true",
                   help="validate every trial and list what would run")
    c.add_argument("--report", action="store_true",
                   help="run nothing: write the report of the trials finished and evaluated so "
                        "far (a long compare's interim result)")
    c.add_argument("--max-concurrent", type=int, metavar="N",
                   help="trials in flight at once (default: what the cluster holds)")
    c.add_argument("--out", metavar="DIR",
                   help="output directory (default: the file's `out`, else runs/compare/<name>)")
    c.set_defaults(fn=_command)
    return c


def main(argv: list[str] | None = None) -> int:
    """``mira compare FILE ...`` as ``python -m scripts.compare FILE ...`` (no CLI import)."""
    parser = argparse.ArgumentParser(prog="python -m scripts")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["compare", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"mira: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
