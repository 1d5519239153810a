"""The one container runners return: raw experience, no learning.

Every array is time-major ``[T + 1, B, ...]`` numpy (zero-copy through Ray's object
store). Row ``t`` holds what the agent saw at step ``t`` (the observations and the agent's
other inputs), what it did (the action, the behaviour policy's logits and value) and what
followed (the reward, the done flags, the final value): the step fields, each declared once
with its shape, dtype and writer in ``agents/steps.py``, from which this class takes its
fields. Row ``T`` is also row 0 of the next unroll; its ``reward``/``terminated``/``truncated``
are not filled until then and the learner only uses rows ``0..T-1`` of them.

``final_value[t]`` is the behaviour policy's value of the *final* observation of an
episode truncated by a time limit at step ``t`` (0 elsewhere): the learner adds
``gamma * final_value`` to that step's reward and stops the bootstrap there, which
is the truncation treatment of partial-episode bootstrapping (Pardo et al. 2018), as
Stable-Baselines3 does it for on-policy learners.

``initial_state`` is the core state before row 0: the learner re-runs the core from it.
``chunk_states`` (when the runner is asked for them, ``state_every = k``): the core state
before rows ``0, k, 2k, ...``, each ``[T / k, B, ...]``, which PPO's chunked minibatches start
from (``learners/algorithms/ppo.py``) instead of re-running the core over the batch to find them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.steps import STATE_FIELDS, STEP_FIELDS, STEP_NAMES, StateField, with_step_fields


@dataclass
@with_step_fields("np.ndarray", states=("initial_state", "chunk_states"))
class Trajectory:
    """One unroll of raw experience: time-major numpy arrays ``[T + 1, B, ...]``.

    Fields: ``obs`` (each key ``[T+1, B, ...]``), then every step field of
    ``agents.steps.STEP_FIELDS`` (name, shape, dtype and writer declared there), then
    ``initial_state`` and ``chunk_states`` (``agents.steps.STATE_FIELDS``), then the unroll's
    facts below.
    """

    obs: dict[str, np.ndarray]
    policy_version: int = 0
    runner_id: int = 0
    # Whole episodes that ended during this unroll: (task_id, return, length in agent steps).
    episodes: list[tuple[int, float, int]] = field(default_factory=list)

    STEP_FIELDS = STEP_NAMES  # the step fields' names, in declaration order

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
        """Join along the batch axis (each declared shape's ``B``). Policy version: the oldest."""
        first = trajectories[0]

        def cat(name: str, axis: int):
            return np.concatenate([getattr(t, name) for t in trajectories], axis=axis)

        def cat_state(s: StateField):
            if getattr(first, s.name) is None:
                return None
            axis = s.shape.index("B")
            return tuple(np.concatenate([getattr(t, s.name)[i] for t in trajectories], axis=axis)
                         for i in range(len(getattr(first, s.name))))

        return Trajectory(
            obs={k: np.concatenate([t.obs[k] for t in trajectories], axis=1) for k in first.obs},
            **{f.name: cat(f.name, f.shape.index("B")) for f in STEP_FIELDS},
            **{s.name: cat_state(s) for s in STATE_FIELDS},
            policy_version=min(t.policy_version for t in trajectories),
            runner_id=first.runner_id,
            episodes=[e for t in trajectories for e in t.episodes],
        )
