"""The learner's batch: a ``Trajectory``'s fields as typed tensors.

The runners' ``Trajectory`` as the learner reads it.

Every step field is time-major ``[T + 1, B, ...]`` on the learner's device, with the shape and
dtype ``agents/steps.py`` declares (``behaviour_logits`` ``[T + 1, B, A]``, each observation
``[T + 1, B, ...]``); the class takes its fields from that declaration. ``mask`` (1 = real
step) exists when columns are padding. PPO (and IMPALA with ``learner.impala.fixed_targets``)
adds its targets, ``advantages``, ``returns`` and ``old_values`` (``[T, B]``; IMPALA also
``value_targets``), before its epochs (``gae_targets`` in ``learners/algorithms/ppo.py``,
``impala_targets`` in ``learners/algorithms/impala.py``, called by the learner); cut into chunks of
``k`` steps (``chunk_sequences``), every field is ``[k, C B]`` and ``steps`` is ``k``. The
losses read attributes, never strings; ``map`` applies one function to every tensor
(cutting chunks, picking minibatch columns, moving devices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agents.steps import AGENT_INPUTS, with_step_fields


@dataclass
@with_step_fields("Tensor", states=("chunk_states",))
class Batch:
    """One batch of unrolls on the learner's device (the module docstring gives the shapes).

    Fields: ``obs``, every step field of ``agents.steps.STEP_FIELDS``, ``chunk_states`` (the
    runner's core states before rows 0, k, 2k, ... ``[T / k, B, ...]``, when it recorded them),
    then the learner's own below.
    """

    obs: dict[str, Tensor]
    mask: Tensor | None = None  # [T + 1, B]: 1 on real steps, 0 on padding columns
    # Targets fixed for an update's epochs (PPO's GAE; IMPALA's V-trace with
    # learner.impala.fixed_targets), [T, B]:
    advantages: Tensor | None = None  # the policy gradient's advantages
    returns: Tensor | None = None  # the value targets, in the head's value space
    old_values: Tensor | None = None  # values at the update's start (the value clip's centre)
    value_targets: Tensor | None = None  # IMPALA: V-trace vs at return scale (PopArt's statistics)

    @property
    def unroll_length(self) -> int:
        """T: the steps that carry a learning target (the trajectory has one row more)."""
        return self.reset.shape[0] - 1

    @property
    def steps(self) -> int:
        """The rows a loss reads: ``T``, or ``k`` once the batch is cut into chunks of ``k``.

        With targets fixed, the trajectory fields may carry one row more than the targets.
        """
        return self.unroll_length if self.advantages is None else self.advantages.shape[0]

    def inputs(self) -> dict[str, Tensor]:
        """What the agent reads: the observations and the step inputs, ``[T', B, ...]``."""
        return {**self.obs, **{k: getattr(self, k) for k in AGENT_INPUTS}}

    def map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        """A new batch with ``fn`` applied to every tensor (absent optional fields stay absent)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("obs", "chunk_states")}
        # chunk_states index whole unrolls: they do not survive a cut or a column pick.
        return Batch(obs={k: fn(v) for k, v in self.obs.items()},
                     **{k: None if v is None else fn(v) for k, v in fields.items()})

    def replace(self, **changes) -> Batch:
        """A copy with the named fields replaced (``dataclasses.replace``; tensors are shared)."""
        return dataclasses.replace(self, **changes)

    @staticmethod
    def from_dict(data: dict[str, Tensor]) -> Batch:
        """From a flat mapping (observation keys beside the step fields), e.g. a test's."""
        names = {f.name for f in dataclasses.fields(Batch)} - {"obs"}
        return Batch(obs={k: v for k, v in data.items() if k not in names},
                     **{k: v for k, v in data.items() if k in names})


def minibatches(batch: Batch, state: tuple, n: int, generator: torch.Generator | None = None):
    """Split the sequences into ``n`` random groups; yields ``(batch, core state)`` per group.

    The sequences are dim 1: envs, or (env, chunk) pairs. ``n = 1`` yields the batch itself,
    uncopied. The groups are ``minibatch_indices``'s, picked by ``pick``.
    """
    for idx in minibatch_indices(batch.reset.shape[1], n, generator, batch.reset.device):
        yield pick(batch, state, idx)


def minibatch_indices(width: int, n: int, generator: torch.Generator | None,
                      device: torch.device) -> list[Tensor | None]:
    """The sequences of each of ``n`` random minibatches of ``width``, on ``device``.

    One permutation drawn with ``generator``, cut into ``n`` groups; ``[None]`` for
    ``n = 1`` (the whole batch, nothing drawn).
    """
    if n == 1:
        return [None]
    order = torch.randperm(width, generator=generator)
    return [idx.to(device) for idx in order.chunk(n)]


def pick(batch: Batch, state: tuple, idx: Tensor | None) -> tuple[Batch, tuple]:
    """``(batch, state)`` of the sequences ``idx`` (dim 1 of the batch, 0 of the state).

    ``idx = None``: the batch and state themselves, uncopied. ``learner.compile`` runs this
    inside each minibatch's compiled graph (``Learner.eager_minibatch_loss``), so the pick
    launches no kernels of its own.
    """
    if idx is None:
        return batch, state
    return (batch.map(lambda v: take_columns(v, idx)),
            tuple(s.index_select(0, idx) for s in state))


def take_columns(v: Tensor, idx: Tensor) -> Tensor:
    """``v[:, idx]``, laid out in memory as ``v`` is (e.g. ``Agent.training_layout``'s pixels).

    index_select, not advanced indexing: the same values, and on CPU a copy of whole rows
    where ``v[:, idx]`` goes element by element (a minibatch of Atari pixels, 7 MB: about
    0.6 ms against 4.5). A tensor whose memory is its dims in another order is picked in
    that order, so the pick stays one copy of whole rows and keeps the order.
    """
    if v.is_contiguous():
        return v.index_select(1, idx)
    order = sorted(range(v.dim()), key=lambda d: -v.stride(d))  # outermost in memory first
    base = v.permute(order)
    if not base.is_contiguous():
        return v.index_select(1, idx)
    picked = base.index_select(order.index(1), idx)
    return picked.permute([order.index(d) for d in range(v.dim())])


@torch.no_grad()
def chunk_sequences(batch: Batch, state: tuple, k: int,
                    agent: Callable | None = None) -> tuple[Batch, tuple]:
    """Cut ``[T (+1), B]`` sequences into ``T / k`` chunks of ``k`` rows: ``[k, (T / k) B]``.

    Chunk-major: column ``c B + b`` is chunk ``c`` of env ``b``. Returns the chunks with the
    core state before each chunk: the runners' own (``batch.chunk_states``, recorded while
    acting) when they carry them, else from one pass of ``agent`` (``(inputs, state) ->
    (output, state)``, the learner's current agent) over the batch (the same states for a
    lock-step batch, up to float rounding).
    """
    T = batch.steps
    starts = range(0, T, k)
    chunks = batch.map(lambda v: torch.cat([v[c : c + k] for c in starts], dim=1))
    stored = batch.chunk_states
    if stored is not None and stored[0].shape[0] == len(starts):
        # [C, B, ...] -> [C B, ...], chunk-major
        return chunks, tuple(s.reshape(-1, *s.shape[2:]) for s in stored)
    if agent is None:
        raise ValueError("chunk_sequences: the batch carries no core states at the chunk "
                         "starts, so it needs the agent to compute them")
    states = []
    for c in starts:
        states.append(state)
        _, state = agent(batch.map(lambda v, c=c: v[c : c + k]).inputs(), state)
    return chunks, tuple(torch.cat([s[i] for s in states], dim=0) for i in range(len(state)))
