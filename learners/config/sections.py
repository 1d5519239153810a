"""The sections of a config as their components' typed options.

``load_config`` (``learners/config/schema.py``) reads a file and its overrides into a plain
mapping; the functions here turn its ``env`` and ``agent`` sections into the chosen suite's
and components' ``Config`` objects, refuse keys the chosen suite or component does not read,
and drop the options of a core, head or torso that an override switches to another.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import replace
from typing import Any

from agents.config import AgentConfig
from envs.suites import ENVS, EnvConfig, suite_options
from learners.config.typed_yaml import ConfigError, from_dict


def mapping_at(value: Any, key: str) -> dict:
    """The mapping at ``key`` (None reads as empty); anything else is a ConfigError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of its keys, got {value!r}")
    return dict(value)


def load_env(section: Any, overridden: set[str]) -> EnvConfig:
    """The env section as the chosen suite's options; a key it does not read is refused.

    A key of another suite is dropped when it holds that suite's default and no override
    names it: every config.yaml saved before each suite had its own options holds every
    env key of every suite, at its default where the suite did not read it.
    """
    env = mapping_at(section, "env")
    suite = env.get("suite", EnvConfig.suite)  # the default suite
    try:
        options = suite_options(str(suite))
    except KeyError as e:
        raise ConfigError(f"env.suite: {e.args[0]}") from None
    own = [f.name for f in dataclasses.fields(options)]
    others: dict[str, list] = {}
    for name in ENVS.names():
        for f in dataclasses.fields(suite_options(name)):
            if f.name not in own:
                default = (f.default if f.default is not dataclasses.MISSING
                           else f.default_factory())
                others.setdefault(f.name, []).append(default)
    unread = []
    for key in list(env):
        if key in others:
            if f"env.{key}" not in overridden and env[key] in others[key]:
                del env[key]  # another suite's default, saved by an older mira
            else:
                unread.append(key)
    if unread:
        reads = ", ".join(f"env.{k}" for k in own if k != "suite") or "no env key but env.suite"
        raise ConfigError(f"{', '.join(f'env.{k}' for k in unread)}: the {suite} suite does "
                          f"not read {'it' if len(unread) == 1 else 'them'} (it reads {reads})")
    return from_dict(options, env, "env")


def load_agent(section: Any) -> AgentConfig:
    """The agent section with each component's options built as that component's Config."""
    from agents.agent import agent_problem
    from agents.cores import CORES
    from agents.heads import HEADS
    from agents.torsos import TORSOS

    agent = mapping_at(section, "agent")
    parts = (("torso", TORSOS), ("core", CORES), ("head", HEADS))
    options = {f"{part}_options": agent.pop(f"{part}_options", None) or {} for part, _ in parts}
    cfg = from_dict(AgentConfig, agent, "agent")
    typed = {}
    for part, registry in parts:
        try:
            typed[f"{part}_options"] = resolve_options(
                registry, getattr(cfg, part), options[f"{part}_options"], f"agent.{part}_options")
        except KeyError as e:  # the registry's "unknown X 'name'; valid Xs: ..."
            raise ConfigError(f"agent.{part}: {e.args[0]}") from None
    problem = agent_problem(cfg := replace(cfg, **typed))
    if problem:
        raise ConfigError(problem)
    return cfg


_NOTED: set[str] = set()  # the swap notes already printed by this process


def reset_switched_options(data: dict, parsed: list[tuple[str, Any]]) -> None:
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
        if (new is None or new == old or not options or replaced or not isinstance(new, str)
                or new not in registry):
            continue
        agent[f"{part}_options"] = {}
        given = sorted(k.split(".", 2)[2] for k, _ in parsed
                       if k.startswith(f"agent.{part}_options."))
        rest = (f"{new} takes {', '.join(given)} from the overrides "
                "and its defaults for the rest" if given else
                f"{new} uses its defaults (give agent.{part}_options.KEY=VALUE to set them)")
        note = (f"[mira] agent.{part}={new} replaces {old or 'the default'}: "
                f"dropping the config's agent.{part}_options ({', '.join(sorted(options))}); "
                f"{rest}")
        if note not in _NOTED:  # a compare loads one variant's config once per seed: say it once
            _NOTED.add(note)
            print(note, file=sys.stderr)


def resolve_options(registry, name: str, options: Any, key: str) -> Any:
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
