"""The agent: torso -> core -> head, composed from registry names (docs/design.md).

It adds nothing algorithmic: it routes the task ID to the head only when the head
declares that it reads it, and asks the torso for a set of spatial positions when the
core says it wants its input as a set (``input_form``, agents/cores/__init__.py).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from agents.config import AgentConfig
from agents.cores import CORES, State, input_form
from agents.heads import HEADS
from agents.registry import typed_options
from agents.torsos import TORSOS
from agents.units import UnitLayer


def reads_set(cfg: AgentConfig) -> bool:
    """Whether the core ``cfg`` names reads the torso as a set of positions (``input_form``)."""
    core_cls = CORES.get(cfg.core)
    return input_form(core_cls, typed_options(core_cls.Config, cfg.core_options)) == "spatial"


def agent_problem(cfg: AgentConfig) -> str | None:
    """Why the components ``cfg`` names cannot make one agent, in one line; None when they can.

    Checked where configs load (learners/config/schema.py) and where an agent is built.
    """
    spatial = reads_set(cfg)
    norm = getattr(typed_options(TORSOS.get(cfg.torso).Config, cfg.torso_options), "norm", "none")
    if spatial and norm != "none":
        return (f"agent.torso_options.norm={norm} normalises the torso's linear layer, which a "
                f"core reading the torso as a set (agent.core_options.input_set: spatial) skips")
    return None


def recycle_problem(cfg: AgentConfig) -> str | None:
    """Why the agent ``cfg`` names cannot re-initialise torso units one by one; else None.

    One line, for ReDo (``learner.redo``); None when ``Agent.unit_links`` can say where every
    probed unit's weights sit.
    """
    torso_cls, core_cls = TORSOS.get(cfg.torso), CORES.get(cfg.core)
    check = getattr(torso_cls, "recycle_problem", None)
    if check is None:
        return f"the {cfg.torso} torso does not declare where its units' weights sit"
    problem = check(typed_options(torso_cls.Config, cfg.torso_options), reads_set(cfg))
    if problem:
        return f"agent.torso={cfg.torso}: {problem}"
    if getattr(core_cls, "input_weights", None) is None:
        readers = ", ".join(n for n in CORES.names() if hasattr(CORES.get(n), "input_weights"))
        return (f"agent.core={cfg.core} declares no input weights to zero for a re-initialised "
                f"feature (cores that do: {readers})")
    return None


class AgentOutput(NamedTuple):
    """What ``Agent.forward`` returns for an unroll: policy logits and value estimates."""

    logits: torch.Tensor  # [T, B, A]
    value: torch.Tensor  # [T, B]


class TaskValueOutput(nn.Module):
    """Per-task affine map of the head's value, ``n_i(x) = w_i v(x) + b_i``.

    w = 1, b = 0 at start: the last value layer that PopArt rescales to preserve outputs
    (``learners/algorithms/popart.py``). Without a task ID (``task_id=None``) the value passes
    through unchanged.
    """

    def __init__(self, num_tasks: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_tasks))
        self.bias = nn.Parameter(torch.zeros(num_tasks))

    def forward(self, value: torch.Tensor, task_id: torch.Tensor | None) -> torch.Tensor:
        """``value``: [T, B]; ``task_id``: [T, B] int64, or None to return ``value`` as is."""
        if task_id is None:
            return value
        return self.weight[task_id] * value + self.bias[task_id]


class Agent(nn.Module):
    """Torso -> core -> head built from the registry names in an ``AgentConfig``."""

    def __init__(self, cfg: AgentConfig, obs_shapes: dict[str, tuple[int, ...]], num_actions: int,
                 num_tasks: int = 1, obs_vocab: dict[str, int] | None = None, popart: bool = False):
        """Build the torso, core and head that ``cfg`` names, with their options.

        ``obs_shapes``: shape of each observation key; ``obs_vocab``: the number of token
        ids of token-valued keys (the instruction), from the environment's observation space;
        ``popart``: end the value in the per-task affine layer that PopArt rescales (the
        learner's ``learner.popart``; runners acting for it build the same agent).
        """
        super().__init__()
        self.obs_keys = tuple(sorted(obs_shapes))
        self.num_actions = num_actions
        problem = agent_problem(cfg)
        if problem:
            raise ValueError(problem)
        torso_cls, core_cls = TORSOS.get(cfg.torso), CORES.get(cfg.core)
        head_cls = HEADS.get(cfg.head)
        # Typed on load (learners/config/schema.py); an AgentConfig built by hand may hold mappings.
        core_config = typed_options(core_cls.Config, cfg.core_options)
        as_set = input_form(core_cls, core_config) == "spatial"
        self.torso = torso_cls(obs_shapes, num_actions, as_set=as_set, obs_vocab=obs_vocab,
                               config=typed_options(torso_cls.Config, cfg.torso_options))
        self.core = core_cls(self.torso.output_size, config=core_config)
        self.head = head_cls(self.core.output_size, num_actions, num_tasks,
                             config=typed_options(head_cls.Config, cfg.head_options))
        self.value_output = TaskValueOutput(num_tasks) if popart else None

    @property
    def reads_task_id(self) -> bool:
        """Whether the head reads the task ID, so ``forward`` needs ``task_id`` in its inputs."""
        return bool(self.head.reads_task_id)

    def initial_state(self, batch_size: int, device=None) -> State:
        """The core's initial (zero) state for ``batch_size`` environments."""
        return self.core.initial_state(batch_size, device)

    def training_layout(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Observations laid out in memory as the torso's training pass reads them.

        The same values; for a learner about to pass over one batch several times. The
        torso's ``training_layout`` if it has one, else ``obs`` as given.
        """
        fn = getattr(self.torso, "training_layout", None)
        return fn(obs) if fn else obs

    def observe(self, obs: dict[str, torch.Tensor]) -> None:
        """Move the input statistics the torso keeps by the frames ``obs`` (``[..., *shape]``).

        The torso's ``observe`` if it has one (``input_norm: running``), else nothing; the
        learner calls it once per batch, before the batch's steps.
        """
        fn = getattr(self.torso, "observe", None)
        if fn:
            fn(obs)

    def forward(self, inputs: dict[str, torch.Tensor], state: State) -> tuple[AgentOutput, State]:
        """Unroll the agent; returns logits ``[T, B, A]``, value ``[T, B]`` and the next state.

        ``inputs``: the observation keys plus the step fields declared ``agent_input`` in
        ``agents/steps.py`` (``last_action``, ``last_reward``, ``reset``, and ``task_id``, which
        may be left out unless the head reads it), all time-major ``[T, B, ...]``.
        """
        x = self.torso({k: inputs[k] for k in self.obs_keys}, inputs["last_action"],
                       inputs["last_reward"])
        h, state = self.core(x, state, inputs["reset"])
        task_id = inputs.get("task_id") if self.reads_task_id else None
        if self.reads_task_id and task_id is None:
            raise ValueError(f"head {type(self.head).__name__} reads the task ID but the inputs "
                             "carry none")
        logits, value = self.head(h, task_id)
        if self.value_output is not None:
            # The critic is trained only; it may read the task ID even when the policy does not.
            value = self.value_output(value, inputs.get("task_id"))
        return AgentOutput(logits, value), state

    def diagnostics(self) -> dict[str, torch.Tensor]:
        """The core's statistics of the last forward pass (``core.diagnostics()``); {} if none."""
        fn = getattr(self.core, "diagnostics", None)
        return fn() if fn else {}

    def unit_links(self) -> dict[str, UnitLayer]:
        """Each probed torso layer's units, the features' outgoing weights the core's input.

        The torso's ``unit_links`` (``agents/units.py``), its last layer's outgoing weights
        the core's ``input_weights()``. ValueError with ``recycle_problem``'s line where the
        torso or the core cannot say.
        """
        links = self.torso.unit_links()
        read = getattr(self.core, "input_weights", None)
        if read is None:
            raise ValueError(f"{type(self.core).__name__} declares no input weights")
        links[self.torso.probe_layers[-1]].outgoing = read()
        return links
