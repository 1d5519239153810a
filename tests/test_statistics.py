"""envs/statistics.py: aggregates, stratified bootstrap, probability of improvement."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from envs import statistics as st


def _scores(runs: int, tasks: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(60.0, 30.0, size=(runs, tasks))


def test_iqm_of_one_to_eight_is_mean_of_three_to_six():
    assert st.iqm(np.arange(1.0, 9.0).reshape(2, 4)) == 4.5
    assert st.iqm(np.arange(1.0, 9.0).reshape(8, 1)) == 4.5


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (3, 5), (5, 57), (7, 13), (10, 30)])
def test_iqm_matches_scipy_trim_mean(shape):
    scores = np.random.default_rng(sum(shape)).exponential(50.0, size=shape)
    expected = scipy.stats.trim_mean(scores, 0.25, axis=None)
    assert st.iqm(scores) == pytest.approx(expected, rel=1e-12)


def test_iqm_ignores_outliers():
    scores = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 1e9]])
    assert st.iqm(scores) == 4.5


def test_median_mean_capped_mean_hand_cases():
    scores = np.array([[1.0, 2.0, 30.0], [3.0, 4.0, 50.0]])  # task means 2, 3, 40
    assert st.median(scores) == 3.0
    assert st.mean(scores) == 15.0
    assert st.capped_mean(np.array([[50.0, 150.0], [100.0, 200.0]])) == 87.5
    assert st.capped_mean(np.array([[50.0, 150.0]]), cap=120.0) == 85.0
    assert st.optimality_gap(np.array([[50.0, 150.0], [100.0, 0.0]])) == 37.5


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"\[runs, tasks\]"):
        st.mean(np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        st.iqm(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="tasks"):
        st.probability_of_improvement(np.ones((3, 4)), np.ones((3, 5)))


@pytest.mark.parametrize("aggregate", [st.median, st.mean, st.iqm, st.capped_mean])
def test_bootstrap_ci_contains_point_estimate(aggregate):
    scores = _scores(runs=5)
    ci = st.stratified_bootstrap_ci(scores, aggregate, reps=500)
    assert ci.estimate == aggregate(scores)
    assert ci.low <= ci.estimate <= ci.high
    assert ci.low < ci.high


def test_bootstrap_ci_shrinks_with_more_runs():
    widths = []
    for runs in (3, 10, 50):
        ci = st.stratified_bootstrap_ci(_scores(runs, seed=runs), st.iqm, reps=500)
        widths.append(ci.high - ci.low)
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] < widths[0] / 2


def test_bootstrap_ci_deterministic_for_a_fixed_seed():
    scores = _scores(runs=5)
    a = st.stratified_bootstrap_ci(scores, st.iqm, reps=300, seed=3)
    b = st.stratified_bootstrap_ci(scores, st.iqm, reps=300, seed=3)
    c = st.stratified_bootstrap_ci(scores, st.iqm, reps=300, seed=4)
    assert a == b
    assert a != c


def test_bootstrap_ci_narrows_with_alpha():
    scores = _scores(runs=5)
    wide = st.stratified_bootstrap_ci(scores, st.mean, reps=500, alpha=0.05)
    narrow = st.stratified_bootstrap_ci(scores, st.mean, reps=500, alpha=0.5)
    assert wide.low < narrow.low <= narrow.high < wide.high


def test_bootstrap_is_stratified_by_task():
    # Task 0 always scores 0 and task 1 always 100: resampling runs within each task
    # keeps every replicate's mean at exactly 50; pooling tasks would not.
    scores = np.tile([0.0, 100.0], (4, 1))
    assert tuple(st.stratified_bootstrap_ci(scores, st.mean, reps=200)) == (50.0, 50.0, 50.0)


def test_single_run_bootstrap_collapses_to_the_estimate():
    scores = _scores(runs=1)
    ci = st.stratified_bootstrap_ci(scores, st.median, reps=50)
    assert ci.low == ci.estimate == ci.high


def test_probability_of_improvement_hand_cases():
    x = _scores(runs=5)
    assert st.probability_of_improvement(x, x) == 0.5
    assert st.probability_of_improvement(x + 1000.0, x) == 1.0
    assert st.probability_of_improvement(x, x + 1000.0) == 0.0
    # One task. Pairs (1,2) (1,2) (3,2) (3,2): X wins half.
    assert st.probability_of_improvement([[1.0], [3.0]], [[2.0], [2.0]]) == 0.5
    # Pairs (2,1) (2,0) (1,1) (1,0): 3 wins and a tie.
    assert st.probability_of_improvement([[2.0], [1.0]], [[1.0], [0.0]]) == 0.875
    # Two tasks, X dominates on one and is dominated on the other.
    assert st.probability_of_improvement([[1.0, 0.0]], [[0.0, 1.0]]) == 0.5


def test_probability_of_improvement_is_mann_whitney_and_antisymmetric():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, size=(6, 8)).astype(float)  # small integers: many ties
    y = rng.integers(0, 5, size=(4, 8)).astype(float)
    per_task = [
        scipy.stats.mannwhitneyu(x[:, t], y[:, t]).statistic / (6 * 4) for t in range(8)
    ]
    assert st.probability_of_improvement(x, y) == pytest.approx(np.mean(per_task))
    xy = st.probability_of_improvement(x, y)
    assert xy + st.probability_of_improvement(y, x) == pytest.approx(1.0)


def test_probability_of_improvement_ci():
    x, y = _scores(5, seed=1) + 10.0, _scores(6, seed=2)
    ci = st.probability_of_improvement_ci(x, y, reps=300)
    assert ci.estimate == st.probability_of_improvement(x, y)
    assert 0.0 <= ci.low <= ci.estimate <= ci.high <= 1.0
    assert ci == st.probability_of_improvement_ci(x, y, reps=300)
    assert tuple(st.probability_of_improvement_ci(x + 1000.0, y, reps=50)) == (1.0, 1.0, 1.0)
