"""Multiplicative interaction layer M(x, z) (Jayakumar et al. 2020, eq. 1, appendix B).

    f(x, z) = z^T W x + z^T U + V x + b                                        (eq. 1)

with a 3-tensor ``W`` of shape ``[z_dim, x_dim, out_dim]`` (the paper's footnote 1:
``(z^T W x)_k = sum_ij z_i W_ijk x_j``), ``U: [out, z_dim]``, ``V: [out, x_dim]``,
``b: [out]``. Read as a hypernetwork (section 2): the context generates a weight
matrix ``W'(z) = z^T W + V`` and a bias ``b'(z) = U z + b``, and ``f = W'(z) x + b'(z)``.

Three forms, each an instance of eq. 1 (``bilinear_tensor()`` returns the 3-tensor):

- ``full``: ``W`` is a free parameter (appendix B: ``Linear(out * in)(z)`` reshaped
  into one weight matrix per example, the form the paper uses everywhere).
- ``diagonal``: FiLM-like scale and shift, ``f = (1 + S z) * (V x) + U z + b``
  (section 2, "Diagonal forms and gating"; "Scales and biases"). The generated matrix
  is ``W'(z) = diag(1 + S z) V``: diagonal in the output basis of ``V``. As eq. 1 this
  is ``W_ijk = S_ki V_kj``: for each output ``k`` a rank-one slice that shares its
  x-factor with the linear term. ``S: [out, z_dim]``.
- ``low_rank``: CP factorisation of rank ``r``, ``W_ijk = sum_r P_ri Q_rj R_kr``, so
  ``z^T W x = R((P z) * (Q x))`` (Figure 1's low-rank approximations of the 3-tensor;
  the Hadamard low-rank bilinear pooling the paper cites). ``P: [r, z_dim]``,
  ``Q: [r, x_dim]``, ``R: [out, r]``.

Initialisation: the part of each form that carries the interaction (``W``, ``S``,
``R``) starts at zero, so at initialisation ``M(x, z) = V x + U z + b`` is exactly
the concatenation baseline ``Linear([x; z])`` that the paper compares against
(section 2, first paragraph). Swapping a linear layer for an M layer then does not
change the network the optimiser starts from, only what it can reach; zero does not
stall learning because ``df/dW_ijk = z_i x_j`` (and ``df/dR = (Pz)*(Qx)``, with ``P``,
``Q`` random) is non-zero from the first step. ``V``, ``b`` and ``U`` use PyTorch's
``nn.Linear`` initialisation, as the baseline does.
"""

from __future__ import annotations

import math

import torch
from torch import nn

FORMS = ("full", "diagonal", "low_rank")


class MultiplicativeInteraction(nn.Module):
    """``M(x [..., x_dim], z [..., z_dim]) -> [..., out_dim]`` (eq. 1).

    Leading dimensions of ``x`` and ``z`` must match; they are flattened for the
    computation and restored on the output.
    """

    def __init__(self, x_dim: int, z_dim: int, out_dim: int, form: str = "full", rank: int | None = None):
        super().__init__()
        if form not in FORMS:
            raise ValueError(f"unknown multiplicative form {form!r}; choose one of {', '.join(FORMS)}")
        if form == "low_rank" and (rank is None or rank < 1):
            raise ValueError(f"form 'low_rank' needs rank >= 1, got rank={rank!r}")
        self.x_dim, self.z_dim, self.out_dim, self.form = x_dim, z_dim, out_dim, form
        self.rank = rank if form == "low_rank" else None
        self.x_proj = nn.Linear(x_dim, out_dim)  # V x + b
        self.z_proj = nn.Linear(z_dim, out_dim, bias=False)  # U z (eq. 1 writes z^T U)
        if form == "full":
            self.W = nn.Parameter(torch.zeros(z_dim, x_dim, out_dim))
        elif form == "diagonal":
            self.S = nn.Parameter(torch.zeros(out_dim, z_dim))
        else:
            # P and Q start random so that dL/dR != 0 while R = 0 (see module docstring).
            self.P = nn.Parameter(torch.randn(rank, z_dim) / math.sqrt(z_dim))
            self.Q = nn.Parameter(torch.randn(rank, x_dim) / math.sqrt(x_dim))
            self.R = nn.Parameter(torch.zeros(out_dim, rank))

    def bilinear_tensor(self) -> torch.Tensor:
        """The explicit 3-tensor ``W: [z_dim, x_dim, out_dim]`` of eq. 1 for this form,
        so that ``f = einsum('ni,ijk,nj->nk', z, W, x) + z @ U.T + x @ V.T + b`` with
        ``U = z_proj.weight``, ``V = x_proj.weight``, ``b = x_proj.bias``."""
        if self.form == "full":
            return self.W
        if self.form == "diagonal":
            return torch.einsum("ki,kj->ijk", self.S, self.x_proj.weight)
        return torch.einsum("ri,rj,kr->ijk", self.P, self.Q, self.R)

    def generated_weights(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The hypernetwork view: ``W'(z) [..., out, x_dim]`` and ``b'(z) [..., out]``."""
        w = torch.einsum("...i,ijk->...kj", z, self.bilinear_tensor()) + self.x_proj.weight
        return w, self.z_proj(z) + self.x_proj.bias

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if x.shape[:-1] != z.shape[:-1]:
            raise ValueError(f"x and z need the same leading dims, got {tuple(x.shape)} and {tuple(z.shape)}")
        lead = x.shape[:-1]
        x2, z2 = x.reshape(-1, self.x_dim), z.reshape(-1, self.z_dim)
        vx = self.x_proj(x2)  # V x + b
        uz = self.z_proj(z2)
        if self.form == "full":
            # One [N, x] @ [x, z * out] matmul, then contract z: the cost of appendix B's
            # generated matrices without materialising one [x, out] matrix per example.
            xw = (x2 @ self.W.permute(1, 0, 2).reshape(self.x_dim, -1)).view(-1, self.z_dim, self.out_dim)
            out = vx + uz + torch.einsum("ni,nik->nk", z2, xw)
        elif self.form == "diagonal":
            b = self.x_proj.bias
            out = (1.0 + z2 @ self.S.t()) * (vx - b) + b + uz
        else:
            out = vx + uz + ((z2 @ self.P.t()) * (x2 @ self.Q.t())) @ self.R.t()
        return out.reshape(*lead, self.out_dim)

    def extra_repr(self) -> str:
        rank = f", rank={self.rank}" if self.rank else ""
        return f"x_dim={self.x_dim}, z_dim={self.z_dim}, out_dim={self.out_dim}, form={self.form!r}{rank}"
