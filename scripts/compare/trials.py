"""Trial bookkeeping shared by ``mira compare`` and its population-based training.

Used by command.py, spec.py and pbt.py (this package): the state of a trial's
run directory, the job that trains and evaluates it, and ``run_trial``, which runs one job
inside a Ray task.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from pathlib import Path

from learners.config.schema import format_overrides, load_config


def say(*parts) -> None:
    """Print ``parts`` to stderr, prefixed with ``[mira]`` and flushed at once."""
    print("[mira]", *parts, file=sys.stderr, flush=True)


def flatten(data: dict, prefix: str = "") -> dict:
    """Flatten nested dicts to dotted keys: ``{"a": {"b": 1}}`` gives ``{"a.b": 1}``.

    An empty dict is kept as a value: ``{"a": {}}`` gives ``{"a": {}}``.
    """
    out = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        out.update(flatten(value, full) if isinstance(value, dict) and value else {full: value})
    return out


def override(key: str, value) -> str:
    """The command-line config override ``key=value``, with ``value`` written as JSON."""
    return f"{key}={json.dumps(value)}"  # JSON is YAML: strings, numbers and lists round-trip


def read_json(path: Path) -> dict | None:
    """The parsed JSON file at ``path``, or None if it is missing, unreadable or not valid JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


STOP_FILE = "STOP"  # a trial's run dir holds it while the compare asks the trial to stop
RECORD = "record.json"  # a trial restored from its kept record holds it (records.py)


def request_stop(run_dir: Path) -> None:
    """Ask the trial training in ``run_dir`` to checkpoint and stop at its next loop turn.

    A file, not ``ray.cancel``: Ray repeats a cancel's KeyboardInterrupt until the task ends
    (``RAY_cancellation_retry_ms``), and the trainer takes a second interrupt as "quit at
    once", so a trial whose last step and checkpoint took longer than the repeat lost them.
    """
    (run_dir / STOP_FILE).touch()


def stop_requested(run_dir: Path, every_s: float = 1.0):
    """``stop_when`` for a trial's ``Trainer.train``: has ``request_stop`` been called?

    It looks at most every ``every_s`` seconds (loop turns are milliseconds apart; run dirs
    may be on a network file system).
    """
    path, last = run_dir / STOP_FILE, [0.0]

    def check(_trainer) -> bool:
        if time.monotonic() - last[0] < every_s:
            return False
        last[0] = time.monotonic()
        return path.exists()

    return check


def trial_state(run_dir: Path, target_frames: int) -> str:
    """``done`` (finished to target), ``resume`` (has a checkpoint) or ``new``."""
    from learners.runtime.run_dir import RunDir
    summary, ckpt = read_json(run_dir / "summary.json"), RunDir(run_dir).latest_checkpoint()
    if ((ckpt is not None or (run_dir / RECORD).is_file()) and summary
            and not summary.get("interrupted") and summary.get("frames", 0) >= target_frames):
        return "done"  # trained here, or restored from its kept record (records.py)
    return "resume" if ckpt is not None else "new"


def trained_frames(run_dir: Path, state: str, target_frames: int) -> int:
    """Frames a trial has behind it: its target if ``done``, else its latest checkpoint's."""
    from learners.runtime.run_dir import RunDir
    if state == "done":
        return target_frames
    ckpt = RunDir(run_dir).latest_checkpoint()
    return 0 if ckpt is None else min(RunDir.frames_of(ckpt), target_frames)


def progress_line(trials, status: dict, behind: dict, may_stop: bool) -> str:
    """How far the compare is, and the training time the rest would take at the pace so far.

    ``trials`` are compare ``Trial``s, ``status`` their ``trial_state``, ``behind`` their
    ``trained_frames``. Trials by state, frames trained of all, then trial-hours left.
    ``may_stop``: the plan's rule can end it before the last seed, so "all" is an upper bound.
    A variant's pace is its trials' training seconds per frame as logged (under whatever else
    ran beside them); a variant with none timed takes the compare's.
    """
    total = sum(t.cfg.run.total_frames for t in trials)
    count = {s: sum(v == s for v in status.values()) for s in ("done", "resume", "new")}
    line = (f"progress: {count['done']} of {len(trials)} trial(s) done, {count['resume']} to "
            f"resume, {count['new']} new; {sum(behind.values()):,} of {total:,} frames trained "
            f"({sum(behind.values()) / total:.0%})")
    timed: dict = {}  # variant -> [seconds, frames] of its trials so far
    for t in trials:
        summary = read_json(t.dir / "summary.json") if behind[t.slug] else None
        if summary and summary.get("wall_time_s") and summary.get("frames"):
            got = timed.setdefault(t.variant, [0.0, 0])
            got[0] += summary["wall_time_s"]
            got[1] += summary["frames"]
    if timed:
        overall = sum(v[0] for v in timed.values()) / sum(v[1] for v in timed.values())
        left = sum((t.cfg.run.total_frames - behind[t.slug])
                   * (timed[t.variant][0] / timed[t.variant][1] if t.variant in timed
                      else overall) for t in trials)
        line += f"; about {left / 3600:,.1f} trial-hours left at the pace so far"
    return line + ("; the stopping rule may end it sooner" if may_stop else "")


def eval_is_current(run_dir: Path, episodes: int) -> bool:
    """True if ``eval.json`` evaluates the latest checkpoint with ``episodes`` episodes per task.

    For a trial restored from its kept record: the checkpoint the record was evaluated from.
    """
    from learners.runtime.run_dir import RunDir
    result, ckpt = read_json(run_dir / "eval.json"), RunDir(run_dir).latest_checkpoint()
    if not result:
        return False
    # eval.json names its checkpoint relative to the run directory (an older one: in full)
    if ckpt is not None:
        of_last = Path(result.get("checkpoint", "")).name == ckpt.name
    else:
        kept = read_json(run_dir / RECORD)
        of_last = kept is not None and Path(result.get("checkpoint", "")).name == kept["checkpoint"]
    return of_last and all(t["episodes"] == episodes for t in result["tasks"].values())


def run_trial(job: dict) -> dict:
    """Train one trial to its ``run.total_frames``, then evaluate its last checkpoint.

    The trial may be new, resumed or already there; evaluation runs only if ``job['episodes']``.
    Runs in a Ray task; output goes to train.log. Returns the trial's state before training, its
    ``summary.json`` and its ``eval.json`` (None where absent).
    """
    import torch

    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer
    from scripts.evaluate import evaluate_checkpoint

    torch.set_num_threads(job["threads"])
    cfg = load_config(job["base"], job["overrides"])
    run_dir = Path(cfg.run.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state = trial_state(run_dir, cfg.run.total_frames)
    if state == "resume":  # a run directory an older mira wrote keeps its meaning
        cfg = load_config(job["base"], job["overrides"] + format_overrides(run_dir))
    (run_dir / STOP_FILE).unlink(missing_ok=True)  # left by the interrupt this run resumes from
    if state == "new":  # a restored record this trial outgrew (records.py) goes
        for name in (RECORD, "summary.json", "eval.json"):
            (run_dir / name).unlink(missing_ok=True)
    with (open(run_dir / "train.log", "a") as log, contextlib.redirect_stdout(log),
          contextlib.redirect_stderr(log)):
        if state != "done":
            run = (RunDir.open(run_dir) if state == "resume" else
                   RunDir.create(cfg, job["base"], job.get("command"), job.get("cwd")))
            if state == "resume":  # the run dir says what it resumed with
                run.save_config(cfg, job.get("cwd"))
            Trainer(cfg, run,
                    resume_from=run.latest_checkpoint() if state == "resume" else None,
                    ).train(stop_when=stop_requested(run_dir))
        summary = read_json(run_dir / "summary.json")
        if d := summary.get("diverged"):  # short of its frames: a failed trial, not a result
            raise RuntimeError(f"diverged: updates {d['last_good_update'] + 1}-{d['update']} had "
                               "a non-finite loss or gradient; its checkpoint holds update "
                               f"{d['last_good_update']}'s weights")
        if (job["episodes"] and not summary["interrupted"]
                and not eval_is_current(run_dir, job["episodes"])):
            evaluate_checkpoint(str(run_dir), episodes=job["episodes"],
                                num_runners=job["eval_runners"])
    return {"state": state, "summary": summary, "eval": read_json(run_dir / "eval.json")}


def make_job(trial, spec, frames: int, extra: list[str], evaluate: bool) -> dict:
    """The job that trains ``trial`` (a compare ``Trial``) to ``frames``.

    If ``evaluate``, the job also evaluates it with ``spec.evaluate.episodes`` episodes.
    """
    overrides = trial.overrides + extra + [f"run.total_frames={frames}"]
    state = trial_state(trial.dir, frames)
    return dict(slug=trial.slug, dir=str(trial.dir), base=trial.base, overrides=overrides,
                frames=frames, state=state, episodes=spec.evaluate.episodes if evaluate else 0,
                eval_runners=spec.evaluate.num_runners,
                threads=max(1, int(spec.resources.cpus_per_trial)))


def needs_work(job: dict) -> bool:
    """True if ``job`` still has training to do, or an evaluation that is missing or stale."""
    return job["state"] != "done" or bool(
        job["episodes"] and not eval_is_current(Path(job["dir"]), job["episodes"]))


def schedule_notes(trials, status: dict) -> list[str]:
    """``note:`` lines for the trials whose resume leaves their saved learning-rate schedule.

    ``trials`` are compare ``Trial``s, ``status`` their ``trial_state``; one line per distinct
    jump, with how many trials it applies to (``RunDir.schedule_note``).
    """
    from learners.runtime.run_dir import RunDir

    notes: dict[str, list[str]] = {}
    for t in trials:
        if status[t.slug] == "resume" and (note := RunDir(t.dir).schedule_note(t.cfg)):
            notes.setdefault(note, []).append(t.slug)
    return [f"note: {len(slugs)} trial(s) resume off their schedule ({slugs[0]}"
            f"{', ...' if len(slugs) > 1 else ''}): {note}" for note, slugs in notes.items()]


def left_out(unfinished: list[str], finished: list[str]) -> str:
    """The unfinished trials, whole seeds as ranges: "a-seed5, seeds 6-19 (every variant)".

    A seed whose every variant is unfinished is named once; the others' trials by name.
    """
    def split(slug: str) -> tuple[str, int | None]:
        m = re.fullmatch(r"(.+)-seed(\d+)", slug)
        return (m[1], int(m[2])) if m else (slug, None)

    variants = {split(s)[0] for s in [*unfinished, *finished]}
    by_seed: dict[int | None, list[str]] = {}
    for slug in unfinished:
        by_seed.setdefault(split(slug)[1], []).append(slug)
    whole = sorted(s for s, slugs in by_seed.items()
                   if s is not None and len(slugs) == len(variants) > 1)
    named = [slug for s, slugs in by_seed.items() if s not in whole for slug in slugs]
    runs: list[list[int]] = []
    for s in whole:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    spans = [f"seed {r[0]}" if len(r) == 1 else f"seeds {r[0]}-{r[-1]}" for r in runs]
    if spans:
        named.append(", ".join(spans) + " (every variant)")
    return ", ".join(named)
