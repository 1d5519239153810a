"""``mira bench CONFIG``: where the time of one agent step goes, measured in one run.

(a) raw environment steps/s (one process, random actions, the config's envs);
(b) agent inference steps/s on a runner (T = 1 forward of the runner's batch, 1 thread);
(c) learner update steps/s alone (fwd + bwd + optimizer on batches of the configured
    shape, 1 thread; PPO counts each collected step once, whatever its epochs), and the
    operators one update dispatches per collected step (``scripts/bench/dispatch.py``);
(d) end-to-end training steps/s (``mira train`` itself for a fixed time), and where an
    update's cycle goes in it: the learner busy (of which making the batch), and waiting for
    a batch, beside a runner's unroll timed inside the runner and in bench's own process;
    and the machine's core time per step over (d)'s window by process (the learner, the
    runners, evaluators, this process, Ray's own processes, everything else:
    ``scripts/bench/core_time.py``),
    whose sum beside (a) + (b) + (c) says how much extra core time a run spends, and where;
    with a CPU learner on several threads, (c) on those threads too. Then, for a CPU learner,
    the core time beyond the limit part by part (``core_time.limit_gap``): the learner's
    threads and the runner's own loop measured alone, what the run adds to each, and the other
    processes; and the share of the limit the first two alone leave to a run
    (``core_time.parts_ceiling``).

(a)-(c) are measured on one core each, so ``1/a + 1/b + 1/c`` is the core-seconds one
agent step costs; with ``N`` cores the compute-bound limit is ``N / (1/a + 1/b + 1/c)``
and (d) is reported as a fraction of it. Figures, not assertions: machines are noisy, and
``--repeat N`` measures (a)-(d) N times in a row to show by how much.

A runner core does (a) and (b), so it collects ``r = 1 / (1/a + 1/b)`` steps/s. With the
learner on a GPU that updates ``G`` steps/s (``--gpu-learner-rate``), ``N`` runner cores
feed ``min(N r, G)`` steps/s end to end; bench prints it for 16 and 64 runner cores.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import replace

import numpy as np
import torch

# Learner steps/s on one H100 (fp32), measured with `mira bench
# configs/impala_atari_paper.yaml env.game=Pong` (IMPALA's one pass per batch); a preset
# with several epochs per batch (configs/impala_atari.yaml, PPO) updates fewer steps/s.
GPU_LEARNER_RATE = 33_569.0
RUNNER_CORES = (16, 64)  # runner cores for which bench prints the GPU-learner estimate


def _rate(fn, seconds: float, per_call: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n * per_call / (time.perf_counter() - start)


def env_rate(runner, seconds: float) -> float:
    """(a) Steps/s of the runner's batch of envs under uniformly random actions, in this process.

    The batch is the one the config's runners step (Atari: ``env.backend``); episode ends
    reset inside the step, so resets are timed too.
    """
    rng = np.random.default_rng(0)
    batch, n = runner.batch, runner.suite.num_actions

    def step():
        batch.step(rng.integers(n, size=runner.B))

    return _rate(step, seconds, runner.B)


def inference_rate(runner, seconds: float) -> float:
    """(b) Agent steps/s: a T = 1 forward of the runner's ``B`` envs and the action sampling.

    Always on row 0 of the runner's buffers from the agent's initial state, in inference mode.
    """
    inputs = runner.step_inputs(0)
    state = runner.agent.initial_state(runner.B)

    def act():
        with torch.inference_mode():
            out, _ = runner.agent(inputs, state)
            torch.multinomial(torch.softmax(out.logits[0], -1), 1)

    return _rate(act, seconds, runner.B)


def rollout_time(runner, unrolls: int = 3) -> float:
    """Seconds of one ``runner.rollout()`` in this process (1 thread), the mean of ``unrolls``.

    Against ``T * B`` times (a) and (b)'s per-step cost: what the runner's own loop adds.
    """
    runner.rollout()
    start = time.perf_counter()
    for _ in range(unrolls):
        runner.rollout()
    return (time.perf_counter() - start) / unrolls


def bench_runner(cfg):
    """The runner a benchmark steps and learns from: one of the config's, in this process."""
    from envs.runner import EnvRunner

    return EnvRunner(cfg.env, cfg.agent, envs_per_runner=cfg.runtime.envs_per_runner,
                     unroll_length=cfg.learner.unroll_length, seed=cfg.run.seed,
                     popart=cfg.learner.popart,
                     # chunk states, as a run's runners record them
                     state_every=cfg.learner.recurrence)


def update_batch(cfg, runner) -> tuple[list, int]:
    """One learner update's unrolls from ``runner``, and the agent steps the update consumes."""
    from learners.algorithms import LEARNERS

    per_update = LEARNERS.get(cfg.learner.name).unrolls_per_update(cfg)
    return [runner.rollout() for _ in range(per_update)], update_steps(cfg, runner)


def update_steps(cfg, runner) -> int:
    """The agent steps one learner update consumes (``update_batch``'s count, no rollouts)."""
    from learners.algorithms import LEARNERS

    return (cfg.learner.unroll_length * runner.B
            * LEARNERS.get(cfg.learner.name).unrolls_per_update(cfg))


def repeat_update(learner, trajectories: list, on_policy: bool) -> dict:
    """One learner update on a fixed batch, stamped as a run's batch would be.

    ``on_policy``: the unrolls carry the learner's version (policy lag 0), as every batch of
    a lock-step run does, so the update takes the path such a run takes (IMPALA's fixed
    targets then read the runners' output instead of a pass over the batch); otherwise the
    batch keeps its first stamp and ages, as an asynchronous runner's batch is old.
    """
    if on_policy:
        for t in trajectories:
            t.policy_version = learner.version
    return learner.update(*trajectories)


def update_ops(cfg, runner, profiler: bool = False) -> dict:
    """The operators one learner update of ``cfg`` dispatches (``scripts/bench/dispatch.py``).

    On one update's unrolls of ``runner``, stamped as (c)'s; on the config's learner device,
    where an eager update's count is the same on CPU and CUDA but for the batch's copies to
    the device (a compiled one's kernels are inductor's C++ on CPU, Triton's on CUDA, and a
    CUDA graph's replay is one call). Counted by torch's profiler under ``learner.compile``
    (the dispatcher's count would turn the compiler off) or when ``profiler`` asks for it.
    """
    from learners.update.learner import Learner
    from scripts.bench.dispatch import count_update_calls, count_update_ops

    learner = Learner(cfg, runner.spec())
    trajectories, steps = update_batch(cfg, runner)
    count = count_update_calls if profiler or cfg.learner.compile else count_update_ops
    return count(lambda: repeat_update(learner, trajectories, cfg.learner.lock_step), steps)


def learner_rate(cfg, runner, seconds: float) -> float:
    """(c) Steps/s of learner updates alone, repeated on one fixed batch of runner rollouts.

    An update consumes ``T * B`` steps per unroll; PPO's epochs count each step once. The
    batch is stamped on-policy for a lock-step config (``repeat_update``).
    """
    from learners.update.learner import Learner

    learner = Learner(cfg, runner.spec())
    trajs, steps = update_batch(cfg, runner)
    return _rate(lambda: repeat_update(learner, trajs, cfg.learner.lock_step), seconds, steps,
                 warmup=1)


def end_to_end_rate(cfg, seconds: float, cycle: dict | None = None) -> float:
    """(d) Agent steps/s of ``mira train`` itself, run in a temporary directory.

    Frames are counted over ``seconds`` (longer if no update has landed in them yet) after a
    warm-up of ``seconds / 4`` and a first update, and divided by the frames per agent step;
    periodic checkpoints and progress logs are off (the run still writes its final
    checkpoint). Runs a copy of ``cfg`` with those ``run`` settings. ``cycle``, if
    given, receives where an update's time went over the whole run (warm-up included): the
    learner's mean ``update_s`` and the mean time it waited for a batch before each update
    (``wait_s``; in lock-step, the runners' part of the cycle), and ``updates``; and where
    the machine's core time went over the timed window, by process group
    (``core_s``: ``scripts/bench/core_time.py``'s groups, core-seconds, and ``window_s``,
    ``window_steps``), empty where there is no ``/proc``.
    """
    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer
    from scripts.bench import core_time

    tmp = tempfile.mkdtemp(prefix="mira-bench-")
    # stopped by time below
    cfg = replace(cfg, run=replace(cfg.run, dir=tmp, name="bench", total_frames=10**12,
                                   checkpoint_every_s=1e9, log_every_s=1e9))
    trainer = Trainer(cfg, RunDir.create(cfg, None), quiet=True)
    fps_per_step = trainer.spec["frames_per_step"]
    warm = seconds / 4  # let every runner start and the first updates land
    start, frames0 = time.time(), 0
    cores: dict = {}

    def timed(t) -> bool:
        # The window opens after the warm-up and a first update, and closes after ``seconds``
        # and at least one more update: on a loaded machine, or where one update takes
        # longer than ``seconds``, it stretches rather than count no steps.
        nonlocal start, frames0
        now = time.time()
        if frames0 == 0 and now - start >= warm and t.frames > 0:
            cores["before"] = core_time.snapshot()
            start, frames0 = now, t.frames
        done = bool(frames0) and now - start >= seconds and t.frames > frames0
        if done:
            cores.update(after=core_time.snapshot(), window_s=now - start,
                         window_steps=(t.frames - frames0) / fps_per_step)
        return done

    summary = trainer.train(stop_when=timed)
    if cycle is not None and summary["updates"]:
        metrics = summary["final_metrics"]  # one log interval: the whole run
        cycle.update(update_s=metrics.get("update_s", float("nan")), updates=summary["updates"],
                     wait_s=metrics.get("learner_queue_wait_s", 0.0) / summary["updates"],
                     batch_s=metrics.get("batch_s", float("nan")),
                     rollout_s=metrics.get("runner_rollout_s", float("nan")))
        if cores.get("before") and cores.get("after") and cores["window_steps"] > 0:
            cycle.update(core_s=core_time.by_group(cores["before"], cores["after"]),
                         window_s=cores["window_s"], window_steps=cores["window_steps"])
    return (summary["frames"] - frames0) / max(time.time() - start, 1e-9) / fps_per_step


def learner_cost(cfg, runner, seconds: float, threads: int) -> float:
    """(c) on ``threads`` intra-op threads: core-ms per step (threads x wall time per step).

    What the run's learner costs alone on its threads (``learners.runtime.fleet.learner_threads``),
    against (c)'s one: the intra-op threads' share of the gap to the limit. An idle thread
    spins between parallel regions (OpenMP's wait policy), so threads x wall is the core
    time it holds.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return 1e3 * threads / learner_rate(cfg, runner, seconds)
    finally:
        torch.set_num_threads(before)


def gpu_estimate(env: float, inference: float, gpu_learner: float,
                 runner_cores: tuple[int, ...] = RUNNER_CORES) -> tuple[float, dict[int, float]]:
    """Steps/s of one runner core and, per runner-core count, the end-to-end rate it implies.

    A runner core steps envs and runs inference (``1 / (1/env + 1/inference)`` steps/s);
    ``N`` of them feed a GPU learner of ``gpu_learner`` steps/s at ``min(N * that, gpu_learner)``.
    """
    per_core = 1.0 / (1.0 / env + 1.0 / inference)
    return per_core, {n: min(n * per_core, gpu_learner) for n in runner_cores}


def run_bench(config_path: str, overrides: list[str], seconds: float = 20.0,
              gpu_learner_rate: float | None = None, repeat: int = 1) -> dict:
    """Measure (a)-(d) for a config, ``seconds`` each, and print them as they come.

    Returns the four rates (steps/s), the compute-bound ``limit`` and the ``cores`` it
    assumes, the runner core's steps/s (``runner_per_core``) and the end-to-end steps/s it
    implies with a GPU learner of ``gpu_learner_rate`` steps/s (``gpu_end_to_end``, keyed by
    runner cores; None: ``GPU_LEARNER_RATE``). ``repeat``: measure (a)-(d) that many times
    in a row, each round against its own limit, and print the spread of the share; the
    figures returned are the last round's, with every round's share in ``shares``. For a CPU
    learner also the core time beyond the limit by part (``limit_gap``) and the ceiling the
    parts measured alone set (``parts_ceiling``, a share of the limit; None where not measured).
    """
    gpu_learner_rate = GPU_LEARNER_RATE if gpu_learner_rate is None else gpu_learner_rate
    from learners.config.schema import ConfigError, load_config

    if not (gpu_learner_rate > 0 and math.isfinite(gpu_learner_rate)):
        raise ConfigError(f"--gpu-learner-rate must be positive, got {gpu_learner_rate:g}")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ConfigError(f"--seconds must be a positive number of seconds, got {seconds:g}")
    if repeat < 1:
        raise ConfigError(f"--repeat must be at least 1, got {repeat}")
    cfg = load_config(config_path, overrides)
    shares = []
    for round_ in range(repeat):
        if repeat > 1:
            print(f"[bench] round {round_ + 1} of {repeat}", flush=True)
        figures = _bench_round(cfg, config_path, seconds, gpu_learner_rate, header=round_ == 0)
        shares.append(figures["end_to_end"] / figures["limit"])
    if repeat > 1:
        print(f"[bench] over {repeat} rounds, each against its own limit: end to end reaches "
              f"{100 * min(shares):.0f}-{100 * max(shares):.0f}% of it, median "
              f"{100 * float(np.median(shares)):.0f}%", flush=True)
    return {**figures, "shares": shares}


def _bench_round(cfg, config_path: str, seconds: float, gpu_learner_rate: float,
                 header: bool = True) -> dict:
    """One measurement of (a)-(d), printed as it comes; ``run_bench``'s figures."""
    torch.set_num_threads(1)
    runner = bench_runner(cfg)
    if header:
        print(f"[bench] {config_path}: {cfg.env.suite} {runner.suite.tasks[0]}"
              f"{' +' if len(runner.suite.tasks) > 1 else ''}, "
              f"{cfg.agent.torso}/{cfg.agent.core}/{cfg.agent.head}, learner {cfg.learner.name}, "
              f"{cfg.runtime.num_runners} runners x {cfg.runtime.envs_per_runner} envs, "
              f"T={cfg.learner.unroll_length}"
              f"{f', backend {cfg.env.backend}' if hasattr(cfg.env, 'backend') else ''}",
              flush=True)
    a = env_rate(runner, seconds)
    print(f"[bench] (a) environment     {a:9.0f} steps/s  ({1e3 / a:.3f} core-ms/step)", flush=True)
    b = inference_rate(runner, seconds)
    print(f"[bench] (b) inference       {b:9.0f} steps/s  ({1e3 / b:.3f} core-ms/step)", flush=True)
    per_core, gpu = gpu_estimate(a, b, gpu_learner_rate)
    fps = runner.suite.frames_per_step
    print(f"[bench] runner core (a + b) {per_core:9.0f} steps/s  "
          f"({1e3 / per_core:.3f} core-ms/step)", flush=True)
    for n, rate in gpu.items():
        bound = "runners" if n * per_core < gpu_learner_rate else "GPU learner"
        print(f"[bench] {n:3d} runner cores + a GPU learner of {gpu_learner_rate:.0f} steps/s: "
              f"{rate:9.0f} steps/s = {rate * fps:.0f} frames/s end to end ({bound} bound)",
              flush=True)
    rollout = rollout_time(runner)
    c = learner_rate(cfg, runner, seconds)
    print(f"[bench] (c) learner update  {c:9.0f} steps/s  ({1e3 / c:.3f} core-ms/step)", flush=True)
    from scripts.bench.dispatch import describe

    ops = update_ops(cfg, runner)  # how launch-bound (c) would be on a GPU
    print(f"[bench]     {describe(ops)}", flush=True)
    from learners.runtime.fleet import learner_threads
    from learners.update.device import resolve_device

    # A CPU learner's cost is core time; a GPU learner's (c) is the device's rate, not a
    # core's, so its threads and the gap part by part are not measured.
    on_cpu = resolve_device(cfg.learner.device).type == "cpu"
    threads = learner_threads(cfg)
    threads_ms = learner_cost(cfg, runner, seconds, threads) if threads > 1 and on_cpu else 1e3 / c
    if threads > 1 and on_cpu:
        print(f"[bench]     on the run's {threads} learner threads: {threads_ms:.3f} core-ms/step "
              f"({threads * 1e3 / threads_ms:.0f} steps/s)", flush=True)
    steps_per_unroll = cfg.learner.unroll_length * runner.B
    runner.close()
    cores = os.cpu_count() or 1
    limit = cores / (1 / a + 1 / b + 1 / c)
    torch.set_num_threads(cores)
    cycle: dict = {}
    d = end_to_end_rate(cfg, seconds, cycle)
    print(f"[bench] (d) end to end      {d:9.0f} steps/s", flush=True)
    if cycle:
        print(f"[bench]     per update of {update_steps(cfg, runner)} steps "
              f"({cycle['updates']} updates): learner "
              f"busy {1e3 * cycle['update_s']:.0f} ms, waiting for a batch "
              f"{1e3 * cycle['wait_s']:.0f} ms"
              f"{' (the runners acting: lock-step)' if cfg.learner.lock_step else ''}",
              flush=True)
        print(f"[bench]     of which: the learner making the batch "
              f"{1e3 * cycle['batch_s']:.0f} ms; "
              f"a runner's unroll {1e3 * cycle['rollout_s']:.0f} ms inside the runner, "
              f"{1e3 * rollout:.0f} ms in this process", flush=True)
    from scripts.bench.core_time import print_core_time, print_gap

    gap, ceiling = {}, None
    if cycle.get("core_s"):
        print_core_time(cycle, cores, 1e3 / a + 1e3 / b + 1e3 / c)
    if cycle.get("core_s") and on_cpu:
        gap, ceiling = print_gap(cycle, cores, {
            "env": 1e3 / a, "inference": 1e3 / b, "learner": 1e3 / c,
            "learner_threads": threads_ms, "rollout": 1e3 * rollout / steps_per_unroll}, threads)
    print(f"[bench] compute-bound limit on {cores} cores: {limit:.0f} steps/s; "
          f"end to end reaches {100 * d / limit:.0f}% of it", flush=True)
    return {"env": a, "inference": b, "learner": c, "end_to_end": d,
            "ops_per_step": ops["ops_per_step"], "limit": limit, "cores": cores,
            "update_cycle": cycle, "limit_gap": gap,
            "parts_ceiling": ceiling,
            "runner_per_core": per_core, "gpu_learner_rate": gpu_learner_rate,
            "gpu_end_to_end": gpu}
