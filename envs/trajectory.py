"""The one container runners return: raw experience, no learning.

Every array is time-major ``[T + 1, B, ...]`` numpy (zero-copy through Ray's object
store). Row ``t`` holds what the agent saw at step ``t`` (``obs``, ``last_action``,
``last_reward``, ``reset``: this step starts a new episode, ``task_id``), what it did
(``action``, ``behaviour_logits``, ``behaviour_value``) and what followed (``reward``,
``terminated``, ``truncated``, ``final_value``). Row ``T`` is also row 0 of the next
unroll; its ``reward``/``terminated``/``truncated`` are not filled until then and the
learner only uses rows ``0..T-1`` of them.

``final_value[t]`` is the behaviour policy's value of the *final* observation of an
episode truncated by a time limit at step ``t`` (0 elsewhere): the learner adds
``gamma * final_value`` to that step's reward and stops the bootstrap there, which
is the truncation treatment of partial-episode bootstrapping (Pardo et al. 2018), as
Stable-Baselines3 does it for on-policy learners.

``initial_state`` is the core state before row 0: the learner re-runs the core from it.
``chunk_states`` (when the runner is asked for them, ``state_every = k``): the core state
before rows ``0, k, 2k, ...``, each ``[T / k, B, ...]``, which PPO's chunked minibatches start
from (``learners/ppo.py``) instead of re-running the core over the batch to find them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Trajectory:
    """One unroll of raw experience: time-major numpy arrays ``[T + 1, B, ...]``."""

    obs: dict[str, np.ndarray]  # each [T+1, B, ...]
    last_action: np.ndarray  # [T+1, B] int64
    last_reward: np.ndarray  # [T+1, B] float32
    reset: np.ndarray  # [T+1, B] bool
    task_id: np.ndarray  # [T+1, B] int64
    action: np.ndarray  # [T+1, B] int64
    behaviour_logits: np.ndarray  # [T+1, B, A] float32
    behaviour_value: np.ndarray  # [T+1, B] float32
    reward: np.ndarray  # [T+1, B] float32 (raw env reward; clipping is the learner's)
    terminated: np.ndarray  # [T+1, B] bool
    truncated: np.ndarray  # [T+1, B] bool
    final_value: np.ndarray  # [T+1, B] float32
    initial_state: tuple[np.ndarray, ...]  # core state before row 0, each [B, ...]
    # core state before rows 0, k, 2k, ..., each [T / k, B, ...]
    chunk_states: tuple[np.ndarray, ...] | None = None
    policy_version: int = 0
    runner_id: int = 0
    # Whole episodes that ended during this unroll: (task_id, return, length in agent steps).
    episodes: list[tuple[int, float, int]] = field(default_factory=list)

    STEP_FIELDS = (
        "last_action", "last_reward", "reset", "task_id", "action", "behaviour_logits",
        "behaviour_value", "reward", "terminated", "truncated", "final_value",
    )

    @property
    def unroll_length(self) -> int:
        """``T``: the rows minus one, since row ``T`` is also row 0 of the next unroll."""
        return self.reset.shape[0] - 1

    @property
    def batch_size(self) -> int:
        """``B``: the number of environments (of all joined runners after ``concat``)."""
        return self.reset.shape[1]

    @staticmethod
    def concat(trajectories: list[Trajectory]) -> Trajectory:
        """Join along the batch axis (dim 1; dim 0 for states). Policy version: the oldest."""
        first = trajectories[0]
        cat = lambda xs, axis=1: np.concatenate(xs, axis=axis)  # noqa: E731
        return Trajectory(
            obs={k: cat([t.obs[k] for t in trajectories]) for k in first.obs},
            **{f: cat([getattr(t, f) for t in trajectories]) for f in Trajectory.STEP_FIELDS},
            initial_state=tuple(cat([t.initial_state[i] for t in trajectories], 0)
                                for i in range(len(first.initial_state))),
            chunk_states=None if first.chunk_states is None else tuple(
                cat([t.chunk_states[i] for t in trajectories], 1)
                for i in range(len(first.chunk_states))),
            policy_version=min(t.policy_version for t in trajectories),
            runner_id=first.runner_id,
            episodes=[e for t in trajectories for e in t.episodes],
        )
