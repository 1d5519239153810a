"""LSTM core (Hochreiter & Schmidhuber 1997), the baseline of every seed paper.

Standard gates, each the additive building block ``phi(W x + U h + b)`` of Wu et al. 2016, eq. 1:
``i, f, o = sigmoid(W x + U h + b)``, ``g = tanh(W x + U h + b)``,
``c' = f * c + i * g``, ``h' = o * tanh(c')``. The weights are an ``nn.LSTMCell``'s
(its gate order i, f, g, o), run by PyTorch's fused LSTM between the steps where episodes
start, so that resets apply step by step (the core contract).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from agents.cores.contract import CORES, State, mask_state
from agents.registry import check_choices, typed_options

_CUDNN_PACKS = "RNN module weights are not part of single contiguous chunk"


@dataclass(frozen=True)
class LSTMConfig:
    """Options of the ``lstm`` core (``core_options``)."""

    hidden_size: int = 256  # width of h and c (IMPALA and the MI paper use 256)
    # an unroll through PyTorch's fused LSTM between episode starts; false steps the cell's
    # equations in a loop (the same gates up to float rounding, slower to train on CPU)
    fused: bool = True
    # the cell's weights: torch (nn.LSTMCell's U(-1/sqrt H, 1/sqrt H), biases too) or
    # orthogonal (each weight matrix orthogonal, gain 1; zero biases: CleanRL's PPO-LSTM)
    init: Literal["torch", "orthogonal"] = "torch"

    def __post_init__(self):
        check_choices(self, "agent.core_options.")


@CORES.register("lstm")
class LSTMCore(nn.Module):
    """LSTM whose resets apply per step; the weights are an ``nn.LSTMCell``'s."""

    Config = LSTMConfig

    def __init__(self, input_size: int, config: LSTMConfig | None = None, **options):
        """``config``, or ``options`` as its fields (their defaults live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(LSTMConfig, config, options)
        self.cell = nn.LSTMCell(input_size, cfg.hidden_size)
        self.output_size = cfg.hidden_size
        if cfg.init == "orthogonal":
            for weight in (self.cell.weight_ih, self.cell.weight_hh):
                nn.init.orthogonal_(weight, gain=1.0)  # the [4H, D] matrix as one
            for bias in (self.cell.bias_ih, self.cell.bias_hh):
                nn.init.zeros_(bias)

    def initial_state(self, batch_size: int, device=None) -> State:
        """Zero ``(h, c)``, each ``[B, hidden_size]`` in the cell's dtype."""
        z = torch.zeros(batch_size, self.output_size, device=device,
                        dtype=self.cell.weight_ih.dtype)
        return (z, z.clone())

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """x: [T, B, D], state: (h, c) each [B, H], reset: [T, B] bool -> (y [T, B, H], state).

        An unroll (T > 1) is cut at the steps where some row's episode starts; each stretch
        between two such steps runs as one call of PyTorch's fused LSTM (oneDNN on CPU, cuDNN
        on CUDA: the loop over time and its backward in native code), and the starting rows'
        state is zeroed between stretches. The same gates as stepping the cell up to float
        rounding (about 1e-7 at width 256) and 2-5x faster to train on CPU than a Python loop
        over steps, which pays dispatch for every operation of every step. Acting (T = 1)
        steps the cell's equations directly, about 2x faster than a fused call of one step,
        and so does an unroll under autocast or with ``fused: false``.
        """
        if (x.shape[0] == 1 or not self.config.fused
                or torch.is_autocast_enabled(x.device.type)):
            # Acting; or under autocast (learner.mixed_precision), where the fused kernel would
            # run in bfloat16 on CPU and float16 on CUDA, state included: stepped, each step's
            # products in autocast's precision and the cell state in float32.
            # W x + b for the whole unroll in one product; only U h stays in the loop.
            xw = F.linear(x, self.cell.weight_ih, self.cell.bias_ih + self.cell.bias_hh)
            outputs = []
            for t in range(x.shape[0]):
                state = self._step(xw[t], mask_state(state, reset[t]))
                outputs.append(state[0])
            return torch.stack(outputs), state
        cell = self.cell
        weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
        T = x.shape[0]
        starts = reset.any(dim=1).tolist()
        outputs, begin = [], 0
        with warnings.catch_warnings() if x.is_cuda else contextlib.nullcontext():
            if x.is_cuda:
                # cuDNN packs the cell's four weight tensors into one buffer at each call
                # (nn.LSTM keeps them packed) and warns; at width 256 that is a 2 MB copy.
                warnings.filterwarnings("ignore", message=_CUDNN_PACKS)
            for end in [t for t in range(T) if starts[t]] + [T]:
                if end > begin:
                    h, c = state
                    # train=True whenever gradients flow: cuDNN's backward needs what its
                    # training mode keeps (the learner runs the agent in eval mode; no dropout).
                    y, h, c = torch.lstm(x[begin:end], (h[None], c[None]), weights, True, 1,
                                         0.0, torch.is_grad_enabled(), False, False)
                    outputs.append(y)
                    state = (h[0], c[0])
                if end < T:
                    state = mask_state(state, reset[end])
                begin = end
        return (outputs[0] if len(outputs) == 1 else torch.cat(outputs)), state

    def _step(self, xw: torch.Tensor, state: State) -> State:
        """One step of the gates from the input's share ``xw = W x + b`` [B, 4H] -> (h', c')."""
        h, c = state
        gates = torch.addmm(xw, h, self.cell.weight_hh.t())  # PyTorch's order: i, f, g, o
        i, f, _, o = torch.sigmoid(gates).chunk(4, dim=-1)  # one sigmoid; g's share unused
        H = self.output_size
        c = f * c + i * torch.tanh(gates[:, 2 * H : 3 * H])
        return o * torch.tanh(c), c
