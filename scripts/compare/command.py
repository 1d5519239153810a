"""``mira compare COMPARE_FILE``: train variants x seeds on Ray, evaluate them, report.

The compare file's format, and the checks every trial's config passes before anything
runs, are in ``scripts/compare/spec.py`` (``load_spec``).

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
``scripts/compare/report.py`` then writes ``results.json``, ``report.md`` and the PNG plots.
``--report`` runs nothing and writes them from the trials finished and evaluated so far (a long
compare's interim result; ``report.md`` names the trials it leaves out).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from learners.config.schema import ConfigError
from scripts.compare import plan as plan_mod
from scripts.compare import records
from scripts.compare.spec import CompareSpec, Trial, frames_of, load_spec
from scripts.compare.trial_runner import actor_cpus, run_jobs_on_ray
from scripts.compare.trials import (
    eval_is_current,
    left_out,
    make_job,
    needs_work,
    progress_line,
    read_json,
    say,
    schedule_notes,
    trained_frames,
    trial_state,
)


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


def _keep_one(spec: CompareSpec, trials: list[Trial], out_dir: Path, quiet: bool,
              slug: str) -> None:
    """Keep the record of trial ``slug`` as soon as it has finished (and been evaluated).

    A compare with ``keep:`` keeps each finished trial's record as it finishes, not only when
    a report is written, so a machine lost mid-study loses no finished trial.
    """
    from scripts.compare.report import keep_records

    t = next(t for t in trials if t.slug == slug)
    episodes = spec.evaluate.episodes
    if not spec.keep or trial_state(t.dir, t.cfg.run.total_frames) != "done" or (
            episodes and not eval_is_current(t.dir, episodes)):
        return
    if keep_records(spec, out_dir, [t]) and not quiet:
        say(f"kept     {slug}'s record in {spec.keep}")


def _started(trials: list[Trial], slugs) -> list[Trial]:
    """The trials named in ``slugs`` that started: their run directory exists."""
    return [t for t in trials if t.slug in slugs and t.dir.is_dir()]


def _partial_report(spec: CompareSpec, trials: list[Trial], out_dir: Path, status: dict,
                    quiet: bool, failed: dict | None = None) -> dict:
    """The report of the trials finished and evaluated so far, and of those that failed."""
    from scripts.compare.report import write_report

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
                out: str | None = None, quiet: bool = False, report_only: bool = False,
                next_seeds: int | None = None, command: str | None = None) -> dict:
    """Validate, run every trial, evaluate, report (``report_only``: report, run nothing).

    ``next_seeds``: run the trials of only the next N seeds that have work left (in the
    file's seed order), then write the report so far and stop; the seeds after them wait
    (status ``waiting``) for a later run of the same file. A declared rule reads the same
    seeds in the same order either way. ``command``: the ``mira`` command that runs, which each
    new trial's ``meta.json`` records (default: ``mira compare PATH``).
    Returns {"out", "trials": {slug: status}, "failed", "results"}.
    """
    from learners.runtime.run_dir import mira_command
    from scripts.compare import pbt as pbt_mod
    from scripts.compare.report import write_report

    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent must be at least 1, got {max_concurrent}")
    if next_seeds is not None and next_seeds < 1:
        raise ConfigError(f"--next-seeds must be at least 1, got {next_seeds}")
    spec, trials, out_dir = load_spec(path, out)
    if next_seeds is not None and spec.pbt.enabled:
        raise ConfigError("--next-seeds does not apply to a population (pbt:) compare, whose "
                          "members run together")
    for line in records.bring_back(spec, trials, out_dir, dry_run, out is not None):
        if dry_run or not quiet:
            say(line)
    if out is not None and (spec.publish.path or spec.csv.path or spec.csv.probes or spec.keep):
        # a run elsewhere leaves the study's own files as they are (its records may still
        # come back from them, above)
        left = [f"{name} {path}" for name, path in (
            ("report", spec.publish.path and f"{spec.publish.path}.md"),
            ("table", spec.csv.path), ("probe table", spec.csv.probes),
            ("records", spec.keep)) if path]
        if not quiet:
            say(f"note: --out is given, so this run leaves the study's {', '.join(left)} as "
                f"they are; its table is {out_dir / 'results.csv'}"
                + (f", its probe table {out_dir / 'probes.csv'}" if spec.csv.probes else ""))
        spec.publish.path, spec.csv.path, spec.keep = "", "", ""
        spec.csv.probes = str(out_dir / "probes.csv") if spec.csv.probes else ""
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
        say(progress_line(trials, status, behind, spec.plan.stop in plan_mod.SEQUENTIAL))
        if spec.plan.pairs:
            say(plan_mod.reach_line(spec.plan, len(spec.seeds)))
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
                                 max_concurrent=max_concurrent, quiet=quiet,
                                 command=command or mira_command(["compare", str(path)]),
                                 on_finish=functools.partial(_keep_one, spec, trials, out_dir,
                                                             quiet))
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
        # --next-seeds N: the seeds with work left after the first N of them wait.
        seed_of = {j["slug"]: t.seed for j, t in zip(jobs, trials)}
        with_work = [s for s in spec.seeds
                     if any(needs_work(j) for j in jobs if seed_of[j["slug"]] == s)]
        waiting = set(with_work[next_seeds:]) if next_seeds is not None else set()
        # "decided" and "settled": one seed at a time (every variant's trial at that seed), and
        # no further seed once every primary interval excludes "no difference" (settled: or
        # cannot exclude it whatever the seeds left bring).
        groups = ([[j for j in jobs if seed_of[j["slug"]] == seed] for seed in spec.seeds]
                  if spec.plan.stop in plan_mod.SEQUENTIAL
                  else [[j for j in jobs if seed_of[j["slug"]] not in waiting]])
        results, failed = {}, {}
        for i, group in enumerate(groups):
            if spec.plan.stop in plan_mod.SEQUENTIAL and spec.seeds[i] in waiting:
                break  # the look after the last seed that ran has written the report
            todo = [j for j in group if needs_work(j)]
            ran, lost = run_jobs(todo)
            results.update(ran)
            failed.update(lost)
            if spec.plan.stop not in plan_mod.SEQUENTIAL:
                continue
            # the look after seed i reads seeds 0..i alone: run again on a study decided
            # earlier, it decides at the same seed, and no later seed is read before its look
            looked = [t for t in trials if t.seed in spec.seeds[: i + 1] and t.slug not in failed]
            intervals = primary_now(spec, looked)
            if plan_mod.stops(spec.plan.stop, intervals):
                for j in (j for g in groups[i + 1:] for j in g if needs_work(j)):
                    status[j["slug"]] = "not needed"
                if not quiet and i + 1 < len(groups):
                    for line in plan_mod.interval_lines(intervals):
                        say(line)
                    null = f"{intervals[0]['null']:g} (no difference)"
                    say(f"decided after {i + 1} seed(s): every primary interval excludes {null}"
                        if plan_mod.decided(intervals) else
                        f"settled after {i + 1} seed(s): every primary interval excludes {null} "
                        "or cannot within the declared seeds")
                    say("  the other seeds do not run")
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
        held = [j["slug"] for j in jobs if seed_of[j["slug"]] in waiting and needs_work(j)
                and status[j["slug"]] != "not needed"]
        if held:
            status.update({s: "waiting" for s in held} | {s: "failed" for s in failed})
            if not quiet:
                say(f"ran the next {next_seeds} seed(s) with work left; seed(s) "
                    f"{', '.join(str(s) for s in sorted(waiting, key=spec.seeds.index))} wait: "
                    "the same command continues from them")
            if spec.plan.stop not in plan_mod.SEQUENTIAL:
                now = {t.slug: trial_state(t.dir, t.cfg.run.total_frames) for t in trials}
                _partial_report(spec, trials, out_dir, now, quiet, failed)
            return {"out": str(out_dir), "trials": status, "failed": failed, "results": None}
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
    from learners.runtime.run_dir import mira_command

    try:
        result = run_compare(args.config, dry_run=args.dry_run, max_concurrent=args.max_concurrent,
                             out=args.out, report_only=args.report, next_seeds=args.next_seeds,
                             command=mira_command(args.argv))
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
    c.add_argument("--next-seeds", type=int, metavar="N",
                   help="run only the next N seeds that have trials left, then write the report "
                        "so far and stop (a long study a piece at a time; the same command "
                        "continues)")
    c.add_argument("--out", metavar="DIR",
                   help="output directory (default: the file's `out`, else runs/compare/<name>)")
    c.set_defaults(fn=_command)
    return c


def main(argv: list[str] | None = None) -> int:
    """``mira compare FILE ...`` as ``python -m scripts.compare.command FILE`` (no CLI import)."""
    parser = argparse.ArgumentParser(prog="python -m scripts")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["compare", *(sys.argv[1:] if argv is None else argv)])
    args.argv = ["compare", *(sys.argv[1:] if argv is None else argv)]
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"mira: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
