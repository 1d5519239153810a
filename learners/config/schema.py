"""Typed experiment configs: YAML + ``dotted.key=value`` overrides -> validated dataclasses.

Each component declares its config next to itself (``EnvConfig`` in ``envs/suites.py``,
``AgentConfig`` in ``agents/config.py``, core/head/torso ``Config`` classes beside them,
loss configs beside the losses); this module composes them into ``ExperimentConfig``
and does the loading: unknown keys name the valid keys, wrong types name the key and
the expected type, and bad combinations fail with a sentence that says what to change
(``learners/config/validation.py`` holds those rules).
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from agents.config import AgentConfig
from agents.registry import ranged
from envs.suites import EnvConfig, MiniGridOptions
from learners.algorithms import LEARNERS
from learners.config.migrations import (  # noqa: F401
    CONFIG_FORMAT,
    MOVED,
    format_overrides,
    migrate,
    saved_overrides,
)
from learners.config.sections import load_agent, load_env, mapping_at, reset_switched_options

# The typed-YAML machinery; importers take these names from here as well.
from learners.config.typed_yaml import (  # noqa: F401
    ConfigError,
    check_range,
    check_ranges,
    from_dict,
    parse_overrides,
    read_yaml,
    set_dotted,
    to_dict,
)
from learners.config.validation import validate


class RunStopped(RuntimeError):
    """A run that cannot go on (its learner is gone); the message says how to continue it."""


@dataclass(frozen=True)
class RunConfig:
    """The ``run:`` section: one run's name, output directory, length, seed, checkpoints, logs."""

    name: str = ""  # run name; default: <config file stem>-<timestamp>
    dir: str = ""  # exact output directory of this run; default runs/<name>
    # stop after this many env frames (Atari: agent steps x 4)
    total_frames: int = ranged(1_000_000, 0, None, True)
    seed: int = 0  # seeds torch, numpy and every environment
    # checkpoint this often (and at the end, and on Ctrl-C)
    checkpoint_every_s: float = ranged(300.0, 0, None, True)
    keep_checkpoints: int = ranged(3, 1)  # older checkpoints are deleted
    # progress line and TensorBoard scalars this often; with run.deterministic, every this many
    # updates (rounded up), so that a replay logs the same scalars at the same steps
    log_every_s: float = ranged(5.0, 0, None, True)
    # replayable: unrolls reach the learner in a fixed order and kernels are deterministic, so
    # one config and seed give the same run bit for bit on CPU (slower: learners/runtime/trainer.py)
    deterministic: bool = False


@dataclass(frozen=True)
class RuntimeConfig:
    """The ``runtime:`` section: the runner actors, their envs and threads, Ray, learner CPUs."""

    num_runners: int = ranged(2, 0)  # EnvRunner actors; 0 = one runner in-process, no Ray
    envs_per_runner: int = ranged(8, 1)  # environments each runner steps as one batch
    address: str = ""  # Ray address: "" = start a local instance, "auto" = join a running cluster
    # multitask: runners per task (0 = spread tasks over runners evenly)
    runners_per_task: int = ranged(0, 0)
    torch_threads: int = ranged(1, 1)  # intra-op threads in each runner (1 runner = 1 CPU)
    # intra-op threads of a CPU learner (0 = as many as learner_cpus)
    learner_threads: int = ranged(0, 0)
    # CPUs the learner actor reserves on its node (raise it for a many-core CPU learner)
    learner_cpus: float = ranged(1.0, 0)


Optimizer = Literal["rmsprop", "rmsprop_tf", "adam"]
OPTIMIZERS = typing.get_args(Optimizer)


@dataclass(frozen=True)
class OptimizerConfig:
    """The ``learner.optimizer:`` section: the optimizer, its learning rate and gradient clip."""

    # rmsprop (PyTorch's), rmsprop_tf (TF1's, as IMPALA tuned it: update/optim.py) or adam (PPO)
    name: Optimizer = "rmsprop"
    lr: float = ranged(6e-4, 0, None, True)  # initial learning rate
    # linear decay to 0 over run.total_frames (or lr_decay_frames), or constant
    lr_schedule: Literal["linear", "constant"] = "linear"
    # frames over which the linear schedule decays to 0; 0: run.total_frames. Set it to run
    # the first run.total_frames of a longer schedule (a preset's 40M-frame protocol stopped
    # at 10M), so that raising run.total_frames later continues the same schedule
    lr_decay_frames: int = ranged(0, 0)
    # frames over which the rate first rises linearly from 0 to the schedule's (0: none; the
    # first update steps at 0 and fills Adam's moments). Adam's first steps move each weight
    # by about lr whatever its gradient; the untuned warmup of Ma & Yarats (2021) runs
    # 2 / (1 - beta2) steps, 2,000 for Adam's 0.999
    lr_warmup_frames: int = ranged(0, 0)
    alpha: float = ranged(0.99, 0, 1, False, True)  # RMSProp smoothing constant
    # RMSProp/Adam epsilon (IMPALA: 0.01 with RMSProp; PPO: 1e-5 with Adam)
    eps: float = ranged(0.01, 0)
    momentum: float = ranged(0.0, 0, 1, False, True)  # RMSProp momentum
    max_grad_norm: float = ranged(40.0, 0, None, True)  # clip the global gradient norm to this
    # the torso's rate as a fraction of lr (its own parameter group when not 1): a smaller
    # step for the layers whose units a large one turns off on every frame
    torso_lr_scale: float = ranged(1.0, 0, 1, True)
    # Adam's whole step as one kernel (the same update up to float rounding); false: PyTorch's
    # step of a few operations per tensor
    fused: bool = True


@dataclass(frozen=True)
class MonitorConfig:
    """The ``learner.monitor:`` section: inactive and dormant torso units, the blind warning."""

    # probe the torso every this many updates (0: never), on the first frames of the update's
    # batch with the weights it starts from (docs/reliability.md); a probe costs 2-17% of an
    # Atari update, so 50 costs under 0.5%
    every: int = ranged(50, 0)
    # observations in the probe batch (at most unroll_length x the batch's envs); unset: 256
    # or the whole batch when smaller
    frames: int | None = ranged(None, 2)
    # Sokar et al.'s tau: a unit whose mean activation over the probe is at most tau times its
    # layer's mean is dormant
    tau: float = ranged(0.025, 0, 1, False, True)
    # a probe is blind when a torso layer is wholly inactive on every probe frame, or at least
    # this share of its features (its last layer) is; 0.8 is the lowest share a torso that
    # stayed blind showed (docs/results/torso-health.md) ...
    blind_share: float = ranged(0.8, 0, 1, True)
    # ... and a run is blind from the first of this many blind probes in a row, and sees
    # again at the first of this many that are not; each change is said once
    blind_probes: int = ranged(3, 1)


@dataclass(frozen=True)
class RedoConfig:
    """The ``learner.redo:`` section: re-initialise dormant torso units (ReDo), off by default."""

    # every this many updates (0: never), re-initialise the torso units that are tau-dormant
    # on the first frames of the update's batch: fresh incoming weights, zero outgoing weights
    # and optimizer state (Sokar et al. 2023, algorithm 1; learners/update/redo.py)
    every: int = ranged(0, 0)
    tau: float = ranged(0.025, 0, 1, False, True)  # a unit scoring at most tau is dormant
    # observations scored (at most unroll_length x the batch's envs); unset: 256 or the
    # whole batch when smaller
    frames: int | None = ranged(None, 2)


@dataclass(frozen=True)
class LearnerSettings:
    """The ``learner:`` section: the algorithm, its targets and loss, and the learner's device."""

    name: str = "impala"  # impala or ppo
    device: str = "auto"  # auto (cuda if the learner's node has a GPU), cpu, cuda
    unroll_length: int = ranged(20, 1)  # T: steps per trajectory
    batch_size: int = ranged(32, 1)  # trajectories (unrolls x envs) per learner update
    gamma: float = ranged(0.99, 0, 1, True)  # discount
    entropy_cost: float = ranged(0.01, 0)  # weight of the entropy bonus
    baseline_cost: float = ranged(0.5, 0)  # weight of the value loss
    # none, clip ([-1, 1], Atari), soft_asymmetric (DMLab)
    reward_clip: Literal["none", "clip", "soft_asymmetric"] = "clip"
    lambda_: float = ranged(1.0, 0, 1)  # V-trace lambda / GAE lambda

    # Both losses. Unset (None): the algorithm's default, its DEFAULTS beside its loss
    # (learners/algorithms/impala.py, .../ppo.py), filled in on load (algorithms.fill_defaults):

    # runners wait for each update, so every batch is on-policy (PPO: must)
    lock_step: bool | None = None
    epochs: int | None = ranged(None, 1)  # passes over each batch
    # steps per pass, each on a random group of whole sequences
    minibatches: int | None = ranged(None, 1)
    # advantages / their std per (mini)batch
    normalize_advantages: bool | None = None
    # loss over the (mini)batch's steps: sum (IMPALA's paper) or mean (PPO); sets what
    # optimizer.eps and max_grad_norm mean
    loss_reduction: Literal["sum", "mean"] | None = None
    # cut each unroll into sequences of this many steps for the minibatches (0 = whole
    # unrolls; IMPALA: with impala.fixed_targets)
    recurrence: int = ranged(0, 0)
    # PPO's ratio clip; the value clip's half-width when clip_value
    clip_eps: float = ranged(0.1, 0, None, True)
    # clip the value update around the update's starting values (IMPALA: with
    # impala.fixed_targets)
    clip_value: bool | None = None

    popart: bool = False  # per-task PopArt value normalisation (Hessel et al. 2019)
    popart_beta: float = ranged(3e-4, 0, 1, True)  # PopArt statistics step size
    # bfloat16 autocast for the learner's forward (CUDA; CPU with bf16 instructions)
    mixed_precision: bool = False
    # torch.compile each minibatch's forward and loss, its backward following, as one graph
    # (the LSTM stepped in it, not fused), and gradient clipping as one more; on CUDA in
    # "reduce-overhead" mode, replayed as CUDA graphs. Meant for a GPU learner, whose update
    # waits on launches (docs/gpu.md)
    compile: bool = False
    # flush denormal floats to zero in the learner's CPU arithmetic (every thread of its
    # process): gradients that decay below float32's normal range otherwise slow its backward
    # several times over (3.2x an update of the resnet torso on Breakout); false keeps IEEE
    # denormals, as runs before this setting computed
    flush_denormal: bool = True
    # stop the run after this many updates in a row with a non-finite loss or gradient
    max_skipped_updates: int = ranged(5, 1)
    # keep each optimizer step whose pre-clip gradient norm exceeds this or is not finite, or
    # whose loss is not finite (0: never) in <run>/bursts/ (its minibatch, core state, weights,
    # optimizer state and per-parameter gradient norms; the first 10 of a run):
    # python -m scripts.bench.burst replays one
    capture_grad_norm: float = ranged(0.0, 0)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    redo: RedoConfig = field(default_factory=RedoConfig)


_LEARNER_CLASSES: dict[tuple, type] = {}


def learner_config() -> type:
    """The ``learner:`` section's class: ``LearnerSettings`` and one section per algorithm.

    Each ``LEARNERS`` entry that declares ``options`` (the settings it alone reads, declared
    beside its loss) gets the field ``learner.<name>`` of that class, after the shared
    settings, in the registry's order of names. A new algorithm gets its section from its
    entry; this module does not name it. The class is built once per set of entries:
    ``LearnerConfig`` below is the one for the algorithms mira ships, and an entry registered
    later (a test's) gets a subclass of it with its own section added.
    """
    sections = tuple((name, LEARNERS.get(name).options) for name in LEARNERS.names()
                     if LEARNERS.get(name).options is not None)
    if sections not in _LEARNER_CLASSES:
        base = next((cls for have, cls in _LEARNER_CLASSES.items()
                     if set(have) <= set(sections)), LearnerSettings)
        own = {f.name for f in dataclasses.fields(base)}
        cls = dataclasses.make_dataclass(
            "LearnerConfig", [(name, options, field(default_factory=options))
                              for name, options in sections if name not in own],
            bases=(base,), frozen=True,
            # no source of its own: the reference reads the shared keys' comments from the base
            namespace={"__doc__": LearnerSettings.__doc__, "__source_less__": True})
        cls.__module__ = __name__  # pickled by reference (a Ray actor's config)
        _LEARNER_CLASSES[sections] = cls
    return _LEARNER_CLASSES[sections]


LearnerConfig = learner_config()


@dataclass(frozen=True)
class EvalConfig:
    """The ``eval:`` section: evaluation episodes during training (how often, how many)."""

    every_frames: int = ranged(0, 0)  # evaluate during training every this many frames (0 = never)
    episodes: int = ranged(10, 1)  # episodes per task per evaluation


@dataclass(frozen=True)
class ExperimentConfig:
    """A whole experiment: one section per component, as ``load_config`` builds and validates it."""

    run: RunConfig = field(default_factory=RunConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    env: EnvConfig = field(default_factory=MiniGridOptions)  # the chosen suite's options
    agent: AgentConfig = field(default_factory=AgentConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def load_saved_config(saved: dict, overrides: list[str] | None = None) -> ExperimentConfig:
    """A config a checkpoint or burst file carries (``saved["config"]``), meaning what it meant.

    Its ``config_format`` (3 where absent) gives the overrides an older format needs
    (``saved_overrides``); validated without the runtime section.
    """
    old = saved_overrides(saved.get("config_format", 3), saved["config"])
    return load_config(saved["config"], old + list(overrides or []), runtime=False)


def load_config(source: str | Path | dict | None = None, overrides: list[str] | None = None,
                runtime: bool = True) -> ExperimentConfig:
    """The one loader of every mira command: a config, migrated, overridden and validated.

    ``source`` is a YAML file, a run directory (its ``config.yaml``, with the
    ``format_overrides`` that keep an older run's meaning), a mapping (a checkpoint's saved
    config) or None (the defaults). Keys older mira wrote are migrated, in the file and in
    ``overrides`` alike; every key, type, range and combination is then checked. The
    result is frozen: change a copy (``dataclasses.replace``) or give overrides.
    ``runtime=False`` skips the checks of the runner layout (see ``validate``).
    """
    overrides = list(overrides or [])
    if isinstance(source, dict):
        data = copy.deepcopy(source)
    elif source is None:
        data = {}
    else:
        p = Path(source)
        if p.is_dir():
            if not (p / "config.yaml").is_file():
                raise ConfigError(f"{str(p)!r} has no config.yaml; is it a mira run directory?")
            overrides = format_overrides(p) + overrides
            p = p / "config.yaml"
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        data = read_yaml(p)
        if data is None:  # an empty file would train on every default, which no one means
            raise ConfigError(f"{p} is empty (or only comments); a config names its sections, "
                              "e.g. configs/impala_minigrid.yaml")
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping of sections at the top level")
    migrate(data)
    parsed = [(MOVED.get(key, key), value) for key, value in parse_overrides(overrides)]
    reset_switched_options(data, parsed)
    for key, value in parsed:
        set_dotted(data, key, value)
    data["env"] = load_env(data.get("env"), {key for key, _ in parsed})
    data["agent"] = load_agent(data.get("agent"))
    data["learner"] = from_dict(learner_config(), mapping_at(data.get("learner"), "learner"),
                                "learner")
    return validate(from_dict(ExperimentConfig, data), runtime)


def save_config(cfg: ExperimentConfig, path: Path) -> None:
    """Write the resolved config to ``path`` as YAML, keys in field order (a run's config.yaml)."""
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))

