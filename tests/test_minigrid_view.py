"""``envs.minigrid.view_grid`` is minigrid's ``gen_obs_grid``: the same view, mask and objects.

Every lab30 level and MiniGrid levels of other shapes (doors, lava, dynamic obstacles,
several rooms), random play, each state seen facing all four ways at view sizes 3 to 9,
sometimes with an object in the agent's hands; then a wrapped level's pixels and symbolic
observation against minigrid's own.
"""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from minigrid.core.world_object import Ball, Wall
from minigrid.minigrid_env import MiniGridEnv

from envs.lab import LAB30
from envs.lab.levels import make_lab_env
from envs.minigrid import _OUTSIDE, TILE_SIZE, make_minigrid, view_grid

MINIGRID = ["MiniGrid-DoorKey-6x6-v0", "MiniGrid-LavaGapS6-v0", "MiniGrid-MemoryS7-v0",
            "MiniGrid-Dynamic-Obstacles-6x6-v0", "MiniGrid-MultiRoom-N2-S4-v0",
            "BabyAI-GoToLocal-v0"]


def _make(name: str) -> gym.Env:
    return make_lab_env(name) if name in LAB30 else make_minigrid(name)


@pytest.mark.parametrize("name", LAB30 + MINIGRID)
def test_view_grid_is_minigrid_gen_obs_grid(name):
    env = _make(name)
    u = env.unwrapped
    rng = np.random.default_rng(5)
    env.reset(seed=0)
    for t in range(25):
        facing = u.agent_dir
        for d, size in itertools.product(range(4), (None, 3, 5, 9)):
            u.agent_dir = d
            want, want_visible = MiniGridEnv.gen_obs_grid(u, size)
            got, got_visible = view_grid(u, size)
            assert np.array_equal(got_visible, want_visible), (name, t, d, size)
            world = {id(c) for c in u.grid.grid}
            for a, b in zip(got.grid, want.grid, strict=True):  # past the edge: a fresh Wall
                past_edge = isinstance(b, Wall) and id(b) not in world
                assert a is b or (past_edge and a is _OUTSIDE), (name, t, d, size)
        u.agent_dir = facing
        u.carrying = Ball("green") if t % 5 == 0 else None
        _, _, terminated, truncated, _ = env.step(int(rng.integers(7)))
        if terminated or truncated:
            env.reset(seed=t)
    with pytest.raises(ValueError, match="agent_view_size must be odd, got 6"):
        view_grid(u, 6)


@pytest.mark.parametrize("name", MINIGRID)
def test_wrapped_level_observes_what_minigrid_does(name):
    # the wrapper makes the level use view_grid: its pixels are get_pov_render's, and the
    # symbolic observation minigrid builds from the view is unchanged
    env = _make(name)
    u = env.unwrapped
    assert u.gen_obs_grid.func is view_grid
    size = u.agent_view_size
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=3)
    for t in range(60):
        grid, visible = MiniGridEnv.gen_obs_grid(u)
        pov = grid.render(TILE_SIZE, agent_pos=(size // 2, size - 1), agent_dir=3,
                          highlight_mask=visible)
        assert np.array_equal(obs["pixels"], pov.transpose(2, 0, 1)), (name, t)
        assert np.array_equal(u.gen_obs()["image"], grid.encode(visible)), (name, t)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(7)))
        if terminated or truncated:
            obs, _ = env.reset(seed=t)
