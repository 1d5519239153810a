"""lab30: a DMLab-30-like multitask suite built from MiniGrid/BabyAI that runs on a laptop.

Thirty levels, one per DMLab-30 level (Beattie et al. 2016; IMPALA, Espeholt et al. 2018;
the multitask setting of Jayakumar et al. 2020, section 6.1), in six families: rooms,
language, lasertag, natlab, psychlab, explore (skymaze folds into explore). Existing
MiniGrid/BabyAI levels stand in where one fits; the others are written here on MiniGrid's
API (``rooms``, ``arena``, ``psychlab``, ``explore``). The level table is
``levels.LEVELS`` and ``docs/results/data/LAB30.md``.

Importing this package
- registers ``mira/Lab30-<level>-v0`` with gymnasium (mira's observation: ``pixels`` uint8
  [3, 56, 56] and ``instruction`` int64 [32]; 7 actions; the level's own episode cap),
- registers the ``lab30`` and ``lab6`` suites in ``envs.suites.ENVS``,
- registers the random/reference score table with ``envs.scores`` under "lab".
"""

from envs.lab.levels import (
    FAMILIES,
    LAB6,
    LAB30,
    LEVELS,
    Level,
    make_lab_env,
    make_level,
    register_envs,
)
from envs.lab.suite import register_scores

register_envs()
register_scores()

__all__ = ["FAMILIES", "LAB6", "LAB30", "LEVELS", "Level", "make_lab_env", "make_level"]
