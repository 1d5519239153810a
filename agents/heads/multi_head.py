"""One linear policy and value head per task, selected by task ID.

The multi-head agent of Jayakumar et al. 2020, section 6.1 ("Multi-head policy and
value layers"): ``[logits; V] = W_k h + b_k`` for the task ``k`` of each step. Reads
the task ID, so it uses privileged information and cannot be evaluated without it.

All heads live in one tensor ``weight [K, H, A + 1]``; every head is applied and the
task's output is gathered, which costs ``K`` small matmuls instead of materialising a
``[T, B, H, A + 1]`` weight per step. The gather's backward scatters into the selected
task only, so a step of task ``k`` gives every other task's slice a zero gradient:
each head gets 1/K of the updates, the paper's point against multi-head layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from agents.heads.contract import HEADS
from agents.registry import typed_options


@dataclass(frozen=True)
class MultiHeadConfig:
    """No options: one linear head per task, as many as ``num_tasks``."""

    pass


@HEADS.register("multi_head")
class MultiHead(nn.Module):
    """``num_tasks`` linear policy and value heads; each step uses the head of its task."""

    Config = MultiHeadConfig
    reads_task_id = True

    def __init__(self, input_size: int, num_actions: int, num_tasks: int = 1,
                 config: MultiHeadConfig | None = None):
        super().__init__()
        self.config = typed_options(MultiHeadConfig, config)
        self.num_actions, self.num_tasks = num_actions, num_tasks
        # nn.Linear's initialisation, per task: U(-1/sqrt(H), 1/sqrt(H)).
        bound = 1.0 / math.sqrt(input_size)
        self.weight = nn.Parameter(
            torch.empty(num_tasks, input_size, num_actions + 1).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_tasks, num_actions + 1).uniform_(-bound, bound))

    def forward(self, h: torch.Tensor, task_id: torch.Tensor | None = None):
        """h: [T, B, H], task_id: [T, B] -> (logits [T, B, A], value [T, B]) of each step's task."""
        if task_id is None:
            raise ValueError("the multi_head head selects a head by task ID, but task_id is None; "
                             "pass task_id [T, B] or use the 'linear' or a learnt-context head")
        out_all = torch.einsum("tbh,kha->tbka", h, self.weight) + self.bias  # [T, B, K, A + 1]
        index = task_id.long()[..., None, None].expand(*task_id.shape, 1, out_all.shape[-1])
        out = out_all.gather(2, index).squeeze(2)  # [T, B, A + 1]
        return out[..., : self.num_actions], out[..., self.num_actions]
