"""MI-LSTM: LSTM with Multiplicative Integration (Wu et al. 2016).

The paper: "On Multiplicative Integration with Recurrent Neural Networks", NeurIPS 2016,
arXiv:1606.06630.

Every gate pre-activation of the LSTM replaces the additive block ``W x + U h + b`` by the
general Multiplicative Integration block (eq. 4), with its own vectors per gate:

    u^s = alpha^s * (W^s x) * (U^s h) + beta1^s * (U^s h) + beta2^s * (W^s x) + b^s,
    s in {i, f, g, o};  i, f, o = sigmoid(u), g = tanh(u);
    c' = f * c + i * g;  h' = o * tanh(c').

``alpha``, ``beta1``, ``beta2``, ``b`` start at {1, 0.5, 0.5, 0}, the MI-LSTM initialisation of
section 4.1 (text8). With ``alpha = 0`` and ``beta1 = beta2 = 1`` the block is the additive
one (footnote 2) and the core is a plain LSTM with weights ``W``, ``U`` and bias ``b``.

``W`` and ``U`` carry no bias of their own (``b`` is eq. 4's only bias) and are initialised like
``nn.LSTMCell`` (uniform in ``+-1/sqrt(hidden_size)``), so MI-LSTM and the ``lstm`` core start
from the same weight scale; the paper's appendix with exact MI-LSTM formulas is not in the seed
copy and the paper gives no weight initialisation for its LSTM experiments. ``W x`` is computed
for the whole unroll at once, since it does not depend on the state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from agents.cores.contract import CORES, State, mask_state
from agents.registry import typed_options
from agents.units import UnitSlice


@dataclass(frozen=True)
class MILSTMConfig:
    """Options of the ``mi_lstm`` core (``core_options``), checked on construction."""

    hidden_size: int = 256  # width of h and c (as the lstm core)

    def __post_init__(self) -> None:
        if self.hidden_size < 1:
            raise ValueError("mi_lstm: hidden_size must be at least 1.")


@CORES.register("mi_lstm")
class MILSTMCore(nn.Module):
    """LSTM whose gate pre-activations are the Multiplicative Integration block (eq. 4)."""

    Config = MILSTMConfig

    def __init__(self, input_size: int, config: MILSTMConfig | None = None, **options):
        """``config``, or ``options`` as its fields (their defaults live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(MILSTMConfig, config, options)
        H = cfg.hidden_size
        bound = 1 / math.sqrt(H)
        # Gate order i, f, g, o along the last axis (as nn.LSTMCell).
        self.weight_ih = nn.Parameter(torch.empty(input_size, 4 * H).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(H, 4 * H).uniform_(-bound, bound))
        self.alpha = nn.Parameter(torch.ones(4 * H))
        self.beta1 = nn.Parameter(torch.full((4 * H,), 0.5))  # scales U h
        self.beta2 = nn.Parameter(torch.full((4 * H,), 0.5))  # scales W x
        self.bias = nn.Parameter(torch.zeros(4 * H))
        self.output_size = H

    def input_weights(self) -> list[UnitSlice]:
        """Where the input's features are read: the rows of ``W`` [D, 4H]."""
        return [UnitSlice(self.weight_ih, 0)]

    def initial_state(self, batch_size: int, device=None) -> State:
        """Zero ``(h, c)``, each ``[B, hidden_size]``."""
        z = torch.zeros(batch_size, self.output_size, device=device)
        return (z, z.clone())

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """x: [T, B, D], state: (h, c) each [B, H], reset: [T, B] bool -> (y [T, B, H], state)."""
        wx_all = x @ self.weight_ih  # [T, B, 4H]
        # alpha * Wx and beta2 * Wx + b do not depend on the state either.
        # unbind, not [t]: indexing a graph tensor T times costs O(T^2) in the backward.
        gate_wx = (self.alpha * wx_all + self.beta1).unbind(0)
        rest_wx = (self.beta2 * wx_all + self.bias).unbind(0)
        outputs = []
        for t in range(x.shape[0]):
            h, c = mask_state(state, reset[t])
            uh = h @ self.weight_hh
            # alpha*Wx*Uh + beta1*Uh + beta2*Wx + b  ==  (alpha*Wx + beta1) * Uh + (beta2*Wx + b)
            u = torch.addcmul(rest_wx[t], gate_wx[t], uh)
            i, f, g, o = u.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            state = (h, c)
            outputs.append(h)
        return torch.stack(outputs), state
