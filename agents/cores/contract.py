"""The cores' registry, state type and helpers (the contract: ``agents/cores/__init__.py``).

Each core module imports these from here, not from the package, so no import goes in a circle:
the package imports the cores, and the cores import this module.
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
