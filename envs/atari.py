"""Atari 2600 through ale-py, preprocessed with gymnasium's own wrappers.

Two named protocols (``env.protocol``):

- ``dqn``: Mnih et al. 2015 / Wang et al. 2016 evaluation protocol: up to 30 random
  no-op starts, no sticky actions, the game's minimal action set;
- ``machado``: Machado et al. 2018: sticky actions with probability 0.25, the full
  18-action set, no no-op starts.

Both: frame skip 4 with max-pooling over the last two frames, 84x84 grayscale
(``gymnasium.wrappers.AtariPreprocessing``), a stack of the last 4 frames
(``FrameStackObservation``) and the 108,000-frame episode cap (ALE's
``max_num_frames_per_episode``, which reports ``truncated``). Multitask training asks
for the full action set for every protocol so that all games share one action space.

``episodic_life`` (used by the PPO preset, as Kostrikov's and baselines' Atari wrappers
do) ends the *learning* episode on a life loss without resetting the game; the episode
returns that mira reports are always whole games, recorded below that wrapper.
"""

from __future__ import annotations

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, RecordEpisodeStatistics

gym.register_envs(ale_py)

PROTOCOLS = ("dqn", "machado")


class EpisodicLife(gym.Wrapper):
    """Signal ``terminated`` on a life loss; reset the emulator only on a real game over.

    A life loss is a real terminal state for the learner (the value of what follows is
    not bootstrapped), but the game goes on: ``reset`` after a life loss takes one no-op
    step instead of restarting the game (baselines' ``EpisodicLifeEnv``).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action):
        """``env.step``, with ``terminated`` also True on a life loss; the game goes on."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        """Reset the game after a game over; after a life loss, take one no-op step instead."""
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


class PixelsDict(gym.ObservationWrapper):
    """[4, 84, 84] frame stack -> ``{"pixels": uint8 [4, 84, 84]}`` (mira's obs layout)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = spaces.Dict(pixels=env.observation_space)

    def observation(self, obs):
        """The frame stack as ``{"pixels": uint8 array}``."""
        return {"pixels": np.asarray(obs)}


def make_atari(
    game: str,
    protocol: str = "dqn",
    *,
    full_action_space: bool | None = None,
    episodic_life: bool = False,
    max_episode_frames: int = 108_000,
    frame_stack: int = 4,
) -> gym.Env:
    """``ALE/<game>-v5`` with the named protocol; observation ``{"pixels": [4, 84, 84]}``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown Atari protocol {protocol!r}; valid protocols: "
                         f"{', '.join(PROTOCOLS)}")
    machado = protocol == "machado"
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,  # AtariPreprocessing does the skipping (and max-pools the last 2 frames)
        repeat_action_probability=0.25 if machado else 0.0,
        full_action_space=machado if full_action_space is None else full_action_space,
        max_num_frames_per_episode=max_episode_frames,
    )
    env = AtariPreprocessing(env, noop_max=0 if machado else 30, frame_skip=4, screen_size=84)
    env = RecordEpisodeStatistics(env)  # whole-game return/length, below EpisodicLife
    if episodic_life:
        env = EpisodicLife(env)
    return PixelsDict(FrameStackObservation(env, frame_stack))
