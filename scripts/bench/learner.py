"""The learner alone: steps/s of its update by thread count and precision, and page faults.

    python -m scripts.bench.learner configs/impala_atari.yaml env.game=Pong [--seconds 15]

Repeats the update of one fixed batch of real runner unrolls (the batch shape the config
trains on), as ``mira bench``'s (c) does, for 1 and 2 intra-op threads, in float32 and with
bfloat16 autocast (``learner.mixed_precision``), and prints for each the agent steps/s, the
core-ms per step (threads x wall time) and the page faults per update (``getrusage``'s minor
faults: fresh memory the kernel had to map; see ``learners/update/malloc.py``). A lock-step config's
batch is stamped with the learner's version, as its runs' batches are (policy lag 0);
``--stale`` measures the update on an older batch instead. Figures, not assertions; only
meaningful on an otherwise idle machine. ``--count-ops`` prints instead the operators one
update dispatches per collected step (``scripts/bench/dispatch.py``): a count, not a timing,
the same on any machine. ``--check-compile`` prints instead how far ``learner.compile``'s
update lands from the eager one: two updates of one batch from the same weights, each
tensor's change against eager's and the update's metrics side by side (on the config's
learner device; a check of the compiled graphs on the preset's own batch, where the tests use
small ones).
"""

from __future__ import annotations

import argparse
import resource
import time

import torch


def measure(cfg, trajectories, steps: int, spec: dict, threads: int, seconds: float,
            on_policy: bool) -> dict:
    """Steps/s, core-ms per step and minor page faults per update of one learner setting.

    ``trajectories``: one update's unrolls, ``steps`` the agent steps they hold;
    ``on_policy``: stamped with the learner's version at every update (``repeat_update``).
    """
    from learners.update.learner import Learner
    from scripts.bench.command import repeat_update

    torch.set_num_threads(threads)
    learner = Learner(cfg, spec, threads)
    # warm-up: first-touch allocations, oneDNN's kernel choice
    repeat_update(learner, trajectories, on_policy)
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or n < 2:
        repeat_update(learner, trajectories, on_policy)
        n += 1
    wall = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    rate = n * steps / wall
    return {"steps_per_s": rate, "core_ms": 1e3 * threads / rate, "faults_per_update": faults / n}


def compiled_agreement(cfg, trajectories, spec: dict, updates: int = 2) -> dict:
    """An eager and a compiled learner from the same weights, ``updates`` updates of one batch.

    Returns ``change``: the largest ``|compiled change - eager change| / |eager change|`` over
    the agent's tensors (the sharp check: a wrong gradient shows here, not in the weights);
    ``metrics``: the last update's smooth metrics, ``{name: (eager, compiled)}``; ``device``:
    the learners' device.
    """
    from dataclasses import replace

    from learners.update.learner import Learner

    after = {}
    for compiled in (False, True):
        learner = Learner(replace(cfg, learner=replace(cfg.learner, compile=compiled)), spec)
        if not compiled:
            start = learner.get_weights()
        learner.agent.load_state_dict(start)
        for _ in range(updates):
            metrics = learner.update(*trajectories)
        after[compiled] = (learner.get_weights(), metrics)
    (eager, em), (comp, cm) = after[False], after[True]
    change = max(float((comp[k] - eager[k]).norm() / (eager[k] - start[k]).norm())
                 for k in start if start[k].is_floating_point()
                 and float((eager[k] - start[k]).norm()) > 0)
    names = ("policy_loss", "value_loss", "entropy", "grad_norm")
    return {"change": change, "metrics": {k: (em[k], cm[k]) for k in names if k in em},
            "device": str(learner.device)}


def main(argv: list[str] | None = None) -> int:
    """Measure and print every setting; 0 on success (a bad config: argparse's exit 2)."""
    from dataclasses import replace

    from learners.config.schema import ConfigError, load_config
    from scripts.bench.command import bench_runner, update_batch

    p = argparse.ArgumentParser(prog="python -m scripts.bench.learner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", metavar="dotted.key=value")
    p.add_argument("--seconds", type=float, default=15.0, help="per setting (default 15)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="intra-op thread counts to measure (default 1 2)")
    p.add_argument("--stale", action="store_true",
                   help="update on a batch older than the learner's weights, as asynchronous "
                        "runners' batches are (default: as the config's runs: policy lag 0 "
                        "with learner.lock_step)")
    p.add_argument("--count-ops", action="store_true",
                   help="print the operators one update dispatches per collected step and exit")
    p.add_argument("--check-compile", action="store_true",
                   help="print how far learner.compile's update lands from the eager one and "
                        "exit")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        p.error(str(e))
    torch.set_num_threads(1)
    runner = bench_runner(cfg)
    if args.count_ops:
        from scripts.bench.command import update_ops
        from scripts.bench.dispatch import describe

        counts = update_ops(cfg, runner)
        if cfg.learner.compile:  # the same update eager, counted the same way beside it
            eager = replace(cfg, learner=replace(cfg.learner, compile=False))
            print(f"[bench_learner] eager, by the profiler: "
                  f"{describe(update_ops(eager, runner, profiler=True))}", flush=True)
        runner.close()
        print(f"[bench_learner] {args.config} {' '.join(args.overrides)}: {describe(counts)}",
              flush=True)
        print("[bench_learner] most dispatched: "
              + ", ".join(f"{name} {n}" for name, n in counts["top"]), flush=True)
        if counts.get("graphs"):
            print("[bench_learner] kernels outside the compiled graphs: "
                  + ", ".join(f"{name} {n}" for name, n in counts["top_outside"]), flush=True)
        return 0
    trajectories, steps = update_batch(cfg, runner)
    spec = runner.spec()
    runner.close()
    if args.check_compile:
        agreement = compiled_agreement(cfg, trajectories, spec)
        print(f"[bench_learner] {args.config} {' '.join(args.overrides)}: compiled against "
              f"eager, 2 updates of one batch of {steps} steps on {agreement['device']}: each "
              f"tensor's change within {agreement['change']:.1e} of eager's", flush=True)
        print("[bench_learner] eager / compiled: " + ", ".join(
            f"{k} {a:.6g} / {b:.6g}" for k, (a, b) in agreement["metrics"].items()), flush=True)
        return 0
    print(f"[bench_learner] {args.config}: {cfg.learner.name}, {steps} steps per update, "
          f"{cfg.learner.epochs} epoch(s) x {cfg.learner.minibatches} minibatch(es), policy lag "
          f"{0 if cfg.learner.lock_step and not args.stale else 'above 0'}", flush=True)
    for precision in ("float32", "bfloat16"):
        mixed = replace(cfg, learner=replace(cfg.learner, mixed_precision=precision == "bfloat16"))
        for threads in args.threads:
            r = measure(mixed, trajectories, steps, spec, threads, args.seconds,
                        cfg.learner.lock_step and not args.stale)
            print(f"[bench_learner] {precision:8s} {threads} thread(s): {r['steps_per_s']:7.0f} "
                  f"steps/s  {r['core_ms']:.3f} core-ms/step  "
                  f"{r['faults_per_update']:8.0f} page faults/update", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
