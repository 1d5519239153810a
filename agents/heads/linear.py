"""Linear policy and value head: ``logits = W_pi h + b_pi``, ``V = w_v h + b_v``.

The IMPALA agent's output layer (Espeholt et al. 2018, fig. 3) and the baseline of
the multiplicative-interactions paper (Jayakumar et al. 2020, section 6.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from agents.heads.contract import HEADS
from agents.registry import check_choices, typed_options


@dataclass(frozen=True)
class LinearHeadConfig:
    """Options of the ``linear`` head (``head_options``): a layer each for logits and value."""

    # the two layers' weights: torch (nn.Linear's U(-1/sqrt H, 1/sqrt H), biases too) or
    # orthogonal (the logits' gain 0.01, the value's 1, zero biases: the PPO baselines' and
    # CleanRL's, under which the first policy is uniform whatever the features)
    init: Literal["torch", "orthogonal"] = "torch"

    def __post_init__(self):
        check_choices(self, "agent.head_options.")


@HEADS.register("linear")
class LinearHead(nn.Module):
    """Linear logits and value from the core output; does not read the task ID."""

    Config = LinearHeadConfig
    reads_task_id = False

    def __init__(self, input_size: int, num_actions: int, num_tasks: int = 1,
                 config: LinearHeadConfig | None = None, **options):
        """``config``, or ``options`` as its fields (their defaults live there, once)."""
        super().__init__()
        self.config = typed_options(LinearHeadConfig, config, options)
        self.policy = nn.Linear(input_size, num_actions)
        self.value = nn.Linear(input_size, 1)
        if self.config.init == "orthogonal":
            for layer, gain in ((self.policy, 0.01), (self.value, 1.0)):
                nn.init.orthogonal_(layer.weight, gain=gain)
                nn.init.zeros_(layer.bias)

    def forward(self, h: torch.Tensor, task_id: torch.Tensor | None = None):
        """h: [T, B, H] -> (logits [T, B, A], value [T, B]); ``task_id`` is ignored."""
        return self.policy(h), self.value(h).squeeze(-1)
