"""The contributor's guide (docs/contributing.md) runs: every example, then its contract tests.

Each ``## Adding ...`` section's Python blocks run in order. A block whose first line names a
file that does not exist yet (``# agents/cores/gru.py``) becomes that module; one naming an
existing file (``# agents/cores/__init__.py: ...``) runs in a copy of that module's names,
as the lines it adds there would; a block naming no file runs alone. The registries and
modules are restored afterwards. Then the contract tests of that kind (every test
parametrised over all the registered names) run for the new entry.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "contributing.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
PATH = re.compile(r"^# ([\w/]+\.py)\b")


def sections() -> dict[str, list[str]]:
    """Section title -> its Python blocks, in order."""
    out = {}
    for part in re.split(r"^## ", GUIDE.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = BLOCK.findall(body)
    return out


@pytest.fixture
def registries(monkeypatch):
    """Every registry, restored after the test (the examples register into them)."""
    from agents.cores import CORES
    from agents.heads import HEADS
    from agents.torsos import TORSOS
    from envs.suites import ENVS
    from learners.algorithms import LEARNERS

    regs = {"core": CORES, "head": HEADS, "torso": TORSOS, "algorithm": LEARNERS, "suite": ENVS}
    for reg in regs.values():
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
    return regs


def run_blocks(blocks: list[str], monkeypatch) -> None:
    for code in blocks:
        match = PATH.match(code)
        if match is None:
            exec(compile(code, f"{GUIDE.name} example", "exec"), {"__name__": "example"})
            continue
        path = match.group(1)
        dotted = path[:-3].replace("/", ".").removesuffix(".__init__")
        if (ROOT / path).exists():  # lines added to an existing module
            namespace = dict(vars(importlib.import_module(dotted)))
            exec(compile(code, path, "exec"), namespace)
            continue
        module = types.ModuleType(dotted)
        module.__file__ = str(ROOT / path)
        monkeypatch.setitem(sys.modules, dotted, module)
        parent, _, leaf = dotted.rpartition(".")
        monkeypatch.setattr(importlib.import_module(parent), leaf, module, raising=False)
        exec(compile(code, path, "exec"), module.__dict__)


def contract_tests(test_module, name: str, shipped: set[str]) -> list[str]:
    """Run each test of ``test_module`` parametrised over every registered name, for ``name``.

    ``shipped``: the names registered before the example; a test parametrised over some of
    them only (a property the new entry may lack) is left out, as is one needing a fixture.
    The other parameters take all their values. Returns the names of the tests run.
    """
    ran = []
    for fn_name, fn in vars(test_module).items():
        if not (fn_name.startswith("test_") and callable(fn)):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        grids, over_names = [], False
        for mark in marks:
            argnames = [a.strip() for a in mark.args[0].split(",")]
            if argnames[0] == "name":
                names = {v[0] if len(argnames) > 1 else v for v in mark.args[1]}
                if names != shipped:
                    break
                over_names = True
                grids.append([dict(zip(argnames, (name, *({},) * (len(argnames) - 1))))])
            else:
                grids.append([dict(zip(argnames, v if len(argnames) > 1 else (v,)))
                              for v in mark.args[1]])
        if not over_names:
            continue
        wanted = set(inspect.signature(fn).parameters)
        if wanted != {k for grid in grids for k in grid[0]}:
            continue  # needs a fixture
        for combo in itertools.product(*grids):
            fn(**{k: v for part in combo for k, v in part.items()})
        ran.append(fn_name)
    return ran


KINDS = {"Adding a core": ("core", "test_cores"), "Adding a head": ("head", "test_heads"),
         "Adding a torso": ("torso", "test_torsos"),
         "Adding an algorithm": ("algorithm", None), "Adding a suite": ("suite", None)}


def test_the_guide_has_one_section_per_seam():
    found = sections()
    assert set(KINDS) <= set(found)
    assert all(found[title] for title in KINDS)


@pytest.mark.parametrize("title", list(KINDS))
def test_the_guides_example_runs_and_passes_its_contract_tests(title, registries, monkeypatch):
    kind, tests = KINDS[title]
    before = set(registries[kind].names())
    module = None if tests is None else importlib.import_module(f"tests.{tests}")  # its NAMES
    run_blocks(sections()[title], monkeypatch)
    (added,) = set(registries[kind].names()) - before  # one registry line, one new name
    if module is not None:
        ran = contract_tests(module, added, before)
        assert len(ran) >= 3, ran
