"""How much denormal floats slow a run's learner: one update timed with them kept and flushed.

A float32 below about 1.2e-38 is denormal, and x86 CPUs compute with such values many times
slower than with normal ones (``learner.flush_denormal``; docs/throughput.md). This loads a
run's latest checkpoint, collects one update's batch with its weights (an in-process runner of
the run's config), and times the same update from the same weights with denormals kept and
flushed, alternated for ``--rounds`` rounds, printing each time and how many of the update's
last gradients were denormal.

    python -m scripts.bench.denormal runs/NAME [--rounds 2] [--threads 1]

A timing: run it on an otherwise idle machine, or compare its two columns only with each other.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def denormal_grads(agent) -> tuple[int, int]:
    """``(denormal, all)``: the agent's gradient entries below float32's normal range, and all."""
    import torch

    tiny, n, total = torch.finfo(torch.float32).tiny, 0, 0
    for p in agent.parameters():
        if p.grad is not None:
            g = p.grad.abs()
            total += g.numel()
            n += int(((g > 0) & (g < tiny)).sum())
    return n, total


def measure(run_dir: Path, rounds: int, threads: int) -> list[dict]:
    """One row per timed update: ``round``, ``flush``, ``seconds``, ``denormal``, ``grads``."""
    import torch

    from learners.runtime.run_dir import RunDir
    from learners.update.learner import Learner
    from scripts.bench.command import bench_runner, repeat_update, update_batch

    run = RunDir.open(run_dir)
    cfg = run.load_config()
    ckpt = RunDir.load_checkpoint(run.latest_checkpoint())
    torch.set_num_threads(threads)
    runner = bench_runner(cfg)
    runner.set_weights(ckpt["learner"]["agent"], 0)
    trajectories, _ = update_batch(cfg, runner)
    spec = runner.spec()
    runner.close()
    learner = Learner(cfg, spec, threads)
    learner.load_state_dict(ckpt["learner"])
    weights = {k: v.clone() for k, v in learner.agent.state_dict().items()}
    rows = []
    try:
        for r in range(rounds):
            for flush in (False, True):
                torch.set_flush_denormal(flush)
                learner.agent.load_state_dict(weights)
                start = time.perf_counter()
                repeat_update(learner, trajectories, cfg.learner.lock_step)
                seconds = time.perf_counter() - start
                n, total = denormal_grads(learner.agent)
                rows.append({"round": r, "flush": flush, "seconds": seconds, "denormal": n,
                             "grads": total})
    finally:
        torch.set_flush_denormal(cfg.learner.flush_denormal)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print each timed update; 2 with a one-line error for a directory without a checkpoint."""
    p = argparse.ArgumentParser(prog="python -m scripts.bench.denormal",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a mira train run directory with a checkpoint")
    p.add_argument("--rounds", type=int, default=2, help="rounds of kept then flushed (2)")
    p.add_argument("--threads", type=int, default=1, help="the learner's threads (1)")
    a = p.parse_args(argv)
    if not (a.run_dir / "config.yaml").is_file() or not any(
            (a.run_dir / "checkpoints").glob("*.pt")):
        print(f"error: {a.run_dir} is not a run directory with a checkpoint (mira train writes "
              "them under checkpoints/)", file=sys.stderr)
        return 2
    for row in measure(a.run_dir, a.rounds, a.threads):
        print(f"[bench_denormal] round {row['round']} denormals "
              f"{'flushed' if row['flush'] else 'kept   '}: {row['seconds']:6.2f} s an update, "
              f"{row['denormal']:,} of {row['grads']:,} gradients denormal", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
