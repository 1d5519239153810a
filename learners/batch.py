"""The learner's batch: a ``Trajectory``'s fields as tensors, typed (STYLE.md rule 6's
container on the learner's side).

Every step field is time-major ``[T + 1, B]`` (``behaviour_logits`` ``[T + 1, B, A]``, each
observation ``[T + 1, B, ...]``) on the learner's device, as ``envs/trajectory.py`` describes
them; ``mask`` (1 = real step) exists when columns are padding. PPO adds its targets,
``advantages``, ``returns`` and ``old_values`` (``[T, B]``), before its epochs
(``learners/ppo.py``). The losses read attributes, never strings; ``map`` applies one
function to every tensor (cutting chunks, picking minibatch columns, moving devices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

# The agent's inputs besides the observations (agents/agent.py: STEP_KEYS).
AGENT_STEP_KEYS = ("last_action", "last_reward", "reset", "task_id")


@dataclass
class Batch:
    obs: dict[str, Tensor]
    last_action: Tensor
    last_reward: Tensor
    reset: Tensor
    task_id: Tensor
    action: Tensor
    behaviour_logits: Tensor
    behaviour_value: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    final_value: Tensor
    mask: Tensor | None = None  # [T + 1, B]: 1 on real steps, 0 on padding columns
    advantages: Tensor | None = None  # PPO: GAE advantages [T, B]
    returns: Tensor | None = None  # PPO: value targets [T, B]
    old_values: Tensor | None = None  # PPO: the behaviour values [T, B], for the value clip
    chunk_states: tuple[Tensor, ...] | None = None  # the runner's core states before rows 0, k, 2k, ... [T / k, B, ...]

    @property
    def unroll_length(self) -> int:
        """T: the steps that carry a learning target (the trajectory has one row more)."""
        return self.reset.shape[0] - 1

    def inputs(self) -> dict[str, Tensor]:
        """What the agent reads: the observations and the step inputs, ``[T', B, ...]``."""
        return {**self.obs, **{k: getattr(self, k) for k in AGENT_STEP_KEYS}}

    def map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        """A new batch with ``fn`` applied to every tensor (absent optional fields stay absent)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("obs", "chunk_states")}
        # chunk_states index whole unrolls: they do not survive a cut or a column pick.
        return Batch(obs={k: fn(v) for k, v in self.obs.items()},
                     **{k: None if v is None else fn(v) for k, v in fields.items()})

    def replace(self, **changes) -> Batch:
        return dataclasses.replace(self, **changes)

    @staticmethod
    def from_dict(data: dict[str, Tensor]) -> Batch:
        """From a flat mapping (observation keys beside the step fields), e.g. a test's."""
        names = {f.name for f in dataclasses.fields(Batch)} - {"obs"}
        return Batch(obs={k: v for k, v in data.items() if k not in names},
                     **{k: v for k, v in data.items() if k in names})


def minibatches(batch: Batch, state: tuple, n: int, generator: torch.Generator | None = None):
    """Split the sequences (dim 1: envs, or (env, chunk) pairs) into ``n`` random groups
    (``n = 1``: the batch itself, uncopied)."""
    if n == 1:
        yield batch, state
        return
    B = batch.reset.shape[1]
    order = torch.randperm(B, generator=generator)
    for idx in order.chunk(n):
        idx = idx.to(batch.reset.device)
        yield batch.map(lambda v, idx=idx: v[:, idx]), tuple(s[idx] for s in state)
