"""Multiplicative interaction layer M(x, z) (Jayakumar et al. 2020, eq. 1, appendix B).

    f(x, z) = z^T W x + z^T U + V x + b                                        (eq. 1)

with a 3-tensor ``W`` of shape ``[z_dim, x_dim, out_dim]`` (the paper's footnote 1:
``(z^T W x)_k = sum_ij z_i W_ijk x_j``), ``U: [out, z_dim]``, ``V: [out, x_dim]``,
``b: [out]``. Read as a hypernetwork (section 2): the context generates a weight
matrix ``W'(z) = z^T W + V`` and a bias ``b'(z) = U z + b``, and ``f = W'(z) x + b'(z)``.

Four forms, each an instance of eq. 1 (``bilinear_tensor()`` returns the 3-tensor):

- ``full``: ``W`` is a free parameter (appendix B: ``Linear(out * in)(z)`` reshaped
  into one weight matrix per example, the form the paper uses everywhere).
- ``diagonal``: the paper's diagonal form (section 2, "Diagonal forms and gating
  mechanisms"): the generated matrix ``W'(z) = z^T W + V`` is restricted to a diagonal
  ``diag(a(z))`` acting on the input, so ``f = a(z) * x + U z + b`` with
  ``a(z) = D^T z + v``. As eq. 1: ``W_ijk = D_ik [j = k]`` and ``V = diag(v)``. The
  output has the size of ``x`` (``out_dim == x_dim``): a gate on ``x``, which the
  multiplicative head projects to its outputs afterwards. ``D: [z_dim, x_dim]``, ``v: [x_dim]``.
- ``output_scale``: FiLM-like scale of the linear map's output,
  ``f = (1 + S z) * (V x) + U z + b`` (section 2, "Scales and biases", one scale per
  output feature). The generated matrix is ``W'(z) = diag(1 + S z) V``: diagonal in
  the output basis of ``V``, not on ``x``. As eq. 1 this is ``W_ijk = S_ki V_kj``.
  ``S: [out, z_dim]``. (mira called this form ``diagonal`` before; it is not the paper's.)
- ``low_rank``: CP factorisation of rank ``r``, ``W_ijk = sum_r P_ri Q_rj R_kr``, so
  ``z^T W x = R((P z) * (Q x))`` (Figure 1's low-rank approximations of the 3-tensor;
  the Hadamard low-rank bilinear pooling the paper cites). ``P: [r, z_dim]``,
  ``Q: [r, x_dim]``, ``R: [out, r]``.

Initialisation (``init``):

- ``zero_interaction`` (default): the part of each form that carries the interaction
  (``W``, ``D``, ``S``, ``R``) starts at zero, so at initialisation ``M(x, z) = V x + U z + b``
  is exactly the concatenation baseline ``Linear([x; z])`` that the paper compares
  against (section 2, first paragraph; for ``diagonal``, ``v = 1``: ``f = x + U z + b``).
  Swapping a linear layer for an M layer then does not change the network the optimiser
  starts from, only what it can reach; zero does not stall learning because
  ``df/dW_ijk = z_i x_j`` is non-zero from the first step. ``V``, ``b`` and ``U`` use
  PyTorch's ``nn.Linear`` initialisation, as the baseline does.
- ``hypernetwork``: appendix B's layer as written, ``W = Linear(out * in)(z)`` and
  ``b' = Linear(out)(z)``: the two generating layers are ordinary Sonnet linear layers,
  whose weights (``W`` or ``D`` or ``S`` or ``R``, and ``U``) start from a normal
  truncated at two standard deviations with standard deviation ``1 / sqrt(fan_in)``
  and whose biases (``V`` or ``v``, and ``b``) start at zero. The interaction is then
  non-zero from the start (``output_scale`` keeps its ``V`` as ``nn.Linear`` starts it,
  since there ``V`` is not generated).
"""

from __future__ import annotations

import math
import typing
from typing import Literal

import torch
from torch import nn

# The enumerated options, declared once as types (the head's config uses them too).
Form = Literal["full", "diagonal", "output_scale", "low_rank"]
Init = Literal["zero_interaction", "hypernetwork"]
FORMS, INITS = typing.get_args(Form), typing.get_args(Init)


def _sonnet_linear_init(weight: torch.Tensor, fan_in: int) -> None:
    """Sonnet's ``Linear`` default: a normal truncated at 2 std, std = 1 / sqrt(fan_in)."""
    std = 1.0 / math.sqrt(fan_in)
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


class MultiplicativeInteraction(nn.Module):
    """``M(x [..., x_dim], z [..., z_dim]) -> [..., out_dim]`` (eq. 1).

    Leading dimensions of ``x`` and ``z`` must match; they are flattened for the
    computation and restored on the output.
    """

    def __init__(self, x_dim: int, z_dim: int, out_dim: int, form: str = "full",
                 rank: int | None = None, init: str = "zero_interaction"):
        super().__init__()
        if form not in FORMS:
            raise ValueError(f"unknown multiplicative form {form!r}; choose one of "
                             f"{', '.join(FORMS)}")
        if init not in INITS:
            raise ValueError(f"unknown multiplicative init {init!r}; choose one of "
                             f"{', '.join(INITS)}")
        if form == "low_rank" and (rank is None or rank < 1):
            raise ValueError(f"form 'low_rank' needs rank >= 1, got rank={rank!r}")
        if form == "diagonal" and out_dim != x_dim:
            raise ValueError(f"form 'diagonal' generates a diagonal matrix acting on x "
                             f"(section 2), so out_dim must equal x_dim, got out_dim={out_dim} "
                             f"and x_dim={x_dim}")
        self.x_dim, self.z_dim, self.out_dim, self.form, self.init = (
            x_dim, z_dim, out_dim, form, init)
        self.rank = rank if form == "low_rank" else None
        self.z_proj = nn.Linear(z_dim, out_dim, bias=False)  # U z (eq. 1 writes z^T U)
        if form == "diagonal":
            self.v = nn.Parameter(torch.ones(x_dim))  # V = diag(v)
            self.bias = nn.Parameter(torch.zeros(x_dim))
            self.D = nn.Parameter(torch.zeros(z_dim, x_dim))
        else:
            self.x_proj = nn.Linear(x_dim, out_dim)  # V x + b
        if form == "full":
            self.W = nn.Parameter(torch.zeros(z_dim, x_dim, out_dim))
        elif form == "output_scale":
            self.S = nn.Parameter(torch.zeros(out_dim, z_dim))
        elif form == "low_rank":
            # P and Q start random so that dL/dR != 0 while R = 0 (see module docstring).
            self.P = nn.Parameter(torch.randn(rank, z_dim) / math.sqrt(z_dim))
            self.Q = nn.Parameter(torch.randn(rank, x_dim) / math.sqrt(x_dim))
            self.R = nn.Parameter(torch.zeros(out_dim, rank))
        if init == "hypernetwork":
            self._hypernetwork_init()

    @torch.no_grad()
    def _hypernetwork_init(self) -> None:
        """Appendix B: the generating layers are ordinary (Sonnet) linear layers of ``z``."""
        _sonnet_linear_init(self.z_proj.weight, self.z_dim)  # b' = Linear(out)(z): weight U ...
        interaction = {"full": "W", "diagonal": "D", "output_scale": "S",
                       "low_rank": "R"}[self.form]
        _sonnet_linear_init(getattr(self, interaction), self.rank or self.z_dim)
        if self.form == "diagonal":
            self.v.zero_()  # ... and the biases of the generating layers (V, b) start at zero
            self.bias.zero_()
        else:
            self.x_proj.bias.zero_()
            if self.form != "output_scale":
                self.x_proj.weight.zero_()

    def linear_weight(self) -> torch.Tensor:
        """``V: [out, x_dim]`` of eq. 1."""
        return torch.diag(self.v) if self.form == "diagonal" else self.x_proj.weight

    def bias_vector(self) -> torch.Tensor:
        """``b: [out]`` of eq. 1."""
        return self.bias if self.form == "diagonal" else self.x_proj.bias

    def bilinear_tensor(self) -> torch.Tensor:
        """The explicit 3-tensor ``W: [z_dim, x_dim, out_dim]`` of eq. 1 for this form.

        With it, ``f = einsum('ni,ijk,nj->nk', z, W, x) + z @ U.T + x @ V.T + b`` with
        ``U = z_proj.weight``, ``V = linear_weight()``, ``b = bias_vector()``.
        """
        if self.form == "full":
            return self.W
        if self.form == "diagonal":
            eye = torch.eye(self.x_dim, dtype=self.D.dtype, device=self.D.device)
            return torch.einsum("ik,jk->ijk", self.D, eye)
        if self.form == "output_scale":
            return torch.einsum("ki,kj->ijk", self.S, self.x_proj.weight)
        return torch.einsum("ri,rj,kr->ijk", self.P, self.Q, self.R)

    def generated_weights(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The hypernetwork view: ``W'(z) [..., out, x_dim]`` and ``b'(z) [..., out]``."""
        w = torch.einsum("...i,ijk->...kj", z, self.bilinear_tensor()) + self.linear_weight()
        return w, self.z_proj(z) + self.bias_vector()

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Eq. 1: ``x [..., x_dim]``, ``z [..., z_dim]`` (same leading dims) -> ``[..., out]``."""
        if x.shape[:-1] != z.shape[:-1]:
            raise ValueError(f"x and z need the same leading dims, got {tuple(x.shape)} and "
                             f"{tuple(z.shape)}")
        lead = x.shape[:-1]
        x2, z2 = x.reshape(-1, self.x_dim), z.reshape(-1, self.z_dim)
        uz = self.z_proj(z2)
        if self.form == "diagonal":  # a(z) * x + U z + b, a(z) = D^T z + v
            return ((z2 @ self.D + self.v) * x2 + uz + self.bias).reshape(*lead, self.out_dim)
        vx = self.x_proj(x2)  # V x + b
        if self.form == "full":
            # One [N, x] @ [x, z * out] matmul, then contract z: the cost of appendix B's
            # generated matrices without materialising one [x, out] matrix per example.
            xw = (x2 @ self.W.permute(1, 0, 2).reshape(self.x_dim, -1)).view(
                -1, self.z_dim, self.out_dim)
            out = vx + uz + torch.einsum("ni,nik->nk", z2, xw)
        elif self.form == "output_scale":
            b = self.x_proj.bias
            out = (1.0 + z2 @ self.S.t()) * (vx - b) + b + uz
        else:
            out = vx + uz + ((z2 @ self.P.t()) * (x2 @ self.Q.t())) @ self.R.t()
        return out.reshape(*lead, self.out_dim)

    def extra_repr(self) -> str:
        """The sizes, form, rank (low_rank only) and init, shown by ``print(module)``."""
        rank = f", rank={self.rank}" if self.rank else ""
        return (f"x_dim={self.x_dim}, z_dim={self.z_dim}, out_dim={self.out_dim}, "
                f"form={self.form!r}{rank}, init={self.init!r}")
