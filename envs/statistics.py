"""Aggregate scores and their uncertainty, for evaluation and comparison reports.

Follows Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS), and its library rliable. Every function takes a score matrix
``scores: [runs, tasks]`` (one normalised score per independent run and task, e.g. the
output of ``envs.scores.normalized_score``) and is plain numpy; there is no RL here.

- Point aggregates: ``median`` (of per-task means), ``mean``, ``iqm`` (interquartile
  mean over all runs x tasks: drop the lowest and highest 25 % of the pooled scores,
  exactly ``scipy.stats.trim_mean(scores, 0.25, axis=None)``, as rliable),
  ``capped_mean`` (DMLab-30: ``min(score, 100)`` per task, then the mean) and
  ``optimality_gap`` (mean shortfall below 100).
- ``stratified_bootstrap_ci``: percentile confidence interval of any aggregate. Each
  bootstrap replicate resamples runs with replacement *independently for every task*
  (stratified by task), so every task keeps its weight and its run count.
- ``stratified_bootstrap_groups``: the same for tasks with unequal run counts (one array of
  runs per task), with ``pooled_iqm``, ``mean_of_means`` and ``median_of_means``.
- ``probability_of_improvement``: P(X > Y), averaged over tasks, with ties counting
  one half (the Mann-Whitney U statistic divided by m*n), and ``..._ci`` for its
  interval, resampling X and Y runs independently per task.

Why not depend on rliable: rliable 1.2.0 is an sdist that pins ``arch<8``; with
Python 3.11 and numpy 2 pip resolves arch 7.2.0 plus pandas 3, and
``import rliable.library`` then fails inside arch (pandas 3 changed
``deprecate_kwarg``). It also pulls in pandas, seaborn and statsmodels for what is
about a hundred lines of numpy. Cross-checked once against rliable 1.2.0 (arch 7.2.0,
pandas 2) in a scratch environment: the point aggregates and probability of
improvement agree to float precision; bootstrap intervals agree to Monte Carlo error
(the random streams differ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

Aggregate = Callable[[np.ndarray], float]


class Interval(NamedTuple):
    """A point estimate and its ``1 - alpha`` percentile bootstrap interval."""

    estimate: float
    low: float
    high: float


def _matrix(scores: np.ndarray) -> np.ndarray:
    """Check and return ``scores`` as a float array [runs, tasks]."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.size == 0:
        raise ValueError(f"scores must be a non-empty [runs, tasks] matrix, got shape "
                         f"{scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN; drop or fill the missing runs first")
    return scores


def median(scores: np.ndarray) -> float:
    """Median over tasks of the mean over runs (rliable ``aggregate_median``)."""
    return float(np.median(_matrix(scores).mean(axis=0)))


def mean(scores: np.ndarray) -> float:
    """Mean over tasks of the mean over runs (= the mean of all scores)."""
    return float(_matrix(scores).mean(axis=0).mean())


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all run x task scores, pooled.

    Sort the ``n`` scores, drop ``floor(n / 4)`` from each end, average the rest:
    ``scipy.stats.trim_mean(scores, 0.25, axis=None)``. IQM(1..8) = mean(3..6) = 4.5.
    """
    flat = np.sort(_matrix(scores), axis=None)
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def capped_mean(scores: np.ndarray, cap: float = 100.0) -> float:
    """DMLab-30's summary: ``min(score, cap)`` per task, then the mean.

    The cap applies to each run's task score, so with several runs this is the mean
    over runs of each run's capped mean (the IMPALA paper reports one run's).
    """
    return float(np.minimum(_matrix(scores), cap).mean())


# The aggregates a compare's report can headline, by the name a compare file gives them.
AGGREGATES = {"median": median, "mean": mean, "iqm": iqm, "capped_mean": capped_mean}


def optimality_gap(scores: np.ndarray, gamma: float = 100.0) -> float:
    """Mean shortfall below ``gamma``: ``mean(gamma - min(score, gamma))``; lower is better.

    rliable's default gamma is 1 on a 0-1 scale; scores here are percentages.
    """
    return float((gamma - np.minimum(_matrix(scores), gamma)).mean())


def _percentile_interval(estimate: float, replicates: np.ndarray, alpha: float) -> Interval:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    low, high = np.percentile(replicates, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return Interval(float(estimate), float(low), float(high))


def _resample_runs(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One stratified replicate: per task, draw ``runs`` runs with replacement."""
    runs, tasks = scores.shape
    return scores[rng.integers(0, runs, size=(runs, tasks)), np.arange(tasks)]


def stratified_bootstrap_ci(
    scores: np.ndarray,
    aggregate_fn: Aggregate,
    reps: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """``aggregate_fn(scores)`` and its percentile interval from a stratified bootstrap.

    scores: [runs, tasks]. Each of ``reps`` replicates draws, for every task separately,
    ``runs`` run indices with replacement; the interval is the ``alpha/2`` and
    ``1 - alpha/2`` percentiles of the aggregate over replicates. With one run per task
    every replicate equals the data and the interval collapses to the point estimate:
    that is a statement about too few runs, not about certainty. Same seed, same result.
    """
    scores = _matrix(scores)
    rng = np.random.default_rng(seed)
    replicates = np.array([aggregate_fn(_resample_runs(scores, rng)) for _ in range(reps)])
    return _percentile_interval(aggregate_fn(scores), replicates, alpha)


def _poi_per_task(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[tasks] of P(X > Y) + 0.5 P(X = Y) over all pairs of runs of each task."""
    xs, ys = x[:, None, :], y[None, :, :]
    return (xs > ys).mean(axis=(0, 1)) + 0.5 * (xs == ys).mean(axis=(0, 1))


def _pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = _matrix(x), _matrix(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x has {x.shape[1]} tasks and y has {y.shape[1]}; they must match")
    return x, y


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """Probability that algorithm X beats Y on a task picked uniformly at random.

    x: [runs_x, tasks], y: [runs_y, tasks], tasks in the same order. Per task,
    P(X > Y) + 0.5 P(X = Y) over every pair of one X run and one Y run (the
    Mann-Whitney U statistic over runs_x * runs_y), then the mean over tasks.
    Identical score sets give 0.5; X above Y on every pair gives 1.0.
    """
    x, y = _pair(x, y)
    return float(_poi_per_task(x, y).mean())


def probability_of_improvement_ci(
    x: np.ndarray,
    y: np.ndarray,
    reps: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """``probability_of_improvement(x, y)`` with a stratified percentile bootstrap interval.

    Each replicate resamples X's runs and Y's runs independently, per task (rliable's
    ``StratifiedIndependentBootstrap``): the two algorithms' runs are not paired.
    """
    x, y = _pair(x, y)
    rng = np.random.default_rng(seed)
    replicates = np.array(
        [
            _poi_per_task(_resample_runs(x, rng), _resample_runs(y, rng)).mean()
            for _ in range(reps)
        ]
    )
    return _percentile_interval(probability_of_improvement(x, y), replicates, alpha)


# ------------------------------------------------ tasks with unequal run counts (ragged groups)


def stratified_bootstrap_groups(groups: list[np.ndarray],
                                aggregate_fn: Callable[[list[np.ndarray]], float],
                                reps: int = 2000, alpha: float = 0.05, seed: int = 0) -> Interval:
    """``aggregate_fn(groups)`` with a percentile interval resampling each group on its own.

    groups: one array of runs per task, of any lengths (a panel where a game lacks a seed).
    Each replicate draws, for every task in turn, as many of its runs with replacement as it
    has. With equal lengths this is ``stratified_bootstrap_ci`` on the ``[runs, tasks]``
    matrix (the same distribution; another random stream).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    rng = np.random.default_rng(seed)
    replicates = np.array([aggregate_fn([g[rng.integers(0, len(g), size=len(g))] for g in groups])
                           for _ in range(reps)])
    return _percentile_interval(aggregate_fn(groups), replicates, alpha)


def pooled_iqm(groups: list[np.ndarray]) -> float:
    """IQM of every run x task score, pooled (``iqm`` of the flat scores)."""
    return iqm(np.concatenate(groups)[None, :])


def mean_of_means(groups: list[np.ndarray]) -> float:
    """Mean over tasks of each task's mean over its runs (``mean`` for equal run counts)."""
    return float(np.mean([g.mean() for g in groups]))


def median_of_means(groups: list[np.ndarray]) -> float:
    """Median over tasks of each task's mean over its runs (``median``)."""
    return float(np.median([g.mean() for g in groups]))
