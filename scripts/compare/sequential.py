"""Anytime-valid confidence sequences for the mean of bounded observations, by betting.

Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B
2023), section 4: the *hedged capital process* with *predictable plug-in* (PrPl) bets.
For observations ``x_1, x_2, ... in [0, 1]`` with a common conditional mean ``m*``, and a
candidate mean ``m``, two gamblers bet for and against ``m``::

    K+_t(m) = prod_{i<=t} (1 + lambda+_i(m) (x_i - m)),   lambda+_i(m) = min(lambda_i, c / m)
    K-_t(m) = prod_{i<=t} (1 - lambda-_i(m) (x_i - m)),   lambda-_i(m) = min(lambda_i, c / (1 - m))
    K_t(m)  = max(theta K+_t(m), (1 - theta) K-_t(m))

with the predictable bet (their eq. 26, the hedged form with log(2 / alpha))::

    lambda_i = sqrt(2 log(2 / alpha) / (sigma2_{i-1} i log(1 + i)))   (sigma2_0 = 1/4)
    mu_i     = (1/2 + sum_{j<=i} x_j) / (i + 1)
    sigma2_i = (1/4 + sum_{j<=i} (x_j - mu_j)^2) / (i + 1)

At the true mean both capital processes are nonnegative martingales, so by Ville's
inequality ``P(exists t: K_t(m*) >= 1/alpha) <= alpha``: the set
``C_t = {m : K_t(m) < 1/alpha}`` covers ``m*`` at every ``t`` at once with probability
``1 - alpha``. The interval may be read after every observation and the sampling may stop
for any reason (the data seen included) without losing that guarantee; the running
intersection of the ``C_t`` is valid too, and is what ``betting_cs`` returns.

The confseq package (0.0.11) implements this in C++ (pybind11 and Boost), which needs a
compiler; this module is plain numpy over a grid of candidate means.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

GRID = 2001  # candidate means on [0, 1]: a resolution of 5e-4 of the range
# The bets' cap: every factor of the capital stays >= 1 - c. The paper suggests 1/2 or 3/4; 3/4
# decides sooner (a paired difference of 0.2 on [-1, 1] with sd 0.3: in a median 31 seeds
# against 43 with 1/2, tests/test_sequential.py), at the same guarantee.
C = 0.75


class Sequence(NamedTuple):
    """A confidence sequence: the interval after each observation, ``[..., T]`` each."""

    estimate: np.ndarray  # running mean of the observations
    low: np.ndarray  # lower end of the (running-intersected) interval
    high: np.ndarray  # upper end


def predictable_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """The PrPl bets ``lambda_1..lambda_T`` for ``x`` [..., T] in [0, 1]: [..., T].

    ``lambda_t`` uses ``x_1..x_{t-1}`` only (predictable). The hedged process clips it per
    candidate mean ``m`` (to ``c / m`` and ``c / (1 - m)``), which keeps every factor of the
    capital at least ``1 - c``.
    """
    x = np.asarray(x, dtype=np.float64)
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    sigma2 = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1)
    # sigma2_{t-1}: the prior 1/4 before any observation
    previous = np.concatenate([np.full(x.shape[:-1] + (1,), 0.25), sigma2[..., :-1]], axis=-1)
    return np.sqrt(2.0 * np.log(2.0 / alpha) / (previous * t * np.log1p(t)))


def capital(x: np.ndarray, m: np.ndarray, alpha: float, c: float = C,
            theta: float = 0.5) -> np.ndarray:
    """The hedged capital ``K_t(m)`` for every ``t`` and candidate mean: [..., T, len(m)].

    ``x``: [..., T] in [0, 1]; ``m``: [M] candidate means in [0, 1].
    """
    x = np.asarray(x, dtype=np.float64)[..., None]  # [..., T, 1]
    m = np.asarray(m, dtype=np.float64)
    lam = predictable_bets(x[..., 0], alpha)[..., None]  # [..., T, 1]
    with np.errstate(divide="ignore"):
        up = np.minimum(lam, c / m)  # m = 0: no limit (x - m >= 0)
        down = np.minimum(lam, c / (1.0 - m))
    # Products as sums of logs: 30 factors of up to 1.5 stay finite either way, but a long
    # sequence would overflow. Factors are >= 1 - c > 0, so the logs are finite.
    log_up = np.cumsum(np.log1p(up * (x - m)), axis=-2)
    log_down = np.cumsum(np.log1p(-down * (x - m)), axis=-2)
    return np.maximum(theta * np.exp(log_up), (1.0 - theta) * np.exp(log_down))


def betting_cs(x: np.ndarray, alpha: float = 0.05, grid: int = GRID, c: float = C,
               theta: float = 0.5) -> Sequence:
    """The hedged betting confidence sequence for the mean of ``x`` [..., T] in [0, 1].

    Returns the running mean and the running intersection of ``{m : K_t(m) < 1/alpha}``
    after each observation, widened outwards by one grid step (so the grid never makes it
    narrower than the exact set). Leading axes are independent sequences (vectorised
    simulations). Observations outside [0, 1] are an error: the guarantee needs the bounds.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError("betting_cs needs at least one observation")
    if np.isnan(x).any() or x.min() < 0.0 or x.max() > 1.0:
        raise ValueError("betting_cs observations must lie in [0, 1] (rescale them with their "
                         "declared bounds first)")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    m = np.linspace(0.0, 1.0, grid)
    inside = capital(x, m, alpha, c, theta) < 1.0 / alpha  # [..., T, M]
    inside = np.logical_and.accumulate(inside, axis=-2)  # running intersection
    step = 1.0 / (grid - 1)
    some = inside.any(axis=-1)
    first = np.argmax(inside, axis=-1)
    last = grid - 1 - np.argmax(inside[..., ::-1], axis=-1)
    # An empty set (possible by chance, far less often than alpha) is reported as the point
    # estimate's cell.
    estimate = np.cumsum(x, axis=-1) / np.arange(1, x.shape[-1] + 1)
    low = np.where(some, np.clip(m[first] - step, 0.0, 1.0), estimate)
    high = np.where(some, np.clip(m[last] + step, 0.0, 1.0), estimate)
    return Sequence(estimate, low, high)


def difference_observations(a: np.ndarray, b: np.ndarray,
                            bounds: tuple[float, float]) -> np.ndarray:
    """Paired differences ``a - b`` of scores clipped to ``bounds``, rescaled to [0, 1].

    ``a - b`` lies in ``[-(hi - lo), hi - lo]`` and maps to ``x = (d / (hi - lo) + 1) / 2``:
    no difference is ``x = 1/2``.
    """
    lo, hi = bounds
    if not hi > lo:
        raise ValueError(f"bounds must be (low, high) with low < high, got {bounds}")
    d = np.clip(a, lo, hi) - np.clip(b, lo, hi)
    return (d / (hi - lo) + 1.0) / 2.0


def win_observations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each paired seed's win indicator: 1 (``a > b``), 1/2 (a tie) or 0; no bounds needed."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a > b) + 0.5 * (a == b)


def paired_difference_cs(a: np.ndarray, b: np.ndarray, bounds: tuple[float, float],
                         alpha: float = 0.05, grid: int = GRID) -> Sequence:
    """Confidence sequence for the mean paired difference ``a - b`` of scores in ``bounds``.

    ``a``, ``b``: [..., T] scores of two variants at the same seeds, in seed order; each is
    clipped to ``bounds = (lo, hi)`` and the differences rescaled to [0, 1]
    (``difference_observations``). The sequence is mapped back to differences in the scores'
    units.
    """
    span = bounds[1] - bounds[0]
    cs = betting_cs(difference_observations(a, b, bounds), alpha, grid)
    back = lambda v: (2.0 * v - 1.0) * span  # noqa: E731
    return Sequence(back(cs.estimate), back(cs.low), back(cs.high))


def win_rate_cs(a: np.ndarray, b: np.ndarray, alpha: float = 0.05,
                grid: int = GRID) -> Sequence:
    """Confidence sequence for P(a > b) + P(a = b) / 2 over paired seeds: [..., T] each.

    Each seed contributes the win indicator 1, 1/2 (a tie) or 0; no bounds are needed.
    """
    return betting_cs(win_observations(a, b), alpha, grid)


def can_still_exclude(x: np.ndarray, remaining: int, alpha: float = 0.05,
                      grid: int = GRID) -> bool:
    """Whether ``remaining`` more observations could make the sequence exclude 1/2.

    ``x``: the observations so far ([T] in [0, 1], T may be 0). Tried with the outcomes that
    push hardest from 1/2, every remaining observation at 1 and every one at 0: if neither
    excludes 1/2 by the last of them, no outcome of the observations left is taken to. That
    the two extremes are the most favourable paths is checked numerically, not proven (a
    higher observation also raises the running variance that later bets shrink by):
    ``tests/test_sequential.py`` compares them with every outcome in {0, 1/2, 1} of a few
    seeds left. The interval is a running intersection, so its last look is its narrowest.
    Used by a compare's ``settled`` rule to stop adding seeds to a pair no declared seed can
    decide.
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    for value in (0.0, 1.0):
        path = np.concatenate([x, np.full(max(remaining, 0), value)])
        if path.size == 0:
            continue
        cs = betting_cs(path, alpha, grid)
        if cs.low[-1] > 0.5 or cs.high[-1] < 0.5:
            return True
    return False


def seeds_needed(alpha: float, most: int = 1000) -> int:
    """The fewest observations after which the sequence can exclude 1/2 (all at one end)."""
    return next((n for n in range(1, most + 1) if can_still_exclude(np.zeros(0), n, alpha)),
                most + 1)
