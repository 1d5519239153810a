"""Running a compare's trials as Ray tasks (``mira compare``, ``scripts/compare/command.py``).

Connects to Ray (or starts a local instance that holds a whole trial), starts as many trials
at once as the cluster holds, reports their progress, and on Ctrl-C stops them so that each
writes its checkpoint.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from learners.config.schema import ExperimentConfig
from learners.runtime.fleet import gpu_options
from learners.runtime.logbook import duration
from scripts.compare.trials import request_stop, run_trial, say


@dataclass
class ResourcesSpec:
    """The ``resources:`` section of a compare file: what each trial's Ray task reserves, and where.

    Runner and learner actors of a trial with ``runtime.num_runners`` > 0 reserve their own CPUs
    and GPU on top of this (see ``trials_at_once``).
    """

    # CPUs a trial's task reserves (with runtime.num_runners 0: the whole run)
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0  # GPUs a trial's task reserves (for an in-process learner)
    placement: str = "driver"  # driver: trial tasks on this node; spread: anywhere (shared FS)

    def __post_init__(self):
        if not math.isfinite(self.cpus_per_trial) or self.cpus_per_trial <= 0:
            raise ValueError(f"resources.cpus_per_trial must be above 0, got {self.cpus_per_trial}")
        if not math.isfinite(self.gpus_per_trial) or self.gpus_per_trial < 0:
            raise ValueError(
                f"resources.gpus_per_trial must be 0 or more, got {self.gpus_per_trial}")


STOP_GRACE_S = 120.0  # how long an interrupted compare waits for its trials' checkpoints


def actor_cpus(cfg: ExperimentConfig) -> float:
    """CPUs a trial's actors take on top of the trial's own: its runners and learner, or none."""
    return cfg.runtime.num_runners + cfg.runtime.learner_cpus if cfg.runtime.num_runners else 0


def _connect(resources: ResourcesSpec, cfg: ExperimentConfig):
    """Ray at ``runtime.address``, else a local instance that holds at least one whole trial."""
    from learners.runtime.fleet import start_ray

    cpus = max(os.cpu_count() or 1, math.ceil(resources.cpus_per_trial + actor_cpus(cfg)))
    return start_ray(cfg.runtime.address, cpus, log_to_driver=False)


def trials_at_once(have: dict, resources: ResourcesSpec, cfg: ExperimentConfig,
                   asked: int | None) -> tuple[int, str | None]:
    """How many trials run at once on a cluster with resources ``have``, and a note if fewer.

    A trial takes ``resources.cpus_per_trial`` (and ``gpus_per_trial``) plus, with runner
    actors, one CPU per runner and the learner's (and a GPU if the learner wants one). Ray
    queues an actor that does not fit until one frees, so trials started beyond what fits
    wait on each other's actors for ever: ``asked`` (``--max-concurrent``) is capped there.
    """
    cpus = resources.cpus_per_trial + actor_cpus(cfg)
    gpus = resources.gpus_per_trial
    if cfg.runtime.num_runners > 0:
        from learners.runtime.fleet import learner_wants_gpu

        gpus += 1 if learner_wants_gpu(cfg) else 0
    fits = [have.get("CPU", 1) // max(cpus, 1e-9)] + ([have.get("GPU", 0) // gpus] if gpus else [])
    fit = max(1, int(min(fits)))
    if asked is None or asked <= fit:
        return asked or fit, None
    parts = (f": the trial, {cfg.runtime.num_runners} runner(s) and the learner"
             if cfg.runtime.num_runners > 0 else "")
    return fit, (f"note: --max-concurrent {asked}, but the cluster holds {fit} trial(s) at once "
                 f"(each takes {cpus:g} CPU(s)" + (f" and {gpus:g} GPU(s)" if gpus else "")
                 + f"{parts}; {have.get('CPU', 0):g} CPU slots): running {fit} at once")


def _progress(run_dir: Path) -> str:
    """The newest progress line of a running trial, shortened.

    Frames trained (and their share of the trial's), the speed, the last-100 return and the
    time the trial has left at its speed so far, as the trial's ``train.log`` last printed them.
    """
    try:
        lines = [line for line in (run_dir / "train.log").read_text().splitlines()
                 if "return(last100)" in line]
    except OSError:
        return "starting"
    m = re.search(r"frames\s+([\d,]+)\s+\(\s*([\d.]+)%\)\s+fps\s+(\d+)"
                  r".*?return\(last100\)\s+(\S+)(?:.*?eta (.+))?$", lines[-1]) if lines else None
    if not m:
        return "starting"
    frames, share, fps, ret, eta = m.groups()
    return (f"{frames} frames ({share}%), {fps} frames/s, return(last100) {ret}"
            + (f", {eta} left" if eta else ""))


def trial_task(ray, fn, resources: ResourcesSpec):
    """``fn`` as the Ray task each trial runs in, with the trial's resources.

    Each task gets a worker process of its own (``max_calls=1``): a trial imports mira's code as
    the checkout holds it when the trial starts, which is the revision its run directory
    records, not code an earlier trial's worker imported before the checkout moved.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # A trial reserving no GPU sees none (its in-process learner then stays on CPU).
    opts = dict(num_cpus=resources.cpus_per_trial, max_retries=1,
                **gpu_options(resources.gpus_per_trial))
    if resources.placement == "driver":
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(max_calls=1)(fn).options(**opts)


def run_jobs_on_ray(jobs: list[dict], resources: ResourcesSpec, aggregate: str,
                    cfg: ExperimentConfig, max_concurrent: int | None,
                    quiet: bool, command: str | None = None,
                    on_finish=None) -> tuple[dict, dict]:
    """Run ``jobs`` as Ray tasks: ({slug: result}, {slug: error}).

    Ray starts only if there is work; at most ``max_concurrent`` tasks run at once (default: what
    the cluster holds); ``aggregate`` names the evaluation aggregate a finished trial's line shows.
    Each job carries ``command`` (the ``mira`` command that runs) and this process's working
    directory, which a new trial's run directory records instead of the Ray worker's.
    ``on_finish(slug)`` runs in the driver after each trial that finished; an error in it is a
    line, not the end of the compare.
    """
    if not jobs:
        return {}, {}
    jobs = [dict(job, command=command, cwd=os.getcwd()) for job in jobs]
    ray = _connect(resources, cfg)
    limit, note = trials_at_once(ray.cluster_resources(), resources, cfg, max_concurrent)
    tell = (lambda *a: None) if quiet else say
    if note:
        tell(note)
    tell(f"running {len(jobs)} trial(s), up to {limit} at once, on "
         f"{ray.cluster_resources().get('CPU', 0):.0f} Ray CPU slots"
         + ("" if cfg.runtime.address else f" ({os.cpu_count()} cores on this machine)"))
    task = trial_task(ray, run_trial, resources)
    pending, running, results, failed = list(jobs), {}, {}, {}
    last = time.time()
    try:
        while pending or running:
            while pending and len(running) < limit:
                job = pending.pop(0)
                running[task.remote(job)] = (job, time.time())
                tell(f"started  {job['slug']} ({job['state']}, to {job['frames']:,} frames)")
            ready, _ = ray.wait(list(running), num_returns=1, timeout=2.0)
            for ref in ready:
                job, start = running.pop(ref)
                try:
                    results[job["slug"]] = res = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - one failed trial does not stop the others
                    failed[job["slug"]] = str(e).strip().splitlines()[-1][:300]
                    tell(f"FAILED   {job['slug']}: {failed[job['slug']]} "
                         f"(see {job['dir']}/train.log)")
                    continue
                s, ev = res["summary"], res["eval"]
                ret = s.get("episode_return_mean")
                agg = (ev or {}).get("aggregates", {}).get(aggregate)
                score = (f", eval {aggregate} {agg['value']:.3f} (this checkpoint's episodes)"
                         if agg else "")
                took, total = time.time() - start, s.get("wall_time_s") or 0.0
                took = duration(took) + (f" this run, {duration(total)} of training in all"
                                         if total > 1.05 * took + 5 else "")  # resumed
                tell(f"finished {job['slug']}: {s['frames']:,} frames, {took}, "
                     f"return(last100) {'n/a' if ret is None else f'{ret:.3f}'}{score} "
                     f"[{len(results) + len(failed)}/{len(jobs)}]")
                if on_finish is not None:
                    try:
                        on_finish(job["slug"])
                    except Exception as e:  # noqa: BLE001 - keeping a record never stops a study
                        tell(f"note: {job['slug']} finished, but keeping its record failed "
                             f"({type(e).__name__}: {e}); the next report keeps it")
            if running and time.time() - last >= 30.0:
                last = time.time()
                for job, _ in running.values():
                    tell(f"  {job['slug']}: {_progress(Path(job['dir']))}")
    except KeyboardInterrupt:
        tell("interrupted: stopping trials, each writes a checkpoint (Ctrl-C again to quit at "
             "once); re-run the same command to resume")
        _stop_trials(ray, running)
        raise
    return results, failed


def _stop_trials(ray, running: dict, grace_s: float = STOP_GRACE_S) -> None:
    """Stop the ``running`` trials ({ref: (job, start)}) and wait for their checkpoints.

    Each trial is asked through its run dir (``request_stop``) and stops at its next loop turn;
    one still running after ``grace_s`` (in its evaluation, say), or all at a second Ctrl-C,
    is cancelled.
    """
    for job, _ in running.values():
        request_stop(Path(job["dir"]))
    try:
        _, late = ray.wait(list(running), num_returns=len(running), timeout=grace_s)
    except KeyboardInterrupt:
        late = list(running)
    for ref in late:
        ray.cancel(ref)
