"""Name -> class registries used by configs (DESIGN.md: CORES, HEADS, TORSOS, ...).

A registry is a plain dict with one extra promise: looking up an unknown name fails
with a sentence that lists the valid names, so a typo in a config is a one-line fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

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
        return sorted(self._entries)
