"""The fleet: the actors a run is made of and how calls reach them (docs/design.md, data path).

- ``Fleet``: the runners (``EnvRunner`` actors, replaced when one dies), the learner actor
  (with a GPU when ``learner.device`` wants one) and evaluators (``make_evaluator``);
- its actors behind typed handles (``handles.py``: ``RunnerHandle``, ``LearnerHandle``,
  ``EvaluatorHandle``), Ray actors or, with ``runtime.num_runners: 0``, objects in this process,
  so one runner and the learner run with no Ray and tests exercise the very loop of
  ``trainer.py``; ``describe``, ``runner_failed``, ``data_lost`` read the errors of calls;
- Ray start-up (``start_ray``: a local instance, or a cluster that must answer and be big
  enough) and the GPU decision (``learner_wants_gpu``), used by ``mira train`` and ``mira compare``;
- ``gpu_options``: every actor sees exactly the GPUs Ray reserved for it (none for runners).

The loop itself (the unroll queue with IMPALA's or the lock-step policy, checkpoints) is in
``learners/runtime/trainer.py``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from envs.evaluation import Evaluator
from envs.runner import EnvRunner
from learners.runtime.handles import EvaluatorHandle, LearnerHandle, RunnerHandle
from learners.update.learner import Learner

log = logging.getLogger("mira")


# ---------------------------------------------------------------- errors of calls


def describe(error: BaseException) -> str:
    """One line for an error raised here or inside a Ray actor or task.

    It is the original ``Type: message`` line that Ray's wrapper texts end with.
    """
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line):
            return line
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def runner_failed(error: BaseException) -> bool:
    """True for an error that says an actor died (``RayActorError``); False without Ray."""
    try:
        from ray.exceptions import RayActorError

        return isinstance(error, RayActorError)
    except ImportError:
        return False


def data_lost(error: BaseException) -> bool:
    """True for an error that says a task's input object is gone (its node died).

    The learner's update then fails with ``ObjectLostError`` (or a subclass), maybe wrapped.
    """
    try:
        from ray.exceptions import ObjectLostError
    except ImportError:
        return False
    return (isinstance(error, ObjectLostError)
            or isinstance(getattr(error, "cause", None), ObjectLostError))


# ---------------------------------------------------------------- cluster set-up


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A ``host:port`` that does not answer fails now with a sentence (a ConfigError).

    This replaces Ray's long GCS time-out; ``auto`` and ``ray://`` addresses are left to Ray.
    """
    import socket

    from learners.config.schema import ConfigError

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(
            f"runtime.address={address}: no Ray cluster answers there ({e.strerror or e}); "
            "check that `ray start --head` runs on that node and the port is open, "
            "or leave runtime.address empty for a local instance"
        ) from None


def start_ray(address: str, cpus: int, log_to_driver: bool = True):
    """Join the cluster at ``address``, or (``""``) start a local instance with ``cpus`` CPUs.

    Returns the ``ray`` module. The one place mira starts Ray (``mira train`` and
    ``mira compare``).
    """
    import ray

    from learners.config.schema import ConfigError

    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING,
                                  log_to_driver=log_to_driver)
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as e:  # e.g. `auto` with no cluster started on this machine
            raise ConfigError(f"runtime.address={address}: {str(e).splitlines()[0]}") from None
    else:
        # address="local": never join a leftover `ray start` cluster by accident.
        logging.getLogger(RAY_AUTH_LOGGER).addFilter(quiet_local_auth_notice)
        ray.init(address="local", num_cpus=cpus, **kwargs)
    return ray


# Ray (2.60) turns token authentication on for every local instance it starts, writing a token
# to ~/.ray/auth_token, and logs a notice saying so on every start. The documentation's Ray page
# explains it once; RAY_AUTH_MODE=token or =disabled in the environment states the choice.
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def quiet_local_auth_notice(record: logging.LogRecord) -> bool:
    """Logging filter: drop Ray's "token authentication is enabled" notice, keep the rest."""
    return not record.getMessage().startswith("Token authentication is enabled")


def connect(cfg) -> None:
    """Start or join Ray for ``cfg.runtime``, then check the cluster can hold the run's actors."""
    # A local instance reserves a CPU per runner plus the learner even on a small machine.
    start_ray(cfg.runtime.address, max(os.cpu_count() or 1, cfg.runtime.num_runners
                                       + int(cfg.runtime.learner_cpus + 0.999)))
    check_capacity(cfg)


def crowding_note(cfg) -> str | None:
    """A line when a training run's runners outnumber this machine's cores on a local instance.

    The presets' runners and learner share 2 cores by design; more runners than cores is a
    layout for a bigger machine (the GPU preset's 15), each runner then at a fraction of its
    speed.
    """
    cores = os.cpu_count()
    if cfg.runtime.address or not cores or cfg.runtime.num_runners <= cores:
        return None
    return (f"{cfg.runtime.num_runners} runners on this machine's {cores} cores share them, "
            f"each at a fraction of its speed (a layout for a bigger machine; "
            f"runtime.num_runners={cores} fits this one)")


def check_capacity(cfg) -> None:
    """Fail with the numbers when the cluster cannot hold this run's actors at all.

    They would wait forever. The run needs a CPU per runner and ``runtime.learner_cpus`` for
    the learner.
    """
    import ray

    from learners.config.schema import ConfigError

    have = ray.cluster_resources().get("CPU", 0)
    need = cfg.runtime.num_runners + cfg.runtime.learner_cpus
    if need > have:
        raise ConfigError(
            f"the Ray cluster has {have:g} CPUs and this run needs {need:g} "
            f"(runtime.num_runners={cfg.runtime.num_runners} runners x 1 CPU + "
            f"runtime.learner_cpus={cfg.runtime.learner_cpus:g}); "
            "lower runtime.num_runners or add nodes"
        )


def gpu_options(num_gpus: float = 0) -> dict:
    """Ray actor options reserving ``num_gpus`` GPUs, such that an actor reserving none sees none.

    Recent Ray (2.4x on) leaves ``CUDA_VISIBLE_DEVICES`` as the node had it for an actor that
    asks for no GPU, so a runner, an evaluator or a CPU learner would see every GPU of its node,
    including one Ray gave another actor, and torch would use it. An empty
    ``CUDA_VISIBLE_DEVICES`` in such an actor's environment hides them; for an actor with GPUs
    Ray sets the variable to the GPUs it reserved. Other ``runtime_env`` env vars of the job
    are kept (Ray merges ``env_vars`` by key).
    """
    if num_gpus > 0:
        return {"num_gpus": num_gpus}
    return {"num_gpus": 0, "runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}}


def make_evaluator(cfg, tasks: list[int], episodes: int, in_process: bool) -> EvaluatorHandle:
    """An ``Evaluator`` of ``tasks`` (``envs/evaluation.py``): in this process, or a Ray actor.

    The actor takes 1 CPU and no GPU, spread over the nodes. The one place evaluators are built
    (training's periodic evaluation and ``mira evaluate``).
    """
    kwargs = dict(env_cfg=cfg.env, agent_cfg=cfg.agent, tasks=tasks, episodes=episodes,
                  max_envs=cfg.runtime.envs_per_runner, seed=cfg.run.seed + 10_000,
                  popart=cfg.learner.popart)
    if in_process:
        return EvaluatorHandle(Evaluator(**kwargs), in_process=True)
    import ray

    return EvaluatorHandle(ray.remote(num_cpus=1, scheduling_strategy="SPREAD",
                                      **gpu_options(0))(Evaluator).remote(**kwargs))


def learner_threads(cfg) -> int:
    """The learner's intra-op threads: ``runtime.learner_threads``, else one per CPU it reserves.

    More than it reserves would fight the runners for cores while both work; a lock-step
    preset, whose runners are parked while the learner updates, names 2 on 2 cores.
    """
    return cfg.runtime.learner_threads or max(1, int(cfg.runtime.learner_cpus))


def learner_wants_gpu(cfg) -> bool:
    """Whether the learner reserves a GPU: with ``learner.device`` cuda, or auto on a GPU cluster.

    ``auto`` asks for one only when the runners are Ray actors and the cluster has a GPU; cuda
    on a Ray cluster with no GPU is a ConfigError (the actor would wait for one forever).
    """
    if cfg.learner.device.startswith("cuda"):
        if cfg.runtime.num_runners > 0:
            import ray

            if ray.cluster_resources().get("GPU", 0) < 1:  # the actor would wait for one forever
                from learners.config.schema import ConfigError

                raise ConfigError(f"learner.device={cfg.learner.device} but the Ray cluster "
                                  "has no GPU; use learner.device=auto or cpu, or add a GPU node")
        return True
    if cfg.learner.device == "auto" and cfg.runtime.num_runners > 0:
        import ray

        return ray.cluster_resources().get("GPU", 0) >= 1
    return False


@dataclass
class Fleet:
    """A run's runners (replaced when one dies, ``replaced`` counting) and its actor factories."""

    cfg: Any
    runners: list[RunnerHandle] = field(default_factory=list)
    replaced: int = 0

    def make_runner(self, index: int) -> RunnerHandle:
        """Runner ``index``: in-process with ``num_runners: 0``, else a 1-CPU, no-GPU Ray actor.

        It gets seed ``run.seed + 7919 * replaced`` (it derives its envs' seeds from that and its
        index), so a replacement does not reuse the dead runner's seeds.
        """
        cfg = self.cfg
        kwargs = dict(
            env_cfg=cfg.env, agent_cfg=cfg.agent, runner_id=index,
            num_runners=cfg.runtime.num_runners, envs_per_runner=cfg.runtime.envs_per_runner,
            unroll_length=cfg.learner.unroll_length, seed=cfg.run.seed + 7919 * self.replaced,
            runners_per_task=cfg.runtime.runners_per_task, torch_threads=cfg.runtime.torch_threads,
            # Chunked minibatches (learner.recurrence) start from the core states the runner
            # had there.
            state_every=cfg.learner.recurrence, popart=cfg.learner.popart,
        )
        if cfg.runtime.num_runners == 0:
            return RunnerHandle(EnvRunner(**kwargs), in_process=True)
        import ray

        actor = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD",
                           **gpu_options(0))(EnvRunner)
        return RunnerHandle(actor.remote(**kwargs))

    def start(self) -> None:
        """Start the runners: ``runtime.num_runners`` actors, or one in-process runner."""
        self.runners = [self.make_runner(i) for i in range(max(self.cfg.runtime.num_runners, 1))]

    def stop(self) -> None:
        """Kill the runner actors (their CPUs go back to the cluster); in-process ones are left."""
        if self.cfg.runtime.num_runners == 0:
            return
        for runner in self.runners:
            runner.kill()
        self.runners = []

    def replace(self, index: int) -> None:
        """Start a new runner ``index`` in place of one that died; its unroll in flight is lost."""
        self.replaced += 1
        log.warning("runner %d died; its in-flight unroll is lost; starting a replacement", index)
        self.runners[index].kill()
        self.runners[index] = self.make_runner(index)

    def make_evaluator(self, num_tasks: int) -> EvaluatorHandle:
        """An evaluator of every task, ``eval.episodes`` each; in-process like the runners."""
        cfg = self.cfg
        return make_evaluator(cfg, list(range(num_tasks)), cfg.eval.episodes,
                              in_process=cfg.runtime.num_runners == 0)

    def make_learner(self, spec: dict, gpus: int = 0) -> LearnerHandle:
        """The learner: in-process with ``num_runners: 0``, else an actor with ``gpus`` GPUs.

        ``gpus`` comes from ``learner_wants_gpu``, asked once by the caller before any actor starts.
        The actor is told how many it reserved, so ``learner.device: auto`` uses a GPU only
        when Ray reserved one (``update.device.resolve_device``); in-process, every GPU this
        process sees is the learner's.
        """
        cfg = self.cfg
        threads = learner_threads(cfg)
        if cfg.runtime.num_runners == 0:
            return LearnerHandle(Learner(cfg, spec, threads), in_process=True)
        import ray

        actor = ray.remote(num_cpus=cfg.runtime.learner_cpus, **gpu_options(gpus))(Learner)
        return LearnerHandle(actor.remote(cfg, spec, threads, gpus))
