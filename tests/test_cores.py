"""Contract tests over every registered core, plus paper-equation references per core.

The contract (agents/cores/__init__.py): shapes, T=1 stepping equals one unroll, resets restart
an episode from the initial state, gradients reach every parameter, the output depends on the
state, and the state can be sliced along the batch. Then the LSTM against PyTorch's, and MI-LSTM
(Wu et al. 2016) and aLSTM (Flennerhag et al. 2018) against naive loops written in each
paper's notation; RIMs (Goyal et al. 2019) has its own file, tests/test_rims.py.
"""

from __future__ import annotations

import pytest
import torch

import agents.cores.alstm  # noqa: F401  (registers "alstm" even before agents/cores imports it)
import agents.cores.mi_lstm  # noqa: F401
import agents.cores.rims  # noqa: F401
from agents.cores import CORES

NAMES = CORES.names()
D = 12  # input width used throughout


def make(name: str, seed: int = 0, **options):
    torch.manual_seed(seed)
    return CORES[name](D, **options)


def random_state(core, batch: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s.shape, generator=g) * 0.5 for s in core.initial_state(batch))


def no_reset(T: int, B: int) -> torch.Tensor:
    return torch.zeros(T, B, dtype=torch.bool)


def assert_equals_cell_stepped(core, x, state0, reset, y, final):
    """Assert an unroll's outputs and final state equal ``core.cell`` stepped with resets.

    Returns the stepped outputs and final state, for comparing gradients through both.
    """
    from agents.cores import mask_state

    state, ys = state0, []
    for t in range(x.shape[0]):
        state = core.cell(x[t], mask_state(state, reset[t]))
        ys.append(state[0])
    ref = torch.stack(ys)
    torch.testing.assert_close(y, ref, atol=1e-6, rtol=1e-5)
    for a, b in zip(final, state):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    return ref, state


def test_every_core_is_tested():
    assert {"lstm", "rims", "mi_lstm", "alstm", "feedforward"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_output_and_state_shapes(name):
    core = make(name)
    T, B = 4, 3
    state = core.initial_state(B)
    assert isinstance(state, tuple) and all(s.shape[0] == B for s in state)
    y, new_state = core(torch.randn(T, B, D), state, no_reset(T, B))
    assert y.shape == (T, B, core.output_size)
    assert [s.shape for s in new_state] == [s.shape for s in state]


@pytest.mark.parametrize("name", NAMES)
def test_stepping_equals_unrolling(name):
    core = make(name).eval()
    T, B = 6, 4
    x = torch.randn(T, B, D)
    reset = torch.rand(T, B) < 0.25
    state0 = random_state(core, B)
    y_unroll, s_unroll = core(x, state0, reset)
    state, ys = state0, []
    for t in range(T):
        y, state = core(x[t:t + 1], state, reset[t:t + 1])
        ys.append(y)
    torch.testing.assert_close(torch.cat(ys), y_unroll, atol=1e-5, rtol=0)
    for a, b in zip(state, s_unroll):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_reset_starts_from_initial_state(name):
    core = make(name).eval()
    T, B, t0 = 7, 3, 3
    x = torch.randn(T, B, D)
    reset = no_reset(T, B)
    reset[t0, 1] = True
    y, _ = core(x, random_state(core, B), reset)
    fresh, _ = core(x[t0:, 1:2], core.initial_state(1), no_reset(T - t0, 1))
    torch.testing.assert_close(y[t0:, 1], fresh[:, 0], atol=1e-5, rtol=0)
    # The other episodes run on undisturbed.
    y_no_reset, _ = core(x, random_state(core, B), no_reset(T, B))
    torch.testing.assert_close(y[:, [0, 2]], y_no_reset[:, [0, 2]], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name):
    core = make(name).train()
    T, B = 6, 16  # enough (t, b) pairs that every RIM is active somewhere
    x = torch.randn(T, B, D, requires_grad=True)
    y, _ = core(x, random_state(core, B), no_reset(T, B))
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3))
    (y * weights).sum().backward()
    assert x.grad.abs().sum() > 0, f"{name}: no gradient reaches the input (the torso)"
    for pname, p in core.named_parameters():
        assert p.grad is not None, f"{name}.{pname} got no gradient"
        assert p.grad.abs().sum() > 0, f"{name}.{pname} got an all-zero gradient"
    if hasattr(core, "diagnostics"):
        for key, value in core.diagnostics().items():
            assert isinstance(value, torch.Tensor) and not value.requires_grad, key


@pytest.mark.parametrize("name", [n for n in NAMES if not getattr(CORES[n], "stateless", False)])
def test_output_depends_on_state(name):
    core = make(name).eval()
    T, B = 3, 2
    x = torch.randn(T, B, D)
    y_zero, _ = core(x, core.initial_state(B), no_reset(T, B))
    y_rand, _ = core(x, random_state(core, B), no_reset(T, B))
    assert (y_zero[0] - y_rand[0]).abs().max() > 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_state_slices_along_batch(name):
    core = make(name).eval()
    T, B = 4, 5
    x = torch.randn(T, B, D)
    state = random_state(core, B)
    idx = torch.tensor([4, 1, 3])
    y_all, s_all = core(x, state, no_reset(T, B))
    y_sub, s_sub = core(x[:, idx], tuple(s[idx] for s in state), no_reset(T, len(idx)))
    torch.testing.assert_close(y_sub, y_all[:, idx], atol=1e-5, rtol=0)
    for a, b in zip(s_sub, s_all):
        torch.testing.assert_close(a, b[idx], atol=1e-5, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("T", [1, 7, 40])
def test_lstm_equals_pytorch_lstm_cell_stepped(T, fused):
    """The LSTM core equals nn.LSTMCell stepped through the unroll, reset masking included.

    An unroll runs PyTorch's fused LSTM between the steps where episodes start (one row's
    start cuts every row's stretch), and acting (T = 1) steps the gates itself: both must stay
    nn.LSTMCell's LSTM, outputs, final state and gradients; so must an unroll with
    ``fused: false``, which steps the gates itself throughout.
    """
    core = make("lstm", hidden_size=16, fused=fused)
    B = 3
    x, reset = torch.randn(T, B, D, requires_grad=True), torch.rand(T, B) < 0.1
    if T > 1:
        reset[0], reset[T // 2, 1] = True, True  # a start at the first step and mid-unroll
    state0 = random_state(core, B)
    y, final = core(x, state0, reset)
    ref, state = assert_equals_cell_stepped(core, x, state0, reset, y, final)
    weights = [x, *core.parameters()]
    loss_weights = torch.randn(T, B, 16)
    for a, b in zip(torch.autograd.grad((y * loss_weights).sum() + final[1].sum(), weights),
                    torch.autograd.grad((ref * loss_weights).sum() + state[1].sum(), weights)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("p_start", [0.02, 0.1, 0.15])
def test_lstm_rows_equals_the_cell_stepped_over_a_wide_batch_with_many_resets(p_start):
    """``resets: rows`` equals nn.LSTMCell stepped, over a wide batch with many resets.

    Each row's stretches run as the sequences of one fused call; over 60 rows of 32 steps,
    where most steps have a start in some row, its outputs, final state and gradients are the
    stepped cell's with reset masking up to float rounding, and the operators it dispatches do
    not grow with the batch's width or its resets.
    """
    from agents.cores.lstm import _MAX_PADDING, row_sequences
    from scripts.bench.dispatch import OpCounter

    T, B, H = 32, 60, 16
    g = torch.Generator().manual_seed(3)
    reset = torch.rand(T, B, generator=g) < p_start
    reset[0, :5], reset[T - 1, 5:8], reset[:, 8] = True, True, False  # edges; a row never reset
    assert reset[1:].any(dim=1).float().mean() > 0.6  # the split path would cut most steps
    assert row_sequences(reset.numpy()).padding <= _MAX_PADDING  # the rows path runs
    core = make("lstm", hidden_size=H, resets="rows")
    x = torch.randn(T, B, D, generator=g, requires_grad=True)
    state0 = tuple(s.requires_grad_() for s in random_state(core, B))
    y, final = core(x, state0, reset)
    ref, state = assert_equals_cell_stepped(core, x, state0, reset, y, final)
    weights = [x, *core.parameters(), *state0]
    loss_weights = torch.randn(T, B, H, generator=g)
    for a, b in zip(torch.autograd.grad((y * loss_weights).sum() + final[1].sum(), weights),
                    torch.autograd.grad((ref * loss_weights).sum() + state[1].sum(), weights)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)

    def ops(width: int, p: float) -> int:
        r = torch.rand(T, width, generator=g) < p
        with OpCounter() as counter:
            out, (_, c) = core(torch.randn(T, width, D, requires_grad=True),
                               core.initial_state(width), r)
            (out.sum() + c.sum()).backward()
        return counter.total

    # a few more or fewer where autograd accumulates gradients differently; not per row
    counts = [ops(4, 0.0), ops(60, 0.05), ops(240, 0.05), ops(240, 0.3)]
    assert max(counts) - min(counts) <= 4, counts


def test_lstm_rows_pads_less_than_its_bound_or_splits():
    """Past ``_MAX_PADDING`` of padding ``resets: rows`` runs the split path, still exact.

    One row never reset and the others at every step: the stepped cell's outputs and state.
    """
    from agents.cores.lstm import _MAX_PADDING, row_sequences

    T, B = 16, 12
    reset = torch.ones(T, B, dtype=torch.bool)
    reset[:, 0] = False
    assert row_sequences(reset.numpy()).padding > _MAX_PADDING
    core = make("lstm", hidden_size=8, resets="rows")
    x, state0 = torch.randn(T, B, D), random_state(core, B)
    y, final = core(x, state0, reset)
    assert_equals_cell_stepped(core, x, state0, reset, y, final)


def test_lstm_under_autocast_steps_with_its_cell_state_in_float32():
    """Under bfloat16 autocast (learner.mixed_precision) the LSTM steps its gates.

    So the cell state stays float32 (the fused kernel would run it in bfloat16), and the
    output equals the plain unroll up to bfloat16's rounding.
    """
    core = make("lstm", hidden_size=16)
    x, reset = torch.randn(6, 3, D), torch.rand(6, 3) < 0.3
    state0 = random_state(core, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, (h, c) = core(x, state0, reset)
    assert c.dtype == h.dtype == y.dtype == torch.float32
    ref, _ = core(x, state0, reset)
    torch.testing.assert_close(y, ref, atol=0.05, rtol=0)


def test_feedforward_core_is_the_identity_and_keeps_its_state():
    core = make("feedforward")
    T, B = 5, 3
    x = torch.randn(T, B, D)
    state = random_state(core, B)
    reset = torch.rand(T, B) < 0.5
    y, new_state = core(x, state, reset)
    assert core.output_size == D and list(core.parameters()) == []
    torch.testing.assert_close(y, x)
    assert all(torch.equal(a, b) for a, b in zip(new_state, state))


# ------------------------------------------------------------------------------------ MI-LSTM


def test_mi_lstm_initial_values_follow_the_paper():
    core = make("mi_lstm")
    assert torch.equal(core.alpha, torch.ones_like(core.alpha))
    assert torch.equal(core.beta1, torch.full_like(core.beta1, 0.5))
    assert torch.equal(core.beta2, torch.full_like(core.beta2, 0.5))
    assert torch.equal(core.bias, torch.zeros_like(core.bias))


def naive_mi_lstm(core, x, h, c):
    """Eq. 4 per gate, then the LSTM update; x: [T, B, D]."""
    H = core.output_size
    ys = []
    for t in range(x.shape[0]):
        pre = []
        for s in range(4):
            sl = slice(s * H, (s + 1) * H)
            Wx = x[t] @ core.weight_ih[:, sl]
            Uh = h @ core.weight_hh[:, sl]
            pre.append(core.alpha[sl] * Wx * Uh + core.beta1[sl] * Uh + core.beta2[sl] * Wx
                       + core.bias[sl])
        i, f, g, o = (torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2]),
                      torch.sigmoid(pre[3]))
        c = f * c + i * g
        h = o * torch.tanh(c)
        ys.append(h)
    return torch.stack(ys)


def test_mi_lstm_general_form_matches_eq4():
    core = make("mi_lstm", hidden_size=16)
    with torch.no_grad():
        for p in (core.alpha, core.beta1, core.beta2, core.bias):
            p.normal_()
    x, (h, c) = torch.randn(5, 3, D), random_state(core, 3)
    torch.testing.assert_close(core(x, (h, c), no_reset(5, 3))[0], naive_mi_lstm(core, x, h, c),
                               atol=1e-5, rtol=0)


def test_mi_lstm_with_additive_parameters_is_a_plain_lstm():
    core = make("mi_lstm", hidden_size=16)
    with torch.no_grad():
        core.alpha.zero_()
        core.beta1.fill_(1.0)
        core.beta2.fill_(1.0)
        core.bias.normal_()
    x, (h, c) = torch.randn(5, 3, D), random_state(core, 3)
    W, U, b = core.weight_ih, core.weight_hh, core.bias
    ys = []
    for t in range(5):  # i, f, o = sigmoid(Wx + Uh + b), g = tanh(Wx + Uh + b)
        i, f, g, o = (x[t] @ W + h @ U + b).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        ys.append(h)
    torch.testing.assert_close(core(x, random_state(core, 3), no_reset(5, 3))[0], torch.stack(ys),
                               atol=1e-5, rtol=0)


# -------------------------------------------------------------------------------------- aLSTM


def test_alstm_step_matches_the_equations():
    core = make("alstm", hidden_size=10, adaptation_size=6)
    B, H = 3, 10
    x = torch.randn(1, B, D)
    h, c, z, cz = random_state(core, B)
    y, (h1, c1, z1, cz1) = core(x, (h, c, z, cz), no_reset(1, B))
    # m's input weights for v_t = [x_t; h_{t-1}; z_{t-1}]
    Wa = torch.cat([core.adapt_ix, core.adapt_ihz])
    for b in range(B):
        # eq. 7: z_t = LSTM(v_t, z_{t-1}), v_t = [x_t; h_{t-1}]
        ga = torch.cat([x[0, b], h[b], z[b]]) @ Wa + core.adapt_bias
        ai, af, ag, ao = ga.chunk(4)
        cz_ref = torch.sigmoid(af) * cz[b] + torch.sigmoid(ai) * torch.tanh(ag)
        z_ref = torch.sigmoid(ao) * torch.tanh(cz_ref)
        pi = torch.tanh(core.policy.weight @ z_ref)  # pi^(j) = tanh(U^(j) z_t)
        D3, D1 = torch.diag(pi[:D]), torch.diag(pi[D:D + H])  # tied across gates
        rest = pi[D + H:]
        u = []
        for s in range(4):  # eq. 8 for gate s
            sl = slice(s * H, (s + 1) * H)
            D4, D2, D0 = (torch.diag(rest[j * 4 * H:(j + 1) * 4 * H][sl]) for j in range(3))
            u.append(D4 @ core.weight_ih[sl] @ D3 @ x[0, b] + D2 @ core.weight_hh[sl] @ D1 @ h[b]
                     + D0 @ core.bias[sl])
        c_ref = torch.sigmoid(u[1]) * c[b] + torch.sigmoid(u[0]) * torch.tanh(u[2])  # eq. 5
        h_ref = torch.sigmoid(u[3]) * torch.tanh(c_ref)
        for got, want in ((h1[b], h_ref), (c1[b], c_ref), (z1[b], z_ref), (cz1[b], cz_ref)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(y[0], h1)


def test_alstm_forget_bias_and_orthogonal_init():
    core = make("alstm", hidden_size=8)
    assert torch.equal(core.bias[8:16], torch.ones(8)) and core.bias[:8].abs().sum() == 0
    W = core.weight_hh  # [4H, H], orthonormal columns
    torch.testing.assert_close(W.t() @ W, torch.eye(8), atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------ scripts


def test_bench_cores_smoke(capsys):
    from scripts.papers import bench_cores

    rows = bench_cores.main(["--hidden", "12", "--input-size", "8", "--rounds", "1",
                             "--unroll", "2", "--batch-size", "2"])
    assert sorted(r["core"] for r in rows) == sorted(NAMES)
    assert "| core |" in capsys.readouterr().out


def test_alstm_parameter_matched_setting_documented_in_the_readme():
    # the docs' cores table: alstm hidden_size 204 matches lstm(256) within 1.1% behind the
    # shallow torso.
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    lstm, alstm = CORES.get("lstm")(263), CORES.get("alstm")(263, hidden_size=204)
    assert count(lstm) == 533_504 and abs(count(alstm) / count(lstm) - 1) < 0.011
    assert count(CORES.get("alstm")(263)) == 718_048  # the defaults: +35%


def test_lstm_orthogonal_init_has_orthogonal_weights_and_zero_biases():
    from agents.cores.lstm import LSTMCore

    torch.manual_seed(0)
    core = LSTMCore(263, hidden_size=64, init="orthogonal")
    for w in (core.cell.weight_ih, core.cell.weight_hh):  # [4H, D]: orthonormal rows or columns
        gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
        assert torch.allclose(gram, torch.eye(min(w.shape)), atol=1e-5)
    assert not core.cell.bias_ih.any() and not core.cell.bias_hh.any()
    assert LSTMCore(263, hidden_size=64).cell.bias_ih.any()  # torch's default keeps its biases
    with pytest.raises(ValueError, match="core_options.init must be one of torch, orthogonal"):
        LSTMCore(263, init="xavier")
