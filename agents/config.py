"""The ``agent`` section of a config: which torso, core and head, and their options.

Options are free-form in YAML but typed on load: ``core_options`` must be fields of the
chosen core's ``Config`` dataclass (likewise heads and torsos), and the resolved config
that a run saves holds every option with its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AgentConfig:
    """Registry names of the agent's torso, core and head, and the options of each."""

    torso: str = "shallow"  # encoder: a name in agents.torsos.TORSOS
    core: str = "lstm"  # recurrent core: a name in agents.cores.CORES
    head: str = "linear"  # policy/value head: a name in agents.heads.HEADS
    torso_options: dict = field(default_factory=dict)  # fields of the torso's Config
    # fields of the core's Config (e.g. hidden_size)
    core_options: dict = field(default_factory=dict)
    head_options: dict = field(default_factory=dict)  # fields of the head's Config
