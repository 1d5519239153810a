"""Multiplicative policy/value head ``pi_t, V_t = M(h_t, c)`` (Jayakumar et al. 2020, section 6.1).

``M`` is one multiplicative interaction (agents/layers/multiplicative.py, eq. 1) from
the core output ``h`` to ``A + 1`` outputs (logits and value), conditioned on a context:

- ``context: task_id``: ``c = relu(MLP(I_k))`` of the one-hot task ID, "generating
  policy layers from a learnt embedding of the task ID" (figure 4b);
- ``context: learnt``: ``c = relu(MLP(h_t))``, no task information at all (figure 4c).

The MLP is one linear layer followed by a relu (the paper's language-model context,
appendix G). The paper controls the parameter count through ``context_size``.

``form`` picks the 3-tensor (agents/layers/multiplicative.py): ``full``, ``low_rank`` and
``output_scale`` map ``h`` to the ``A + 1`` outputs directly; the paper's ``diagonal`` form
generates a diagonal matrix acting on ``h`` itself (a context-dependent gate
``a(c) * h + U c + b``), which a linear layer then maps to the ``A + 1`` outputs.
``init`` chooses between the zero interaction (the head starts as the concatenation
baseline) and appendix B's hypernetwork initialisation.

``reads_task_id`` depends on the context, so it is an instance attribute set in
``__init__`` (the class attribute ``True`` is only the default): a learnt-context head
declares ``False``, ignores any ``task_id`` it is given and works with ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from agents.heads.contract import HEADS
from agents.layers.encoding import one_hot
from agents.layers.multiplicative import Form, Init, MultiplicativeInteraction
from agents.registry import check_choices, typed_options


@dataclass(frozen=True)
class MultiplicativeHeadConfig:
    """Options of the ``multiplicative`` head (``head_options``), checked on construction."""

    # what M is conditioned on: the one-hot task, or learnt from h_t
    context: Literal["task_id", "learnt"] = "task_id"
    context_size: int = 32  # width of c; the paper's knob for the parameter count
    # 3-tensor of M: "full", "diagonal" (the paper's: a gate on h), "output_scale" (FiLM-like)
    # or "low_rank"
    form: Form = "full"
    rank: int = 8  # CP rank of the 3-tensor; used only by form "low_rank"
    # "zero_interaction" (starts as the concatenation baseline) or "hypernetwork" (appendix B)
    init: Init = "zero_interaction"

    def __post_init__(self):
        check_choices(self, "head option ")
        if self.context_size < 1 or self.rank < 1:
            raise ValueError("head options context_size and rank must be at least 1")


@HEADS.register("multiplicative")
class MultiplicativeHead(nn.Module):
    """Logits and value from one multiplicative interaction ``M(h, c)`` with a context ``c``.

    With ``form: diagonal``, ``M`` gates ``h`` and a linear layer reads the logits and value off
    the result.
    """

    Config = MultiplicativeHeadConfig
    reads_task_id = True  # default only; __init__ sets the instance value from `context`

    def __init__(self, input_size: int, num_actions: int, num_tasks: int = 1,
                 config: MultiplicativeHeadConfig | None = None, **options):
        """``config``, or ``options`` as its fields (their defaults and checks live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(MultiplicativeHeadConfig, config, options)
        self.context, self.num_actions, self.num_tasks = cfg.context, num_actions, num_tasks
        self.reads_task_id = cfg.context == "task_id"
        context_in = num_tasks if self.reads_task_id else input_size
        self.context_net = nn.Linear(context_in, cfg.context_size)
        # the paper's diagonal form acts on h; a linear layer reads its result
        gate = cfg.form == "diagonal"
        self.mi = MultiplicativeInteraction(input_size, cfg.context_size,
                                            input_size if gate else num_actions + 1, form=cfg.form,
                                            rank=cfg.rank if cfg.form == "low_rank" else None,
                                            init=cfg.init)
        self.readout = nn.Linear(input_size, num_actions + 1) if gate else None

    def context_vector(self, h: torch.Tensor, task_id: torch.Tensor | None) -> torch.Tensor:
        """``c [T, B, context_size]``."""
        if not self.reads_task_id:
            return F.relu(self.context_net(h))
        if task_id is None:
            raise ValueError("the multiplicative head with context='task_id' needs task_id "
                             "[T, B], got None; use context='learnt' for a head that never "
                             "reads the task ID")
        code = one_hot(task_id, self.num_tasks, h.dtype)
        return F.relu(self.context_net(code))

    def forward(self, h: torch.Tensor, task_id: torch.Tensor | None = None):
        """h: [T, B, H], task_id: [T, B] or None -> (logits [T, B, A], value [T, B])."""
        out = self.mi(h, self.context_vector(h, task_id))
        if self.readout is not None:
            out = self.readout(out)
        return out[..., : self.num_actions], out[..., self.num_actions]
