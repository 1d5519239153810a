"""The ``lab30`` and ``lab6`` suites (``env.suite`` in a config) and their score table.

Task IDs index ``envs.lab.levels.LAB30`` (or ``LAB6``); ``make(task, seed)`` builds the
level as mira sees it, wrapped in ``RecordEpisodeStatistics`` and reset with ``seed``,
like the minigrid suite. Scores normalise under the suite key "lab": random and
reference returns per level from ``envs/data/lab30_scores.csv`` (written by
``python -m scripts.papers.lab_scores``), registered with ``envs.scores`` as
"reference-normalised" scores: ``100 * (score - random) / (reference - random)``.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import io
from dataclasses import dataclass

import gymnasium as gym
from gymnasium.wrappers import RecordEpisodeStatistics

from envs.lab.levels import GYM_ID, LAB6, LAB30, make_lab_env
from envs.suites import EnvConfig, SuiteSpec, register_suite

SCORE_SUITE = "lab"
SCORES_CSV = "lab30_scores.csv"
SCORE_COLUMNS = (
    "level", "dmlab_level", "family", "random", "reference", "reference_solver", "episodes",
    "success_rate",
)


@dataclass(frozen=True)
class LabOptions(EnvConfig):
    """The ``env`` section for suites ``lab30`` and ``lab6``: no option besides the suite."""

    suite: str = "lab30"  # which suite: a name in envs.ENVS (minigrid, atari, lab30, lab6)


def _make_lab(levels: tuple[str, ...], task: int, seed: int) -> gym.Env:
    env = RecordEpisodeStatistics(make_lab_env(levels[task]))
    env.reset(seed=seed)
    return env


@register_suite("lab30", LabOptions)
def lab30_suite(cfg: LabOptions) -> SuiteSpec:
    """All 30 lab30 levels as tasks, in ``LAB30`` order; 7 actions, scores under "lab"."""
    return SuiteSpec(list(LAB30), functools.partial(_make_lab, tuple(LAB30)), 7, SCORE_SUITE)


@register_suite("lab6", LabOptions)
def lab6_suite(cfg: LabOptions) -> SuiteSpec:
    """The six ``LAB6`` levels (one per family) as tasks; 7 actions, scores under "lab"."""
    return SuiteSpec(list(LAB6), functools.partial(_make_lab, tuple(LAB6)), 7, SCORE_SUITE)


def read_scores() -> list[dict[str, str]] | None:
    """Rows of ``envs/data/lab30_scores.csv``, or None before the scores were measured."""
    path = importlib.resources.files("envs") / "data" / SCORES_CSV
    if not path.is_file():
        return None
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def register_scores() -> bool:
    """Register the lab30 table with ``envs.scores`` under "lab"; False if no CSV yet.

    Gym ids ("mira/Lab30-Watermaze-v0") are accepted as aliases of the level names.
    """
    from envs import scores

    try:
        scores.score_name(SCORE_SUITE)
        return True  # already registered (the table is read once per process)
    except KeyError:
        pass
    rows = read_scores()
    if rows is None:
        return False
    table = {row["level"]: (float(row["random"]), float(row["reference"])) for row in rows}
    aliases = {GYM_ID.format(name): name for name in table}
    scores.register_reference_scores(SCORE_SUITE, table, aliases=aliases)
    return True
