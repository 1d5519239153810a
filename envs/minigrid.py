"""MiniGrid as mira sees it: egocentric RGB pixels plus the mission as tokens.

Observation (a ``gymnasium.spaces.Dict``, the same for every MiniGrid/BabyAI level):
- ``pixels``: uint8 [3, 56, 56], the agent's 7x7 partial view rendered at 8 px per tile
  (minigrid's ``RGBImgPartialObsWrapper``), channels first;
- ``instruction``: int64 [MAX_TOKENS], the mission string tokenised (``envs.instructions``).
Actions: MiniGrid's 7 discrete actions. Episodes end with ``terminated`` on success or
failure and ``truncated`` at the level's ``max_steps`` (kept apart for bootstrapping).
"""

from __future__ import annotations

import gymnasium as gym
import minigrid  # noqa: F401  (registers MiniGrid-* and BabyAI-* ids)
import numpy as np
from gymnasium import spaces
from minigrid.wrappers import RGBImgPartialObsWrapper

from envs.instructions import MAX_TOKENS, VOCAB_SIZE, tokenize

TILE_SIZE = 8


class PixelsAndInstruction(gym.ObservationWrapper):
    """MiniGrid dict obs -> ``{"pixels": [3, H, W] uint8, "instruction": [L] int64}``."""

    def __init__(self, env: gym.Env, tile_size: int = TILE_SIZE):
        super().__init__(RGBImgPartialObsWrapper(env, tile_size=tile_size))
        h, w, c = self.env.observation_space["image"].shape
        self.observation_space = spaces.Dict(
            pixels=spaces.Box(0, 255, (c, h, w), np.uint8),
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
        return {
            "pixels": np.ascontiguousarray(obs["image"].transpose(2, 0, 1)),
            "instruction": self._tokens.copy(),
        }


def make_minigrid(env_id: str, **kwargs) -> gym.Env:
    """``gym.make(env_id)`` wrapped to mira's MiniGrid observation."""
    return PixelsAndInstruction(gym.make(env_id, **kwargs))
