"""Name -> class registries used by configs (CORES, HEADS, TORSOS, ...).

A registry is a plain dict with one extra promise: looking up an unknown name fails
with a sentence that lists the valid names, so a typo in a config is a one-line fix.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from typing import Generic, Literal, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of components. ``REG["lstm"]`` or ``REG.get("lstm")``."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@CORES.register("lstm")`` on a class."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        """The entry registered as ``name``; KeyError listing the valid names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} {name!r}; valid {self.kind}s: {valid}") from None

    __getitem__ = get

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)


def choices(tp) -> tuple | None:
    """The allowed values of a ``Literal[...]`` type (``X | None`` unwrapped), else None."""
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
        tp = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else None


def check_choices(obj, prefix: str = "") -> None:
    """Raise ValueError unless every ``Literal`` field of dataclass ``obj`` holds one of its values.

    The one check of enumerated settings, from their type (the config loader runs
    the same test on load, with the full key in its message).
    """
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        allowed = choices(hints[f.name])
        value = getattr(obj, f.name)
        if allowed is not None and value is not None and value not in allowed:
            raise ValueError(f"{prefix}{f.name} must be one of {', '.join(map(str, allowed))}, "
                             f"got {value!r}")


def typed_options(config_cls: type, config=None, options: dict | None = None):
    """A component's options as its ``Config``: ``config`` itself, or built from ``options``.

    Components take either the typed config that the experiment config resolved on load
    (``learners/config/schema.py``) or keyword options when built directly
    (``LSTMCore(64, hidden_size=32)``); a mapping given as ``config`` (an ``AgentConfig``
    built by hand) is read as options. Both at once is a TypeError.
    """
    if isinstance(config, dict):
        config, options = None, {**config, **(options or {})}
    if config is not None:
        if options:
            raise TypeError(f"give {config_cls.__name__} or keyword options, not both "
                            f"(got {sorted(options)} with it)")
        if not isinstance(config, config_cls):
            raise TypeError(f"expected {config_cls.__name__}, got {type(config).__name__}")
        return config
    return config_cls(**(options or {}))


def ranged(default, low=None, high=None, low_open: bool = False, high_open: bool = False):
    """A config field whose number must lie in an interval, declared beside the field.

    ``field(default=default)`` with the interval in its metadata under ``"range"`` as
    ``(low, high, low_open, high_open)``; None is unbounded. The config loader checks it
    (``learners.config.typed_yaml.check_ranges``) and the configuration reference prints it.
    """
    return dataclasses.field(default=default,
                             metadata={"range": (low, high, low_open, high_open)})
