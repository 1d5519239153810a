"""The step fields: what one row of experience holds, declared once.

Every container of experience is built from ``STEP_FIELDS`` and ``STATE_FIELDS``: the
runner's buffers (``envs/runner.py``), the ``Trajectory`` it returns (``envs/trajectory.py``)
and the learner's ``Batch`` (``learners/algorithms/batch.py``); the fields marked
``agent_input`` are what ``Agent.forward`` reads besides the observation keys. The observation
keys themselves come from the environment's observation space (``observation_fields``). The
declaration sits in ``agents/`` because agents, runners and learners all import it while it
imports none of them.

Shapes are written with symbols: ``T+1`` rows (row ``T`` is also row 0 of the next unroll),
``B`` envs, ``A`` actions, ``T/k`` chunks of ``k`` rows, ``S...`` a core state tensor's own
dims. Row ``t`` holds what the agent saw at step ``t``, what it did, and what followed.

Who writes a field:

- ``env``: the environment's step after row ``t``'s action (``envs.batch.BatchStep`` has a
  field of that name), written to row ``t``;
- ``act``: the runner acting on row ``t``: the agent's outputs and the action it samples;
- ``step``: the runner while stepping: the next row's inputs (zeroed where an episode
  starts) and the value of a truncated episode's last observation;
- ``task``: the runner's task assignment, fixed for each env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Writer = Literal["env", "act", "step", "task"]
ROW = ("T+1", "B")  # the shape of a scalar per step


@dataclass(frozen=True)
class StepField:
    """One field of a row of experience: ``[T+1, B, ...]``, one value per step and env."""

    name: str
    shape: tuple[str | int, ...]  # symbols (module docstring) or sizes, e.g. ("T+1", "B", "A")
    dtype: type  # numpy scalar type
    writer: Writer  # who writes it (module docstring)
    agent_input: bool = False  # Agent.forward reads it
    doc: str = ""

    def sized(self, **sizes: int) -> tuple[int, ...]:
        """The shape with its symbols replaced, e.g. ``sized(T1=21, B=8, A=6)``.

        ``T+1`` is passed as ``T1``; sizes that are numbers already stay.
        """
        names = {"T+1": "T1"}
        return tuple(d if isinstance(d, int) else sizes[names.get(d, d)] for d in self.shape)


@dataclass(frozen=True)
class StateField:
    """A core state of an unroll: a tuple with one array per tensor of the core's state.

    The dtype is the core's; ``optional`` fields are ``None`` unless the runner is asked for them.
    """

    name: str
    shape: tuple[str, ...]
    optional: bool = False
    doc: str = ""


STEP_FIELDS: tuple[StepField, ...] = (
    StepField("last_action", ROW, np.int64, "step", True, "the previous action; 0 on a reset row"),
    StepField("last_reward", ROW, np.float32, "step", True,
              "the previous raw reward; 0 on a reset row"),
    StepField("reset", ROW, np.bool_, "step", True, "this row starts a new episode"),
    StepField("task_id", ROW, np.int64, "task", True, "the env's task index"),
    StepField("action", ROW, np.int64, "act", doc="sampled from behaviour_logits"),
    StepField("behaviour_logits", (*ROW, "A"), np.float32, "act",
              doc="the acting policy's logits"),
    StepField("behaviour_value", ROW, np.float32, "act", doc="the acting agent's value"),
    StepField("reward", ROW, np.float32, "env",
              doc="raw reward for the row's action (clipping and scaling are the learner's)"),
    StepField("terminated", ROW, np.bool_, "env",
              doc="the episode ended in a terminal state (not bootstrapped)"),
    StepField("truncated", ROW, np.bool_, "env",
              doc="cut by a time limit (bootstrapped); never with terminated"),
    StepField("final_value", ROW, np.float32, "step",
              doc="the acting agent's value of a truncated episode's last observation, else 0"),
)

STATE_FIELDS: tuple[StateField, ...] = (
    StateField("initial_state", ("B", "S..."), doc="the core state before row 0"),
    StateField("chunk_states", ("T/k", "B", "S..."), optional=True,
               doc="the core state before rows 0, k, 2k, ... (PPO's chunk starts)"),
)

STEP_NAMES = tuple(f.name for f in STEP_FIELDS)
# What the agent reads besides the observation keys, all [T, B].
AGENT_INPUTS = tuple(f.name for f in STEP_FIELDS if f.agent_input)


def fields_by(writer: Writer) -> tuple[StepField, ...]:
    """The step fields ``writer`` writes, in declaration order."""
    return tuple(f for f in STEP_FIELDS if f.writer == writer)


def observation_fields(space) -> tuple[StepField, ...]:
    """One env-written agent input per observation key of ``space``.

    ``space`` maps each key to an object with ``shape`` and ``dtype`` (a gymnasium ``Dict``).
    """
    return tuple(StepField(k, (*ROW, *space[k].shape), space[k].dtype.type, "env", True)
                 for k in space)


def with_step_fields(array: str, states: tuple[str, ...] = ()):
    """Class decorator, before ``@dataclass``: insert the step fields after ``obs``.

    ``array`` is the annotation of one field (``"np.ndarray"``, ``"Tensor"``); ``states`` names
    the ``STATE_FIELDS`` the class carries, inserted after the step fields (an optional one
    defaults to ``None``). The class declares ``obs`` first and none of the inserted names.
    """

    def add(cls):
        own = dict(cls.__dict__.get("__annotations__", {}))
        declared = [*STEP_NAMES, *states]
        if next(iter(own), None) != "obs" or set(declared) & set(own):
            raise TypeError(f"{cls.__name__} must declare obs first and none of {declared}")
        fields = {"obs": own.pop("obs"), **{name: array for name in STEP_NAMES}}
        for s in STATE_FIELDS:
            if s.name in states:
                fields[s.name] = f"tuple[{array}, ...]" + (" | None" if s.optional else "")
                if s.optional:
                    setattr(cls, s.name, None)
        cls.__annotations__ = {**fields, **own}
        return cls

    return add
