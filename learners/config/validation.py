"""The rules a loaded experiment config must satisfy beyond its fields' types.

``learners/config/schema.py`` parses a config into typed dataclasses; ``validate`` then checks
names, declared ranges and combinations (learning-rate schedule against the run's length,
how runners deal a multitask suite's tasks, the algorithm's own checks) and fills the
settings whose default depends on the algorithm. Each failure is a ``ConfigError`` whose
sentence names the key and what to change.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from typing import Any

from learners.config.typed_yaml import ConfigError, check_range, check_ranges

# ``cfg`` below is a ``learners.config.schema.ExperimentConfig``; that module imports this one,
# so it
# is not imported back for the annotations (tests/test_layering.py forbids the circle).


def validate(cfg, runtime: bool = True):
    """Check names, ranges and combinations; the config with the algorithm's defaults filled.

    ``runtime=False`` skips what only matters for training (how runners deal the tasks and
    fill the learner's batches): evaluating a checkpoint does not use that layout.
    """
    from envs.suites import check_task_ids
    from learners.algorithms import LEARNERS, fill_defaults

    try:  # settings whose default depends on the algorithm
        algorithm = LEARNERS.get(cfg.learner.name)
        cfg = replace(cfg, learner=fill_defaults(cfg.learner))
    except KeyError as e:  # the registry's "unknown learner 'name'; valid learners: ..."
        raise ConfigError(f"learner.name: {e.args[0]}") from None
    try:
        check_task_ids(cfg.env)
    except KeyError as e:  # its message starts with the key
        raise ConfigError(e.args[0]) from None
    L = cfg.learner
    checks = [
        (L.device in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:[0-9]+", L.device) is not None,
         f"learner.device must be auto, cpu, cuda or cuda:N (N a device index), got {L.device!r}"),
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
    check_ranges(cfg)  # every field declared with ranged(), read from its declaration
    for section in ("torso", "core", "head"):
        _check_option_ranges(getattr(cfg.agent, f"{section}_options"), f"agent.{section}_options")
    if runtime:
        _check_task_dealing(cfg)
        _check_monitor(cfg, algorithm)
        _check_redo(cfg, algorithm)
        problem = algorithm.check(cfg)
        if problem:
            raise ConfigError(problem)
    return cfg


def _check_task_dealing(cfg) -> None:
    """Multitask runs play every task with the same number of envs (envs.runner.assign_tasks)."""
    from envs.suites import ENVS, build_suite, config_tasks

    env, rt = cfg.env, cfg.runtime
    named = config_tasks(env)  # minigrid and atari: no env built (an Atari suite probes one)
    tasks = len(named[1]) if named else len(build_suite(env).tasks)
    suite_check = ENVS.get(env.suite).check
    if suite_check is not None and (problem := suite_check(env)) is not None:
        raise ConfigError(problem)
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


def _check_monitor(cfg, algorithm) -> None:
    """The torso monitor's probe batch fits in the observations one update holds."""
    M, T = cfg.learner.monitor, cfg.learner.unroll_length
    envs = algorithm.unrolls_per_update(cfg) * cfg.runtime.envs_per_runner
    if M.every and M.frames is not None and M.frames > T * envs:
        raise ConfigError(
            f"learner.monitor.frames={M.frames} is more than one update holds "
            f"(learner.unroll_length {T} x {envs} envs = {T * envs} observations); lower it, "
            "leave it unset (256 or the whole batch) or set learner.monitor.every=0")


def _check_redo(cfg, algorithm) -> None:
    """ReDo's scored batch fits in one update, and the agent can say where its units sit."""
    from agents.agent import recycle_problem

    R, T = cfg.learner.redo, cfg.learner.unroll_length
    if not R.every:
        return
    envs = algorithm.unrolls_per_update(cfg) * cfg.runtime.envs_per_runner
    if R.frames is not None and R.frames > T * envs:
        raise ConfigError(
            f"learner.redo.frames={R.frames} is more than one update holds "
            f"(learner.unroll_length {T} x {envs} envs = {T * envs} observations); lower it "
            "or leave it unset (256 or the whole batch)")
    problem = recycle_problem(cfg.agent)
    if problem:
        raise ConfigError(f"learner.redo.every={R.every}: {problem}")


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
