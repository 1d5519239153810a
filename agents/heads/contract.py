"""The heads' registry (the contract: ``agents/heads/__init__.py``).

Each head module registers itself here, not in the package, so no import goes in a circle:
the package imports the heads, and the heads import this module.
"""

from __future__ import annotations

from agents.registry import Registry

HEADS: Registry = Registry("head")
