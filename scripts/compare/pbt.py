"""Population-based training for ``mira compare``.

Jaderberg et al. 2017, "Population Based Training of Neural Networks", section 3: truncation
selection + perturbation.

A population is the seeds of one variant. Every ``pbt.interval_frames`` all trials stop (a
checkpoint and a ``summary.json``); in each population the bottom ``pbt.quantile`` by training
return (mean of the last 100 episodes) *exploits* a uniformly drawn member of the top quantile,
copying its last checkpoint (agent, optimizer state, counters, episode statistics) into its
own run directory, and *explores* by taking that member's hyperparameters each multiplied
by a factor drawn from ``pbt.perturb``. Training then resumes from the checkpoints with each
trial's current hyperparameters as config overrides (``Trainer(..., resume_from=...)``).

Synchronous generations, not the paper's asynchronous ``ready`` criterion: the population is
a handful of seeds run by one driver, and rounds make the schedule reproducible. State (the
current hyperparameters and every decision) is in ``<out>/pbt.json``; decisions are drawn
from ``numpy.random.default_rng([pbt.seed, generation])``, so a re-run after a crash makes
the same ones.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from learners.config.schema import ConfigError
from scripts.compare.trials import make_job, needs_work, override, read_json, say


@dataclass
class PBTSpec:
    """The ``pbt:`` section of a compare file; off by default, validated by ``check``."""

    enabled: bool = False  # population-based training over each variant's seeds
    interval_frames: int = 0  # frames trained between exploit/explore steps
    # config keys (positive float settings) that PBT tunes
    hyperparams: list[str] = field(
        default_factory=lambda: ["learner.optimizer.lr", "learner.entropy_cost"])
    quantile: float = 0.25  # bottom fraction copies a member of the top fraction
    # explore: multiply by one of these
    perturb: list[float] = field(default_factory=lambda: [0.8, 1.25])
    init_range: float = 2.0  # initial values log-uniform in [v / r, v * r] (1: all start at v)
    seed: int = 0  # seeds the initial values and every exploit/explore decision


def _get(cfg, dotted: str):
    """The config value at a dotted key, e.g. ``learner.optimizer.lr``; AttributeError if none."""
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check(spec, trials) -> None:
    """Fail early, with what to change, on a PBT set-up that cannot work."""
    p = spec.pbt
    problems = [
        (p.interval_frames > 0, "pbt.interval_frames must be positive when pbt.enabled"),
        (0 < p.quantile <= 0.5, f"pbt.quantile must be in (0, 0.5], got {p.quantile}"),
        (bool(p.perturb) and all(f > 0 for f in p.perturb),
         f"pbt.perturb must be positive factors, got {p.perturb}"),
        (p.init_range >= 1, f"pbt.init_range must be at least 1, got {p.init_range}"),
        (len(spec.seeds) >= 2,
         "PBT needs a population: give each variant at least 2 seeds (4 or more is better)"),
        (len({t.cfg.run.total_frames for t in trials}) == 1,
         "PBT runs generations in step: every trial needs the same run.total_frames"),
    ]
    for ok, message in problems:
        if not ok:
            raise ConfigError(message)
    for name in p.hyperparams:
        try:
            value = _get(trials[0].cfg, name)
        except AttributeError:
            raise ConfigError(f"pbt.hyperparams: {name!r} is not a config key") from None
        if not isinstance(value, float) or value <= 0:
            raise ConfigError(
                f"pbt.hyperparams: {name} must be a positive float setting, got {value!r}")
    if "learner.optimizer.lr" in p.hyperparams and any(
            t.cfg.learner.optimizer.lr_schedule != "constant" for t in trials):
        raise ConfigError("PBT sets the learning rate itself (a linear schedule would scale "
                          "what it chose down over the run): "
                          "set learner.optimizer.lr_schedule: constant in overrides")


def initial_hyperparams(spec, trials) -> dict[str, dict[str, float]]:
    """Each trial's starting values: log-uniform in [v / init_range, v * init_range]."""
    rng = np.random.default_rng([spec.pbt.seed, 0])
    r = math.log(spec.pbt.init_range)
    return {t.slug: {h: float(_get(t.cfg, h) * math.exp(rng.uniform(-r, r)))
                     for h in spec.pbt.hyperparams}
            for t in trials}


def exploit_explore(population: list[tuple[str, float, dict]], quantile: float,
                    perturb: list[float], rng: np.random.Generator) -> dict[str, tuple[str, dict]]:
    """Truncation selection and perturbation over one population.

    ``population`` = [(trial, fitness, hyperparams)] -> {bottom trial: (top trial it copies, its
    new hyperparams)}.
    """
    ranked = sorted(population, key=lambda p: -math.inf if p[1] is None else p[1])
    n = len(ranked)
    k = min(max(1, int(n * quantile)), n // 2) if n >= 2 else 0
    bottom, top = ranked[:k], ranked[n - k:]
    moves = {}
    for slug, _, _ in bottom:
        donor, _, hyper = top[int(rng.integers(len(top)))]
        moves[slug] = (donor, {h: float(v * rng.choice(perturb)) for h, v in hyper.items()})
    return moves


def _copy_checkpoint(donor: Path, recipient: Path) -> str:
    """Replace ``recipient``'s checkpoints with ``donor``'s latest one; returns its file name.

    The copy is written under a name that ``RunDir``'s ``ckpt_*.pt`` glob skips and renamed into
    place after the recipient's old checkpoints are deleted, so a crash mid-copy never leaves a
    truncated file that passes for the latest checkpoint.
    """
    from learners.runtime.run_dir import RunDir

    src, dst = RunDir(donor).latest_checkpoint(), RunDir(recipient)
    tmp = dst.checkpoints / (src.name + ".copy")
    shutil.copy2(src, tmp)
    for old in dst.checkpoint_paths():
        old.unlink()
    os.replace(tmp, dst.checkpoints / src.name)
    return src.name


def _whole_schedule(cfg, total: int) -> list[str]:
    """The override that keeps a linear learning-rate schedule over the whole run.

    A generation trains with ``run.total_frames`` at its boundary, so without it the rate
    would decay to 0 at every boundary and jump back up in the next generation.
    """
    o = cfg.learner.optimizer
    if o.lr_schedule == "constant" or o.lr_decay_frames:
        return []
    return [override("learner.optimizer.lr_decay_frames", int(total))]


def run_population(spec, trials, out_dir: Path, run_jobs, quiet: bool) -> tuple[set, dict]:
    """Train every trial in generations with exploit/explore between them.

    ``run_jobs(jobs) -> (results, failed)`` runs one generation's jobs. Returns (trials that ran,
    failed).
    """
    state_path = out_dir / "pbt.json"
    state = read_json(state_path) or {"hyperparams": initial_hyperparams(spec, trials),
                                      "generations": []}
    total = trials[0].cfg.run.total_frames
    boundaries = list(range(spec.pbt.interval_frames, total, spec.pbt.interval_frames)) + [total]
    ran: set = set()
    for generation, frames in enumerate(boundaries, start=1):
        last = frames == total
        jobs = [make_job(t, spec, frames,
                         [override(h, v) for h, v in state["hyperparams"][t.slug].items()]
                         + _whole_schedule(t.cfg, total), last)
                for t in trials]
        todo = [j for j in jobs if needs_work(j)]
        if todo and not quiet:
            say(f"PBT generation {generation}/{len(boundaries)}: training to {frames:,} frames")
        results, failed = run_jobs(todo)
        ran.update(results)
        if failed:
            return ran, failed  # a population with a hole cannot go on; a re-run resumes here
        if last or any(g["frames"] == frames for g in state["generations"]):
            continue
        rng = np.random.default_rng([spec.pbt.seed, generation])
        record = {"generation": generation, "frames": frames, "fitness": {}, "moves": {}}
        for variant in sorted({t.variant for t in trials}):
            members = [t for t in trials if t.variant == variant]
            fitness = {t.slug: (read_json(t.dir / "summary.json") or {}).get("episode_return_mean")
                       for t in members}
            record["fitness"].update(fitness)
            population = [(t.slug, fitness[t.slug], state["hyperparams"][t.slug]) for t in members]
            by_slug = {t.slug: t for t in members}
            for recipient, (donor, hyper) in exploit_explore(
                    population, spec.pbt.quantile, spec.pbt.perturb, rng).items():
                ckpt = _copy_checkpoint(by_slug[donor].dir, by_slug[recipient].dir)
                state["hyperparams"][recipient] = hyper
                record["moves"][recipient] = {"copied": donor, "checkpoint": ckpt,
                                              "hyperparams": hyper}
                if not quiet:
                    ret = {s: "n/a" if fitness[s] is None else f"{fitness[s]:.3f}"
                           for s in (recipient, donor)}
                    say(f"PBT {recipient} (return {ret[recipient]}) copies {donor} "
                        f"(return {ret[donor]}): "
                        + ", ".join(f"{h.split('.')[-1]}={v:.3g}" for h, v in hyper.items()))
        state["generations"].append(record)
        state_path.write_text(json.dumps(state, indent=2))
    state_path.write_text(json.dumps(state, indent=2))
    return ran, {}
