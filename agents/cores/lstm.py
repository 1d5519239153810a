"""LSTM core (Hochreiter & Schmidhuber 1997), the baseline of every seed paper.

Standard gates, each the additive building block ``phi(W x + U h + b)`` of Wu et al. 2016, eq. 1:
``i, f, o = sigmoid(W x + U h + b)``, ``g = tanh(W x + U h + b)``,
``c' = f * c + i * g``, ``h' = o * tanh(c')``. The weights are an ``nn.LSTMCell``'s
(its gate order i, f, g, o), run by PyTorch's fused LSTM so that resets apply step by step
(the core contract): between the steps where some row's episode starts (``resets: split``), or
over each row's stretches between its own episode starts as sequences of one call
(``resets: rows``, whose calls do not grow with the batch).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.cores.contract import CORES, State, mask_state
from agents.registry import check_choices, typed_options
from agents.units import UnitSlice

_CUDNN_PACKS = "RNN module weights are not part of single contiguous chunk"
# A padding step's pre-activation of the input and forget gates (``resets: rows``): their
# sigmoids are exactly 0 there, so the step leaves c = 0 and h = 0 whatever came before.
_CLOSED = -1.0e4
# ``resets: rows`` pads every sequence to the longest; past this much padding (steps computed
# over steps used: about 1 + the episode starts per row, e.g. 1.03 on Pong, 4.2 with a start
# every 10th step) an unroll is split at its episode starts instead, bounding the wasted work.
_MAX_PADDING = 8


@dataclass(frozen=True)
class LSTMConfig:
    """Options of the ``lstm`` core (``core_options``)."""

    hidden_size: int = 256  # width of h and c (IMPALA and the MI paper use 256)
    # an unroll through PyTorch's fused LSTM between episode starts; false steps the cell's
    # equations in a loop (the same gates up to float rounding, slower to train on CPU)
    fused: bool = True
    # how a fused unroll applies episode starts: split (one call per stretch between steps where
    # some row starts: more calls the wider the batch) or rows (each row's stretches as the
    # sequences of one call, padded: the same calls at any width; for a GPU's wide batches)
    resets: Literal["split", "rows"] = "split"
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

    def input_weights(self) -> list[UnitSlice]:
        """Where the input's features are read: the columns of ``W_ih`` [4H, D]."""
        return [UnitSlice(self.cell.weight_ih, 1)]

    def initial_state(self, batch_size: int, device=None) -> State:
        """Zero ``(h, c)``, each ``[B, hidden_size]`` in the cell's dtype."""
        z = torch.zeros(batch_size, self.output_size, device=device,
                        dtype=self.cell.weight_ih.dtype)
        return (z, z.clone())

    def forward(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """x: [T, B, D], state: (h, c) each [B, H], reset: [T, B] bool -> (y [T, B, H], state).

        With ``resets: split`` an unroll (T > 1) is cut at the steps where some row's episode
        starts; each stretch between two such steps runs as one call of PyTorch's fused LSTM
        (oneDNN on CPU, cuDNN on CUDA: the loop over time and its backward in native code),
        and the starting rows' state is zeroed between stretches. A wide batch has a start in
        some row at most steps, so its calls approach one per step. With ``resets: rows`` each
        row's own stretches are the sequences of one fused call (``_rows``), whatever the
        batch's width. Either way the same gates as stepping the cell up to float
        rounding (about 1e-7 at width 256) and 2-5x faster to train on CPU than a Python loop
        over steps, which pays dispatch for every operation of every step. Acting (T = 1)
        steps the cell's equations directly, about 2x faster than a fused call of one step,
        and so does an unroll under autocast, with ``fused: false`` or under ``torch.compile``.
        """
        if (x.shape[0] == 1 or not self.config.fused
                or torch.is_autocast_enabled(x.device.type) or torch.compiler.is_compiling()):
            # Acting; or under autocast (learner.mixed_precision), where the fused kernel would
            # run in bfloat16 on CPU and float16 on CUDA, state included: stepped, each step's
            # products in autocast's precision and the cell state in float32. Under
            # learner.compile: stepped too, so the unroll is part of one compiled graph (the
            # fused call's host-planned layout would break it; on CUDA the graph is replayed
            # whole, its steps' launches included).
            # W x + b for the whole unroll in one product; only U h stays in the loop.
            xw = F.linear(x, self.cell.weight_ih, self.cell.bias_ih + self.cell.bias_hh)
            outputs = []
            for t in range(x.shape[0]):
                state = self._step(xw[t], mask_state(state, reset[t]))
                outputs.append(state[0])
            return torch.stack(outputs), state
        with warnings.catch_warnings() if x.is_cuda else contextlib.nullcontext():
            if x.is_cuda:
                # cuDNN packs the cell's four weight tensors into one buffer at each call
                # (nn.LSTM keeps them packed) and warns; at width 256 that is a 2 MB copy.
                warnings.filterwarnings("ignore", message=_CUDNN_PACKS)
            if self.config.resets == "rows":
                plan = row_sequences(reset.cpu().numpy())
                if plan.padding <= _MAX_PADDING:
                    return self._rows(x, state, plan)
            return self._split(x, state, reset)

    def _split(self, x: torch.Tensor, state: State, reset: torch.Tensor):
        """``resets: split``: one fused call per stretch between steps where some row starts."""
        cell = self.cell
        weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
        T = x.shape[0]
        starts = reset.any(dim=1).tolist()
        outputs, begin = [], 0
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

    def _rows(self, x: torch.Tensor, state: State, plan: RowSequences):
        """``resets: rows``: every row's stretches between its episode starts, one fused call.

        The stretches are the sequences (columns) of one ``[L, S]`` unroll, ``L`` the longest;
        a row's last stretch ends at step ``L - 1`` (padded before it), its others start at
        step 0 (padded after). A stretch that starts an episode starts from a zero state, the
        row's first otherwise from the row's state. A padding step reads one extra input,
        whose weight closes the input and forget gates (their sigmoids are exactly 0): it
        leaves the state exactly zero, so a last stretch padded before it still starts from
        zero, and its final state is the row's. Outputs are picked back to ``[T, B]``.
        Dispatches a fixed number of operators, whatever ``B`` and the resets.
        """
        cell, (T, B, D), H = self.cell, x.shape, self.output_size
        index = torch.from_numpy(plan.index).to(x.device)
        n_src, n_out = plan.L * plan.S, T * B
        src, out, first, last = index.split([n_src, n_out, plan.S, B])
        pad = x.new_zeros(1, D + 1)
        pad[0, D] = 1.0  # the padding step: no input but the gate-closing one
        rows = torch.cat([F.pad(x.reshape(T * B, D), (0, 1)), pad])  # [T B + 1, D + 1]
        closing = x.new_zeros(4 * H, 1)
        closing[: 2 * H] = _CLOSED  # PyTorch's gate order: i, f, g, o
        weights = [torch.cat([cell.weight_ih, closing], 1), cell.weight_hh, cell.bias_ih,
                   cell.bias_hh]
        zero = x.new_zeros(1, H)
        h0, c0 = (torch.cat([s, zero]).index_select(0, first)[None] for s in state)
        y, h, c = torch.lstm(rows.index_select(0, src).view(plan.L, plan.S, D + 1), (h0, c0),
                             weights, True, 1, 0.0, torch.is_grad_enabled(), False, False)
        y = y.reshape(n_src, H).index_select(0, out).view(T, B, H)
        return y, (h[0].index_select(0, last), c[0].index_select(0, last))

    def _step(self, xw: torch.Tensor, state: State) -> State:
        """One step of the gates from the input's share ``xw = W x + b`` [B, 4H] -> (h', c')."""
        h, c = state
        gates = torch.addmm(xw, h, self.cell.weight_hh.t())  # PyTorch's order: i, f, g, o
        i, f, _, o = torch.sigmoid(gates).chunk(4, dim=-1)  # one sigmoid; g's share unused
        H = self.output_size
        c = f * c + i * torch.tanh(gates[:, 2 * H : 3 * H])
        return o * torch.tanh(c), c


@dataclass(frozen=True)
class RowSequences:
    """Where ``LSTMCore._rows`` reads and writes each step (``row_sequences``).

    ``index`` holds four int64 index vectors back to back: for each step ``p`` of each
    sequence ``j`` of the ``[L, S]`` unroll, the input row it reads (``t B + b``; ``T B`` for
    a padding step), at ``p S + j``; for each ``(t, b)`` the unroll's output row holding it
    (``p S + j``), at ``t B + b``; for each sequence its initial state's row (``b``, or ``B``
    for zero); for each row ``b`` its last sequence. ``padding``: ``L S / (T B)``.
    """

    L: int
    S: int
    index: np.ndarray
    padding: float


def row_sequences(reset: np.ndarray) -> RowSequences:
    """The sequences of ``resets: rows`` for ``reset`` [T, B] bool: every row's stretches.

    A stretch starts at step 0 or where the row's episode starts, and runs to the row's next
    start; the row's last one is right-aligned at ``L - 1``, the others left-aligned at 0.
    """
    T, B = reset.shape
    starts = reset.T.copy()  # [B, T]: a row's steps side by side
    starts[:, 0] = True
    flat = starts.reshape(-1)
    seq = np.cumsum(flat) - 1  # each (b, t)'s sequence, numbered row by row
    S = int(seq[-1]) + 1
    begin = np.flatnonzero(flat)  # b T + t of each sequence's first step
    col, first_t = np.divmod(begin, T)
    length = np.diff(np.append(begin, B * T))
    L = int(length.max())
    is_last = first_t + length == T
    offset = np.where(is_last, L - length, 0)
    t = np.tile(np.arange(T), B)
    pos = offset[seq] + t - first_t[seq]  # step within the sequence
    src = np.full(L * S, T * B, dtype=np.int64)
    src[pos * S + seq] = t * B + np.repeat(np.arange(B), T)
    out = np.empty(T * B, dtype=np.int64)
    out[t * B + np.repeat(np.arange(B), T)] = pos * S + seq
    continues = (first_t == 0) & ~reset[0, col]
    first = np.where(continues, col, B)
    last = seq.reshape(B, T)[:, -1]
    index = np.concatenate([src, out, first, last]).astype(np.int64)
    return RowSequences(L, S, index, L * S / (T * B))
