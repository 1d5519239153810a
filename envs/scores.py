"""Reference score tables and score normalisation.

A normalised score puts a raw episode return on a per-task scale where 0 is the
reference "low" policy (uniform random) and 100 the reference "high" one:

    normalised = 100 * (score - random) / (reference - random)

For Atari-57 and DMLab-30 the reference is a human tester, and the score is called
*human-normalised* (Mnih et al. 2015; Wang et al. 2016; IMPALA, Espeholt et al. 2018).
DMLab-30 results are usually summarised with the *capped* mean: ``min(score, 100)`` per
level, then the mean over levels (``capped_mean`` in ``envs/statistics.py``).

Tables (``envs/data/``, sources in ``envs/data/README.md``), loaded as package data:
- ``ATARI57``: game -> (random, human), ALE game names ("Pong", "MontezumaRevenge"),
  from deepmind/dqn_zoo ``atari_data.py``.
- ``DMLAB30``: level -> (random, human), from deepmind/scalable_agent ``dmlab30.py``.

VideoPinball discrepancy: this table (like dqn_zoo and the Nature DQN paper) uses
random = 16256.9, while Agent57's table (Badia et al. 2020) uses random = 0.0; it is
the only game where the two differ. Both give 100 at the human score 17667.9, but here
the human-random gap is 1411.0 instead of 17667.9, so the slope is 12.5x steeper: a raw
500,000 normalises to 34,284 % here vs 2,830 % with random = 0, and a raw 0 to -1,152 %
vs 0 %. One strong VideoPinball run can move a 57-game *mean* by hundreds of points;
medians and IQMs barely move. Say which table a reported mean used.

Suites are a small registry so that another suite brings its own table: e.g. a
MiniGrid-based "lab" suite calls ``register_reference_scores("lab", {task: (random,
reference)})`` once at import and then uses ``normalized_score("lab", task, score)``.
Its scores are labelled "reference-normalised" (``score_name``); Atari's and DMLab's
are "human-normalised". Registered suites: "atari" (ATARI57) and "dmlab30" (DMLAB30).

Task names are matched tolerantly, so env ids work directly: a leading namespace
("ALE/"), a version suffix ("-v5"), the old gym suffixes "NoFrameskip" and
"Deterministic", case, "_", "-" and spaces are ignored. "Pong", "ALE/Pong-v5",
"PongNoFrameskip-v4", "pong" and "PONG" are one game; "private_eye" is "PrivateEye".
Two names of one suite that become equal this way are refused at registration.
"""

from __future__ import annotations

import csv
import importlib.resources
import io
import re
from dataclasses import dataclass

HUMAN_NORMALISED = "human-normalised"
REFERENCE_NORMALISED = "reference-normalised"


def _read_table(filename: str) -> dict[str, tuple[float, float]]:
    """``envs/data/<filename>`` (columns: name, random, human) -> {name: (random, human)}."""
    text = (importlib.resources.files("envs") / "data" / filename).read_text(encoding="utf-8")
    rows = csv.reader(io.StringIO(text))
    next(rows)  # header
    return {name: (float(low), float(high)) for name, low, high in rows}


ATARI57: dict[str, tuple[float, float]] = _read_table("atari57_random_human.csv")
"""ALE game name -> (random score, human score), 57 games."""

DMLAB30: dict[str, tuple[float, float]] = _read_table("dmlab30_random_human.csv")
"""DMLab-30 level -> (random score, human score), 30 levels (two scored as ``_test``)."""

# Two DMLab-30 levels are trained on a ``_train`` variant and scored on ``_test``
# (scalable_agent's LEVEL_MAPPING); a score reported under the training name is
# looked up in the test row.
_DMLAB30_ALIASES = {
    "rooms_collect_good_objects_train": "rooms_collect_good_objects_test",
    "rooms_exploit_deferred_effects_train": "rooms_exploit_deferred_effects_test",
}

_VERSION = re.compile(r"-v\d+$", re.IGNORECASE)
_GYM_SUFFIX = re.compile(r"(noframeskip|deterministic)$")


def _key(name: str) -> str:
    """Spelling-insensitive key: 'ALE/Private_Eye-v5' -> 'privateeye'."""
    name = _VERSION.sub("", name.strip().rsplit("/", 1)[-1])
    name = re.sub(r"[\s_\-]", "", name.lower())
    return _GYM_SUFFIX.sub("", name)


@dataclass(frozen=True)
class _Suite:
    table: dict[str, tuple[float, float]]  # canonical name -> (low, high)
    keys: dict[str, str]  # _key(name or alias) -> canonical name
    score_name: str


_SUITES: dict[str, _Suite] = {}


def register_reference_scores(
    suite: str,
    table: dict[str, tuple[float, float]],
    *,
    score_name: str = REFERENCE_NORMALISED,
    aliases: dict[str, str] | None = None,
) -> None:
    """Add a suite's reference table: ``{task: (random, reference)}``.

    ``score_name`` labels the normalised scores in reports ("reference-normalised" by
    default). ``aliases`` maps extra names to table names. Fails on a suite registered
    twice, a task whose random and reference scores are equal, or two names that the
    tolerant matching cannot tell apart.
    """
    if suite in _SUITES:
        raise ValueError(f"reference scores for suite {suite!r} are registered twice")
    table = {name: (float(low), float(high)) for name, (low, high) in table.items()}
    keys: dict[str, str] = {}
    for name, target in [(n, n) for n in table] + list((aliases or {}).items()):
        if target not in table:
            raise ValueError(f"alias {name!r} of suite {suite!r} names unknown task {target!r}")
        if keys.get(_key(name), target) != target:
            raise ValueError(
                f"suite {suite!r}: {name!r} and {keys[_key(name)]!r} are the same name "
                "once case, '_', '-' and version suffixes are ignored; rename one"
            )
        keys[_key(name)] = target
    for name, (low, high) in table.items():
        if low == high:
            raise ValueError(f"suite {suite!r}, task {name!r}: random == reference == {low}")
    _SUITES[suite] = _Suite(table=table, keys=keys, score_name=score_name)


def _suite(suite: str) -> _Suite:
    try:
        return _SUITES[suite]
    except KeyError:
        raise KeyError(
            f"no reference scores for suite {suite!r}; registered suites: "
            f"{', '.join(sorted(_SUITES))}"
        ) from None


def has_reference_scores(suite: str) -> bool:
    """Whether ``suite`` has a registered table (a suite without one reports raw returns)."""
    return suite in _SUITES


def score_name(suite: str) -> str:
    """What a suite's normalised score is called.

    "human-normalised" for Atari and DMLab-30, "reference-normalised" for suites
    registered with their own table.
    """
    return _suite(suite).score_name


def canonical_task(suite: str, task: str) -> str:
    """The table's name for ``task`` ('ALE/Pong-v5' -> 'Pong'); KeyError lists valid names."""
    s = _suite(suite)
    try:
        return s.keys[_key(task)]
    except KeyError:
        raise KeyError(
            f"unknown {suite} task {task!r}; valid names: {', '.join(sorted(s.table))}"
        ) from None


def reference_scores(suite: str, task: str) -> tuple[float, float]:
    """``(random, reference)`` for a task of a registered suite."""
    return _suite(suite).table[canonical_task(suite, task)]


def normalized(score: float, low: float, high: float) -> float:
    """``100 * (score - low) / (high - low)``: 0 at ``low``, 100 at ``high``."""
    if high == low:
        raise ValueError(f"cannot normalise: low == high == {low}")
    return 100.0 * (score - low) / (high - low)


def normalized_score(suite: str, task: str, score: float) -> float:
    """A raw return on ``task`` of ``suite`` as a percentage of its reference score."""
    low, high = reference_scores(suite, task)
    return normalized(score, low, high)


def human_normalized(game: str, score: float) -> float:
    """Atari-57 human-normalised score in percent (100 = human, 0 = random).

    ``game`` is any tolerant spelling: "Pong", "ALE/Pong-v5", "pong", "private_eye".
    Uses this package's table, i.e. VideoPinball random = 16256.9 (see module doc).
    """
    return normalized_score("atari", game, score)


register_reference_scores("atari", ATARI57, score_name=HUMAN_NORMALISED)
register_reference_scores(
    "dmlab30", DMLAB30, score_name=HUMAN_NORMALISED, aliases=_DMLAB30_ALIASES
)
