"""scripts/compare/sequential.py: the betting confidence sequence, by hand and by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scripts.compare import sequential as sq


def _naive_capital(x: list[float], m: float, alpha: float, c: float = 0.75) -> list[float]:
    """K_t(m) after each observation, a plain loop in the paper's notation (theta = 1/2)."""
    k_up = k_down = 1.0
    sum_x = sum_sq = 0.0
    sigma2_prev, out = 0.25, []
    for t, xt in enumerate(x, start=1):
        lam = math.sqrt(2 * math.log(2 / alpha) / (sigma2_prev * t * math.log(1 + t)))
        lam_up = lam if m == 0 else min(lam, c / m)
        lam_down = lam if m == 1 else min(lam, c / (1 - m))
        k_up *= 1 + lam_up * (xt - m)
        k_down *= 1 - lam_down * (xt - m)
        out.append(max(0.5 * k_up, 0.5 * k_down))
        sum_x += xt
        mu = (0.5 + sum_x) / (t + 1)
        sum_sq += (xt - mu) ** 2
        sigma2_prev = (0.25 + sum_sq) / (t + 1)
    return out


def test_capital_matches_a_naive_loop():
    x = np.random.default_rng(0).uniform(0, 1, size=25)
    m = np.array([0.0, 0.13, 0.5, 0.77, 1.0])
    got = sq.capital(x, m, alpha=0.05)
    for j, mj in enumerate(m):
        assert got[:, j] == pytest.approx(_naive_capital(list(x), mj, 0.05), rel=1e-12)


def test_three_ones_hand_case():
    """Three observations of 1, alpha 0.05, bets capped at c = 1/2 (by hand).

    Bets: sigma2_0 = 1/4, so lambda_1 = sqrt(2 ln 40 / (ln 2 / 4)) = 6.525; mu_1 = 3/4,
    sigma2_1 = (1/4 + 1/16) / 2 = 0.15625, lambda_2 = sqrt(2 ln 40 / (0.3125 ln 3)) = 4.64;
    mu_2 = 5/6, sigma2_2 = (0.3125 + 1/36) / 3 = 0.1134, lambda_3 = 3.95. Near the lower end
    every bet is capped at c/m (c = 1/2, m = 0.17: c/m = 2.92), so
    K_3(m) = (1 + c (1 - m) / m)^3 / 2, which reaches 1/alpha = 20 at
    m = c / (40^(1/3) - 1 + c) = 0.1712. Above, K- stays below 1: the upper end is 1.
    """
    assert sq.predictable_bets(np.ones(3), 0.05) == pytest.approx([6.525, 4.636, 3.955],
                                                                   abs=1e-3)
    cs = sq.betting_cs(np.ones(3), alpha=0.05, c=0.5)
    step = 1 / (sq.GRID - 1)
    exact = 0.5 / (40 ** (1 / 3) - 1 + 0.5)
    assert exact == pytest.approx(0.17124, abs=1e-5)
    assert exact - 2 * step <= cs.low[2] <= exact and cs.high[2] == 1.0
    assert cs.low[1] < cs.low[2] and cs.estimate[-1] == 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sq.betting_cs(np.array([0.5, 1.2]))
    with pytest.raises(ValueError, match="at least one"):
        sq.betting_cs(np.zeros(0))
    with pytest.raises(ValueError, match="low < high"):
        sq.paired_difference_cs(np.ones(3), np.ones(3), (1.0, 1.0))


def _ever_excludes(x: np.ndarray, truth: float, alpha: float) -> np.ndarray:
    """[sims]: does the running-intersection interval exclude ``truth`` at some look?"""
    return (sq.capital(x, np.array([truth]), alpha)[..., 0] >= 1 / alpha).any(axis=-1)


def test_no_difference_is_excluded_at_most_alpha_of_the_time_looking_after_every_seed():
    """2,000 compares of two equal variants, a look after each of 30 seeds: <= 5% ever wrong."""
    rng = np.random.default_rng(1)
    d = np.clip(rng.normal(0.0, 0.3, size=(2000, 30)), -1, 1)  # paired differences on [-1, 1]
    x = (d + 1) / 2
    wrong = _ever_excludes(x, 0.5, 0.05)
    assert wrong.mean() <= 0.05
    # The grid intervals agree with the capital at the truth (checked on a slice).
    cs = sq.betting_cs(x[:200], alpha=0.05, grid=401)
    grid_wrong = ((cs.low > 0.5) | (cs.high < 0.5)).any(axis=-1)
    assert (grid_wrong <= wrong[:200]).all()  # widened by a grid step: never narrower
    # A worst case for a fixed-n interval: a two-point distribution at the bounds.
    coin = rng.integers(0, 2, size=(2000, 30)).astype(float)
    assert _ever_excludes(coin, 0.5, 0.05).mean() <= 0.05


def seeds_to_decide(effect: float = 0.2, sd: float = 0.3, alpha: float = 0.05,
                    sims: int = 2000, horizon: int = 80) -> np.ndarray:
    """[sims] seeds until the interval excludes "no difference" (horizon + 1: never)."""
    rng = np.random.default_rng(2)
    d = np.clip(rng.normal(effect, sd, size=(sims, horizon)), -1, 1)
    hit = sq.capital((d + 1) / 2, np.array([0.5]), alpha)[..., 0] >= 1 / alpha
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1) + 1, horizon + 1)


def test_a_true_difference_is_found_within_a_stated_number_of_seeds(capsys):
    """Mean paired difference 0.2 on [-1, 1], sd 0.3: seeds until the interval excludes 0."""
    one = seeds_to_decide(alpha=0.05)
    three = seeds_to_decide(alpha=0.05 / 3)  # one of three declared pairs (Bonferroni)
    with capsys.disabled():
        print(f"\nseeds to exclude 0 (effect 0.2, sd 0.3 on [-1, 1]): alpha 0.05 median "
              f"{np.median(one):.0f}, 90% within {np.quantile(one, 0.9):.0f}; alpha 0.05/3 "
              f"median {np.median(three):.0f}, 90% within {np.quantile(three, 0.9):.0f}")
    # A regression pin, not a derivation: measured median 31, 90% within 46 (alpha 0.05);
    # median 40, 90% within 57 (0.05 / 3). The band is wide enough for the simulation's noise
    # and narrow enough to catch a sequence that got much slower (or too fast to be valid).
    assert 20 <= np.median(one) <= 40 and np.quantile(one, 0.9) <= 50
    assert np.median(three) > np.median(one)


def test_paired_difference_and_win_rate_map_back_to_their_units():
    a = np.array([10.0, 12.0, 11.0, 15.0])
    b = np.array([9.0, 12.0, 14.0, 10.0])
    cs = sq.paired_difference_cs(a, b, (0.0, 20.0))
    assert cs.estimate[-1] == pytest.approx(np.mean(a - b))
    assert cs.low[-1] <= cs.estimate[-1] <= cs.high[-1]
    # the sequence on [0, 1] of (d / 20 + 1) / 2, mapped back: low and high at every seed
    unit = sq.betting_cs(((a - b) / 20.0 + 1.0) / 2.0)
    np.testing.assert_allclose(cs.low, 40.0 * unit.low - 20.0)
    np.testing.assert_allclose(cs.high, 40.0 * unit.high - 20.0)
    win = sq.win_rate_cs(a, b)
    assert win.estimate.tolist() == [1.0, 0.75, 0.5, 0.625]


def test_can_still_exclude_agrees_with_every_outcome_of_the_seeds_left():
    # Every win/loss sequence of the seeds left, run through the interval: a pair is called
    # undecidable exactly when none of them excludes 1/2 (the two extremes are the test's
    # shortcut, the enumeration its reference).
    import itertools

    alpha, left = 0.025, 6
    starts = ([1, 0, 0, 0, 1, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1, 0, 1], [0.5, 1, 0, 1],
              [0, 0, 0, 0, 0, 0, 1, 0], [1, 0, 1, 1, 1], [0, 1, 0, 0, 0])
    for start in starts:
        x = np.array(start, dtype=float)
        reachable = any(
            (lambda cs: cs.low[-1] > 0.5 or cs.high[-1] < 0.5)(
                sq.betting_cs(np.concatenate([x, np.array(rest, float)]), alpha))
            for rest in itertools.product((0.0, 0.5, 1.0), repeat=left))
        assert sq.can_still_exclude(x, left, alpha) == reachable, start
    # the heads study's learnt-vs-linear wins: after its fourth loss at the eighth seed, not
    # even twelve straight wins would exclude 1/2 at alpha 0.025
    wins = np.array([1, 0, 0, 0, 1, 1, 1, 0], float)
    assert sq.can_still_exclude(wins[:7], 13, 0.025) and not sq.can_still_exclude(wins, 12, 0.025)
    assert not sq.can_still_exclude(np.zeros(0), 0) and sq.can_still_exclude(np.zeros(0), 20)
    # the other side: the same record with the roles swapped needs the all-losses path
    assert sq.can_still_exclude(1 - wins[:7], 13, 0.025)
    assert not sq.can_still_exclude(1 - wins, 12, 0.025)
    # the count of seeds left matters to the seed: 1/2 can first be excluded after 8
    # observations at alpha 0.025, so 7 left cannot and 8 can
    assert not sq.can_still_exclude(np.zeros(0), 7, 0.025)
    assert sq.can_still_exclude(np.zeros(0), 8, 0.025) and sq.seeds_needed(0.025) == 8
    assert sq.seeds_needed(0.05) == 7
