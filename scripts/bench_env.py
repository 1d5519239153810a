"""``python -m scripts.bench_env [GAME]``: bare Atari stepping rates, one core, no agent.

The yardstick for ``mira bench``'s end-to-end figure: what the emulator alone gives on one
core with uniformly random actions, stepped the two ways mira can step it.

- ``gymnasium``: ``gymnasium.vector.SyncVectorEnv`` over ``--envs`` copies of
  ``ALE/<GAME>-v5`` with ``AtariPreprocessing`` (frame skip 4, max-pool, 84x84 gray, up to 30
  no-op starts) and a 4-frame ``FrameStackObservation``;
- ``ale_vector``: ale-py's C++ ``AtariVectorEnv`` with the same preprocessing and stack,
  one emulator thread.

Both count agent steps (4 frames each), resets included. Figures, not assertions: run it on an
otherwise idle machine, and compare rates measured back to back.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _rate(step, num_envs: int, seconds: float) -> float:
    for _ in range(20):
        step()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return n * num_envs / (time.perf_counter() - start)


def _random_play_rate(envs, num_envs: int, seconds: float) -> float:
    """Agent steps/s of a vector env under uniformly random actions; closes it after."""
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    n = envs.single_action_space.n
    rate = _rate(lambda: envs.step(rng.integers(n, size=num_envs)), num_envs, seconds)
    envs.close()
    return rate


def gymnasium_rate(game: str, num_envs: int, seconds: float) -> float:
    """Agent steps/s of a ``SyncVectorEnv`` of gymnasium-wrapped ``ALE/<game>-v5`` envs."""
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)

    def make():
        env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0)
        return FrameStackObservation(AtariPreprocessing(env, noop_max=30), 4)

    envs = gym.vector.SyncVectorEnv([make for _ in range(num_envs)])
    return _random_play_rate(envs, num_envs, seconds)


def ale_vector_rate(game: str, num_envs: int, seconds: float) -> float:
    """Agent steps/s of ale-py's ``AtariVectorEnv`` (one thread), the same preprocessing."""
    from ale_py.vector_env import AtariVectorEnv

    from envs.atari import rom_id

    envs = AtariVectorEnv(rom_id(game), num_envs,
                          num_threads=1, repeat_action_probability=0.0, noop_max=30,
                          reward_clipping=False, use_fire_reset=False)
    return _random_play_rate(envs, num_envs, seconds)


def main(argv: list[str] | None = None) -> None:
    """Print both rates and their ratio."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("game", nargs="?", default="Pong", help="ALE game name")
    p.add_argument("--envs", type=int, default=32, help="environments stepped as one batch")
    p.add_argument("--seconds", type=float, default=20.0, help="duration of each measurement")
    args = p.parse_args(argv)
    g = gymnasium_rate(args.game, args.envs, args.seconds)
    print(f"[bench_env] gymnasium  {args.game} x {args.envs}: {g:8.0f} agent steps/s on 1 core",
          flush=True)
    a = ale_vector_rate(args.game, args.envs, args.seconds)
    print(f"[bench_env] ale_vector {args.game} x {args.envs}: {a:8.0f} agent steps/s on 1 core "
          f"({a / g:.2f}x gymnasium)", flush=True)


if __name__ == "__main__":
    main()
