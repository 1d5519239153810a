"""Does an agent read its observation? Two probes used to diagnose a run that does not learn.

``python -m scripts.papers.atari_probe readout CONFIG [key=value ...] [--updates 400]``
    Atari only. Supervised, no RL: random play on the config's game records each frame with a
    RAM byte that the screen shows (Pong: our paddle's y, RAM[51]); the config's agent (torso ->
    core -> value head) regresses it with the config's optimizer, learning rate and
    gradient clip on ``0.5 * sum (V - y)^2`` over batches of ``T x B`` steps (IMPALA's
    value term before its ``baseline_cost``). Prints the explained variance on held-out
    batches every 100 updates: if it rises, frames reach the agent intact and the agent can
    learn to read them; the RL signal is then what decides whether a run learns.
``python -m scripts.papers.atari_probe checkpoint RUN_DIR [RUN_DIR ...]``
    Any suite with pixel observations and any torso that does not present a set to its core
    (Atari, MiniGrid, the lab suite, whose observations may also carry an instruction and a
    task ID). Plays 4 unrolls of 8 envs (2 per task in a multitask suite, so every task is
    seen equally) with the run's last checkpoint and prints the policy's mean action
    probabilities, their spread across frames (a policy that ignores the screen has a spread
    near 0), the value's spread across frames, for each layer the torso declares
    (``probe_layers``) the share of its units (a conv layer's channels) inactive on every one
    of those frames (dead ReLU units) and tau-dormant (the run's ``learner.monitor``: the
    training monitor's own measure, ``learners/update/monitor.py``), the features' rms and
    spread across frames, and the core output's spread across frames. In a multitask suite
    it also prints the policy's spread across the frames of each task: the spread over all
    frames also moves with the task ID alone (a task-ID head changes its policy per task
    whatever it sees), the spread within a task does not.
``python -m scripts.papers.atari_probe initial CONFIG [key=value ...] [--seeds 0 1 2]``
    The same probe on the weights a run of the config starts from, for each seed: what a
    run's first updates start from (on Pong, about half the fc units are off on every frame
    at the initial weights, since the frames differ in a few pixels).
``python -m scripts.papers.atari_probe checkpoint --every RUN_DIR``
    The same probe on each checkpoint the run kept, fewest frames first, then a table with
    one row per checkpoint: when a run's torso collapsed, or its policy stopped reading the
    screen (``run.keep_checkpoints`` sets how many a run keeps; the rest are deleted).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

# RAM bytes a game shows on screen, for ``readout``.
SCREEN_RAM = {"Pong": 51}


def readout(config: str, overrides: list[str], updates: int, T: int = 20, B: int = 32,
            batches: int = 60, every: int = 100) -> list[tuple[int, float]]:
    """The ``readout`` probe: can the config's agent learn to read a RAM byte off the screen?

    Records ``batches`` batches of ``T x B`` random-play frames, holds a sixth of them out and
    regresses the standardised byte on the rest for ``updates`` updates. Returns
    ``(update, explained variance on the held-out batches)`` at 0 and every ``every`` updates.
    """
    from envs.atari import make_atari
    from learners.config.schema import load_config
    from learners.update.learner import Learner

    cfg = load_config(config, ["runtime.num_runners=0", *overrides])
    if cfg.env.suite != "atari" or cfg.env.game not in SCREEN_RAM:
        raise SystemExit(f"atari_probe readout: needs env.suite=atari and env.game one of "
                         f"{', '.join(SCREEN_RAM)}")
    torch.set_num_threads(1)
    envs = [make_atari(cfg.env.game, cfg.env.protocol) for _ in range(B)]
    for i, env in enumerate(envs):
        env.reset(seed=cfg.run.seed * 1000 + i)
    rng = np.random.default_rng(cfg.run.seed)
    n_test = max(1, batches // 6)
    n_train = batches - n_test
    obs = np.zeros((n_train + n_test, T, B, 4, 84, 84), np.uint8)
    target = np.zeros((n_train + n_test, T, B), np.float32)
    for u in range(n_train + n_test):
        for t in range(T):
            for i, env in enumerate(envs):
                o, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
                if terminated or truncated:
                    o, _ = env.reset()
                obs[u, t, i] = o["pixels"]
                target[u, t, i] = env.unwrapped.ale.getRAM()[SCREEN_RAM[cfg.env.game]]
    target = (target - target.mean()) / target.std()
    spec = {"obs_shapes": {"pixels": obs.shape[3:]}, "num_actions": envs[0].action_space.n,
            "tasks": [cfg.env.game], "frames_per_step": 4}
    learner = Learner(cfg, spec, threads=1)
    agent, dev = learner.agent, learner.device  # the learner's device: a GPU where there is one

    def inputs(u: int) -> dict:
        zeros = lambda dtype: torch.zeros(T, B, dtype=dtype, device=dev)  # noqa: E731
        return {"pixels": torch.from_numpy(obs[u]).to(dev), "last_action": zeros(torch.long),
                "last_reward": zeros(torch.float32), "reset": zeros(torch.bool)}

    def targets(u: int) -> torch.Tensor:
        return torch.from_numpy(target[u]).to(dev)

    def explained_variance() -> float:
        with torch.no_grad():
            errors = [float(((agent(inputs(u), agent.initial_state(B, dev))[0].value
                              - targets(u)) ** 2).mean())
                      for u in range(n_train, n_train + n_test)]
        return 1.0 - float(np.mean(errors))  # targets are standardised

    history = [(0, explained_variance())]
    print(f"[probe] {cfg.env.game} RAM[{SCREEN_RAM[cfg.env.game]}] from frames, "
          f"optimizer {cfg.learner.optimizer.name} lr {cfg.learner.optimizer.lr} "
          f"eps {cfg.learner.optimizer.eps}, "
          f"torso init {cfg.agent.torso_options.init}: "
          f"explained variance {history[0][1]:.3f} at 0 updates", flush=True)
    for k in range(1, updates + 1):
        u = int(rng.integers(n_train))
        out, _ = agent(inputs(u), agent.initial_state(B, dev))
        loss = 0.5 * ((out.value - targets(u)) ** 2).sum()
        learner.step(loss)
        if k % every == 0:
            history.append((k, explained_variance()))
            print(f"[probe] explained variance {history[-1][1]:.3f} after {k} updates", flush=True)
    return history


def checkpoint(run_dir: str, envs: int | None = None, path=None) -> dict:
    """The ``checkpoint`` probe: do the policy and value of a run's checkpoint read the screen?

    Plays 4 unrolls of ``envs`` envs (default 8, or 2 per task in a multitask suite) with the
    checkpoint ``path`` (default: the last one in ``run_dir``); returns (and prints) the
    statistics listed in the module docstring, plus ``frames`` (the checkpoint's) and
    ``replay_error``: the largest gap between the runner's logits and the probe's own replay
    of the same stream, which checks the probe's path through the agent and should be about 0.
    ``policy_spread_per_task`` maps each task's name to the mean over actions of the policy's
    spread across that task's frames (one entry for a one-task suite).
    """
    from learners.runtime.run_dir import RunDir

    run = RunDir.open(run_dir)
    path = run.latest_checkpoint() if path is None else path
    if path is None:
        raise SystemExit(f"atari_probe checkpoint: {run_dir} has no checkpoint yet")
    state = RunDir.load_checkpoint(path)
    cfg = run.load_config()
    return _probe(_runner(cfg, envs), state["learner"]["agent"], path.name,
                  RunDir.frames_of(path), cfg.learner.monitor)


def initial(config: str, overrides: list[str], seeds: list[int],
            envs: int | None = None) -> list[dict]:
    """The ``checkpoint`` probe on the weights a run of ``config`` starts from, per seed.

    The learner builds the agent as a run with ``run.seed`` = each of ``seeds`` would (the
    weights depend on the seed alone); returns the probe's results (``frames`` 0), one per seed.
    """
    from learners.config.schema import load_config
    from learners.update.learner import Learner

    results = []
    for seed in seeds:
        cfg = load_config(config, [*overrides, f"run.seed={seed}"])
        runner = _runner(cfg, envs)
        learner = Learner(cfg, runner.spec(), threads=1)
        weights = {k: v.cpu() for k, v in learner.agent.state_dict().items()}
        results.append(_probe(runner, weights, f"seed {seed}, initial weights", 0,
                              cfg.learner.monitor))
    return results


def _runner(cfg, envs: int | None):
    """The probe's runner for ``cfg``'s suite: ``envs`` envs (default 8, or 2 per task)."""
    from envs.runner import EnvRunner

    torch.set_num_threads(1)
    if envs is None:
        from envs.suites import build_suite

        tasks = len(build_suite(cfg.env).tasks)
        envs = 8 if tasks == 1 else 2 * tasks
    return EnvRunner(cfg.env, cfg.agent, envs_per_runner=envs, unroll_length=50, seed=99,
                     runners_per_task=0, popart=cfg.learner.popart)


def _probe(runner, weights: dict, name: str, frames: int, monitor) -> dict:
    """Play 4 unrolls of ``runner``'s envs with ``weights``; the statistics ``checkpoint`` lists.

    ``monitor``: the run's ``learner.monitor`` section (its ``tau``). The shares are the
    training monitor's (``learners.update.monitor.measure``), per layer of ``probe_layers``:
    ``inactive_<layer>`` and ``dormant_<layer>``, and under ``monitor`` by tag; ``features``
    names the last layer, whose rms and spread are ``fc_rms`` and ``fc_spread``.
    """
    from learners.update import monitor as torso_monitor

    trajs = [runner.rollout(weights, 0) for _ in range(4)]
    logits = np.concatenate([t.behaviour_logits[:-1] for t in trajs]).reshape(
        -1, trajs[0].behaviour_logits.shape[-1])
    probs = torch.softmax(torch.from_numpy(logits), -1)
    values = np.concatenate([t.behaviour_value[:-1] for t in trajs]).ravel()
    agent = runner.agent
    torso = agent.torso
    if torso.as_set:
        raise SystemExit("atari_probe checkpoint: the run's core reads the torso as a spatial set; "
                         "the probe reads flat torsos")
    # Consecutive unrolls tile one stream (row T of one is row 0 of the next): rows 0..T-1 of
    # each, in time order, are 4T steps of the same 8 envs from the first unroll's core state.
    rows = {k: torch.from_numpy(np.concatenate([t.obs[k][:-1] for t in trajs]))
            for k in trajs[0].obs}
    for key in ("last_action", "last_reward", "reset", "task_id"):
        rows[key] = torch.from_numpy(np.concatenate([getattr(t, key)[:-1] for t in trajs]))
    pixels = rows["pixels"].flatten(0, 1)
    measured = torso_monitor.values(torso_monitor.measure(
        torso, pixels, torch.from_numpy(logits), monitor.tau,
        torso_monitor.features_outgoing(agent)))
    layers = list(torso.probe_layers)
    with torch.no_grad():
        fc = torso.probe({"pixels": pixels})[layers[-1]]  # the features, before the extras
        features = torso({k: rows[k] for k in agent.obs_keys}, rows["last_action"],
                         rows["last_reward"])
        core_out, _ = agent.core(features,
                                 tuple(torch.from_numpy(s) for s in trajs[0].initial_state),
                                 rows["reset"])
        replayed_logits, _ = agent.head(core_out, rows["task_id"] if agent.reads_task_id else None)
    # Spread across the frames of each task: a task-ID head moves its policy per task whatever
    # it sees, so only this part says whether the policy reads the observation.
    task_of = rows["task_id"].flatten().numpy()
    names = runner.suite.tasks
    per_task = {str(names[k]): float(probs[torch.from_numpy(task_of == k)].std(0).mean())
                for k in sorted(set(task_of.tolist()))}
    result = {
        "checkpoint": name, "frames": frames,
        "policy_mean": probs.mean(0).tolist(), "policy_spread": probs.std(0).tolist(),
        "policy_spread_per_task": per_task,
        "value_mean": float(values.mean()), "value_spread": float(values.std()),
        "features": layers[-1], "monitor": measured,
        **{f"{kind}_{layer}": measured[f"torso/{layer}/{kind}"] for layer in layers
           for kind in ("inactive", "dormant")},
        "fc_rms": float(fc.pow(2).mean().sqrt()), "fc_spread": float(fc.std(0).mean()),
        "core_spread": float(core_out.flatten(0, 1).std(0).mean()),
        # The probe's own pass over the stream must give the runner's logits: a check of its path.
        "replay_error": float((replayed_logits.reshape(-1, logits.shape[-1])
                               - torch.from_numpy(logits)).abs().max()),
    }
    print(f"[probe] {name}: policy {np.round(result['policy_mean'], 3)} spread across frames "
          f"{np.round(result['policy_spread'], 3)}; value {result['value_mean']:.3f} "
          f"spread {result['value_spread']:.3f}; units inactive on all {len(pixels)} frames "
          f"(tau-dormant at tau {monitor.tau:g}): "
          + ", ".join(f"{layer} {result[f'inactive_{layer}']:.0%} "
                      f"({result[f'dormant_{layer}']:.0%})" for layer in layers)
          + f"; {layers[-1]} rms {result['fc_rms']:.3f} "
          f"spread {result['fc_spread']:.4f}; core output spread {result['core_spread']:.4f}; "
          f"replay error {result['replay_error']:.1e}", flush=True)
    if len(per_task) > 1:
        print("[probe] policy spread across the frames of each task (mean over actions): "
              + ", ".join(f"{k} {v:.3f}" for k, v in per_task.items()), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the probe named in ``argv`` (``readout``, ``checkpoint`` or ``initial``); return 0."""
    parser = argparse.ArgumentParser(prog="python -m scripts.papers.atari_probe",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("readout",
                       help="supervised: can the agent learn to read a RAM value off the screen?")
    r.add_argument("config")
    r.add_argument("overrides", nargs="*", help="dotted.key=value")
    r.add_argument("--updates", type=int, default=400)
    c = sub.add_parser("checkpoint", help="does a run's policy and value depend on the screen? "
                                          "(any suite; one line per run directory)")
    c.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    c.add_argument("--every", action="store_true",
                   help="probe every checkpoint the run kept and print one row per checkpoint")
    i = sub.add_parser("initial", help="the checkpoint probe on the weights a run of CONFIG "
                                       "starts from, one line per seed")
    i.add_argument("config")
    i.add_argument("overrides", nargs="*", help="dotted.key=value")
    i.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    from learners.config.typed_yaml import ConfigError

    try:  # a config or override the loader refuses: its one-line message, no traceback
        if args.command == "initial":
            initial(args.config, args.overrides, args.seeds)
            return 0
        if args.command == "readout":
            readout(args.config, args.overrides, args.updates)
            return 0
    except ConfigError as e:
        raise SystemExit(f"atari_probe {args.command}: {e}") from None
    for run_dir in args.run_dirs:
        if len(args.run_dirs) > 1:
            print(f"[probe] {run_dir}", flush=True)
        if not args.every:
            checkpoint(run_dir)
            continue
        from learners.runtime.run_dir import RunDir

        paths = RunDir.open(run_dir).checkpoint_paths()
        if not paths:
            raise SystemExit(f"atari_probe checkpoint: {run_dir} has no checkpoint yet")
        print(timeline([checkpoint(run_dir, path=p) for p in paths]), flush=True)
    return 0


def timeline(results: list[dict]) -> str:
    """A markdown table of ``checkpoint`` results, one row per checkpoint in the given order."""
    layer = results[0]["features"] if results else "fc"
    lines = [f"| frames | {layer} inactive on every frame | {layer} rms | {layer} spread "
             "| value spread | policy spread (mean over actions) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['frames']:,} | {r[f'inactive_{layer}']:.0%} | {r['fc_rms']:.3g} "
                     f"| {r['fc_spread']:.3g} | {r['value_spread']:.3g} "
                     f"| {float(np.mean(r['policy_spread'])):.3g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
