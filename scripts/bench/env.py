"""``python -m scripts.bench.env [GAME | --suite lab6]``: bare env stepping, one core, no agent.

The yardstick for ``mira bench``'s end-to-end figure: what the emulator alone gives on one
core with uniformly random actions, stepped the two ways mira can step it.

- ``gymnasium``: ``gymnasium.vector.SyncVectorEnv`` over ``--envs`` copies of
  ``ALE/<GAME>-v5`` with ``AtariPreprocessing`` (frame skip 4, max-pool, 84x84 gray, up to 30
  no-op starts) and a 4-frame ``FrameStackObservation``;
- ``ale_vector``: ale-py's C++ ``AtariVectorEnv`` with the same preprocessing and stack,
  one emulator thread.

With ``--suite lab6`` (or ``lab30``): the lab levels, ``--envs`` of them dealt over the
levels in mira's batch, the view computed and drawn three ways: minigrid's own
(``gen_obs_grid`` for the step's symbolic observation and again for
``get_frame(agent_pov=True)``, ``Grid.render``: what ``RGBImgPartialObsWrapper`` does; the
wrapper's own layer is left out, so the ratios are if anything low); minigrid's view drawn
by mira (``envs.minigrid.pov_pixels``); and mira's view (``envs.minigrid.view_grid``, for
both) drawn by mira. The image is the same, pixel for pixel. Every path is warmed up first
(minigrid's tile cache is shared).

Atari counts agent steps (4 frames each), the lab suite steps (1 frame each), resets
included. Figures, not assertions: run it on an otherwise idle machine, and compare rates
measured back to back.
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


def lab_rate(suite: str, num_envs: int, seconds: float, minigrid_view: bool,
             minigrid_drawing: bool) -> float:
    """Steps/s of ``num_envs`` lab levels (dealt in the suite's order) in mira's ``GymBatch``.

    ``minigrid_view``: the level computes its view with minigrid's own ``gen_obs_grid``
    instead of ``envs.minigrid.view_grid``; ``minigrid_drawing``: the pixels come from
    ``get_frame(agent_pov=True)`` (what ``RGBImgPartialObsWrapper`` calls) instead of
    ``envs.minigrid.pov_pixels``.
    """
    from envs.batch import GymBatch
    from envs.lab.levels import LAB6, LAB30, make_lab_env
    from envs.minigrid import PixelsAndInstruction

    class Pixels(PixelsAndInstruction):
        def __init__(self, env):
            super().__init__(env)
            if minigrid_view:
                vars(env.unwrapped).pop("gen_obs_grid", None)  # minigrid's own view again

        def pixels(self):
            if not minigrid_drawing:
                return super().pixels()
            frame = self.env.unwrapped.get_frame(tile_size=self.tile_size, agent_pov=True)
            return np.ascontiguousarray(frame.transpose(2, 0, 1))

    levels = {"lab6": LAB6, "lab30": LAB30}[suite]
    envs = []
    for i in range(num_envs):
        env = make_lab_env(levels[i % len(levels)])  # PixelsAndInstruction outermost
        envs.append(Pixels(env.env))
    for i, env in enumerate(envs):
        env.reset(seed=i)
    batch, rng = GymBatch(envs), np.random.default_rng(0)
    return _rate(lambda: batch.step(rng.integers(7, size=num_envs)), num_envs, seconds)


LAB_PATHS = (  # label, minigrid_view, minigrid_drawing
    ("minigrid view and drawing", True, True),
    ("minigrid view, mira drawing", True, False),
    ("mira view and drawing", False, False),
)


def main(argv: list[str] | None = None) -> None:
    """Print both rates and their ratio."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("game", nargs="?", default="Pong", help="ALE game name")
    p.add_argument("--suite", choices=("atari", "lab6", "lab30"), default="atari",
                   help="which envs to step")
    p.add_argument("--envs", type=int, default=None,
                   help="environments stepped as one batch (default: 32 Atari, 12 lab)")
    p.add_argument("--seconds", type=float, default=20.0, help="duration of each measurement")
    args = p.parse_args(argv)
    if args.suite != "atari":
        n = args.envs or 12
        for _, view, drawing in LAB_PATHS:  # fill the shared tile cache, warm every path
            lab_rate(args.suite, n, min(1.0, args.seconds), view, drawing)
        first = None
        for label, view, drawing in LAB_PATHS:
            r = lab_rate(args.suite, n, args.seconds, view, drawing)
            first = first or r
            print(f"[bench_env] {label:<27} {args.suite} x {n}: {r:8.0f} steps/s on 1 core "
                  f"({r / first:.2f}x minigrid)", flush=True)
        return
    args.envs = args.envs or 32
    g = gymnasium_rate(args.game, args.envs, args.seconds)
    print(f"[bench_env] gymnasium  {args.game} x {args.envs}: {g:8.0f} agent steps/s on 1 core",
          flush=True)
    a = ale_vector_rate(args.game, args.envs, args.seconds)
    print(f"[bench_env] ale_vector {args.game} x {args.envs}: {a:8.0f} agent steps/s on 1 core "
          f"({a / g:.2f}x gymnasium)", flush=True)


if __name__ == "__main__":
    main()
