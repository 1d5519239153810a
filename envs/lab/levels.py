"""The lab30 level table: 30 MiniGrid/BabyAI levels, one per DMLab-30 level.

Each ``Level`` names the DMLab-30 level it stands in for (exact names of
``envs/data/dmlab30_random_human.csv``), its family, how to build it (a registered
MiniGrid/BabyAI id, or a class of this package with its arguments), whether the agent
gets the mission as an instruction, and which reference solver scores it
(``envs.lab.experts``). DMLab-30's seven prefixes fold into six families: skymaze's
irreversible paths join ``explore`` (both are navigation to a goal), so ``LAB6`` can take
one level per family. The table is repeated, with measured scores, in
``docs/results/data/LAB30.md``.

Instructions: as in DMLab-30, only the language levels carry one. The other levels'
missions are replaced by the empty string (all-zero tokens), so a constant mission
cannot give the task away; an agent must tell the levels apart from what it sees.

Every level is presented through ``envs.minigrid.PixelsAndInstruction``: one observation
space (``pixels`` uint8 [3, 56, 56], ``instruction`` int64 [32]) and MiniGrid's 7
actions for all 30. Each level keeps its own ``max_steps``.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field

import gymnasium as gym

from envs.lab.arena import Forage, LaserTag
from envs.lab.explore import GoalLocations, ObjectLocations, ObjectRewards, VariedLavaCrossing
from envs.lab.psychlab import ArbitraryVisuomotorMapping, ContinuousRecognition
from envs.lab.rooms import (
    AnswerQuantitativeQuestion,
    CollectGoodObjects,
    ExploitDeferredEffects,
    SelectNonmatchingObject,
    Watermaze,
)

FAMILIES = ("rooms", "language", "lasertag", "natlab", "psychlab", "explore")


@dataclass(frozen=True)
class Level:
    """One row of the table: the DMLab-30 level stood in for, how to build it, its solver."""

    dmlab: str  # the DMLab-30 level this one stands in for
    family: str  # one of FAMILIES
    build: str | type  # a registered MiniGrid/BabyAI id, or a MiniGridEnv subclass
    kwargs: dict = field(default_factory=dict)  # constructor arguments of ``build``
    instruction: bool = False  # the mission reaches the agent (language levels only)
    solver: str = "planner"  # reference solver: "babyai" (BabyAIBot) or "planner" (BFS, full state)


def _lasertag(n: int, large: bool) -> dict:
    if large:
        return dict(num_opponents=n, size=13, num_pillars=12, max_steps=150)
    return dict(num_opponents=n, size=9, num_pillars=3, max_steps=100)


LEVELS: dict[str, Level] = {
    # rooms: objects in one or two rooms
    "CollectGoodObjects": Level("rooms_collect_good_objects_test", "rooms", CollectGoodObjects),
    "ExploitDeferredEffects": Level(
        "rooms_exploit_deferred_effects_test", "rooms", ExploitDeferredEffects
    ),
    "SelectNonmatchingObject": Level(
        "rooms_select_nonmatching_object", "rooms", SelectNonmatchingObject
    ),
    "Watermaze": Level("rooms_watermaze", "rooms", Watermaze),
    "KeysDoorsPuzzle": Level(
        "rooms_keys_doors_puzzle", "rooms", "BabyAI-KeyCorridorS3R1-v0", solver="babyai"
    ),
    # language: BabyAI instructions
    "SelectDescribedObject": Level(
        "language_select_described_object", "language", "BabyAI-GoToLocalS6N3-v0",
        instruction=True, solver="babyai"
    ),
    "SelectLocatedObject": Level(
        "language_select_located_object", "language", "BabyAI-PickupLoc-v0",
        instruction=True, solver="babyai"
    ),
    "ExecuteRandomTask": Level(
        "language_execute_random_task", "language", "BabyAI-ActionObjDoor-v0",
        instruction=True, solver="babyai"
    ),
    "AnswerQuantitativeQuestion": Level(
        "language_answer_quantitative_question", "language", AnswerQuantitativeQuestion,
        instruction=True
    ),
    # lasertag: wandering opponents that tag back
    "LaserTagOneOpponentSmall": Level(
        "lasertag_one_opponent_small", "lasertag", LaserTag, _lasertag(1, False)
    ),
    "LaserTagThreeOpponentsSmall": Level(
        "lasertag_three_opponents_small", "lasertag", LaserTag, _lasertag(3, False)
    ),
    "LaserTagOneOpponentLarge": Level(
        "lasertag_one_opponent_large", "lasertag", LaserTag, _lasertag(1, True)
    ),
    "LaserTagThreeOpponentsLarge": Level(
        "lasertag_three_opponents_large", "lasertag", LaserTag, _lasertag(3, True)
    ),
    # natlab: foraging
    "ForageFixedLargeMap": Level(
        "natlab_fixed_large_map", "natlab", Forage,
        dict(size=15, num_food=15, num_rocks=20, fixed_map=True, max_steps=200),
    ),
    "ForageVaryingMapRegrowth": Level(
        "natlab_varying_map_regrowth", "natlab", Forage,
        dict(size=11, num_food=6, num_rocks=10, regrow_steps=20)
    ),
    "ForageVaryingMapRandomized": Level(
        "natlab_varying_map_randomized", "natlab", Forage, dict(size=11, num_food=10, num_rocks=10)
    ),
    # skymaze (family explore): irreversible paths = lava crossings
    "IrreversiblePathHard": Level(
        "skymaze_irreversible_path_hard", "explore", "MiniGrid-LavaCrossingS9N3-v0"
    ),
    "IrreversiblePathVaried": Level(
        "skymaze_irreversible_path_varied", "explore", VariedLavaCrossing
    ),
    # psychlab: trials with a cue and two answer pads, memory, visual search
    "ArbitraryVisuomotorMapping": Level(
        "psychlab_arbitrary_visuomotor_mapping", "psychlab", ArbitraryVisuomotorMapping
    ),
    "ContinuousRecognition": Level(
        "psychlab_continuous_recognition", "psychlab", ContinuousRecognition
    ),
    "SequentialComparison": Level(
        "psychlab_sequential_comparison", "psychlab", "MiniGrid-MemoryS7-v0"
    ),
    "VisualSearch": Level(
        "psychlab_visual_search", "psychlab", "BabyAI-GoToRedBallGrey-v0", solver="babyai"
    ),
    # explore: mazes of small rooms, redrawn per episode
    "ObjectLocationsSmall": Level("explore_object_locations_small", "explore", ObjectLocations),
    "ObjectLocationsLarge": Level(
        "explore_object_locations_large", "explore", ObjectLocations,
        dict(rooms=3, num_apples=5, max_steps=250)
    ),
    "ObstructedGoalsSmall": Level(
        "explore_obstructed_goals_small", "explore", GoalLocations, dict(obstructed=True)
    ),
    "ObstructedGoalsLarge": Level(
        "explore_obstructed_goals_large", "explore", GoalLocations,
        dict(obstructed=True, rooms=3, max_steps=250)
    ),
    "GoalLocationsSmall": Level("explore_goal_locations_small", "explore", GoalLocations),
    "GoalLocationsLarge": Level(
        "explore_goal_locations_large", "explore", GoalLocations, dict(rooms=3, max_steps=250)
    ),
    "ObjectRewardsFew": Level(
        "explore_object_rewards_few", "explore", ObjectRewards, dict(room=4, num_objects=5)
    ),
    "ObjectRewardsMany": Level(
        "explore_object_rewards_many", "explore", ObjectRewards,
        dict(room=4, num_objects=12, max_steps=200)
    ),
}

LAB30: list[str] = list(LEVELS)
"""The 30 level names, in table order (the task IDs of the lab30 suite)."""

LAB6: list[str] = [
    "CollectGoodObjects",
    "SelectDescribedObject",
    "LaserTagOneOpponentSmall",
    "ForageVaryingMapRandomized",
    "ArbitraryVisuomotorMapping",
    "ObjectLocationsSmall",
]
"""One level per family, chosen among the easiest: small maps and frequent rewards
(random play already scores, so a learner gets signal from the first updates)."""

GYM_ID = "mira/Lab30-{}-v0"


class NoInstruction(gym.ObservationWrapper):
    """Blank the mission string: non-language levels give the agent no instruction."""

    def observation(self, obs):
        """``obs`` with ``mission`` set to the empty string."""
        return {**obs, "mission": ""}


class QuietReset(gym.Wrapper):
    """Swallow the "Sampling rejected" lines BabyAI levels print while generating."""

    def reset(self, **kwargs):
        """``env.reset`` with its stdout discarded."""
        with contextlib.redirect_stdout(io.StringIO()):
            return self.env.reset(**kwargs)


def make_level(level: str, **kwargs) -> gym.Env:
    """The bare MiniGrid level (MiniGrid's dict observation, full mission string)."""
    try:
        spec = LEVELS[level]
    except KeyError:
        raise KeyError(f"unknown lab30 level {level!r}; valid levels: "
                       f"{', '.join(LEVELS)}") from None
    if isinstance(spec.build, str):
        env = gym.make(spec.build, disable_env_checker=True, **spec.kwargs, **kwargs)
        return QuietReset(env) if spec.build.startswith("BabyAI-") else env
    return spec.build(**spec.kwargs, **kwargs)


def make_lab_env(level: str, **kwargs) -> gym.Env:
    """A lab30 level as mira sees it (``PixelsAndInstruction``); entry point of ``mira/Lab30-*``."""
    from envs.minigrid import PixelsAndInstruction

    env = make_level(level, **kwargs)
    if not LEVELS[level].instruction:
        env = NoInstruction(env)
    return PixelsAndInstruction(env)


def register_envs() -> None:
    """Register ``mira/Lab30-<level>-v0`` for every level (idempotent)."""
    for name in LEVELS:
        env_id = GYM_ID.format(name)
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="envs.lab.levels:make_lab_env",
                kwargs={"level": name},
                disable_env_checker=True,
            )
