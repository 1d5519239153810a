"""The bootstrap intervals of envs/statistics.py against hand computations.

Two references, at settings that are not the defaults (replicates, alpha, seed):

- the same resampling scheme written out in loops: one ``[runs, tasks]`` block of run
  indices per replicate from ``numpy.random.default_rng(seed)`` (for the probability of
  improvement, X's block, then Y's), each task's column filled from its own runs, and the
  percentiles by linear interpolation between order statistics (numpy's default); the
  interval must agree to float precision;
- a check that does not depend on the random stream: for 3 runs x 2 tasks the stratified
  bootstrap distribution of the mean has 27 x 27 equally likely replicates, all enumerated
  here; the interval's ends must sit at its ``alpha / 2`` and ``1 - alpha / 2`` quantiles up
  to Monte Carlo error. Resampling whole runs (rows) instead of each task's runs, or the
  wrong tail mass, moves them.
"""

import itertools
import math

import numpy as np
import pytest

from envs import statistics as st

SCORES = np.array([[12.0, 80.5, 3.25],
                   [47.5, 61.0, -8.0],
                   [30.25, 99.0, 14.5],
                   [5.5, 70.25, 40.0],
                   [21.0, 55.5, 9.75]])  # 5 runs x 3 tasks, no ties
REPS, ALPHA, SEED = 300, 0.2, 11


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, linear interpolation between the sorted values."""
    xs = sorted(values)
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def resample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One stratified replicate: every task's column drawn from that task's own runs."""
    runs, tasks = scores.shape
    idx = rng.integers(0, runs, size=(runs, tasks))
    out = np.empty((runs, tasks))
    for i in range(runs):
        for j in range(tasks):
            out[i, j] = scores[idx[i, j], j]
    return out


def naive_mean(s):
    return sum(sum(row) for row in s) / (len(s) * len(s[0]))


def naive_median(s):
    per_task = sorted(sum(row[j] for row in s) / len(s) for j in range(len(s[0])))
    n = len(per_task)
    return per_task[n // 2] if n % 2 else 0.5 * (per_task[n // 2 - 1] + per_task[n // 2])


def naive_iqm(s):
    flat = sorted(x for row in s for x in row)
    cut = len(flat) // 4
    kept = flat[cut : len(flat) - cut]
    return sum(kept) / len(kept)


AGGREGATES = [(st.mean, naive_mean), (st.median, naive_median), (st.iqm, naive_iqm),
              (st.capped_mean, lambda s: naive_mean(np.minimum(s, 100.0)))]


@pytest.mark.parametrize("fn,naive", AGGREGATES, ids=[f.__name__ for f, _ in AGGREGATES])
def test_stratified_interval_equals_the_hand_computation(fn, naive):
    rng = np.random.default_rng(SEED)
    replicates = [naive(resample(SCORES, rng)) for _ in range(REPS)]
    want = (naive(SCORES), percentile(replicates, 100 * ALPHA / 2),
            percentile(replicates, 100 * (1 - ALPHA / 2)))
    got = st.stratified_bootstrap_ci(SCORES, fn, reps=REPS, alpha=ALPHA, seed=SEED)
    np.testing.assert_allclose(tuple(got), want, rtol=1e-12)
    assert got.low < got.estimate < got.high


def naive_poi(x, y):
    """P(X > Y) + P(X = Y) / 2 per task over every pair of runs, then the mean over tasks."""
    tasks = x.shape[1]
    total = 0.0
    for j in range(tasks):
        wins = 0.0
        for a in x[:, j]:
            for b in y[:, j]:
                wins += 1.0 if a > b else 0.5 if a == b else 0.0
        total += wins / (x.shape[0] * y.shape[0])
    return total / tasks


def test_probability_of_improvement_interval_equals_the_hand_computation():
    x = SCORES
    y = SCORES[:4] + np.array([[-5.0, 3.0, 0.0]])  # 4 runs; one tie per task at most
    y[0, 2] = x[1, 2]  # a tie, worth one half
    rng = np.random.default_rng(SEED)
    replicates = []
    for _ in range(REPS):
        rx = resample(x, rng)  # X's runs, then Y's, independently
        ry = resample(y, rng)
        replicates.append(naive_poi(rx, ry))
    want = (naive_poi(x, y), percentile(replicates, 100 * ALPHA / 2),
            percentile(replicates, 100 * (1 - ALPHA / 2)))
    got = st.probability_of_improvement_ci(x, y, reps=REPS, alpha=ALPHA, seed=SEED)
    np.testing.assert_allclose(tuple(got), want, rtol=1e-12)


def exact_bootstrap_of_the_mean(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every stratified replicate's mean and its probability: (sorted values, probabilities)."""
    runs, tasks = scores.shape
    per_task = []
    for j in range(tasks):  # every draw of `runs` indices for this task, equally likely
        per_task.append([sum(scores[i, j] for i in draw) / runs
                         for draw in itertools.product(range(runs), repeat=runs)])
    means = [sum(combo) / tasks for combo in itertools.product(*per_task)]
    values, counts = np.unique(np.round(means, 12), return_counts=True)
    return values, counts / counts.sum()


def test_interval_ends_sit_at_the_exact_bootstrap_quantiles():
    scores = np.array([[1.0, 10.3], [4.7, 2.2], [9.1, 6.6]])
    values, probs = exact_bootstrap_of_the_mean(scores)
    cdf = np.cumsum(probs)
    alpha = 0.3
    ci = st.stratified_bootstrap_ci(scores, st.mean, reps=4000, alpha=alpha, seed=5)
    for end, mass in ((ci.low, alpha / 2), (ci.high, 1 - alpha / 2)):
        below = probs[values < end - 1e-9].sum()  # P(X < end)
        at_or_below = cdf[values <= end + 1e-9][-1]  # P(X <= end)
        # The end is a `mass` quantile of the exact distribution, up to Monte Carlo error
        # (about 0.007 in probability for 4000 replicates).
        assert below - 0.02 <= mass <= at_or_below + 0.02, (end, mass, below, at_or_below)
