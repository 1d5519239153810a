"""``mira evaluate RUN_DIR_OR_CHECKPOINT``: whole episodes per task, normalised scores, CIs.

Runs ``--episodes`` episodes of every task (or ``--tasks``) with the checkpoint's agent in
evaluation mode, one Ray evaluator per task in parallel (``--num-runners 0``: in-process),
and writes ``eval.json`` and ``eval.md`` beside the checkpoint: in the run directory for a
run's checkpoint, next to the file otherwise. Unless ``learner.monitor.every`` is 0, it also
probes the checkpoint's torso on frames it plays (``probe_torso``): the shares of inactive
and dormant units per layer and the policy's spread (``learners/update/monitor.py``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from learners.config.schema import ConfigError
from learners.config.typed_yaml import said_briefly, weight_changes


def locate(path: str) -> tuple[Path, Path]:
    """(checkpoint file, directory to write to) from a run directory or a checkpoint path."""
    from learners.runtime.run_dir import RunDir

    p = Path(path)
    if p.is_dir():
        ckpt = RunDir(p).latest_checkpoint()
        if ckpt is None:
            raise ConfigError(f"{path} holds no checkpoint (looked in {p / 'checkpoints'})")
        return ckpt, p
    if not p.is_file():
        raise ConfigError(f"{path} is neither a run directory nor a checkpoint file")
    out = (p.parent.parent
           if p.parent.name == "checkpoints" and (p.parent.parent / "config.yaml").is_file()
           else p.parent)
    return p, out


def record_videos(cfg, weights: dict, indices: list[int], names: list[str], episodes: int,
                  out_dir: Path, quiet: bool = False, unit_strip: bool = False) -> list[Path]:
    """Record ``episodes`` episodes of each task as video files in ``out_dir``/videos.

    Each task in ``indices`` gets its own one-env runner, on which ``envs/video.py`` plays and
    writes the episodes; returns the paths of the files written.
    """
    from envs.runner import EnvRunner
    from envs.suites import ENVS
    from envs.video import record

    paths = []
    for i in indices:
        runner = EnvRunner(cfg.env, cfg.agent, runner_id=i, envs_per_runner=1, unroll_length=1,
                           seed=cfg.run.seed + 20_000 + i, tasks=[i], popart=cfg.learner.popart)
        paths += record(runner, weights, episodes, out_dir / "videos", names[i],
                        ENVS.get(cfg.env.suite).video_fps, unit_strip)
        runner.close()
        if not quiet:
            print(f"[mira]   {names[i]}: {episodes} episode(s) recorded", file=sys.stderr,
                  flush=True)
    return paths


def probe_torso(cfg, weights: dict, tasks: list[int]) -> dict[str, float]:
    """The torso monitor's measures on frames the checkpoint's policy plays.

    One unroll of 8 envs (2 per task of ``tasks``, task indices, when that is more; the
    tasks dealt env by env), long enough for
    ``learner.monitor.frames`` observations (unset: 256), seeded apart from the evaluation's
    envs; tag -> value (``learners.update.monitor.measure``).
    """
    import math

    import torch

    from envs.runner import EnvRunner
    from learners.update.monitor import features_outgoing, measure, values

    frames = cfg.learner.monitor.frames or 256
    envs = max(8, 2 * len(tasks))
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=envs,
                       unroll_length=math.ceil(frames / envs), seed=cfg.run.seed + 15_000,
                       tasks=[tasks[i % len(tasks)] for i in range(envs)],
                       popart=cfg.learner.popart)
    try:
        traj = runner.rollout(weights, 0)
    finally:
        runner.close()
    pixels = torch.from_numpy(traj.obs["pixels"][:-1]).flatten(0, 1)[:frames]
    logits = torch.from_numpy(traj.behaviour_logits[:-1]).flatten(0, 1)[:frames]
    return values(measure(runner.agent.torso, pixels, logits, cfg.learner.monitor.tau,
                          features_outgoing(runner.agent)))


def torso_line(measured: dict[str, float]) -> str:
    """``probe_torso``'s measures in one line: each layer's inactive and dormant shares."""
    layers = [k.split("/")[1] for k in measured if k.endswith("/inactive")]
    shares = ", ".join(f"{layer} {measured[f'torso/{layer}/inactive']:.0%} "
                       f"({measured[f'torso/{layer}/dormant']:.0%})" for layer in layers)
    return (f"Torso units inactive on every probe frame (dormant): {shares}; policy spread "
            f"across frames {measured.get('policy/spread', float('nan')):.3f}.")


def evaluate_checkpoint(path: str, episodes: int = 10, tasks: list[str] | None = None,
                        protocol: str | None = None, num_runners: int | None = None,
                        overrides: list[str] | None = None, quiet: bool = False, video: int = 0,
                        rims_strip: bool = False) -> dict:
    """Evaluate the agent of ``path`` (a run directory or a checkpoint) on whole episodes.

    Runs ``episodes`` episodes of each task (``tasks``, default all) and writes ``eval.json``
    and ``eval.md`` where ``locate`` says. Returns ``envs.evaluation.score_table``'s dict
    (per-task returns and normalised scores, aggregates with 95% CIs) plus ``checkpoint``
    (relative to the directory of ``eval.json``), ``frames``, ``protocol`` (None outside
    Atari), ``wall_time_s``, ``torso`` (``probe_torso``; None with the monitor off) and, with
    ``video > 0``, ``videos``.
    """
    from envs.evaluation import markdown, score_table
    from envs.suites import ENVS, build_suite
    from learners.runtime.fleet import connect, make_evaluator
    from learners.runtime.handles import get
    from learners.runtime.run_dir import RunDir, weights_misfit

    ckpt, out_dir = locate(path)
    state = RunDir.load_checkpoint(ckpt)
    overrides = list(overrides or [])
    cfg = RunDir.checkpoint_config(ckpt, state, overrides)
    if overrides and (changed := weight_changes(RunDir.checkpoint_config(ckpt, state, []), cfg)):
        raise ConfigError(f"cannot evaluate as another agent ({said_briefly(changed)}): the "
                          "checkpoint holds the weights of the agent it was trained as")
    with_protocol = ENVS.get(cfg.env.suite).protocol_overrides
    if protocol and with_protocol is not None:
        overrides += with_protocol(cfg.env, protocol)  # Atari: sticky actions, no-op starts
        cfg = RunDir.checkpoint_config(ckpt, state, overrides)
    elif protocol:
        raise ConfigError(f"--protocol applies to Atari runs; "
                          f"this run's env suite is {cfg.env.suite!r}")
    if rims_strip and cfg.agent.core != "rims":
        raise ConfigError(f"--rims-strip shows which RIMs are active; "
                          f"this run's core is {cfg.agent.core!r}")
    suite = build_suite(cfg.env)
    names = tasks or suite.tasks
    unknown = [t for t in names if t not in suite.tasks]
    if unknown:
        raise ConfigError(f"unknown task(s) {unknown}; this run's tasks: {', '.join(suite.tasks)}")
    indices = [suite.tasks.index(t) for t in names]
    weights = state["learner"]["agent"]
    in_process = (cfg.runtime.num_runners if num_runners is None else num_runners) == 0
    start = time.time()
    if not quiet:
        print(f"[mira] evaluating {ckpt} on {len(indices)} task(s), {episodes} episodes each"
              f"{' in-process' if in_process else ' on Ray'}", file=sys.stderr, flush=True)
    if not in_process:
        import ray

        connect(cfg)
        weights = ray.put(weights)
    handles = [make_evaluator(cfg, [i], episodes, in_process) for i in indices]
    refs = [h.evaluate(weights) for h in handles]
    returns = {}
    for i, ref in zip(indices, refs):
        try:
            returns[suite.tasks[i]] = get(ref)[i]
        except Exception as e:  # noqa: BLE001 - RuntimeError, or Ray's wrapper of it
            if (mismatch := weights_misfit(str(e))) is None:
                raise
            raise ConfigError(f"cannot evaluate {ckpt}: {mismatch}") from None
        if not quiet:
            r = returns[suite.tasks[i]]
            print(f"[mira]   {suite.tasks[i]}: mean return {sum(r) / len(r):.3f} "
                  f"over {len(r)} episodes ({time.time() - start:.0f}s)", file=sys.stderr,
                  flush=True)
    result = score_table(returns, suite.score_suite)
    # the checkpoint relative to eval.json's directory: a record kept elsewhere names no machine
    result.update(checkpoint=str(ckpt.resolve().relative_to(out_dir.resolve())),
                  frames=state["progress"]["frames"],
                  protocol=cfg.env.protocol if with_protocol is not None else None,
                  wall_time_s=time.time() - start)
    result["torso"] = (probe_torso(cfg, state["learner"]["agent"], indices)
                       if cfg.learner.monitor.every else None)
    probed = "" if result["torso"] is None else "\n" + torso_line(result["torso"]) + "\n"
    if probed and not quiet:
        print(f"[mira] {probed.strip()}", file=sys.stderr)
    (out_dir / "eval.json").write_text(json.dumps(result, indent=2))
    (out_dir / "eval.md").write_text(
        markdown(result, f"Evaluation of {ckpt.name} ({result['frames']:,} frames)") + probed)
    if not quiet:
        print(f"[mira] wrote {out_dir / 'eval.json'} and eval.md", file=sys.stderr)
    if video > 0:
        result["videos"] = [str(p) for p in record_videos(cfg, state["learner"]["agent"], indices,
                                                          suite.tasks, video, out_dir, quiet,
                                                          rims_strip)]
        if not quiet:
            print(f"[mira] wrote {len(result['videos'])} video(s) to {out_dir / 'videos'}",
                  file=sys.stderr)
    return result
