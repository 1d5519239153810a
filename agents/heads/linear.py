"""Linear policy and value head: ``logits = W_pi h + b_pi``, ``V = w_v h + b_v``.

The IMPALA agent's output layer (Espeholt et al. 2018, fig. 3) and the baseline of
the multiplicative-interactions paper (Jayakumar et al. 2020, section 6.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agents.heads.contract import HEADS
from agents.registry import typed_options


@dataclass(frozen=True)
class LinearHeadConfig:
    """No options: one linear layer for the logits and one for the value."""

    pass


@HEADS.register("linear")
class LinearHead(nn.Module):
    """Linear logits and value from the core output; does not read the task ID."""

    Config = LinearHeadConfig
    reads_task_id = False

    def __init__(self, input_size: int, num_actions: int, num_tasks: int = 1,
                 config: LinearHeadConfig | None = None):
        super().__init__()
        self.config = typed_options(LinearHeadConfig, config)
        self.policy = nn.Linear(input_size, num_actions)
        self.value = nn.Linear(input_size, 1)

    def forward(self, h: torch.Tensor, task_id: torch.Tensor | None = None):
        """h: [T, B, H] -> (logits [T, B, A], value [T, B]); ``task_id`` is ignored."""
        return self.policy(h), self.value(h).squeeze(-1)
