"""LSTM core (Hochreiter & Schmidhuber 1997), the baseline of every seed paper.

Standard gates (Wu et al. 2016, eq. 5 without the multiplicative term):
``i, f, o = sigmoid(W x + U h + b)``, ``g = tanh(W x + U h + b)``,
``c' = f * c + i * g``, ``h' = o * tanh(c')``. Implemented with ``nn.LSTMCell`` and
an explicit loop over time so that resets apply step by step (DESIGN.md contract).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agents.cores import CORES, State, mask_state


@dataclass
class LSTMConfig:
    hidden_size: int = 256  # width of h and c (IMPALA and the MI paper use 256)


@CORES.register("lstm")
class LSTMCore(nn.Module):
    Config = LSTMConfig

    def __init__(self, input_size: int, **options):
        """``options``: the fields of ``LSTMConfig`` (their defaults live there, once)."""
        super().__init__()
        self.config = cfg = LSTMConfig(**options)
        self.cell = nn.LSTMCell(input_size, cfg.hidden_size)
        self.output_size = cfg.hidden_size

    def initial_state(self, batch_size: int, device=None) -> State:
        z = torch.zeros(batch_size, self.output_size, device=device, dtype=self.cell.weight_ih.dtype)
        return (z, z.clone())

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        outputs = []
        for t in range(x.shape[0]):
            h, c = mask_state(state, reset[t])
            h, c = self.cell(x[t], (h, c))
            state = (h, c)
            outputs.append(h)
        return torch.stack(outputs), state
