"""Neural arithmetic units (Madsen & Johansen 2020) and the NALU baselines (Trask et al. 2018).

NAU, section 2.1.1: a linear layer whose weight is clamped to [-1, 1] (eq. 6)
    z_o = sum_i W_oi x_i                                                        (eq. 8)
    R_sparse = 1/(O*I) sum_oi min(|W_oi|, 1 - |W_oi|)                           (eq. 7)
NMU, section 2.1.4: weight clamped to [0, 1] (eq. 11)
    z_o = prod_i (W_oi x_i + 1 - W_oi)                                          (eq. 13)
    R_sparse = 1/(O*I) sum_oi min(W_oi, 1 - W_oi)                               (eq. 12)
Regulariser warm-up, section 2.1.6:
    lambda = lambda_hat * max(min((t - lambda_start) / (lambda_end - lambda_start), 1), 0)  (eq. 15)
Baselines, section 2 (as Madsen & Johansen restate Trask et al.):
    W = tanh(W_hat) * sigmoid(M_hat)                                            (eq. 2)
    NAC+: z = W x                                                               (eq. 3)
    NAC*: z = exp(W log(|x| + eps))                                             (eq. 4)
    NALU: z = g * NAC+(x) + (1 - g) * NAC*(x),  g = sigmoid(G x), one shared W
Sparsity error of a solution, section 4.1.1:
    E_sparsity = max_oi min(|W_oi|, |1 - |W_oi||)                               (eq. 18)

Clamping: the paper clamps the stored weight "in each iteration"; call ``clamp_()``
after every optimiser step. ``forward`` and ``regularizer`` also read the clamped
weight, so a caller that forgets still computes eq. 8/13 with an admissible weight
and the regulariser never rewards leaving the box (``1 - |W|`` < 0 outside it).

Shapes: ``x [..., in] -> [..., out]``. Weights are ``[out, in]``; a weight with extra
leading dims ``[S, out, in]`` (an ensemble of S independent layers, e.g. one per seed)
broadcasts against ``x [S, ..., in]``, and ``sparsity``/``regularizer``/``sparsity_error``
then return one value per member.

Initialisation (sections 2.1.5, appendix B): NAU is Glorot-uniform; NMU has
``E[W] = 1/2`` (neither including nor excluding an input) and the paper's
``Var[W] = 1/4`` is not reachable inside [0, 1], so both use the authors' released
choice of capping the uniform half-width (0.5 for NAU, 0.25 for NMU: U[0.25, 0.75]).
NAC weights draw ``W_hat, M_hat ~ U[-r, r]`` with ``r`` solving eq. 30,
``Var[W] = 2 / (fan_in + fan_out)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def regularizer_scale(step: float, lambda_hat: float, lambda_start: float,
                      lambda_end: float) -> float:
    """Eq. 15: zero before ``lambda_start``, linear ramp, ``lambda_hat`` after ``lambda_end``."""
    ramp = (step - lambda_start) / (lambda_end - lambda_start)
    return lambda_hat * max(min(ramp, 1.0), 0.0)


def sparsity_error(weight: torch.Tensor) -> torch.Tensor:
    """Eq. 18: the largest distance of any weight from {-1, 0, 1}, over the last two dims."""
    a = weight.abs()
    return torch.minimum(a, (1 - a).abs()).amax(dim=(-2, -1))


def nac_weight_variance(r: float) -> float:
    """Eq. 30: Var[tanh(W_hat) sigmoid(M_hat)] for W_hat, M_hat ~ U[-r, r]."""
    if r == 0:
        return 0.0
    return (1 - math.tanh(r) / r) * (r - math.tanh(r / 2)) / (2 * r)


def nac_init_range(fan_in: int, fan_out: int) -> float:
    """Solve eq. 30 for ``r`` with the Glorot target ``2 / (fan_in + fan_out)``.

    Eq. 30 tends to 1/2 as r grows, so the target is unreachable below a fan of 4;
    like the authors we floor the fan at 5. Bisection: eq. 30 increases in r.
    """
    target = 2.0 / max(fan_in + fan_out, 5)
    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if nac_weight_variance(mid) < target else (lo, mid)
    return (lo + hi) / 2


class _ClampedUnit(nn.Module):
    """What NAU and NMU share: a clamped weight ``[out, in]`` and its sparsity regulariser.

    The weight is kept in ``weight_range`` (eq. 6 / 11); the regulariser is
    ``min(|w|, 1 - |w|)`` (eq. 7 / 12; on NMU's [0, 1] box ``|w| = w``).
    """

    weight_range: tuple[float, float]

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.reset_parameters()  # each unit's own initialisation (NAU, NMU below)

    @torch.no_grad()
    def clamp_(self) -> None:
        """Project the stored weight into the box; call after each optimiser step."""
        self.weight.clamp_(*self.weight_range)

    def clamped_weight(self) -> torch.Tensor:
        return self.weight.clamp(*self.weight_range)

    @staticmethod
    def sparsity(weight: torch.Tensor) -> torch.Tensor:
        """Eq. 7 / 12 on a weight ``[..., out, in]``, averaged over its last two dims."""
        a = weight.abs()
        return torch.minimum(a, 1 - a).mean(dim=(-2, -1))

    def regularizer(self) -> torch.Tensor:
        return self.sparsity(self.clamped_weight())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class NAU(_ClampedUnit):
    """Neural addition unit: ``x [..., in] -> [..., out]``, eq. 6-8."""

    weight_range = (-1.0, 1.0)

    def reset_parameters(self) -> None:
        """Glorot-uniform with the half-width capped at 0.5, the authors' released choice."""
        r = min(0.5, math.sqrt(6.0 / (self.in_features + self.out_features)))
        nn.init.uniform_(self.weight, -r, r)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 8 with the clamped weight: ``x [..., in] -> [..., out]``."""
        return x @ self.clamped_weight().transpose(-1, -2)


class NMU(_ClampedUnit):
    """Neural multiplication unit: ``x [..., in] -> [..., out]``, eq. 11-13."""

    weight_range = (0.0, 1.0)

    def reset_parameters(self) -> None:
        """U[0.25, 0.75]: ``E[W] = 1/2``, half-width capped at 0.25 (the authors' choice)."""
        nn.init.uniform_(self.weight, 0.25, 0.75)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 13 with the clamped weight: ``x [..., in] -> [..., out]``."""
        w = self.clamped_weight().unsqueeze(-3)  # [..., 1, out, in]
        # x as [..., N, 1, in]: W x + 1 - W per (output, input) pair, then the product over inputs.
        return (w * x.unsqueeze(-2) + 1 - w).prod(dim=-1)


class _NACWeight(nn.Module):
    """The soft {-1, 0, 1} weight of eq. 2, ``W = tanh(W_hat) * sigmoid(M_hat)``."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.W_hat = nn.Parameter(torch.empty(out_features, in_features))
        self.M_hat = nn.Parameter(torch.empty(out_features, in_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r = nac_init_range(self.in_features, self.out_features)
        nn.init.uniform_(self.W_hat, -r, r)
        nn.init.uniform_(self.M_hat, -r, r)

    @property
    def weight(self) -> torch.Tensor:
        return torch.tanh(self.W_hat) * torch.sigmoid(self.M_hat)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class NACAdd(_NACWeight):
    """NAC+: ``z = W x`` with the eq. 2 weight (eq. 3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 3: ``x [..., in] -> [..., out]``."""
        return x @ self.weight.transpose(-1, -2)


class NACMul(_NACWeight):
    """NAC*: ``z = exp(W log(|x| + eps))`` (eq. 4).

    It supports division, and so the singularity near x = 0 that section 2.1.2 discusses.
    """

    def __init__(self, in_features: int, out_features: int, eps: float = 1e-7):
        super().__init__(in_features, out_features)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 4: ``x [..., in] -> [..., out]``."""
        return torch.exp(torch.log(x.abs() + self.eps) @ self.weight.transpose(-1, -2))


class NALU(nn.Module):
    """NALU (Trask et al. 2018): ``g * W x + (1 - g) * exp(W log(|x| + eps))``.

    ``g = sigmoid(G x)``; the additive and multiplicative paths share one eq. 2 weight
    as in the original. ``G`` is Glorot-uniform; there is no bias.
    """

    def __init__(self, in_features: int, out_features: int, eps: float = 1e-7):
        super().__init__()
        self.in_features, self.out_features, self.eps = in_features, out_features, eps
        self.nac = _NACWeight(in_features, out_features)
        self.G = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.xavier_uniform_(self.G)

    @property
    def weight(self) -> torch.Tensor:
        """The shared eq. 2 weight ``[out, in]``."""
        return self.nac.weight

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """``g = sigmoid(G x)``, ``[..., out]``: the weight of the additive path."""
        return torch.sigmoid(x @ self.G.transpose(-1, -2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., in] -> [..., out]``: NAC+ and NAC* mixed by the gate."""
        w = self.nac.weight.transpose(-1, -2)
        add = x @ w
        mul = torch.exp(torch.log(x.abs() + self.eps) @ w)
        g = self.gate(x)
        return g * add + (1 - g) * mul

    def extra_repr(self) -> str:
        """The widths and ``eps``, shown by ``print(module)``."""
        return f"in_features={self.in_features}, out_features={self.out_features}, eps={self.eps}"
