"""Return targets and advantages for the learner: V-trace, GAE and n-step returns.

Pure torch functions over time-major tensors ([T, B]); no modules, no configs, no Ray.
Every function runs under ``torch.no_grad`` because its outputs are regression targets
and advantage weights: gradients must not flow through them. Inputs are never modified.

Episode ends are carried entirely by ``discounts`` (gamma * (1 - terminated), per step),
so the product of discounts, not gamma**k, cuts the recursions at a boundary. A
*truncated* step (time limit) is not a terminal: the caller adds gamma * V(final_obs) to
that step's reward and sets its discount to 0, so the target there is r + gamma * V_final.

Sources:
    IMPALA / V-trace -- Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with
    Importance Weighted Actor-Learner Architectures". Eq. 1 defines the n-step target
        v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) rho_t delta_t V,
        delta_t V = r_t + gamma V(x_{t+1}) - V(x_t),
        rho_t = min(rho_bar, pi/mu), c_i = lambda * min(c_bar, pi/mu);
    Remark 1 gives the recursive form computed here,
        v_s = V(x_s) + delta_s V + gamma c_s (v_{s+1} - V(x_{s+1})),
    and section 4.1 the policy-gradient advantage rho_s (r_s + gamma v_{s+1} - V(x_s)).
    Semantics follow deepmind/scalable_agent ``vtrace.py``.
    GAE -- Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
    Advantage Estimation", eq. 16: A_t = sum_l (gamma lambda)^l delta_{t+l}.
    Both recursions run as a scan by recursive doubling (Hillis & Steele 1986, "Data
    parallel algorithms"): log2 T rounds of whole-tensor operations instead of T steps, the
    same sums in another order (``reverse_scan``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["VTraceReturns", "GAEReturns", "vtrace", "gae"]


class VTraceReturns(NamedTuple):
    """V-trace outputs. ``vs``: [T, B] value targets; ``pg_advantages``: [T, B]."""

    vs: Tensor
    pg_advantages: Tensor


class GAEReturns(NamedTuple):
    """GAE outputs. ``advantages``: [T, B]; ``returns``: [T, B] = advantages + values."""

    advantages: Tensor
    returns: Tensor


def _check_shapes(time_major: dict[str, Tensor], bootstrap_value: Tensor) -> None:
    """Fail early with a sentence: mis-shaped inputs would otherwise broadcast silently."""
    shapes = {name: tuple(t.shape) for name, t in time_major.items()}
    first = next(iter(shapes.values()))
    if len(first) != 2 or any(s != first for s in shapes.values()):
        raise ValueError(f"expected equal [T, B] shapes for {list(shapes)}, got {shapes}")
    if tuple(bootstrap_value.shape) != first[1:]:
        raise ValueError(
            f"bootstrap_value must be [B] = {list(first[1:])}, "
            f"got {list(bootstrap_value.shape)}"
        )


def reverse_scan(deltas: Tensor, coefficients: Tensor) -> Tensor:
    """``x_t = deltas_t + coefficients_t x_{t+1}`` for every t, with ``x_T = 0``: [T, B] -> [T, B].

    By recursive doubling: after the round of shift ``s``, ``x_t`` sums the next ``2 s``
    steps' deltas, each weighted by the product of the coefficients before it, and
    ``coefficients_t`` holds the product over those steps. ``ceil(log2 T)`` rounds of a few
    whole-tensor operations (7 for T = 128) where a loop dispatches operations at every one
    of the T steps: the same as that loop up to float rounding, in a fixed number of
    operators whatever ``B``.
    """
    x, a, T = deltas, coefficients, deltas.shape[0]
    shift = 1
    while shift < T:
        x = torch.cat([torch.addcmul(x[:-shift], a[:-shift], x[shift:]), x[-shift:]])
        if 2 * shift < T:  # past the last step x is 0, so its coefficients may be too
            a = torch.cat([a[:-shift] * a[shift:], torch.zeros_like(a[-shift:])])
        shift *= 2
    return x


def _next_step(x: Tensor, bootstrap_value: Tensor) -> Tensor:
    """``x`` shifted one step forward in time, bootstrap in the last row: [T, B] -> [T, B]."""
    return torch.cat([x[1:], bootstrap_value.unsqueeze(0)], dim=0)


@torch.no_grad()
def vtrace(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    *,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages (IMPALA eq. 1, Remark 1, sec. 4.1).

    Args:
        log_rhos: [T, B] log(pi(a_t|x_t) / mu(a_t|x_t)), target over behaviour policy.
        discounts: [T, B] gamma * (1 - terminated_t); 0 cuts the recursion at step t.
        rewards: [T, B] r_t.
        values: [T, B] V(x_t) under the current value function.
        bootstrap_value: [B] V(x_T), the value of the state after the last step.
        clip_rho_threshold: rho_bar for the value target; None disables clipping.
        clip_pg_rho_threshold: rho_bar for the pg advantage; None disables clipping.
        clip_c_threshold: c_bar for the trace coefficients; None disables clipping.
        lambda_: trace decay; c_i = lambda_ * min(c_bar, rho_i) (Remark 2).

    Returns:
        VTraceReturns(vs [T, B], pg_advantages [T, B]), detached, dtype of ``values``.
    """
    _check_shapes(
        dict(log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values),
        bootstrap_value,
    )
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
    cs = rhos if clip_c_threshold is None else rhos.clamp(max=clip_c_threshold)
    cs = lambda_ * cs

    values_t_plus_1 = _next_step(values, bootstrap_value)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    # Remark 1, written for vs - V so the recursion starts from 0 past the last step:
    # vs_t - V_t = delta_t + discounts_t c_t (vs_{t+1} - V_{t+1}).
    vs = values + reverse_scan(deltas, discounts * cs)

    # Section 4.1: the advantage uses v_{s+1}, the V-trace target of the next state.
    clipped_pg_rhos = (
        rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
    )
    vs_t_plus_1 = _next_step(vs, bootstrap_value)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


@torch.no_grad()
def gae(
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    discounts: Tensor,
    *,
    lambda_: float = 0.95,
) -> GAEReturns:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16), per-step discounts.

    Computed by the recursion A_t = delta_t + discounts_t * lambda_ * A_{t+1}, with
    delta_t = r_t + discounts_t V(x_{t+1}) - V(x_t) and A_T = 0; with constant discounts
    this is eq. 16 truncated at the end of the unroll.

    Args:
        rewards: [T, B] r_t.
        values: [T, B] V(x_t).
        bootstrap_value: [B] V(x_T), the value of the state after the last step.
        discounts: [T, B] gamma * (1 - terminated_t).
        lambda_: bias/variance trade-off; 0 is the one-step TD error, 1 the Monte Carlo
            return minus V.

    Returns:
        GAEReturns(advantages [T, B], returns [T, B] = advantages + values), detached.
    """
    _check_shapes(dict(rewards=rewards, values=values, discounts=discounts), bootstrap_value)
    values_t_plus_1 = _next_step(values, bootstrap_value)
    deltas = rewards + discounts * values_t_plus_1 - values

    adv = reverse_scan(deltas, discounts * lambda_)  # A_t = delta_t + discounts_t lambda A_{t+1}
    return GAEReturns(advantages=adv, returns=adv + values)
