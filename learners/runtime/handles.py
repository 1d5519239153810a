"""Typed handles on the run's actors: one method per remote method, with or without Ray.

A handle holds either a Ray actor handle or the object itself, in this process (with
``runtime.num_runners: 0``), and calls it the same way: each method returns a ref at once,
whose value ``get`` reads. On Ray a ref is an ``ObjectRef``; in process the method has
already run and its ref is a ``Done`` holding the value (or the error, raised by ``get`` as
Ray raises a task's error where its result is read). So one driver loop
(``trainer.py``) serves both, and a test in process runs the very loop of a cluster.

- ``RunnerHandle``: an ``EnvRunner`` (``envs/runner.py``);
- ``LearnerHandle``: a ``Learner`` (``learners/update/learner.py``);
- ``EvaluatorHandle``: an ``Evaluator`` (``envs/evaluation.py``).

A handle method is declared with its signature and a docstring, and ``@remote`` makes it call
the wrapped class's method of the same name. Each handle class checks, as it is defined, that
the class it wraps has every such method with the same parameters: a misspelt or outdated
method fails at import, not in the middle of a run.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from envs.evaluation import Evaluator
from envs.runner import EnvRunner
from learners.update.learner import Learner

# A Ray ObjectRef, or a Done in process.
Ref = Any
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(eq=False)  # hashable by identity, like an ObjectRef
class Done:
    """The result of an in-process call (a Ray ObjectRef's in-process counterpart)."""

    value: Any = None
    error: BaseException | None = None


def get(ref: Ref, timeout: float | None = None):
    """The value behind a ref: a ``Done``'s value (raising its error) or ``ray.get(ref)``.

    ``timeout`` (seconds) bounds the wait for a Ray ref; an in-process ref is always ready.
    """
    if isinstance(ref, Done):
        if ref.error is not None:
            raise ref.error
        return ref.value
    import ray

    return ray.get(ref, timeout=timeout)


def wait_one(refs: list, timeout: float = 1.0) -> list:
    """Refs among ``refs`` that are ready, waiting up to ``timeout`` s for one.

    In-process results are always ready.
    """
    local = [r for r in refs if isinstance(r, Done)]
    if local:
        return local  # in-process results are all ready
    import ray

    ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    return ready


def remote(method: F | None = None, *, num_returns: int = 1):
    """Make a handle method call the wrapped class's method of the same name and parameters.

    ``@remote`` or ``@remote(num_returns=2)`` on a method of an ``ActorHandle`` subclass: its
    body is a docstring only; a call returns the ref (a tuple of ``num_returns`` refs when
    more than one) of the wrapped object's method. The subclass checks, when it is defined,
    that ``wraps`` has that method with the same parameters.
    """

    def make(fn: F) -> F:
        name = fn.__name__

        @functools.wraps(fn)
        def call(self: ActorHandle, *args):
            return self._call(name, *args, num_returns=num_returns)

        call.remote_method = name  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return make(method) if method is not None else make


def _parameters(fn: Callable) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


class ActorHandle:
    """A Ray actor handle (``in_process=False``) or the object itself, called one way.

    Attributes:
        actor: the Ray actor handle, or the in-process object.
        in_process: whether calls run now, in this process.
    """

    wraps: ClassVar[type]  # the class whose methods the handle calls

    def __init_subclass__(cls, **kwargs):
        """Check every ``@remote`` method against ``wraps``: a misspelt one fails the import."""
        super().__init_subclass__(**kwargs)
        for attr, fn in vars(cls).items():
            name = getattr(fn, "remote_method", None)
            if name is None:
                continue
            target = getattr(cls.wraps, name, None)
            if target is None:
                raise AttributeError(f"{cls.__name__}.{attr}: {cls.wraps.__name__} has no "
                                     f"method {name!r}")
            if _parameters(fn) != _parameters(target):
                raise TypeError(f"{cls.__name__}.{attr} and {cls.wraps.__name__}.{name} "
                                f"differ in parameters: {inspect.signature(fn)} vs "
                                f"{inspect.signature(target)}")

    def __init__(self, actor, in_process: bool = False):
        self.actor, self.in_process = actor, in_process

    def _call(self, name: str, *args, num_returns: int = 1):
        """Call method ``name`` on the actor; its ref, or a tuple of ``num_returns`` refs.

        In process the method runs now, on the values of any ``Done`` arguments (as Ray
        resolves refs passed to a task); an exception it raises is kept in the ``Done``.
        """
        if self.in_process:
            args = tuple(get(a) if isinstance(a, Done) else a for a in args)
            try:
                out = getattr(self.actor, name)(*args)
            except Exception as e:  # noqa: BLE001 - reported where the result is read
                return (tuple(Done(error=e) for _ in range(num_returns)) if num_returns > 1
                        else Done(error=e))
            return tuple(Done(v) for v in out) if num_returns > 1 else Done(out)
        fn = getattr(self.actor, name)
        return (fn.options(num_returns=num_returns).remote(*args) if num_returns > 1
                else fn.remote(*args))

    def kill(self) -> None:
        """End a Ray actor (its resources go back to the cluster); an in-process one is left."""
        if not self.in_process:
            import ray

            ray.kill(self.actor, no_restart=True)


class RunnerHandle(ActorHandle):
    """An ``EnvRunner``: unrolls for the learner, and the spec the learner builds its agent from."""

    wraps = EnvRunner

    @remote
    def spec(self) -> Ref:
        """Ref to ``EnvRunner.spec()``: observation shapes, actions, tasks, score suite."""

    @remote(num_returns=2)
    def rollout_with_info(self, weights: Ref | dict | None = None,
                          version: int | None = None) -> tuple[Ref, Ref]:
        """Refs to one unroll (a ``Trajectory``) and its small info dict (episodes, version).

        ``weights`` None keeps the weights the runner holds.
        """


class LearnerHandle(ActorHandle):
    """A ``Learner``: updates, weights and the state a checkpoint holds."""

    wraps = Learner

    @remote
    def learn(self, *trajectories: Ref) -> Ref:
        """Ref to the ``UpdateReport`` of one update on a batch made of ``trajectories``."""

    @remote
    def get_weights(self) -> Ref:
        """Ref to a CPU snapshot of the agent's weights (what the runners load)."""

    @remote
    def get_version(self) -> Ref:
        """Ref to the policy version: the number of updates so far."""

    @remote
    def state_counters(self) -> Ref:
        """Ref to ``{"version": ..., "frames": ...}``."""

    @remote
    def state_dict(self) -> Ref:
        """Ref to everything a checkpoint holds of the learner (plain CPU tensors and numbers)."""

    @remote
    def take_captures(self) -> Ref:
        """Ref to the gradient-burst steps kept since the last call (``Learner.capture``)."""

    @remote
    def load_state_dict(self, state: dict) -> Ref:
        """Ref to None once the learner continues from ``state`` (a ``state_dict()``)."""


class EvaluatorHandle(ActorHandle):
    """An ``Evaluator``: whole episodes of its tasks with fixed weights."""

    wraps = Evaluator

    @remote
    def evaluate(self, weights: Ref | dict) -> Ref:
        """Ref to ``{task: [return of each episode]}``."""


HANDLES: tuple[type[ActorHandle], ...] = (RunnerHandle, LearnerHandle, EvaluatorHandle)
