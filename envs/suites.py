"""Suites: what a config's ``env`` section names, and how runners build its envs.

A suite turns the ``env`` config into a ``SuiteSpec``: the list of tasks (one task per
level or game; the task index is the task ID every trajectory carries), a picklable
factory ``make(task_index, seed) -> gym.Env`` with mira's observation dict, the number
of actions shared by all tasks, and the name under which scores are normalised.
``ENVS`` maps ``env.suite`` to a ``Suite``: the function that builds the spec, its options
(a subclass of ``EnvConfig``: the keys of the ``env`` section it reads) and what else the
code outside the suite asks of it (how a config names its tasks, how to check those names,
its own combination rules, its evaluation protocols, its video rate). A new suite is one
function registered with ``register_suite``; nothing outside it names the suite.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import gymnasium as gym
from gymnasium.wrappers import RecordEpisodeStatistics

from agents.registry import Registry, ranged


@dataclass(frozen=True)
class EnvConfig:
    """The ``env`` section of a config: the suite, then that suite's own options.

    Each suite declares its options as a subclass (``MiniGridOptions``, ``AtariOptions``,
    ``envs.lab.suite.LabOptions``) registered with it (``register_suite``); the section is
    an instance of the chosen suite's class, so a key the suite never reads is not a field
    of it. ``EnvConfig(suite=..., **options)`` builds the class that ``suite`` names.
    """

    suite: str = "minigrid"  # which suite: a name in envs.ENVS (minigrid, atari, lab30, lab6)

    def __new__(cls, *args, **kwargs):
        """The options class of ``suite`` when called on ``EnvConfig`` itself; else ``cls``."""
        if cls is EnvConfig:
            cls = suite_options(args[0] if args else kwargs.get("suite", "minigrid"))
        return super().__new__(cls)


@dataclass(frozen=True)
class MiniGridOptions(EnvConfig):
    """The ``env`` section for suite ``minigrid``: MiniGrid/BabyAI levels, one task each."""

    level: str = "MiniGrid-Empty-5x5-v0"  # MiniGrid/BabyAI env id
    # several MiniGrid ids, one task each (replaces level)
    levels: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AtariOptions(EnvConfig):
    """The ``env`` section for suite ``atari``: the games, the protocol and the emulator."""

    suite: str = "atari"  # which suite: a name in envs.ENVS (minigrid, atari, lab30, lab6)
    game: str = "Pong"  # ALE game name
    # several games, one task each (replaces game; full action set)
    games: list[str] = field(default_factory=list)
    # Atari protocol: dqn (no-op starts) or machado (sticky actions, full action set)
    protocol: Literal["dqn", "machado"] = "dqn"
    episodic_life: bool = False  # a life loss ends the learning episode (PPO preset)
    max_episode_frames: int = ranged(108_000, 1)  # episode cap in emulator frames (30 min of play)
    frame_stack: int = ranged(4, 1)  # frames stacked into one observation
    # force the 18-action set on/off (None: the protocol's; multitask: on)
    full_action_space: bool | None = None
    # ale_vector (ale-py's C++ vector env) or gymnasium (one wrapped env per env)
    backend: Literal["ale_vector", "gymnasium"] = "ale_vector"
    ale_threads: int = ranged(1, 1)  # ale_vector: emulator threads per runner (1: its one CPU)


@dataclass
class SuiteSpec:
    """A built suite: its tasks, a picklable env factory, the action count and score table."""

    tasks: list[str]  # task names; the index is the task ID
    make: Callable[[int, int], gym.Env]  # (task_index, seed) -> env; picklable
    num_actions: int
    score_suite: str  # key for envs.scores normalisation ("atari", "lab", or "none")
    frames_per_step: int = 1  # environment frames per agent step (Atari: the frame skip, 4)
    # (tasks, seeds) -> batch with GymBatch's interface; None: a GymBatch of make(task, seed)
    make_batch: Callable[[list[int], list[int]], object] | None = None


BACKENDS = ("ale_vector", "gymnasium")  # env.backend's values (suite atari)


@dataclass(frozen=True)
class Suite:
    """One ``ENVS`` entry: a suite's builder and what it declares about itself.

    Code outside the suite asks these instead of comparing ``env.suite`` with a name.
    """

    build: Callable[[EnvConfig], SuiteSpec]  # the suite's options -> its SuiteSpec
    Options: type[EnvConfig]  # the env section's class (the keys the suite reads)
    # options -> (config key, task names) when the config names the tasks (levels, games);
    # None: a fixed task list, counted by building the suite
    named_tasks: Callable[[EnvConfig], tuple[str, list[str]]] | None = None
    # () -> (gymnasium id pattern, valid task names): checks named tasks before any env is
    # built, a typo answered with close names; None: not checked
    known_ids: Callable[[], tuple[str, list[str]]] | None = None
    # options -> a sentence saying what to change, or None: the suite's own combination rules
    check: Callable[[EnvConfig], str | None] | None = None
    # (options, protocol) -> the env overrides that evaluate a run under another protocol
    # (``mira evaluate --protocol``); None: the suite has no protocols
    protocol_overrides: Callable[[EnvConfig, str], list[str]] | None = None
    video_fps: int = 8  # frames per second of a recorded episode (one frame per agent step)

    def __call__(self, cfg: EnvConfig) -> SuiteSpec:
        """The ``SuiteSpec`` of these options."""
        return self.build(cfg)


ENVS: Registry[Suite] = Registry("env suite")


def register_suite(name: str, options: type[EnvConfig], **declared):
    """Decorator: register a suite function as ``name``; its env section is ``options``.

    The function takes an ``options`` instance and returns a ``SuiteSpec``; ``declared``
    are the ``Suite`` fields it sets besides (``named_tasks``, ``check``, ...). Returns the
    function unchanged.
    """
    if not (isinstance(options, type) and issubclass(options, EnvConfig)
            and options is not EnvConfig):
        raise TypeError(f"suite {name!r}: its options must be a subclass of EnvConfig")

    def add(fn):
        ENVS.register(name)(Suite(fn, options, **declared))
        return fn

    return add


def suite_options(name: str) -> type[EnvConfig]:
    """The options class of suite ``name``; KeyError naming the valid suites otherwise.

    The lab suites are registered by then: importing ``envs.suites`` imports the ``envs``
    package first, which registers them.
    """
    return ENVS.get(name).Options


def _make_minigrid(level_ids: list[str], task: int, seed: int) -> gym.Env:
    from envs.minigrid import make_minigrid

    env = RecordEpisodeStatistics(make_minigrid(level_ids[task]))
    env.reset(seed=seed)
    return env


def _make_atari(cfg: AtariOptions, games: list[str], full_action_space: bool | None, task: int,
                seed: int) -> gym.Env:
    from envs.atari import make_atari

    env = make_atari(
        games[task],
        cfg.protocol,
        full_action_space=full_action_space,
        episodic_life=cfg.episodic_life,
        max_episode_frames=cfg.max_episode_frames,
        frame_stack=cfg.frame_stack,
    )
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def _atari_batch(cfg: AtariOptions, games: list[str], full_action_space: bool | None,
                 tasks: list[int], seeds: list[int]):
    from envs.atari import AleVectorBatch

    return AleVectorBatch(games, tasks, seeds, cfg.protocol, full_action_space=full_action_space,
                          episodic_life=cfg.episodic_life,
                          max_episode_frames=cfg.max_episode_frames, frame_stack=cfg.frame_stack,
                          num_threads=cfg.ale_threads)


def make_batch(suite: SuiteSpec, tasks: list[int], seeds: list[int]):
    """The batch of envs a runner steps: env ``i`` plays ``tasks[i]``, seeded ``seeds[i]``."""
    from envs.batch import GymBatch

    if suite.make_batch is not None:
        return suite.make_batch(tasks, seeds)
    return GymBatch([suite.make(task, seed) for task, seed in zip(tasks, seeds)])


def config_tasks(cfg: EnvConfig) -> tuple[str, list[str]] | None:
    """(config key, task ids) of the suites whose tasks the config names.

    minigrid: levels, atari: games; None for suites with a fixed task list
    (``Suite.named_tasks``).
    """
    named = ENVS.get(cfg.suite).named_tasks
    return None if named is None else named(cfg)


def _minigrid_tasks(cfg: MiniGridOptions) -> tuple[str, list[str]]:
    return ("env.levels", list(cfg.levels)) if cfg.levels else ("env.level", [cfg.level])


def _minigrid_ids() -> tuple[str, list[str]]:
    import minigrid  # noqa: F401  (registers MiniGrid-* and BabyAI-*)

    return "{}", sorted(k for k in gym.registry if k.startswith(("MiniGrid-", "BabyAI-")))


@register_suite("minigrid", MiniGridOptions, named_tasks=_minigrid_tasks,
                known_ids=_minigrid_ids)
def minigrid_suite(cfg: MiniGridOptions) -> SuiteSpec:
    """MiniGrid/BabyAI levels as tasks: 7 actions, raw returns (no score table)."""
    levels = config_tasks(cfg)[1]
    return SuiteSpec(levels, functools.partial(_make_minigrid, levels), 7, "none")


def _atari_tasks(cfg: AtariOptions) -> tuple[str, list[str]]:
    return ("env.games", list(cfg.games)) if cfg.games else ("env.game", [cfg.game])


def _ale_ids() -> tuple[str, list[str]]:
    import ale_py

    gym.register_envs(ale_py)
    return "ALE/{}-v5", sorted(k[4:-3] for k in gym.registry
                               if k.startswith("ALE/") and k.endswith("-v5"))


def _atari_check(cfg: AtariOptions) -> str | None:
    if len(_atari_tasks(cfg)[1]) > 1 and cfg.full_action_space is False:
        return "env.full_action_space=false: multitask Atari needs one action set for all games"
    return None


def _atari_protocol(cfg: AtariOptions, protocol: str) -> list[str]:
    """Overrides evaluating under ``protocol``, keeping the action set the agent trained with.

    The protocols differ in action sets too (dqn: minimal, machado: full); the agent keeps
    the one it was trained with, so only sticky actions and no-op starts change.
    """
    trained_actions = build_suite(cfg).num_actions
    return [f"env.protocol={protocol}",
            f"env.full_action_space={str(trained_actions == 18).lower()}"]


@register_suite("atari", AtariOptions, named_tasks=_atari_tasks, known_ids=_ale_ids,
                check=_atari_check, protocol_overrides=_atari_protocol,
                video_fps=15)  # 60 Hz emulator / frame skip 4
def atari_suite(cfg: AtariOptions) -> SuiteSpec:
    """ALE games as tasks, 4 frames a step; the action count is probed from the first game.

    Runners step them on ``env.backend``: ale-py's vector env, or gymnasium envs one by one.
    """
    if cfg.backend not in BACKENDS:
        raise ValueError(f"env.backend must be one of {', '.join(BACKENDS)}, got {cfg.backend!r}")
    if cfg.ale_threads < 1:
        raise ValueError(f"env.ale_threads must be at least 1, got {cfg.ale_threads}")
    games = config_tasks(cfg)[1]
    full = True if len(games) > 1 else cfg.full_action_space  # one action space for all games
    make = functools.partial(_make_atari, cfg, games, full)
    probe = make(0, 0)
    n = probe.action_space.n
    probe.close()
    batch = (functools.partial(_atari_batch, cfg, games, full) if cfg.backend == "ale_vector"
             else None)
    return SuiteSpec(games, make, int(n), "atari", frames_per_step=4, make_batch=batch)


def check_task_ids(cfg: EnvConfig) -> None:
    """Raise ``KeyError`` naming close valid ids for a task gymnasium does not know.

    The suite says how its ids look and which exist (``Suite.known_ids``: MiniGrid levels,
    Atari games), read from gymnasium's registry; no env is built, so this is cheap enough
    for config validation.
    """
    import difflib

    named, known = config_tasks(cfg), ENVS.get(cfg.suite).known_ids
    if named is None or known is None:
        return
    key, names = named
    gym_id, valid = known()
    for name in names:
        if gym_id.format(name) not in gym.registry:
            close = difflib.get_close_matches(name, valid, n=5, cutoff=0.5)
            hint = (f"did you mean {', '.join(close)}?" if close
                    else f"valid ids include {', '.join(valid[:8])}, ...")
            raise KeyError(f"{key}: unknown {cfg.suite} id {name!r}; {hint}")


def build_suite(cfg: EnvConfig) -> SuiteSpec:
    """The ``SuiteSpec`` that ``cfg.suite`` names.

    The lab suites are registered by the ``envs`` package, which Python imports before this
    module.
    """
    return ENVS.get(cfg.suite)(cfg)
