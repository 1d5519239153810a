"""MiniGrid as mira sees it: egocentric RGB pixels plus the mission as tokens.

Observation (a ``gymnasium.spaces.Dict``, the same for every MiniGrid/BabyAI level):
- ``pixels``: uint8 [3, 56, 56], the agent's 7x7 partial view rendered at 8 px per tile,
  channels first: the image minigrid's ``RGBImgPartialObsWrapper`` draws, pixel for pixel
  (``pov_pixels``, in about half the time of minigrid's ``get_pov_render``);
- ``instruction``: int64 [MAX_TOKENS], the mission string tokenised (``envs.instructions``).
Actions: MiniGrid's 7 discrete actions. Episodes end with ``terminated`` on success or
failure and ``truncated`` at the level's ``max_steps`` (kept apart for bootstrapping).
"""

from __future__ import annotations

import gymnasium as gym
import minigrid  # noqa: F401  (registers MiniGrid-* and BabyAI-* ids)
import numpy as np
from gymnasium import spaces
from minigrid.core.grid import Grid

from envs.instructions import MAX_TOKENS, VOCAB_SIZE, tokenize

TILE_SIZE = 8


def pov_pixels(env, tile_size: int = TILE_SIZE) -> np.ndarray:
    """The agent's partial view as RGB ``[H, W, 3]`` uint8, as ``env.get_pov_render`` draws it.

    The same tiles from minigrid's own tile cache (``Grid.render_tile``), agent at the
    bottom centre facing up, the visible cells highlighted; what it saves is
    ``Grid.render``'s per-cell ``np.array_equal`` and 49 slice assignments into a fresh
    image: the tiles go into one ``[rows, tile, cols, tile, 3]`` array.
    """
    grid, visible = env.gen_obs_grid()
    n = grid.width
    agent_i, agent_j = n // 2, grid.height - 1
    img = np.empty((grid.height, tile_size, n, tile_size, 3), np.uint8)
    cells = grid.grid
    render_tile = Grid.render_tile
    for j in range(grid.height):
        for i in range(n):
            img[j, :, i] = render_tile(
                cells[j * n + i],
                agent_dir=3 if (i == agent_i and j == agent_j) else None,
                highlight=visible[i, j],
                tile_size=tile_size,
            )
    return img.reshape(grid.height * tile_size, n * tile_size, 3)


class PixelsAndInstruction(gym.ObservationWrapper):
    """MiniGrid dict obs -> ``{"pixels": [3, H, W] uint8, "instruction": [L] int64}``."""

    def __init__(self, env: gym.Env, tile_size: int = TILE_SIZE):
        super().__init__(env)
        self.tile_size = tile_size
        side = env.unwrapped.agent_view_size * tile_size
        self.observation_space = spaces.Dict(
            pixels=spaces.Box(0, 255, (3, side, side), np.uint8),
            instruction=spaces.Box(0, VOCAB_SIZE - 1, (MAX_TOKENS,), np.int64),
        )
        self._mission = None
        self._tokens = None

    def observation(self, obs):
        """Channels-first pixels ``[3, H, W]`` and the mission's tokens ``[MAX_TOKENS]``."""
        # Missions change only between episodes; tokenise once per distinct string.
        if obs["mission"] != self._mission:
            self._mission = obs["mission"]
            self._tokens = tokenize(self._mission)
        return {"pixels": self.pixels(), "instruction": self._tokens.copy()}

    def pixels(self) -> np.ndarray:
        """The agent's view now, channels first ``[3, H, W]`` uint8."""
        return np.ascontiguousarray(
            pov_pixels(self.env.unwrapped, self.tile_size).transpose(2, 0, 1))


def make_minigrid(env_id: str, **kwargs) -> gym.Env:
    """``gym.make(env_id)`` wrapped to mira's MiniGrid observation."""
    return PixelsAndInstruction(gym.make(env_id, **kwargs))
