"""A batch of environments stepped as one: the interface ``EnvRunner`` steps once per time step.

``step(actions[B])`` returns a ``BatchStep``: the next observations ``[B, ...]`` (for an env
whose episode ended, already the first observation of its next episode), the rewards,
``terminated`` and ``truncated`` (never both), the last observation of each truncated
episode (its value is bootstrapped), and the whole games that ended. ``reward``, ``terminated``
and ``truncated`` are the step fields ``agents/steps.py`` declares written by the env: the runner
copies each into its buffer of the same name. Two implementations:
``GymBatch`` below loops over a list of gymnasium envs (MiniGrid, the lab suites, and
Atari's ``gymnasium`` backend); ``envs.atari.AleVectorBatch`` drives ale-py's C++ vector env.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np


@dataclass
class BatchStep:
    """What one step of a batch of ``B`` envs returns."""

    obs: dict[str, np.ndarray]  # [B, ...] each; a new episode's first obs where one ended
    reward: np.ndarray  # [B] float32, raw (the learner clips or scales)
    terminated: np.ndarray  # [B] bool: the episode ended in a terminal state (not bootstrapped)
    truncated: np.ndarray  # [B] bool: cut by a time limit (bootstrapped), never with terminated
    final_obs: dict[int, dict[str, np.ndarray]]  # env index -> last obs of its truncated episode
    # (env index, return, length in agent steps) of every whole game that ended this step
    episodes: list[tuple[int, float, int]] = field(default_factory=list)
    # RGB [H, W, 3] picture of each env after this step's action (before any reset), when asked
    screens: list[np.ndarray] | None = None


class GymBatch:
    """``B`` gymnasium envs stepped one after another; an env whose episode ended is reset.

    Each env reports finished whole games through ``info["episode"]``
    (``RecordEpisodeStatistics``), which may differ from the learning episode (Atari's
    episodic life).
    """

    renders = True  # step(..., screens=True) gives each env's full picture

    def __init__(self, envs: list[gym.Env]):
        self.envs = envs
        self.num_envs = len(envs)
        self.observation_space: gym.spaces.Dict = envs[0].observation_space

    def _stack(self, rows: list[dict]) -> dict[str, np.ndarray]:
        return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in self.observation_space}

    def reset(self) -> dict[str, np.ndarray]:
        """Start a new episode in every env; returns the first observations ``[B, ...]``."""
        return self._stack([env.reset()[0] for env in self.envs])

    def step(self, actions: np.ndarray, screens: bool = False) -> BatchStep:
        """Step env ``i`` with ``actions[i]``; reset the envs whose episode ended."""
        from envs.video import screen

        B = self.num_envs
        rows, rewards = [], np.zeros(B, np.float32)
        terminated, truncated = np.zeros(B, bool), np.zeros(B, bool)
        final_obs, episodes, frames = {}, [], [] if screens else None
        for i, env in enumerate(self.envs):
            obs, reward, term, trunc, info = env.step(int(actions[i]))
            rewards[i] = reward
            terminated[i], truncated[i] = term, trunc and not term
            if "episode" in info:
                episodes.append((i, float(info["episode"]["r"]), int(info["episode"]["l"])))
            if frames is not None:
                frames.append(screen(env, obs))
            if term or trunc:
                if truncated[i]:
                    final_obs[i] = obs
                obs, _ = env.reset()
            rows.append(obs)
        return BatchStep(self._stack(rows), rewards, terminated, truncated, final_obs, episodes,
                         frames)

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()
