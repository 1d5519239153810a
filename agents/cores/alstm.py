"""aLSTM: adaptive LSTM (Flennerhag et al. 2018).

The paper: Flennerhag et al., "Breaking the Activation Function Bottleneck through Adaptive
Parameterization", NeurIPS 2018, arXiv:1805.08574.

An LSTM (eq. 5) whose linear maps are adapted at every step by IO-adaptation (eq. 3, section
3, eq. 8) driven by a recurrent adaptation policy (eq. 7):

    v_t = [x_t ; h_{t-1}]                                    summary variable (text after eq. 7)
    z_t = m(v_t, z_{t-1})                                    eq. 7, m a standard LSTM (state z, c^z)
    pi^(j)(z_t) = tanh(U^(j) z_t),  D^(j)_t = diag(pi^(j))    sub-policies (text before eq. 6)
    u^s_t = D^(s,4) W^s D^(3) x_t + D^(s,2) V^s D^(1) h_{t-1} + D^(s,0) b^s     eq. 8
    c_t = sigma(u^f) * c_{t-1} + sigma(u^i) * tanh(u^z),  h_t = sigma(u^o) * tanh(c_t)   eq. 5

with the input adaptations tied across the gates s in {i, f, o, z}, as the paper does
(``D^(s',j) = D^(s,j)`` for j in {1, 3}): one ``D^(3)`` of size ``input_size`` and one ``D^(1)``
of size ``hidden_size``; the output adaptations ``D^(s,4)``, ``D^(s,2)`` and the bias adaptation
``D^(s,0)`` are per gate (``4 * hidden_size`` each). All sub-policies come from one bias-free
projection of ``z_t`` (the U^(j) stacked), as in the authors' code (github.com/flennerhag/alstm).

Choices the paper leaves open, and why:

- ``adaptation_size`` (the size of ``z``) defaults to 32. The paper uses 100 for its PTB
  models (section 5.3), whose layers are several times wider than mira's 256; 32 keeps the
  policy at about a third of the LSTM's parameters. At the defaults the core has 35% more
  parameters than the 256-unit LSTM (718,048 vs 533,504 behind the shallow torso's 263
  inputs); ``hidden_size: 204`` matches the LSTM within 1.1% (539,168; 0.4-0.9% for wider
  inputs), the setting for a parameter-fair comparison of cores (tests/test_cores.py).
- ``W`` and ``V`` are initialised (semi-)orthogonal (section 2.2: "we initialize weight matrices
  as semi-orthogonal"); ``b`` is zero except the forget gate at 1, and the policy LSTM and
  projection use PyTorch defaults, as in the authors' code.
- Scale at initialisation: every pre-activation is a product of ``tanh(U z)`` factors (eq. 7),
  each small while ``z`` is small, so the output starts about 100x smaller than a plain
  LSTM's (mean |h| ~1e-3 vs ~0.1 here). This follows the paper and the authors' code (no
  offset on the ``tanh``); it can slow the first updates of an RL run, and a learning rate
  tuned for the LSTM is not necessarily right for the aLSTM.
- Single layer: eq. 9 (the RHN-style summary across stacked layers) does not apply, and
  neither the authors' variational dropout, which belongs to the training recipe.

The state is ``(h, c, z, c_z)``: ``[B, hidden_size]`` twice, then ``[B, adaptation_size]`` twice;
a reset zeroes all four. The gate order along ``4 * hidden_size`` is i, f, z (cell input), o.
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
class ALSTMConfig:
    """Options of the ``alstm`` core (``core_options``), checked on construction."""

    hidden_size: int = 256  # width of h and c (as the lstm core)
    adaptation_size: int = 32  # size of the policy latent z (paper: 100 on PTB with wider layers)

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.adaptation_size < 1:
            raise ValueError("alstm: hidden_size and adaptation_size must be at least 1.")


@CORES.register("alstm")
class ALSTMCore(nn.Module):
    """LSTM whose gate maps are rescaled every step by a small policy LSTM (eq. 5, 7, 8)."""

    Config = ALSTMConfig

    def __init__(self, input_size: int, config: ALSTMConfig | None = None, **options):
        """``config``, or ``options`` as its fields (their defaults live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(ALSTMConfig, config, options)
        D, H, A = input_size, cfg.hidden_size, cfg.adaptation_size
        self.input_size, self.hidden_size, self.adaptation_size = D, H, A
        self.output_size = H

        # Main LSTM maps W^s, V^s, b^s (eq. 5), rows stacked over gates i, f, z, o.
        self.weight_ih = nn.Parameter(torch.empty(4 * H, D))
        self.weight_hh = nn.Parameter(torch.empty(4 * H, H))
        self.bias = nn.Parameter(torch.zeros(4 * H))
        nn.init.orthogonal_(self.weight_ih)
        nn.init.orthogonal_(self.weight_hh)
        with torch.no_grad():
            self.bias[H:2 * H] = 1.0

        # Adaptation model m (eq. 7): an LSTM on v_t = [x_t; h_{t-1}], written out so that its
        # x_t part is computed for the whole unroll at once. nn.LSTMCell's initialisation.
        bound = 1 / math.sqrt(A)
        self.adapt_ix = nn.Parameter(torch.empty(D, 4 * A).uniform_(-bound, bound))
        self.adapt_ihz = nn.Parameter(torch.empty(H + A, 4 * A).uniform_(-bound, bound))
        self.adapt_bias = nn.Parameter(torch.empty(4 * A).uniform_(-bound, bound))

        # Sub-policy projections U^(j), stacked: D^(3) [D], D^(1) [H], D^(s,4), D^(s,2),
        # D^(s,0) [4H each].
        self._split = [D, H, 4 * H, 4 * H, 4 * H]
        self.policy = nn.Linear(A, sum(self._split), bias=False)

    def input_weights(self) -> list[UnitSlice]:
        """Where the input's features are read: ``W^s`` [4H, D] and the adaptation's x weights.

        The columns of ``W^s`` and the rows of the adaptation model's ``x`` weights [D, 4A];
        the sub-policy ``D^(3)`` scales x before ``W^s``, so no other weight reads it.
        """
        return [UnitSlice(self.weight_ih, 1), UnitSlice(self.adapt_ix, 0)]

    def initial_state(self, batch_size: int, device=None) -> State:
        """Zero ``(h, c, z, c_z)``: [B, hidden_size] twice, then [B, adaptation_size] twice."""
        h = torch.zeros(batch_size, self.hidden_size, device=device)
        z = torch.zeros(batch_size, self.adaptation_size, device=device)
        return (h, h.clone(), z, z.clone())

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """x: [T, B, D], state: (h, c, z, c_z), reset: [T, B] bool -> (y [T, B, H], state)."""
        # unbind, not [t]: indexing a graph tensor T times costs O(T^2) in the backward.
        adapt_x = (x @ self.adapt_ix + self.adapt_bias).unbind(0)  # T x [B, 4A]
        xs = x.unbind(0)
        outputs = []
        for t in range(x.shape[0]):
            h, c, z, cz = mask_state(state, reset[t])
            # eq. 7: z_t = LSTM([x_t; h_{t-1}], z_{t-1})
            ga = adapt_x[t] + torch.cat([h, z], dim=-1) @ self.adapt_ihz
            ai, af, ag, ao = ga.chunk(4, dim=-1)
            cz = torch.sigmoid(af) * cz + torch.sigmoid(ai) * torch.tanh(ag)
            z = torch.sigmoid(ao) * torch.tanh(cz)
            # pi^(j) = tanh(U^(j) z_t)
            d_x, d_h, d_wx, d_vh, d_b = torch.tanh(self.policy(z)).split(self._split, dim=-1)
            # eq. 8 with tied input adaptations: D4 W (D3 x) + D2 V (D1 h) + D0 b
            u = (d_wx * ((d_x * xs[t]) @ self.weight_ih.t())
                 + d_vh * ((d_h * h) @ self.weight_hh.t())
                 + d_b * self.bias)
            i, f, g, o = u.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            state = (h, c, z, cz)
            outputs.append(h)
        return torch.stack(outputs), state
