"""Feed-forward core: no memory, the head reads the torso's output as it is.

The agent of A3C FF (Mnih et al. 2016, section 8: the shallow torso, then the policy and
value layers) and of TorchBeast's and Cleanba's IMPALA on Atari, where the 4-frame stack
carries the motion a recurrent core would otherwise remember. It is the no-memory
baseline for a core comparison (docs/results/impala-atari.md, for its runs on Pong).

The core contract (agents/cores/__init__.py) asks for a state; this core carries a
``[B, 1]`` zero tensor that it passes through untouched (``stateless``), so runners,
minibatches and checkpoints treat it like any other core's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agents.cores.contract import CORES, State
from agents.registry import typed_options


@dataclass(frozen=True)
class FeedForwardConfig:
    """No options: the torso's width is the output width."""


@CORES.register("feedforward")
class FeedForwardCore(nn.Module):
    """Identity core, ``y = x``: the no-memory baseline; its state is a placeholder."""

    Config = FeedForwardConfig
    stateless = True  # the output does not depend on the state (tests/test_cores.py)

    def __init__(self, input_size: int, config: FeedForwardConfig | None = None, **options):
        super().__init__()
        self.config = typed_options(FeedForwardConfig, config, options)
        self.output_size = input_size

    def initial_state(self, batch_size: int, device=None) -> State:
        """A ``[B, 1]`` zero tensor, carried only so the state has the contract's layout."""
        return (torch.zeros(batch_size, 1, device=device),)

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """x: [T, B, D] -> (y = x [T, B, D], state unchanged); ``reset`` has nothing to zero."""
        return x, state
