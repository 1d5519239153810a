"""RIMs (Goyal et al. 2019) against its paper.

Top-k selection (eq. 2), gradients through inactive units (section 2.3), the spatial input
set, a naive reference step written in the paper's notation, and the tie rule on every device.
The contract every core meets is in tests/test_cores.py.
"""

from __future__ import annotations

import math

import pytest
import torch

import agents.cores.rims  # noqa: F401
from tests.test_cores import D, make, no_reset, random_state


def changed_units(before, after):
    """[B, U] bool: which RIMs' state changed at all (any element of h or c)."""
    diff = (before[0] != after[0]).any(-1)
    for b, a in zip(before[1:], after[1:]):
        diff = diff | (b != a).any(-1)
    return diff


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("k_active", [1, 4, 6])
def test_rims_exactly_k_active_units_change(cell, k_active):
    core = make("rims", cell=cell, k_active=k_active, num_units=6).eval()
    B = 8
    state = random_state(core, B)
    assert len(state) == (2 if cell == "lstm" else 1)
    assert state[0].shape == (B, 6, core.config.unit_size)
    for _ in range(5):
        x = torch.randn(1, B, D)
        _, new = core(x, state, no_reset(1, B))
        changed = changed_units(state, new)
        assert (changed.sum(1) == k_active).all()
        inactive = ~changed
        for old, cur in zip(state, new):  # inactive RIMs are kept bit for bit
            assert torch.equal(old[inactive], cur[inactive])
        freq = core.diagnostics()["activation_frequency"]
        assert freq.shape == (6,)
        torch.testing.assert_close(freq.sum(), torch.tensor(float(k_active)))
        torch.testing.assert_close(freq, changed.float().mean(0))
        state = new


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_gradients_flow_through_inactive_rims(cell):
    """Section 2.3: an inactive RIM keeps its state and "the gradient still flows through" it.

    d h_{t+1,k} / d h_{t,k} is the identity for an inactive k (a detached copy would give 0).
    """
    core = make("rims", cell=cell, num_units=6, k_active=2).eval()
    B = 5
    h0 = random_state(core, B)[0].requires_grad_()
    state = (h0, *random_state(core, B)[1:])
    _, new = core(torch.randn(1, B, D), state, no_reset(1, B))
    inactive = ~changed_units(state, new)
    assert inactive.any()
    new[0][inactive].sum().backward()
    torch.testing.assert_close(h0.grad[inactive], torch.ones_like(h0.grad[inactive]))
    assert (h0.grad[~inactive] == 0).all()  # active RIMs' new state was not in the sum


def test_rims_spatial_input_set():
    core = make("rims", input_set="spatial").eval()
    T, B, N = 4, 3, 5
    x = torch.randn(T, B, N, D)
    reset = no_reset(T, B)
    state0 = random_state(core, B)
    y, _ = core(x, state0, reset)
    assert y.shape == (T, B, core.output_size)
    state, ys = state0, []
    for t in range(T):
        y_t, state = core(x[t:t + 1], state, reset[t:t + 1])
        ys.append(y_t)
    torch.testing.assert_close(torch.cat(ys), y, atol=1e-5, rtol=0)
    # A flat input is the set with one element.
    flat = torch.randn(T, B, D)
    torch.testing.assert_close(core(flat, state0, reset)[0],
                               core(flat[:, :, None], state0, reset)[0])


def test_rims_invalid_k_active_is_a_clear_error():
    with pytest.raises(ValueError, match="k_active=7 must be between 1 and num_units=6"):
        make("rims", num_units=6, k_active=7)
    with pytest.raises(ValueError, match="cell"):
        make("rims", cell="rnn")


def test_rims_dropout_only_in_training():
    core = make("rims", input_dropout=0.5, comm_dropout=0.5)
    x, state = torch.randn(3, 4, D), random_state(core, 4)
    core.eval()
    torch.testing.assert_close(core(x, state, no_reset(3, 4))[0], core(x, state, no_reset(3, 4))[0])
    core.train()
    assert not torch.equal(core(x, state, no_reset(3, 4))[0], core(x, state, no_reset(3, 4))[0])


def naive_rims_step(core, x, h, c=None):
    """One RIMs step written per RIM and per head in the paper's notation.

    Eqs. 1-2, sections 2.2-2.4. x: [B, N, D]; h, c: [B, U, H]. Loops everywhere; eval mode
    (no dropout).
    """
    cfg = core.config
    B, U, H = h.shape
    nh, dk, dv = cfg.input_heads, cfg.input_key_size, cfg.input_value_size // cfg.input_heads
    ch, ck, cv = cfg.comm_heads, cfg.comm_key_size, cfg.comm_value_size
    We, Wv = core.key.weight.t(), core.value.weight.t()
    h_out = h.clone()
    c_out = c.clone() if c is not None else None
    for b in range(B):
        X = torch.cat([torch.zeros(1, x.shape[-1]), x[b]])  # eq. 1: null row first
        null_att, reads = [], []
        for k in range(U):
            Wq = core.query[k]
            heads, p_null = [], 0.0
            for j in range(nh):
                q = h[b, k] @ Wq[:, j * dk:(j + 1) * dk]
                K = X @ We[:, j * dk:(j + 1) * dk]
                V = X @ Wv[:, j * dv:(j + 1) * dv]
                p = torch.softmax(K @ q / math.sqrt(dk), dim=0)  # eq. 2
                heads.append(p @ V)
                p_null = p_null + p[0] / nh
            reads.append(torch.cat(heads))
            null_att.append(float(p_null.detach()))
        active = sorted(range(U), key=lambda k: null_att[k])[:cfg.k_active]
        h_tilde = h[b].clone()
        c_new = {}
        for k in active:  # section 2.3: per-RIM LSTM (gates i, f, o, g) or GRU (r, z, n) on A_k
            gi = reads[k] @ core.weight_ih[k] + core.bias_ih[k, 0]
            gh = h[b, k] @ core.weight_hh[k]
            if cfg.cell == "lstm":
                i, f, o, g = (gi + gh).chunk(4)
                c_new[k] = torch.sigmoid(f) * c[b, k] + torch.sigmoid(i) * torch.tanh(g)
                h_tilde[k] = torch.sigmoid(o) * torch.tanh(c_new[k])
            else:
                gh = gh + core.bias_hh[k, 0]
                r = torch.sigmoid(gi[:H] + gh[:H])
                z = torch.sigmoid(gi[H:2 * H] + gh[H:2 * H])
                n = torch.tanh(gi[2 * H:] + r * gh[2 * H:])
                h_tilde[k] = (1 - z) * n + z * h[b, k]
        for k in active:  # section 2.4: read from all RIMs, residual
            outs = []
            for j in range(ch):
                W = core.comm_qkv
                base = j * (2 * ck + cv)
                q = h_tilde[k] @ W[k][:, base:base + ck]
                keys = torch.stack([h_tilde[m] @ W[m][:, base + ck:base + 2 * ck]
                                    for m in range(U)])
                vals = torch.stack([h_tilde[m] @ W[m][:, base + 2 * ck:base + 2 * ck + cv]
                                    for m in range(U)])
                outs.append(torch.softmax(keys @ q / math.sqrt(ck), dim=0) @ vals)
            r = torch.cat(outs)
            if cfg.comm_gate:  # the authors' write: sigmoid(gate) * tanh(projection)
                write = r @ core.comm_out[k][:, :H] + core.comm_bias[k, 0, :H]
                gate = r @ core.comm_out[k][:, H:] + core.comm_bias[k, 0, H:]
                h_out[b, k] = h_tilde[k] + torch.sigmoid(gate) * torch.tanh(write)
            else:
                h_out[b, k] = r @ core.comm_out[k] + h_tilde[k]
            if cfg.cell == "lstm":
                c_out[b, k] = c_new[k]
    return h_out, c_out


@pytest.mark.parametrize("gate", [True, False])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("N", [1, 3])
def test_rims_step_matches_naive_reference(N, cell, gate):
    core = make("rims", cell=cell, unit_size=8, input_value_size=16, input_key_size=8,
                comm_key_size=4, comm_value_size=4, comm_gate=gate).eval()
    B = 3
    state = random_state(core, B)
    x = torch.randn(B, N, D)
    y, new = core(x[None], state, no_reset(1, B))
    h_ref, c_ref = naive_rims_step(core, x, *state)
    torch.testing.assert_close(new[0], h_ref, atol=1e-5, rtol=0)
    if cell == "lstm":
        torch.testing.assert_close(new[1], c_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(y[0], h_ref.reshape(B, -1), atol=1e-5, rtol=0)


def reversed_ties(monkeypatch):
    """Make ``torch.topk`` and unstable ``torch.sort`` break ties highest index first.

    Both leave the order of equal values unspecified (CPU and CUDA differ); flipping the input,
    asking the library, and mapping the indices back gives the other order of ties.
    """
    topk, sort = torch.topk, torch.sort

    def flipped_topk(input, k, dim=-1, largest=True, sorted=True):
        out = topk(input.flip(dim), k, dim=dim, largest=largest, sorted=sorted)
        return torch.return_types.topk((out.values, input.shape[dim] - 1 - out.indices))

    def flipped_sort(input, dim=-1, descending=False, stable=False):
        if stable:  # a stable sort has one answer: ties in index order
            return sort(input, dim=dim, descending=descending, stable=True)
        out = sort(input.flip(dim), dim=dim, descending=descending)
        return torch.return_types.sort((out.values, input.shape[dim] - 1 - out.indices))

    monkeypatch.setattr(torch, "topk", flipped_topk)
    monkeypatch.setattr(torch, "sort", flipped_sort)
    monkeypatch.setattr(torch.Tensor, "topk", flipped_topk)
    monkeypatch.setattr(torch.Tensor, "sort", flipped_sort)


@pytest.mark.parametrize("N", [1, 3])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rims_ties_go_to_the_lowest_index_on_every_device(monkeypatch, cell, N):
    """From the zero state every RIM ties; the choice must not depend on the library's ties.

    CPU and CUDA ``topk`` break ties differently, which made a CPU runner and a CUDA learner
    update different RIMs after each reset. Here the other tie order is forced and the
    outputs, states and choices must not change; the tied steps choose RIMs 0..k_active-1.
    """
    core = make("rims", cell=cell, num_units=6, k_active=4).eval()
    T, B = 4, 3
    x = torch.randn(T, B, N, D)
    reset = no_reset(T, B)
    reset[2, 1] = True  # a reset mid-unroll: a zero state, so a tie, again
    state0 = core.initial_state(B)
    y, state = core(x, state0, reset)
    active = core.last_active()
    lowest = torch.tensor([True] * 4 + [False] * 2)
    assert (active[0] == lowest).all()  # [B, U] at t = 0: every batch element tied
    assert torch.equal(active[2, 1], lowest)
    with monkeypatch.context() as m:
        reversed_ties(m)
        flipped = torch.topk(torch.zeros(6, 1), 4, dim=0, largest=False).indices[:, 0]
        assert sorted(flipped.tolist()) != [0, 1, 2, 3]  # the patch does reverse the ties
        y2, state2 = core(x, state0, reset)
        active2 = core.last_active()
    assert torch.equal(active2, active)
    assert torch.equal(y2, y)
    for a, b in zip(state2, state):
        assert torch.equal(a, b)
