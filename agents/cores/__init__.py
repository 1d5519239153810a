"""Recurrent cores: the middle of encoder -> core -> head (docs/design.md, "Contracts").

Every core is an ``nn.Module`` registered in ``CORES`` and honours one contract:

- a ``Config`` dataclass of the core's options, declared next to it (defaults, one-line
  docs, checks in ``__post_init__``); the config loader resolves ``agent.core_options``
  into it;
- ``Core(input_size: int, config: Config | None = None, **options)``: built from that
  ``Config`` (as the agent does) or from its fields as keywords (``typed_options``);
- ``core.output_size``: the width ``H`` of what the head reads;
- ``core.initial_state(batch_size, device=None) -> State``: a tuple of tensors whose
  first dimension is the batch, so a minibatch of sequences is ``tuple(s[idx] for s in state)``;
- ``core.forward(x [T, B, D], state, reset [T, B] bool) -> (y [T, B, H], state)``:
  before step ``t`` the state is multiplied by ``1 - reset[t]``, step by step, so an
  episode boundary inside an unroll starts the next episode from the initial (zero) state;
- optionally ``Core.input_form(config) -> "flat" | "spatial"`` (a static method): the
  input the core wants, ``x [T, B, D]`` or the torso's positions as a set ``x [T, B, N, D]``;
  ``"flat"`` when absent (``input_form`` below is what the agent asks);
- optionally ``stateless = True`` (a class attribute) for a core whose output does not
  depend on its state (``feedforward``);
- optionally ``core.diagnostics() -> dict[str, Tensor]`` with statistics of the last
  forward pass worth logging (e.g. RIMs' per-unit activation frequency).

A new core is one file here plus one import line below.
"""

from __future__ import annotations

import torch

from agents.registry import Registry

State = tuple[torch.Tensor, ...]

CORES: Registry = Registry("core")


def mask_state(state: State, reset: torch.Tensor) -> State:
    """Zero the state of batch elements whose episode starts at this step.

    ``reset``: [B] bool/float. Multiplying (rather than assigning) keeps the graph
    differentiable and works for any state shape ``[B, ...]``.
    """
    keep = 1.0 - reset.to(state[0].dtype)
    return tuple(s * keep.view(-1, *([1] * (s.dim() - 1))) for s in state)


def input_form(core_cls, config) -> str:
    """What core class ``core_cls`` with options ``config`` (its Config) reads: flat or spatial."""
    declared = getattr(core_cls, "input_form", None)
    return declared(config) if declared is not None else "flat"


# One line per core: importing the module registers it.
from agents.cores import alstm, feedforward, lstm, mi_lstm, rims  # noqa: E402,F401
