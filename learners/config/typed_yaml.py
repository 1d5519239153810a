"""Typed dataclasses from YAML: the one place mappings become typed configs.

``from_dict`` builds a dataclass from a mapping, checking every key against the fields
(an unknown key lists the valid ones) and every value against the field's type (a
``Literal`` lists its values); ``read_yaml`` and ``parse_overrides`` read files and
``dotted.key=value`` overrides with one-line errors; ``check_ranges`` checks every field
declared with a range (``agents.registry.ranged``) against it.
``learners/config/schema.py`` composes the experiment's sections with these.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from agents.registry import choices


class ConfigError(ValueError):
    """A config that cannot be used; the message names the key."""


def _coerce(value: Any, tp: Any, key: str) -> Any:
    allowed = choices(tp)
    if allowed is not None:  # enumerated settings (Literal types): checked here, once
        if value is None and type(None) in typing.get_args(tp):
            return None
        if value not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, allowed))}, got {value!r}")
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):  # a section the loader built already (env, agent)
            return value
        if not isinstance(value, dict):
            fields = ", ".join(f.name for f in dataclasses.fields(tp))
            raise ConfigError(f"{key}: expected a mapping of its keys ({fields}), got {value!r}")
        return from_dict(tp, value, key)
    if origin is list or tp is list:
        if isinstance(value, str):
            value = yaml.safe_load(value) if value.strip().startswith("[") else [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (inner,) = typing.get_args(tp) or (Any,)
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            number = float(value)  # accepts 2e6 and "2e6"
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not math.isfinite(number) or number != int(number):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(number)
    if tp is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return "" if value is None else str(value)
    return value


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``; every key must be a field of ``cls``."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'the file'}: expected a mapping of keys ({', '.join(names)})"
                          f", got {type(data).__name__} {data!r:.60}")
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else key
        if key not in names:
            where = f"under '{prefix}'" if prefix else "at the top level"
            raise ConfigError(f"unknown config key '{full}'; "
                              f"valid keys {where}: {', '.join(names)}")
        kwargs[key] = _coerce(value, hints[key], full)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # a __post_init__ check; its text may name the key
        text = str(e)
        raise ConfigError(text if prefix and text.startswith(f"{prefix}.")
                          else f"{prefix or 'config'}: {text}") from None


def to_dict(cfg: Any) -> dict:
    """A config dataclass as nested plain dicts and lists (``dataclasses.asdict``)."""
    return dataclasses.asdict(cfg)


def changed_keys(old: Any, new: Any, prefix: str) -> list[str]:
    """``"prefix.key: old -> new"`` for each setting that differs between two config sections.

    ``old`` and ``new`` are config dataclasses of one section (or nested dicts); nested
    sections are compared key by key, so the line names the innermost setting.
    """
    a = old if isinstance(old, dict) else to_dict(old)
    b = new if isinstance(new, dict) else to_dict(new)
    out = []
    for key in sorted(set(a) | set(b)):
        x, y, name = a.get(key), b.get(key), f"{prefix}.{key}"
        if isinstance(x, dict) and isinstance(y, dict):
            out += changed_keys(x, y, name)
        elif x != y:
            out.append(f"{name}: {x!r} -> {y!r}")
    return out


def weight_changes(held: Any, wanted: Any) -> list[str]:
    """What differs between two experiment configs in the settings that shape the agent's weights.

    The agent section, and ``learner.popart`` (its per-task value outputs are agent weights).
    """
    return (changed_keys(held.agent, wanted.agent, "agent")
            + changed_keys({"popart": held.learner.popart}, {"popart": wanted.learner.popart},
                           "learner"))


def said_briefly(lines: list[str], most: int = 3) -> str:
    """The first ``most`` of ``lines`` joined by "; ", and how many more there are."""
    more = len(lines) - most
    return "; ".join(lines[:most]) + (f"; and {more} more" if more > 0 else "")


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``dotted = "a.b.c"``, creating sections as needed."""
    keys = dotted.split(".")
    node = data
    for i, k in enumerate(keys[:-1]):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            where = ".".join(keys[:i + 1])
            raise ConfigError(f"override {dotted}: {where} holds {node!r}, not a section (was it "
                              f"set by the file or an earlier override such as {where}=...?)")
    node[keys[-1]] = value


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{getattr(e, 'problem', None) or e}"


def read_yaml(path: Path) -> Any:
    """A YAML file's contents, parsed.

    Unreadable text or a syntax error is a ConfigError naming the file and the line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x}); "
                          "is it a YAML config?") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: YAML syntax error at {_yaml_problem(e)}") from None


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """``["a.b=3", "c=[1, 2]"]`` -> ``[("a.b", 3), ("c", [1, 2])]`` (values parsed as YAML)."""
    out = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form dotted.key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: the value is not valid YAML "
                              f"({_yaml_problem(e)})") from None
        out.append((key.strip(), value))
    return out


def _interval(low, high, low_open: bool, high_open: bool) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {low}"
    return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def check_range(key: str, value, low, high, low_open: bool = False,
                high_open: bool = False) -> None:
    """ConfigError naming ``key`` unless ``value`` is finite and inside the interval."""
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (low is None or (value > low if low_open else value >= low))
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        raise ConfigError(f"{key} must be {_interval(low, high, low_open, high_open)}, "
                          f"got {value!r}")


def check_ranges(cfg: Any, prefix: str = "") -> None:
    """Check every field of dataclass ``cfg`` declared with a range, nested sections too.

    The interval is the field's ``metadata["range"]`` (``agents.registry.ranged``); a
    value outside it is a ConfigError naming ``prefix.field``; None (unset) is not checked.
    """
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value):
            check_ranges(value, key)
        elif "range" in f.metadata and value is not None:
            check_range(key, value, *f.metadata["range"])
