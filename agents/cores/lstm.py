"""LSTM core (Hochreiter & Schmidhuber 1997), the baseline of every seed paper.

Standard gates, each the additive building block ``phi(W x + U h + b)`` of Wu et al. 2016, eq. 1:
``i, f, o = sigmoid(W x + U h + b)``, ``g = tanh(W x + U h + b)``,
``c' = f * c + i * g``, ``h' = o * tanh(c')``. The weights are an ``nn.LSTMCell``'s
(its gate order i, f, g, o); the loop over time is explicit so that resets apply step by
step (the core contract), and ``W x + b`` is computed for the whole unroll at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from agents.cores.contract import CORES, State, mask_state
from agents.registry import typed_options


@dataclass(frozen=True)
class LSTMConfig:
    """Options of the ``lstm`` core (``core_options``)."""

    hidden_size: int = 256  # width of h and c (IMPALA and the MI paper use 256)


@CORES.register("lstm")
class LSTMCore(nn.Module):
    """LSTM unrolled step by step so resets apply per step; the weights are an ``nn.LSTMCell``'s."""

    Config = LSTMConfig

    def __init__(self, input_size: int, config: LSTMConfig | None = None, **options):
        """``config``, or ``options`` as its fields (their defaults live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(LSTMConfig, config, options)
        self.cell = nn.LSTMCell(input_size, cfg.hidden_size)
        self.output_size = cfg.hidden_size

    def initial_state(self, batch_size: int, device=None) -> State:
        """Zero ``(h, c)``, each ``[B, hidden_size]`` in the cell's dtype."""
        z = torch.zeros(batch_size, self.output_size, device=device,
                        dtype=self.cell.weight_ih.dtype)
        return (z, z.clone())

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """x: [T, B, D], state: (h, c) each [B, H], reset: [T, B] bool -> (y [T, B, H], state)."""
        cell = self.cell
        # The input's share of the gates, W x + b, for all T steps in one product (what
        # nn.LSTMCell computes step by step); only U h stays in the loop. The same gates up
        # to float rounding, about 1.3x faster to train on CPU; the weights are the cell's.
        xw = F.linear(x, cell.weight_ih, cell.bias_ih + cell.bias_hh)  # [T, B, 4H]
        H = self.output_size
        # Few operations per step, as each costs more to dispatch (and to record for the
        # backward) than to compute at these sizes: rows where no episode starts skip the
        # reset mask (a product with 1), and one sigmoid covers the four gates (g's share
        # unused; tanh gives g). The same values as a gate at a time up to float rounding
        # (bit for bit at width 256 on AVX-512); the learner's update about 1.04x faster.
        starts = reset.any(dim=1).tolist() if x.shape[0] > 1 else [True]  # acting: T = 1
        outputs = []
        for t in range(x.shape[0]):
            if starts[t]:
                state = mask_state(state, reset[t])
            h, c = state
            gates = torch.addmm(xw[t], h, cell.weight_hh.t())  # PyTorch's order: i, f, g, o
            i, f, _, o = torch.sigmoid(gates).chunk(4, dim=-1)
            c = f * c + i * torch.tanh(gates[:, 2 * H : 3 * H])
            h = o * torch.tanh(c)
            state = (h, c)
            outputs.append(h)
        return torch.stack(outputs), state
