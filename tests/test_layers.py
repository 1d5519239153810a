"""Reference tests for agents/layers.

Each layer against its paper's formula written naively, analytic special cases (exact sums and
products), and the training helpers (clamping, regulariser, schedule). Ends with smoke runs of the
two paper scripts.
"""

import math

import pytest
import torch

from agents.layers import (
    NALU,
    NAU,
    NMU,
    AdaptiveLinear,
    MultiplicativeInteraction,
    NACAdd,
    NACMul,
    nac_init_range,
    regularizer_scale,
    sparsity_error,
)
from agents.layers.arithmetic import nac_weight_variance

DT = torch.float64
FORMS = [("full", None), ("diagonal", None), ("output_scale", None), ("low_rank", 3)]
OUT = {"diagonal": 5}  # the paper's diagonal form acts on x: out_dim = x_dim; the others map 5 -> 3


def _randomise(module, seed=0):
    """Give every parameter (including the zero-initialised interaction) random values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _mi(form, rank, x_dim=5, z_dim=4):
    return _randomise(MultiplicativeInteraction(x_dim, z_dim, OUT.get(form, 3), form=form,
                                                rank=rank).to(DT))


def _mi_reference(mi, x, z):
    """Eq. 1 literally: z^T W x + z^T U + V x + b, with the 3-tensor of the paper's footnote."""
    W = mi.bilinear_tensor()
    U, V, b = mi.z_proj.weight, mi.linear_weight(), mi.bias_vector()
    return torch.einsum("ni,ijk,nj->nk", z, W, x) + z @ U.t() + x @ V.t() + b


# --- multiplicative interaction -------------------------------------------------------

@pytest.mark.parametrize("form,rank", FORMS)
def test_mi_equals_bilinear_formula(form, rank):
    mi = _mi(form, rank)
    x, z = torch.randn(7, 5, dtype=DT), torch.randn(7, 4, dtype=DT)
    assert mi.bilinear_tensor().shape == (4, 5, OUT.get(form, 3))
    torch.testing.assert_close(mi(x, z), _mi_reference(mi, x, z))


def test_mi_diagonal_form_is_the_papers_gate_on_x():
    """Section 2, "Diagonal forms": W'(z) = z^T W + V restricted to diag(a(z)), applied to x.

    f_k = (sum_i z_i D_ik + v_k) x_k + sum_i U_ki z_i + b_k, written out with loops.
    """
    mi = _mi("diagonal", None)
    x, z = torch.randn(3, 5, dtype=DT), torch.randn(3, 4, dtype=DT)
    D, v, U, b = mi.D, mi.v, mi.z_proj.weight, mi.bias
    expected = torch.zeros(3, 5, dtype=DT)
    for n in range(3):
        for k in range(5):
            a = sum(z[n, i] * D[i, k] for i in range(4)) + v[k]
            expected[n, k] = a * x[n, k] + sum(U[k, i] * z[n, i] for i in range(4)) + b[k]
    torch.testing.assert_close(mi(x, z), expected)
    w, _ = mi.generated_weights(z)  # the generated matrix is diagonal
    torch.testing.assert_close(w, torch.diag_embed(torch.diagonal(w, dim1=-2, dim2=-1)))
    with pytest.raises(ValueError, match="out_dim must equal x_dim"):
        MultiplicativeInteraction(5, 4, 3, form="diagonal")


def test_mi_output_scale_and_low_rank_forms_from_their_parameters():
    """The two factorised forms written out with loops over their own parameters.

    ``output_scale`` (section 2, "Scales and biases"): f_k = (1 + sum_i S_ki z_i) (V x)_k +
    (U z)_k + b_k. ``low_rank`` (Figure 1's factorised 3-tensor): f_k = sum_r R_kr (P z)_r
    (Q x)_r + (V x)_k + (U z)_k + b_k.
    """
    x, z = torch.randn(3, 5, dtype=DT), torch.randn(3, 4, dtype=DT)
    scale, low = _mi("output_scale", None), _mi("low_rank", 3)
    for mi in (scale, low):
        V, b, U = mi.x_proj.weight, mi.x_proj.bias, mi.z_proj.weight
        expected = torch.zeros(3, 3, dtype=DT)
        for n in range(3):
            for k in range(3):
                vx = sum(V[k, j] * x[n, j] for j in range(5))
                uz = sum(U[k, i] * z[n, i] for i in range(4))
                if mi is scale:
                    gate = 1 + sum(mi.S[k, i] * z[n, i] for i in range(4))
                    expected[n, k] = gate * vx + uz + b[k]
                else:
                    pz = [sum(mi.P[r, i] * z[n, i] for i in range(4)) for r in range(3)]
                    qx = [sum(mi.Q[r, j] * x[n, j] for j in range(5)) for r in range(3)]
                    inter = sum(mi.R[k, r] * pz[r] * qx[r] for r in range(3))
                    expected[n, k] = inter + vx + uz + b[k]
        torch.testing.assert_close(mi(x, z), expected, msg=mi.form)


@pytest.mark.parametrize("form,rank", FORMS)
def test_mi_hypernetwork_init_is_appendix_b(form, rank):
    """Appendix B: W = Linear(out * in)(z), b' = Linear(out)(z).

    Sonnet-initialised weights (truncated normal, std 1/sqrt(fan in)) and zero biases, so the
    interaction starts non-zero.
    """
    torch.manual_seed(0)
    mi = MultiplicativeInteraction(64, 32, 64 if form == "diagonal" else 48, form=form,
                                   rank=8 if rank else None, init="hypernetwork")
    interaction = {"full": mi.W if form == "full" else None, "diagonal": getattr(mi, "D", None),
                   "output_scale": getattr(mi, "S", None), "low_rank": getattr(mi, "R", None)}[form]
    fan_in = 8 if form == "low_rank" else 32
    for weight, fan in ((interaction, fan_in), (mi.z_proj.weight, 32)):
        std = 1 / math.sqrt(fan)
        assert weight.abs().max() <= 2 * std + 1e-6 and 0.75 * std < weight.std() < std
    assert not mi.bias_vector().any()
    if form != "output_scale":
        assert not mi.linear_weight().any()  # V is the generating layer's bias
    x, z = torch.randn(8, 64), torch.randn(8, 32)
    assert not torch.allclose(mi(x, z), mi(x, torch.zeros_like(z)))


@pytest.mark.parametrize("form,rank", FORMS)
def test_mi_hypernetwork_view(form, rank):
    """Section 2: f = W'(z) x + b'(z) with W'(z) = z^T W + V and b'(z) = z^T U + b."""
    mi = _mi(form, rank)
    x, z = torch.randn(6, 5, dtype=DT), torch.randn(6, 4, dtype=DT)
    w, b = mi.generated_weights(z)
    torch.testing.assert_close(torch.einsum("nkj,nj->nk", w, x) + b, mi(x, z))


@pytest.mark.parametrize("form,rank", FORMS)
def test_mi_is_affine_in_each_argument(form, rank):
    mi = _mi(form, rank)
    x1, x2 = torch.randn(6, 5, dtype=DT), torch.randn(6, 5, dtype=DT)
    z1, z2 = torch.randn(6, 4, dtype=DT), torch.randn(6, 4, dtype=DT)
    for a in (0.3, -1.7, 2.5):
        torch.testing.assert_close(mi(a * x1 + (1 - a) * x2, z1),
                                   a * mi(x1, z1) + (1 - a) * mi(x2, z1))
        torch.testing.assert_close(mi(x1, a * z1 + (1 - a) * z2),
                                   a * mi(x1, z1) + (1 - a) * mi(x1, z2))
    # ... but not jointly: the interaction term is bilinear.
    assert not torch.allclose(mi(2 * x1, 2 * z1) - mi(x1 * 0, z1 * 0),
                              2 * (mi(x1, z1) - mi(x1 * 0, z1 * 0)))


@pytest.mark.parametrize("form,rank", FORMS)
def test_mi_starts_as_linear_layer(form, rank):
    mi = MultiplicativeInteraction(5, 4, OUT.get(form, 3), form=form, rank=rank)
    x, z = torch.randn(8, 5), torch.randn(8, 4)
    # diagonal: V = I, so x + U z + b
    expected = x @ mi.linear_weight().t() + mi.bias_vector() + mi.z_proj(z)
    torch.testing.assert_close(mi(x, z), expected)
    # ... and the interaction still receives a gradient at the first step.
    mi(x, z).pow(2).sum().backward()
    name = {"full": "W", "diagonal": "D", "output_scale": "S", "low_rank": "R"}[form]
    assert getattr(mi, name).grad.abs().sum() > 0


@pytest.mark.parametrize("form,rank", FORMS)
def test_mi_accepts_leading_dims(form, rank):
    mi = _mi(form, rank)
    x, z = torch.randn(3, 2, 5, dtype=DT), torch.randn(3, 2, 4, dtype=DT)
    out, k = mi(x, z), OUT.get(form, 3)
    assert out.shape == (3, 2, k)
    torch.testing.assert_close(out.reshape(6, k), mi(x.reshape(6, 5), z.reshape(6, 4)))


def test_mi_rejects_bad_options():
    with pytest.raises(ValueError, match="form"):
        MultiplicativeInteraction(3, 3, 3, form="cubic")
    with pytest.raises(ValueError, match="rank"):
        MultiplicativeInteraction(3, 3, 3, form="low_rank")
    with pytest.raises(ValueError, match="leading dims"):
        MultiplicativeInteraction(3, 2, 1)(torch.zeros(4, 3), torch.zeros(5, 2))


# --- NAU / NMU -------------------------------------------------------------------------

def test_nau_exact_sums_and_differences():
    nau = NAU(4, 3)
    with torch.no_grad():
        nau.weight.copy_(torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1], [1, -1, 0, -1]]))
    x = torch.tensor([[1.5, 2.25, -3.0, 10.0], [100.0, 0.5, 7.0, -2.0]], dtype=torch.float32)
    expected = torch.stack([x[:, 0] + x[:, 1], x.sum(1), x[:, 0] - x[:, 1] - x[:, 3]], dim=1)
    assert torch.equal(nau(x), expected)


def test_nmu_exact_products_and_identity():
    nmu = NMU(4, 3)
    with torch.no_grad():
        nmu.weight.copy_(torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]))
    x = torch.tensor([[1.5, 2.0, -3.0, 0.5], [-4.0, 0.25, 8.0, -2.0]])
    expected = torch.stack([x[:, 0] * x[:, 1], x.prod(1), torch.ones(2)], dim=1)
    assert torch.equal(nmu(x), expected)


def test_nmu_matches_eq13_for_soft_weights():
    nmu = NMU(5, 2).to(DT)
    x = torch.randn(4, 5, dtype=DT)
    W = nmu.weight.detach()
    expected = torch.stack([torch.stack([math.prod(W[o, i] * x[n, i] + 1 - W[o, i]
                                                   for i in range(5))
                                         for o in range(2)]) for n in range(4)])
    torch.testing.assert_close(nmu(x), expected)


def test_nau_nmu_solve_the_paper_function():
    """Section 1.1: t = (x1 + x2)(x1 + x2 + x3 + x4) with an NAU then an NMU.

    The NAU's weights are [[1,1,0,0],[1,1,1,1]], the NMU's [1,1].
    """
    nau, nmu = NAU(4, 2), NMU(2, 1)
    with torch.no_grad():
        nau.weight.copy_(torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]]))
        nmu.weight.fill_(1.0)
    x = torch.rand(16, 4) * 4 + 2
    t = (x[:, 0] + x[:, 1]) * x.sum(1)
    torch.testing.assert_close(nmu(nau(x)).squeeze(1), t)


@pytest.mark.parametrize("cls,low,high", [(NAU, -1.0, 1.0), (NMU, 0.0, 1.0)])
def test_clamping(cls, low, high):
    layer = cls(3, 2)
    raw = torch.tensor([[-3.0, 0.2, 1.5], [0.7, -0.4, 9.0]])
    with torch.no_grad():
        layer.weight.copy_(raw)
    x = torch.randn(5, 3)
    out_before = layer(x)
    layer.clamp_()
    assert torch.equal(layer.weight.detach(), raw.clamp(low, high))
    assert layer.weight.min() >= low and layer.weight.max() <= high
    # forward reads the clamped weight, so projecting the parameter changes nothing.
    torch.testing.assert_close(layer(x), out_before)


def test_regularizer_values():
    nau, nmu = NAU(2, 2), NMU(2, 2)
    with torch.no_grad():
        nau.weight.copy_(torch.tensor([[0.25, -0.75], [1.0, 0.0]]))
        nmu.weight.copy_(torch.tensor([[0.25, 0.5], [0.9, 1.0]]))
    # eq. 7: mean of min(|w|, 1 - |w|) = (0.25 + 0.25 + 0 + 0) / 4
    torch.testing.assert_close(nau.regularizer(), torch.tensor(0.125))
    # eq. 12: mean of min(w, 1 - w) = (0.25 + 0.5 + 0.1 + 0) / 4
    torch.testing.assert_close(nmu.regularizer(), torch.tensor(0.2125))
    # Out of the box the clamped weight is used: no reward for leaving [0, 1].
    with torch.no_grad():
        nmu.weight.copy_(torch.tensor([[2.0, -1.0], [1.0, 0.0]]))
    assert nmu.regularizer().item() == 0.0


def test_regularizer_scale_schedule():
    args = dict(lambda_hat=10.0, lambda_start=1000, lambda_end=3000)
    assert regularizer_scale(0, **args) == 0.0
    assert regularizer_scale(1000, **args) == 0.0
    assert regularizer_scale(2000, **args) == pytest.approx(5.0)
    assert regularizer_scale(3000, **args) == 10.0
    assert regularizer_scale(10**6, **args) == 10.0


def test_sparsity_error():
    w = torch.tensor([[1.0, -1.0, 0.0], [0.98, -0.03, 0.4]])
    assert sparsity_error(w).item() == pytest.approx(0.4)
    assert sparsity_error(torch.tensor([[1.0, 0.0, -1.0]])).item() == 0.0


def test_initialisations():
    torch.manual_seed(0)
    nmu = NMU(100, 100)
    assert nmu.weight.min() >= 0.25 and nmu.weight.max() <= 0.75
    assert abs(nmu.weight.mean().item() - 0.5) < 0.01
    nau = NAU(100, 100)
    assert nau.weight.abs().max() <= 0.5 and abs(nau.weight.mean().item()) < 0.01
    # NAC: r solves eq. 30 for the Glorot variance 2 / (fan_in + fan_out).
    r = nac_init_range(100, 100)
    assert nac_weight_variance(r) == pytest.approx(2 / 200, rel=1e-6)
    w = NACAdd(200, 200).weight.detach()
    assert w.var().item() == pytest.approx(2 / 400, rel=0.05)


@pytest.mark.parametrize("cls", [NAU, NMU, NACAdd, NACMul, NALU])
def test_stacked_weights_run_an_ensemble(cls):
    """Weights [S, out, in] broadcast against x [S, N, in]: member s equals layer s alone."""
    torch.manual_seed(0)
    layers = [cls(4, 3) for _ in range(2)]
    stacked = cls(4, 3)
    with torch.no_grad():
        for name, _ in stacked.named_parameters():
            module, _, leaf = name.rpartition(".")
            value = torch.stack([m.get_parameter(name) for m in layers])
            setattr(stacked.get_submodule(module) if module else stacked, leaf,
                    torch.nn.Parameter(value))
    x = torch.rand(2, 5, 4) + 0.5
    out = stacked(x)
    assert out.shape == (2, 5, 3)
    for s in range(2):
        torch.testing.assert_close(out[s], layers[s](x[s]))
    if hasattr(stacked, "regularizer"):
        torch.testing.assert_close(stacked.regularizer(),
                                   torch.stack([m.regularizer() for m in layers]))


# --- NAC / NALU -------------------------------------------------------------------------

def test_nac_shapes_and_weights():
    x = torch.rand(3, 7, 4) + 0.5
    add, mul = NACAdd(4, 2), NACMul(4, 2)
    assert add(x).shape == mul(x).shape == (3, 7, 2)
    W = add.weight
    assert W.shape == (2, 4) and W.abs().max() < 1
    torch.testing.assert_close(W, torch.tanh(add.W_hat) * torch.sigmoid(add.M_hat))
    torch.testing.assert_close(add(x), x @ W.t())
    torch.testing.assert_close(mul(x), torch.exp(torch.log(x.abs() + mul.eps) @ mul.weight.t()))


def test_nac_saturated_weights_compute_exact_operations():
    add, mul = NACAdd(3, 1), NACMul(3, 1, eps=0.0)
    with torch.no_grad():
        for m in (add, mul):
            m.W_hat.copy_(torch.tensor([[30.0, 30.0, -30.0]]))  # tanh -> +-1
            m.M_hat.fill_(40.0)  # sigmoid -> 1
    x = torch.tensor([[2.0, 3.0, 4.0]], dtype=torch.float32)
    torch.testing.assert_close(add(x), torch.tensor([[1.0]]))  # 2 + 3 - 4
    torch.testing.assert_close(mul(x), torch.tensor([[1.5]]))  # 2 * 3 / 4


def test_nalu_gate_mixes_the_two_paths():
    nalu = NALU(4, 3)
    x = torch.rand(5, 4) + 0.5
    g = nalu.gate(x)
    assert g.shape == (5, 3) and ((g > 0) & (g < 1)).all()
    W = nalu.weight
    add = x @ W.t()
    mul = torch.exp(torch.log(x.abs() + nalu.eps) @ W.t())
    torch.testing.assert_close(nalu(x), g * add + (1 - g) * mul)
    with torch.no_grad():  # a saturated gate selects one path
        nalu.G.fill_(50.0)
    torch.testing.assert_close(nalu(x), add)
    with torch.no_grad():
        nalu.G.fill_(-50.0)
    torch.testing.assert_close(nalu(x), mul)


# --- adaptive linear ---------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_adaptive_linear_matches_eq3(bias):
    layer = AdaptiveLinear(5, 3, adapt_features=4, bias=bias).to(DT)
    if bias:
        with torch.no_grad():
            layer.bias.normal_()
    x, z = torch.randn(6, 5, dtype=DT), torch.randn(6, 4, dtype=DT)
    U = layer.policy.weight
    U1, U2, U0 = U[:5], U[5:8], U[8:]
    out = []
    for n in range(6):  # f = D2 W D1 x + D0 b with D_j = diag(tanh(U_j z))
        D1, D2 = torch.diag(torch.tanh(U1 @ z[n])), torch.diag(torch.tanh(U2 @ z[n]))
        y = D2 @ layer.weight @ D1 @ x[n]
        if bias:
            y = y + torch.diag(torch.tanh(U0 @ z[n])) @ layer.bias
        out.append(y)
    torch.testing.assert_close(layer(x, z), torch.stack(out))


def test_adaptive_linear_defaults_to_input_policy_and_leading_dims():
    layer = AdaptiveLinear(4, 2)
    x = torch.randn(3, 2, 4)
    assert layer(x).shape == (3, 2, 2)
    torch.testing.assert_close(layer(x), layer(x, x))
    w = layer.weight.detach()
    torch.testing.assert_close(w @ w.t(), torch.eye(2), atol=1e-5, rtol=0)  # semi-orthogonal init


# --- paper scripts, smoke runs --------------------------------------------------------------

def test_toy_multitask_smoke(capsys):
    from scripts.papers import toy_multitask

    toy_multitask.main(["--tasks", "4", "--steps", "20", "--seeds", "2", "--eval-points", "50"])
    out = capsys.readouterr().out
    assert "| MI |" in out and "| multi-head MLP |" in out and "T=4" in out


def test_arithmetic_smoke(capsys):
    from scripts.papers import arithmetic

    arithmetic.main(["--seeds", "3", "--iterations", "200", "--eval-every", "100",
                     "--eval-size", "500"])
    out = capsys.readouterr().out
    for name in ("NMU", "NALU", "NAC•"):
        assert f"| {name} |" in out
    # The sparsity regulariser's ramp (eq. 15) inside the run: its loss term is exercised too.
    results = arithmetic.main(["--seeds", "2", "--iterations", "200", "--eval-every", "100",
                               "--eval-size", "200", "--lambda-start", "50", "--lambda-end", "150"])
    assert all(math.isfinite(x) for r in results.values() for x in r["sparsity"])
