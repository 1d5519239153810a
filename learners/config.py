"""Typed experiment configs: YAML + ``dotted.key=value`` overrides -> validated dataclasses.

Each component declares its config next to itself (``EnvConfig`` in ``envs/suites.py``,
``AgentConfig`` in ``agents/config.py``, core/head/torso ``Config`` classes beside them,
loss configs beside the losses); this module composes them into ``ExperimentConfig``
and does the loading: unknown keys name the valid keys, wrong types name the key and
the expected type, and bad combinations fail with a sentence that says what to change.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from agents.config import AgentConfig
from envs.suites import EnvConfig
from learners.impala import ImpalaConfig
from learners.ppo import PPOConfig

# The typed-YAML machinery; importers take these names from here as well.
from learners.typed_yaml import (  # noqa: F401
    ConfigError,
    check_range,
    from_dict,
    parse_overrides,
    read_yaml,
    set_dotted,
    to_dict,
)


class RunStopped(RuntimeError):
    """A run that cannot go on (its learner is gone); the message says how to continue it."""


@dataclass
class RunConfig:
    """The ``run:`` section: one run's name, output directory, length, seed, checkpoints, logs."""

    name: str = ""  # run name; default: <config file stem>-<timestamp>
    dir: str = ""  # exact output directory of this run; default runs/<name>
    total_frames: int = 1_000_000  # stop after this many env frames (Atari: agent steps x 4)
    seed: int = 0  # seeds torch, numpy and every environment
    checkpoint_every_s: float = 300.0  # checkpoint this often (and at the end, and on Ctrl-C)
    keep_checkpoints: int = 3  # older checkpoints are deleted
    log_every_s: float = 5.0  # progress line and TensorBoard scalars this often
    # replayable: unrolls reach the learner in a fixed order and kernels are deterministic, so
    # one config and seed give the same run bit for bit on CPU (slower: learners/trainer.py)
    deterministic: bool = False


@dataclass
class RuntimeConfig:
    """The ``runtime:`` section: the runner actors, their envs and threads, Ray, learner CPUs."""

    num_runners: int = 2  # EnvRunner actors; 0 = one runner in-process, no Ray
    envs_per_runner: int = 8  # environments each runner steps as one batch
    address: str = ""  # Ray address: "" = start a local instance, "auto" = join a running cluster
    runners_per_task: int = 0  # multitask: runners per task (0 = spread tasks over runners evenly)
    torch_threads: int = 1  # intra-op threads in each runner (1 runner = 1 CPU)
    learner_threads: int = 0  # intra-op threads of a CPU learner (0 = as many as learner_cpus)
    # CPUs the learner actor reserves on its node (raise it for a many-core CPU learner)
    learner_cpus: float = 1.0


Optimizer = Literal["rmsprop", "rmsprop_tf", "adam"]
OPTIMIZERS = typing.get_args(Optimizer)


@dataclass
class OptimizerConfig:
    """The ``learner.optimizer:`` section: the optimizer, its learning rate and gradient clip."""

    # rmsprop (PyTorch's), rmsprop_tf (TF1's, as IMPALA tuned it: learners/optim.py) or adam (PPO)
    name: Optimizer = "rmsprop"
    lr: float = 6e-4  # initial learning rate
    # linear decay to 0 over run.total_frames (or lr_decay_frames), or constant
    lr_schedule: Literal["linear", "constant"] = "linear"
    # frames over which the linear schedule decays to 0; 0: run.total_frames. Set it to run
    # the first run.total_frames of a longer schedule (a preset's 40M-frame protocol stopped
    # at 10M), so that raising run.total_frames later continues the same schedule
    lr_decay_frames: int = 0
    alpha: float = 0.99  # RMSProp smoothing constant
    eps: float = 0.01  # RMSProp/Adam epsilon (IMPALA: 0.01 with RMSProp; PPO: 1e-5 with Adam)
    momentum: float = 0.0  # RMSProp momentum
    max_grad_norm: float = 40.0  # clip the global gradient norm to this


@dataclass
class LearnerConfig:
    """The ``learner:`` section: the algorithm, its targets and loss, and the learner's device."""

    name: str = "impala"  # impala or ppo
    device: str = "auto"  # auto (cuda if the learner's node has a GPU), cpu, cuda
    unroll_length: int = 20  # T: steps per trajectory
    batch_size: int = 32  # trajectories (unrolls x envs) per learner update
    gamma: float = 0.99  # discount
    entropy_cost: float = 0.01  # weight of the entropy bonus
    baseline_cost: float = 0.5  # weight of the value loss
    # none, clip ([-1, 1], Atari), soft_asymmetric (DMLab)
    reward_clip: Literal["none", "clip", "soft_asymmetric"] = "clip"
    lambda_: float = 1.0  # V-trace lambda / GAE lambda

    # Both losses. Unset (None): the algorithm's default, its DEFAULTS beside its loss
    # (learners/impala.py, learners/ppo.py), filled in on load (learners.algorithms.fill_defaults):

    # runners wait for each update, so every batch is on-policy (PPO: must)
    lock_step: bool | None = None
    epochs: int | None = None  # passes over each batch
    # steps per pass, each on a random group of whole sequences
    minibatches: int | None = None
    # advantages / their std per (mini)batch
    normalize_advantages: bool | None = None
    # loss over the (mini)batch's steps: sum (IMPALA's paper) or mean (PPO); sets what
    # optimizer.eps and max_grad_norm mean
    loss_reduction: Literal["sum", "mean"] | None = None
    # cut each unroll into sequences of this many steps for the minibatches (0 = whole
    # unrolls; IMPALA: with impala.fixed_targets)
    recurrence: int = 0
    clip_eps: float = 0.1  # PPO's ratio clip; the value clip's half-width when clip_value
    # clip the value update around the update's starting values (IMPALA: with
    # impala.fixed_targets)
    clip_value: bool | None = None

    popart: bool = False  # per-task PopArt value normalisation (Hessel et al. 2019)
    popart_beta: float = 3e-4  # PopArt statistics step size
    # bfloat16 autocast for the learner's forward (CUDA; CPU with bf16 instructions)
    mixed_precision: bool = False
    # stop the run after this many updates in a row with a non-finite loss or gradient
    max_skipped_updates: int = 5
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)

    # Settings one algorithm alone reads, declared beside its loss:

    impala: ImpalaConfig = field(default_factory=ImpalaConfig)  # learners/impala.py
    ppo: PPOConfig = field(default_factory=PPOConfig)  # learners/ppo.py


@dataclass
class EvalConfig:
    """The ``eval:`` section: evaluation episodes during training (how often, how many)."""

    every_frames: int = 0  # evaluate during training every this many frames (0 = never)
    episodes: int = 10  # episodes per task per evaluation


@dataclass
class ExperimentConfig:
    """A whole experiment: one section per component, as ``load_config`` builds and validates it."""

    run: RunConfig = field(default_factory=RunConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


# Numeric ranges, checked on load: key -> (low, high, low open, high open); None = unbounded.
# (run.total_frames, runtime.num_runners, runtime.envs_per_runner and learner.unroll_length
# are checked with the combination rules in validate().)
RANGES: dict[str, tuple] = {
    "run.checkpoint_every_s": (0, None, True, False),
    "run.keep_checkpoints": (1, None, False, False),
    "run.log_every_s": (0, None, True, False),
    "runtime.runners_per_task": (0, None, False, False),
    "runtime.torch_threads": (1, None, False, False),
    "runtime.learner_threads": (0, None, False, False),
    "runtime.learner_cpus": (0, None, False, False),
    "env.max_episode_frames": (1, None, False, False),
    "env.frame_stack": (1, None, False, False),
    "env.ale_threads": (1, None, False, False),
    "learner.batch_size": (1, None, False, False),
    "learner.gamma": (0, 1, True, False),
    "learner.entropy_cost": (0, None, False, False),
    "learner.baseline_cost": (0, None, False, False),
    "learner.lambda_": (0, 1, False, False),
    "learner.impala.clip_rho_threshold": (0, None, True, False),
    "learner.impala.clip_pg_rho_threshold": (0, None, True, False),
    "learner.impala.clip_c_threshold": (0, None, True, False),
    "learner.epochs": (1, None, False, False),
    "learner.minibatches": (1, None, False, False),
    "learner.recurrence": (0, None, False, False),
    "learner.clip_eps": (0, None, True, False),
    "learner.impala.surrogate_clip": (0, 1, False, True),
    "learner.ppo.target_kl": (0, None, False, False),
    "learner.popart_beta": (0, 1, True, False),
    "learner.max_skipped_updates": (1, None, False, False),
    "learner.optimizer.lr": (0, None, True, False),
    "learner.optimizer.alpha": (0, 1, False, True),
    "learner.optimizer.eps": (0, None, False, False),
    "learner.optimizer.momentum": (0, 1, False, True),
    "learner.optimizer.max_grad_norm": (0, None, True, False),
    "learner.optimizer.lr_decay_frames": (0, None, False, False),
    "eval.every_frames": (0, None, False, False),
    "eval.episodes": (1, None, False, False),
}


def _check_option_ranges(options: Any, key: str) -> None:
    """Range-check a component's typed options; a value out of range is a ConfigError naming it.

    Every integer is a size or a count (>= 1), every ``*dropout`` a probability in [0, 1).
    """
    fields = dataclasses.fields(options) if dataclasses.is_dataclass(options) else ()
    for name, value in ((f.name, getattr(options, f.name)) for f in fields):
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            check_range(f"{key}.{name}", value, 1, None)
        elif isinstance(value, float) and name.endswith("dropout"):
            check_range(f"{key}.{name}", value, 0, 1, False, True)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict | None = None, runtime: bool = True) -> ExperimentConfig:
    """Read YAML (or start from ``base``), apply overrides, validate every key and combination."""
    data: dict = dict(base or {})
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        data = read_yaml(p) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping of sections at the top level")
    migrate(data)
    parsed = [(MOVED.get(key, key), value) for key, value in parse_overrides(overrides or [])]
    _reset_switched_options(data, parsed)
    for key, value in parsed:
        set_dotted(data, key, value)
    cfg = from_dict(ExperimentConfig, data)
    check_suite_keys(cfg.env, [key for key, _ in parsed])
    validate(cfg, runtime)
    return cfg


# The env keys each suite reads besides env.suite; a key outside its suite's set is refused.
SUITE_KEYS: dict[str, tuple[str, ...]] = {
    "minigrid": ("level", "levels"),
    "atari": ("game", "games", "protocol", "episodic_life", "max_episode_frames", "frame_stack",
              "full_action_space", "backend", "ale_threads"),
    "lab30": (),
    "lab6": (),
}


def check_suite_keys(env: EnvConfig, overridden: list[str]) -> None:
    """Refuse an env key the chosen suite never reads: named in ``overridden``, or not default.

    Suites missing from ``SUITE_KEYS`` (registered elsewhere) are not checked.
    """
    reads = SUITE_KEYS.get(env.suite)
    if reads is None:
        return
    default = EnvConfig()
    unread = [f.name for f in dataclasses.fields(env) if f.name != "suite" and f.name not in reads
              and (f"env.{f.name}" in overridden
                   or getattr(env, f.name) != getattr(default, f.name))]
    if unread:
        keys = ", ".join(f"env.{k}" for k in reads) or "no env key but env.suite"
        raise ConfigError(f"{', '.join(f'env.{k}' for k in unread)}: the {env.suite} suite does "
                          f"not read {'it' if len(unread) == 1 else 'them'} (it reads {keys})")


# Keys that moved, old -> new: the settings one algorithm alone reads left the learner
# section for its own (2026-11-24); saved runs, presets and commands that use the old names
# keep working.
MOVED = {f"learner.{name}": f"learner.{section}.{name}" for section, names in (
    ("impala", ("clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold",
                "surrogate_clip", "fixed_targets")),
    ("ppo", ("target_kl",))) for name in names}


def migrate(data: dict) -> dict:
    """Replace, in place, keys older mira wrote with what they mean now; returns ``data``.

    ``agent.popart`` is a copy of ``learner.popart`` that every saved config.yaml and
    checkpoint up to 2026-11 carries; the keys of ``MOVED`` are the learner settings one
    algorithm alone reads, which every saved config up to 2026-11-24 holds in ``learner``.
    """
    learner = data.get("learner")
    if isinstance(learner, dict):
        for old, new in MOVED.items():
            name, section = old.split(".")[1], new.split(".")[1]
            if name in learner:
                value = learner.pop(name)
                part = learner.setdefault(section, {})
                if isinstance(part, dict):
                    part.setdefault(name, value)
    agent = data.get("agent")
    if isinstance(agent, dict) and "popart" in agent:
        if agent.pop("popart") is True:  # the agent had PopArt's output layer: its weights need it
            learner = data.setdefault("learner", {})
            if isinstance(learner, dict):
                learner["popart"] = True
    return data


def _reset_switched_options(data: dict, parsed: list[tuple[str, Any]]) -> None:
    """Drop the file's options of a core, head or torso that an override switches; say so.

    An override that switches ``agent.core``, ``agent.head`` or ``agent.torso`` to another
    component drops the options the file set for the old one (they are rarely options of
    the new one; option overrides given with the switch still apply); says so in one line.
    """
    from agents.cores import CORES
    from agents.heads import HEADS
    from agents.torsos import TORSOS

    agent = data.get("agent") if isinstance(data.get("agent"), dict) else {}
    for part, registry in (("core", CORES), ("head", HEADS), ("torso", TORSOS)):
        new = next((v for k, v in reversed(parsed) if k == f"agent.{part}"), None)
        old, options = agent.get(part), agent.get(f"{part}_options")
        # the overrides set the whole mapping; an unknown name is validate()'s one-line error
        replaced = any(k == f"agent.{part}_options" for k, _ in parsed)
        if new is None or new == old or not options or replaced or new not in registry:
            continue
        agent[f"{part}_options"] = {}
        given = sorted(k.split(".", 2)[2] for k, _ in parsed
                       if k.startswith(f"agent.{part}_options."))
        rest = (f"{new} takes {', '.join(given)} from the command line "
                "and its defaults for the rest" if given else
                f"{new} uses its defaults (give agent.{part}_options.KEY=VALUE to set them)")
        print(f"[mira] agent.{part}={new} replaces {old or 'the default'}: "
              f"dropping the config's agent.{part}_options "
              f"({', '.join(sorted(options))}); {rest}", file=sys.stderr)


def _resolve_options(registry, name: str, options: Any, key: str) -> Any:
    """The options of component ``name`` as its ``Config`` (the object its constructor takes).

    ``options`` is the YAML mapping, or the Config itself when the config was validated
    before; anything else is a ConfigError naming ``key``.
    """
    cls = registry.get(name)
    option_cls = getattr(cls, "Config", None)
    if option_cls is None:
        if options:
            raise ConfigError(f"{key}: {name!r} takes no options, got {sorted(options)}")
        return {}
    if isinstance(options, option_cls):
        return options
    if not isinstance(options, dict):
        raise ConfigError(f"{key}: expected a mapping of {name} options "
                          f"({', '.join(f.name for f in dataclasses.fields(option_cls))}), "
                          f"got {options!r}")
    return from_dict(option_cls, options, key)


def validate(cfg: ExperimentConfig, runtime: bool = True) -> None:
    """Check names against registries and combinations; fill component options.

    ``runtime=False`` skips what only matters for training (how runners deal the tasks and
    fill the learner's batches): evaluating a checkpoint does not use that layout.
    """
    import envs  # noqa: F401  (registers every suite)
    from agents.cores import CORES
    from agents.heads import HEADS
    from agents.torsos import TORSOS
    from envs.suites import ENVS, check_task_ids
    from learners.algorithms import LEARNERS, fill_defaults

    def named(key: str, fn, *args):
        try:
            return fn(*args)
        except KeyError as e:  # a registry's "unknown X 'name'; valid Xs: ..."
            raise ConfigError(f"{key}: {e.args[0]}" if key else e.args[0]) from None

    a = cfg.agent
    named("learner.name", fill_defaults, cfg.learner)  # settings the algorithm defaults
    named("env.suite", ENVS.get, cfg.env.suite)
    named("", check_task_ids, cfg.env)  # its message starts with the key
    a.torso_options = named("agent.torso", _resolve_options, TORSOS, a.torso, a.torso_options,
                            "agent.torso_options")
    a.core_options = named("agent.core", _resolve_options, CORES, a.core, a.core_options,
                           "agent.core_options")
    a.head_options = named("agent.head", _resolve_options, HEADS, a.head, a.head_options,
                           "agent.head_options")
    L = cfg.learner
    checks = [
        (L.device in ("auto", "cpu", "cuda") or L.device.startswith("cuda:"),
         f"learner.device must be auto, cpu or cuda, got {L.device!r}"),
        (L.unroll_length >= 1, "learner.unroll_length must be at least 1"),
        (cfg.runtime.num_runners >= 0, "runtime.num_runners must be 0 (in-process) or more"),
        (cfg.runtime.envs_per_runner >= 1, "runtime.envs_per_runner must be at least 1"),
        (cfg.run.total_frames > 0, "run.total_frames must be positive"),
        (L.optimizer.lr_decay_frames <= 0 or L.optimizer.lr_schedule == "constant"
         or L.optimizer.lr_decay_frames >= cfg.run.total_frames,
         f"learner.optimizer.lr_decay_frames ({L.optimizer.lr_decay_frames:,}) is below "
         f"run.total_frames ({cfg.run.total_frames:,}): the learning rate would be 0 for the "
         "rest of the run; raise it or set it to 0 (decay over run.total_frames)"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    for key, bounds in RANGES.items():
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        check_range(key, node, *bounds)
    for section in ("torso", "core", "head"):
        _check_option_ranges(getattr(a, f"{section}_options"), f"agent.{section}_options")
    if not runtime:
        return
    _check_task_dealing(cfg)
    problem = LEARNERS.get(L.name).check(cfg)
    if problem:
        raise ConfigError(problem)


def _check_task_dealing(cfg: ExperimentConfig) -> None:
    """Multitask runs play every task with the same number of envs (envs.runner.assign_tasks)."""
    from envs.suites import build_suite, config_tasks

    env, rt = cfg.env, cfg.runtime
    named = config_tasks(env)  # minigrid and atari: no env built (an Atari suite probes one)
    tasks = len(named[1]) if named else len(build_suite(env).tasks)
    if env.suite == "atari" and tasks > 1 and env.full_action_space is False:
        raise ConfigError("env.full_action_space=false: "
                          "multitask Atari needs one action set for all games")
    if tasks == 1:
        return
    runners = max(rt.num_runners, 1)
    if rt.runners_per_task > 0:
        if rt.num_runners != rt.runners_per_task * tasks:
            raise ConfigError(
                f"runtime.runners_per_task={rt.runners_per_task} x {tasks} tasks needs "
                f"runtime.num_runners={rt.runners_per_task * tasks}, got {rt.num_runners}; "
                "change one, or set runners_per_task=0 to deal the tasks over the runners"
            )
    elif runners >= tasks and runners % tasks:
        raise ConfigError(
            f"{runners} runners cannot play {tasks} tasks equally (each runner plays one task); "
            f"make runtime.num_runners a multiple of {tasks} or use runtime.runners_per_task"
        )
    elif runners < tasks and (runners * rt.envs_per_runner) % tasks:
        raise ConfigError(
            f"{runners} runner(s) x {rt.envs_per_runner} envs cannot play {tasks} tasks equally "
            "(tasks are dealt env by env); "
            f"make runtime.num_runners x runtime.envs_per_runner a multiple of {tasks}"
        )


def save_config(cfg: ExperimentConfig, path: Path) -> None:
    """Write the resolved config to ``path`` as YAML, keys in field order (a run's config.yaml)."""
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))

