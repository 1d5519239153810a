"""The ``agent`` section of a config: which torso, core and head, and their options.

Options are a mapping in YAML and typed as they are loaded: ``learners.config.schema.load_config``
builds ``core_options`` as the chosen core's ``Config`` dataclass (likewise heads and
torsos; unknown keys and wrong types fail with the key named), and that object is what the
agent hands the core. The config a run saves holds every option with its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The chosen component's Config dataclass, as the loader builds it (a mapping of its fields
# only in an AgentConfig built by hand, read by agents.registry.typed_options).
Options = Any


@dataclass(frozen=True)
class AgentConfig:
    """Registry names of the agent's torso, core and head, and the options of each."""

    torso: str = "shallow"  # encoder: a name in agents.torsos.TORSOS
    core: str = "lstm"  # recurrent core: a name in agents.cores.CORES
    head: str = "linear"  # policy/value head: a name in agents.heads.HEADS
    torso_options: Options = field(default_factory=dict)  # the torso's Config
    core_options: Options = field(default_factory=dict)  # the core's Config (e.g. hidden_size)
    head_options: Options = field(default_factory=dict)  # the head's Config
