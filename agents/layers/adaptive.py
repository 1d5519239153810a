"""Adaptive feed-forward layer with IO-adaptation (Flennerhag et al. 2018, eq. 3).

    f(x) = D2 W D1 x + D0 b,     D_j = diag(pi_j(z)),     pi_j(z) = tanh(U_j z)   (eq. 3, section 3)

``W: [out, in]`` and ``b: [out]`` are the static "prior" the paper's section 2 talks
about; the adaptation policy rescales the input (``D1``, input adaptation), the output
(``D2``, output adaptation) and the bias (``D0``) per example. ``z`` is the latent
variable of the adaptation policy; by default it is the input itself (eq. 2's
``pi(x)``), and a caller that has its own latent model (the aLSTM's eq. 6 or 7) passes
it in. The layer does not apply an activation (the paper's eq. 2 allows none).

Initialisation follows the paper and its released code: ``W`` semi-orthogonal
(section 2.2), ``U_j`` PyTorch's default ``nn.Linear`` initialisation without bias, ``b``
zero.
"""

from __future__ import annotations

import torch
from torch import nn


class AdaptiveLinear(nn.Module):
    """``x [..., in], z [..., adapt] | None -> [..., out]`` (eq. 3)."""

    def __init__(self, in_features: int, out_features: int, adapt_features: int | None = None,
                 bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.adapt_features = in_features if adapt_features is None else adapt_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.orthogonal_(self.weight)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        # One projection for all sub-policies: [pi_1 (in) | pi_2 (out) | pi_0 (out)].
        sizes = [in_features, out_features] + ([out_features] if bias else [])
        self.sizes = sizes
        self.policy = nn.Linear(self.adapt_features, sum(sizes), bias=False)

    def adaptation(self, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The diagonals ``(d1 [..., in], d2 [..., out], d0 [..., out] | None)``."""
        parts = torch.tanh(self.policy(z)).split(self.sizes, dim=-1)
        return parts[0], parts[1], (parts[2] if self.bias is not None else None)

    def forward(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """``x [..., in]``, ``z [..., adapt]`` -> ``[..., out]``; ``z=None`` uses ``x`` (eq. 2)."""
        d1, d2, d0 = self.adaptation(x if z is None else z)
        out = d2 * ((d1 * x) @ self.weight.t())
        return out if self.bias is None else out + d0 * self.bias

    def extra_repr(self) -> str:
        """The three widths, shown by ``print(module)``."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"adapt_features={self.adapt_features}")
