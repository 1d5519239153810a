"""Recurrent Independent Mechanisms (Goyal et al. 2019, "RIMs").

The paper: "Recurrent Independent Mechanisms", ICLR 2021, arXiv:1909.10893.

``num_units`` small recurrent cells ("RIMs") with their own parameters. One step, in the
paper's four stages (Fig. 1, Appendix G):

1. **Input attention** (section 2.2, eqs. 1-2). The input is a set of elements (rows) and a
   null row of zeros is prepended, ``X = 0 (+) x_t`` (eq. 1). Keys ``K = X W^e`` and values
   ``V = X W^v`` are shared; every RIM ``k`` reads with its own queries ``Q = h_{t,k} W^q_k``:
   ``A_k = softmax(Q K^T / sqrt(d_e)) V`` (eq. 2), one attention per head, the heads' reads
   concatenated into the RIM's input.
2. **Competition** (section 2.2). The ``k_active`` RIMs that put the *least* attention on the
   null row (softmax weight averaged over heads, as the paper does for multi-head input
   attention) form the active set ``S_t``; among equal scores the lower-indexed RIM wins, so
   the choice is the same on every device (a stable sort per batch element, no loop).
3. **Independent dynamics** (section 2.3). ``h~_{t,k} = D_k(h_{t,k}, A_k)``, an LSTM (or GRU)
   per RIM with its own weights, computed for all RIMs at once with block weights
   ``[num_units, in, 4 * unit_size]`` (``bmm``; Appendix C.1 "batch matrix multiplication over
   the RIMs"). Inactive RIMs keep their state exactly, ``h_{t+1,k} = h_{t,k}`` (and ``c``),
   written as the blend ``m * new + (1 - m) * old`` so gradients still flow through the old
   state ("the gradient still flows through a RIM on a step where it is not activated").
4. **Communication** (section 2.4). Active RIMs read from all RIMs with multi-head key-value
   attention (queries, keys, values per RIM) plus a residual connection:
   ``h_{t+1,k} = softmax(Q_k K^T / sqrt(d)) V + h~_{t,k}`` for ``k in S_t``. The read enters
   the residual gated and squashed, as in the authors' code (next list):
   ``h_{t+1,k} = h~_{t,k} + sigmoid(r W^g_k + b^g_k) * tanh(r W^o_k + b^o_k)`` with ``r`` the
   heads' reads concatenated.

The output is the concatenation of all RIMs' ``h`` (Appendix C.3):
``[T, B, num_units * unit_size]``. State: ``(h, c)``, each ``[B, num_units, unit_size]``
(``(h,)`` with ``cell="gru"``). Defaults follow Table 3 (key 64, value ``4 * unit_size``, 4
heads, dropout 0.1; communication keys/values 32, 4 heads, dropout 0.1) and the Atari setting
of Appendix D.8 (6 RIMs, 4 active).

Deviations and readings of under-specified points, and why:

- ``unit_size`` defaults to 42: the paper compares RIMs with an LSTM of the *same total hidden
  size* (Table 1: 6 x 100 vs. 600; section 2.4 "drop-in replacement"); 6 x 42 = 252 is the
  closest multiple of 6 not above the 256-wide LSTM used in mira.
- Heads of the input attention: each head reads ``input_value_size // input_heads`` values and
  the heads' reads are concatenated, so a RIM's input has ``input_value_size`` features
  (Table 3's "size of individual RIM * 4" read as the total). ``input_key_size`` and the
  communication key/value sizes are per head, as in the paper's attention code.
- Keys, values and queries have no bias ("linear transformations", eq. 2), so the null row's
  key and value are exactly zero and its score is 0.
- Communication with several heads needs an output projection from ``comm_heads *
  comm_value_size`` back to ``unit_size`` before the residual; it is per RIM (block weights),
  like every other RIM-side weight.
- The communication's write is bounded (``comm_gate``, on by default). Section 2.4's
  equation adds the attention's read to ``h~`` as it is; the authors' code
  (``MultiHeadAttention`` with ``residual=True``, used for the communication in
  ``BlocksCore``) adds ``sigmoid(gate_fc(r)) * tanh(fc(r))``, each element inside (-1, 1).
  Without it nothing bounds ``h``: an inactive RIM keeps its ``h``, other RIMs read it back
  through their values, and once the weights give that loop a gain above 1 the state grows
  each step. With the gate and the LSTM cell ``|h| < 2`` (``h_new`` and the write are each
  under 1); a GRU's ``h`` can still grow, by under 1 per step. In the copying task an
  ungated model (width 252, Adam 1e-3, clip 1.0) trained for 5,500 steps had ``h`` at 1e5
  within 15 steps of a sequence, and a cross-entropy of 1e5 nats. ``comm_gate: false`` gives
  the ungated core (runs saved before the gate existed load with it); the gate's two
  projections are per RIM, like the rest, and add
  ``num_units * (comm_heads * comm_value_size + 2) * unit_size`` parameters.
- Communication reads keys and values of inactive RIMs from their *unchanged* state
  ``h_{t,k}`` (section 2.4: "non-activated RIMs ... their value needs not change"). Appendix G's
  pseudocode instead runs the dynamics for every RIM and blocks the gradient of inactive ones
  with a custom autograd function; reading the unchanged state needs no such function and
  gives inactive RIMs' dynamics no gradient from that step either.
- Dropout (Table 3) is applied to the attention weights of both attentions, after the top-k
  selection, which always uses the un-dropped weights. ``nn.Dropout`` is off in eval mode, and
  mira's RL learners run the agent in eval mode like the actors do (``learners/update/learner.py``):
  V-trace and PPO ratios need the learner's policy to equal the behaviour policy for the same
  weights, which two different dropout masks would break. Dropout therefore acts in supervised
  use (``scripts/papers/copying.py``), not in RL training.
- Spatial input (section 2.2, eq. 3): the set may hold ``N`` elements (``x [T, B, N, D]``,
  e.g. positions of a conv torso) and the competition is the same null-row rule over the whole
  set. The paper's position-specific competition ("top k_A RIMs ... for each spatial
  position") does not define which RIMs update their state, so it is not implemented.
- From the zero initial state every query is zero and all RIMs tie at the first step of an
  episode. ``torch.topk`` breaks such ties one way on CPU and another on CUDA (unspecified in
  either), so a CPU runner and a CUDA learner would update different RIMs after every reset.
  The competition therefore uses a stable sort: equal scores go to the lowest-indexed RIMs
  (RIMs ``0 .. k_active - 1`` at the first step), on every device. The paper's code uses
  ``topk`` and leaves ties to the library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from agents.cores.contract import CORES, State, mask_state
from agents.registry import check_choices, typed_options
from agents.units import UnitSlice


@dataclass(frozen=True)
class RIMsConfig:
    """Options of the ``rims`` core (``core_options``), checked on construction."""

    num_units: int = 6  # number of RIMs k_T (Atari setting, Appendix D.8)
    k_active: int = 4  # RIMs activated per step k_A (Appendix D.8 uses 4 or 5)
    unit_size: int = 42  # hidden size of one RIM; 6 x 42 = 252 matches a 256 LSTM (section 2.4)
    # independent dynamics of each RIM: "lstm" (state (h, c)) or "gru" (state (h,))
    cell: Literal["lstm", "gru"] = "lstm"
    input_key_size: int = 64  # input-attention key/query size per head (Table 3)
    # RIM input width, heads concatenated; None = 4 * unit_size (Table 3)
    input_value_size: int | None = None
    # input-attention heads; scores are averaged over heads for the top-k (Table 3)
    input_heads: int = 4
    input_dropout: float = 0.1  # dropout on input-attention weights (Table 3)
    comm_key_size: int = 32  # communication key/query size per head (Table 3)
    comm_value_size: int = 32  # communication value size per head (Table 3)
    comm_heads: int = 4  # communication heads (Table 3)
    comm_dropout: float = 0.1  # dropout on communication-attention weights (Table 3)
    # how the agent presents input: "flat" x [T,B,D] or "spatial" x [T,B,N,D] (torso positions)
    input_set: Literal["flat", "spatial"] = "flat"
    # communication writes sigmoid(gate) * tanh(projected read) into h, each element under 1
    # (the authors' code); false: the projected read itself (section 2.4's equation)
    comm_gate: bool = True

    def __post_init__(self) -> None:
        if self.input_value_size is None:
            object.__setattr__(self, "input_value_size", 4 * self.unit_size)  # frozen
        if not 1 <= self.k_active <= self.num_units:
            raise ValueError(
                f"rims: k_active={self.k_active} must be between 1 and num_units={self.num_units}; "
                "lower k_active or raise num_units."
            )
        check_choices(self, "rims: ")
        if self.input_value_size % self.input_heads:
            raise ValueError(
                f"rims: input_value_size={self.input_value_size} must be a multiple of "
                f"input_heads={self.input_heads}; change one of them."
            )
        for name in ("unit_size", "input_key_size", "comm_key_size", "comm_value_size",
                     "input_heads", "comm_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"rims: {name} must be at least 1.")
        for name in ("input_dropout", "comm_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"rims: {name} must be in [0, 1).")


def _block_weight(num_units: int, fan_in: int, fan_out: int, bound: float) -> nn.Parameter:
    """Per-RIM weights ``[num_units, fan_in, fan_out]``, uniform in ``[-bound, bound]``."""
    return nn.Parameter(torch.empty(num_units, fan_in, fan_out).uniform_(-bound, bound))


@CORES.register("rims")
class RIMsCore(nn.Module):
    """``num_units`` RIMs that compete for the input, update sparsely and communicate (Fig. 1)."""

    Config = RIMsConfig

    @staticmethod
    def input_form(config: RIMsConfig) -> str:
        """``spatial`` when the core attends over the torso's positions (``input_set``)."""
        return config.input_set

    def __init__(self, input_size: int, config: RIMsConfig | None = None, **options):
        super().__init__()
        cfg = typed_options(RIMsConfig, config, options)
        self.config = cfg
        U, H = cfg.num_units, cfg.unit_size
        self.output_size = U * H
        self._gates = 4 if cfg.cell == "lstm" else 3
        self._in_dv = cfg.input_value_size // cfg.input_heads

        # Input attention (eq. 2): shared W^e, W^v; per-RIM W^q_k.
        self.key = nn.Linear(input_size, cfg.input_heads * cfg.input_key_size, bias=False)
        self.value = nn.Linear(input_size, cfg.input_value_size, bias=False)
        self.query = _block_weight(U, H, cfg.input_heads * cfg.input_key_size, 1 / math.sqrt(H))

        # Independent dynamics D_k (section 2.3): block LSTM/GRU, nn.LSTMCell's initialisation.
        # LSTM gates are ordered i, f, o, g so that one sigmoid covers three of them; the LSTM
        # needs one bias, the GRU two (its reset gate multiplies the recurrent term only).
        bound = 1 / math.sqrt(H)
        self.weight_ih = _block_weight(U, cfg.input_value_size, self._gates * H, bound)
        self.weight_hh = _block_weight(U, H, self._gates * H, bound)
        self.bias_ih = nn.Parameter(torch.empty(U, 1, self._gates * H).uniform_(-bound, bound))
        if cfg.cell == "gru":
            self.bias_hh = nn.Parameter(torch.empty(U, 1, self._gates * H).uniform_(-bound, bound))
        else:
            self.register_parameter("bias_hh", None)

        # Communication (section 2.4): per-RIM queries, keys, values in one block weight,
        # and a per-RIM output projection of the concatenated heads back to unit_size; with
        # comm_gate, the write's projection and its gate's side by side, with their biases.
        ck, cv, ch = cfg.comm_key_size, cfg.comm_value_size, cfg.comm_heads
        self.comm_qkv = _block_weight(U, H, ch * (2 * ck + cv), 1 / math.sqrt(H))
        out = 2 * H if cfg.comm_gate else H
        self.comm_out = _block_weight(U, ch * cv, out, 1 / math.sqrt(ch * cv))
        if cfg.comm_gate:
            self.comm_bias = nn.Parameter(
                torch.empty(U, 1, out).uniform_(-1 / math.sqrt(ch * cv), 1 / math.sqrt(ch * cv)))
        else:
            self.register_parameter("comm_bias", None)

        self.input_dropout = nn.Dropout(cfg.input_dropout)
        self.comm_dropout = nn.Dropout(cfg.comm_dropout)
        self._activation_frequency = torch.zeros(U)

    def input_weights(self) -> list[UnitSlice]:
        """Where a flat input's features are read: the key and value maps' columns.

        The input attention's ``W^e`` and ``W^v`` (eq. 2), the only weights that read the input.
        """
        return [UnitSlice(self.key.weight, 1), UnitSlice(self.value.weight, 1)]

    def initial_state(self, batch_size: int, device=None) -> State:
        """Zero ``(h, c)`` (``(h,)`` with ``cell="gru"``), each ``[B, num_units, unit_size]``."""
        shape = (batch_size, self.config.num_units, self.config.unit_size)
        z = torch.zeros(shape, device=device)
        return (z, z.clone()) if self.config.cell == "lstm" else (z,)

    def diagnostics(self) -> dict[str, torch.Tensor]:
        """Statistics of the last forward pass, worth logging.

        ``activation_frequency [num_units]``: fraction of (t, b) of the last forward pass
        in which each RIM was active (sums to ``k_active``).
        """
        return {"activation_frequency": self._activation_frequency}

    def last_active(self) -> torch.Tensor:
        """``[T, B, num_units]`` bool: the RIMs each step of the last forward pass updated.

        ``mira evaluate --video N --rims-strip`` draws them under the frames.
        """
        return self._active.permute(0, 2, 1) > 0

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """Unroll the RIMs over ``T`` steps; returns y [T, B, U * H] and the state.

        x: [T, B, D] (a one-element set) or [T, B, N, D] (a set of N elements);
        state: ``initial_state`` layout; reset: [T, B] bool.
        """
        cfg = self.config
        if x.dim() == 3:
            x = x.unsqueeze(2)
        T, B, N, _ = x.shape
        U, H = cfg.num_units, cfg.unit_size
        # Keys and values depend on the input only: compute them for the whole unroll at once.
        # The 1/sqrt(d_e) of eq. 2 is folded into the keys.
        keys = self.key(x).view(T, B, N, cfg.input_heads, cfg.input_key_size)
        keys = keys * (1.0 / math.sqrt(cfg.input_key_size))
        values = self.value(x).view(T, B, N, cfg.input_heads, self._in_dv)
        # unbind, not keys[t]: indexing a graph tensor T times costs O(T^2) in the backward
        # (each index's gradient is a zero-filled copy of the whole tensor).
        keys, values = keys.unbind(0), values.unbind(0)

        # Internally the RIM axis leads ([U, B, ...]) so every per-RIM matmul is one bmm.
        state = tuple(s.transpose(0, 1) for s in state)
        outputs, masks = [], []
        for t in range(T):
            # mask_state expects the batch first; the transposes are views.
            state = tuple(s.transpose(0, 1) for s in
                          mask_state(tuple(s.transpose(0, 1) for s in state), reset[t]))
            state, mask = self._step(keys[t], values[t], state)
            masks.append(mask)
            outputs.append(state[0])
        self._active = torch.stack(masks).detach()  # [T, U, B]: which RIMs each step updated
        self._activation_frequency = self._active.mean(dim=(0, 2))
        # [T, U, B, H] -> [T, B, U*H]
        y = torch.stack(outputs).permute(0, 2, 1, 3).reshape(T, B, U * H)
        return y, tuple(s.transpose(0, 1).contiguous() for s in state)

    def _step(self, keys: torch.Tensor, values: torch.Tensor, state: State):
        """One step on the RIM-major layout; returns (state, mask [U, B]).

        keys: [B, N, heads, dk] (already scaled), values: [B, N, heads, dv]; state tensors
        [U, B, H].

        torch.softmax is slow on CPU for rows this short (2 to 7 entries), so both softmaxes
        are written out; for a one-element input set the null-row softmax is a sigmoid.
        """
        cfg = self.config
        h = state[0]
        U, B, H = h.shape
        N = keys.shape[1]

        # 1. Input attention over {null} + input set (eqs. 1-2). The null row's key is zero,
        # so its score is 0; its value is zero, so only the real elements enter the read.
        q = torch.bmm(h, self.query).view(U, B, cfg.input_heads, cfg.input_key_size)
        if N == 1:
            scores = (q * keys[:, 0]).sum(-1, keepdim=True)  # [U, B, heads, 1]
            p_real = torch.sigmoid(scores)  # softmax over (0, s)
            p_null = 1.0 - p_real[..., 0]
        else:
            scores = torch.einsum("ubhd,bnhd->ubhn", q, keys)
            top = scores.amax(-1, keepdim=True).clamp_min(0.0)
            e_real, e_null = torch.exp(scores - top), torch.exp(-top)
            z = e_real.sum(-1, keepdim=True) + e_null
            p_real, p_null = e_real / z, (e_null / z)[..., 0]

        # 2. Competition: the k_active RIMs with the least attention on the null row
        # (averaged over heads; a sum orders the same). A stable sort, not topk: ties (all
        # of them at a zero state) go to the lowest index on every device.
        chosen = torch.sort(p_null.sum(-1), dim=0, stable=True).indices[:cfg.k_active]
        mask = h.new_zeros(U, B).scatter_(0, chosen, 1.0)
        m = mask.unsqueeze(-1)  # [U, B, 1]

        p_real = self.input_dropout(p_real)
        if N == 1:
            read = p_real * values[:, 0]
        else:
            read = torch.einsum("ubhn,bnhv->ubhv", p_real, values)
        read = read.reshape(U, B, cfg.input_value_size)

        # 3. Independent dynamics, all RIMs at once; inactive RIMs keep their state:
        # new = m * new + (1 - m) * old, written as addcmul((1 - m) * old, m, new).
        keep = 1.0 - m
        kept_h = keep * h
        if cfg.cell == "lstm":
            c = state[1]
            gates = torch.baddbmm(torch.baddbmm(self.bias_ih, read, self.weight_ih), h,
                                  self.weight_hh)
            ifo = torch.sigmoid(gates[..., :3 * H])
            g = torch.tanh(gates[..., 3 * H:])
            c_new = torch.addcmul(ifo[..., H:2 * H] * c, ifo[..., :H], g)
            h_new = ifo[..., 2 * H:] * torch.tanh(c_new)
        else:
            gi = torch.baddbmm(self.bias_ih, read, self.weight_ih)
            gh = torch.baddbmm(self.bias_hh, h, self.weight_hh)
            rz = torch.sigmoid(gi[..., :2 * H] + gh[..., :2 * H])
            r, z = rz[..., :H], rz[..., H:]
            n = torch.tanh(torch.addcmul(gi[..., 2 * H:], r, gh[..., 2 * H:]))
            h_new = n + z * (h - n)  # (1 - z) * n + z * h
        h_tilde = torch.addcmul(kept_h, m, h_new)

        # 4. Communication: every RIM's keys/values, active RIMs' queries, residual (section 2.4).
        ck, cv, ch = cfg.comm_key_size, cfg.comm_value_size, cfg.comm_heads
        qkv = torch.bmm(h_tilde, self.comm_qkv).view(U, B, ch, 2 * ck + cv)
        qkv = qkv.permute(1, 2, 0, 3).reshape(B * ch, U, 2 * ck + cv)
        cq, ckey, cval = qkv.split([ck, ck, cv], dim=-1)
        att = torch.bmm(cq, ckey.transpose(1, 2)) * (1.0 / math.sqrt(ck))  # [B*ch, U, U]
        att = torch.exp(att - att.amax(-1, keepdim=True))
        att = self.comm_dropout(att / att.sum(-1, keepdim=True))
        ctx = torch.bmm(att, cval).view(B, ch, U, cv).permute(2, 0, 1, 3).reshape(U, B, ch * cv)
        if cfg.comm_gate:  # h~ + sigmoid(gate) * tanh(write), the authors' code
            o = torch.baddbmm(self.comm_bias, ctx, self.comm_out)
            h_comm = torch.addcmul(h_tilde, torch.sigmoid(o[..., H:]), torch.tanh(o[..., :H]))
        else:
            h_comm = torch.baddbmm(h_tilde, ctx, self.comm_out)  # h~ + attention output
        h_next = torch.addcmul(kept_h, m, h_comm)

        if cfg.cell == "lstm":
            return (h_next, torch.addcmul(keep * c, m, c_new)), mask
        return (h_next,), mask
