"""Layering (docs/design.md, "Who owns what"): floors, Ray at the edges, no circles.

The agents, the return math and the losses import without Ray (they run in learners and runners
alike, and in notebooks).
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
sys.modules["ray"] = None  # importing ray now raises ImportError
import agents.agent, agents.cores, agents.heads, agents.torsos, agents.layers
import learners.algorithms.returns, learners.algorithms.terms, learners.algorithms.impala
import learners.algorithms.ppo, learners.update.optim
top = {m.split('.')[0] for m, mod in sys.modules.items() if mod is not None}
print(sorted(top & {'envs', 'ray', 'scripts'}))
"""


def test_agents_and_losses_import_without_ray_or_envs():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"agents/losses pulled in {out.stdout.strip()}"


# ------------------------------------------------------------------ no circle of imports

PACKAGES = ("agents", "envs", "learners", "scripts", "tests")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages: dotted name -> file (a package: its __init__)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` imports, wherever the import stands.

    Module level, inside functions, under ``if TYPE_CHECKING``: each counts. ``from P import
    X`` imports module ``P.X`` where there is one, else ``P`` (X is a name defined there).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name} | ({name} & found)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = project_modules(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component that has one (Tarjan), as a module path.

    Each circle is listed from its first module (in sorted order) back to that module.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the number of modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for component in sorted(components):
        members, start = set(component), component[0]
        # the shortest way from start back to start inside the component (breadth first)
        paths = {w: [start, w] for w in graph[start] if w in members}
        frontier = list(paths)
        while start not in paths:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        found.append(paths[start])
    return found


def test_the_cycle_finder_finds_a_circle_and_passes_a_tree():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"a"}}) == [["a", "a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_function_level_and_relative_imports_count(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts/__init__.py").write_text("")
    (tmp_path / "scripts/one.py").write_text("def f():\n    from scripts import two\n")
    (tmp_path / "scripts/two.py").write_text("from .one import f\n")
    assert import_graph(tmp_path)["scripts.one"] == {"scripts.two"}
    assert cycles(import_graph(tmp_path)) == [["scripts.one", "scripts.two", "scripts.one"]]


def test_no_circle_of_imports():
    found = cycles(import_graph())
    assert not found, "circles of imports (function-level imports count):\n" + "\n".join(
        " -> ".join(c) for c in found)


# ------------------------------------------------------------------ floors

# Lowest first. A module imports only modules of its own room or of a lower floor; rooms on one
# floor (``compare`` and ``bench``) do not import each other. The longest prefix names a module's
# room; ``config_reference`` documents every registry, so it sits with the commands.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("agents",),
    ("envs",),
    ("learners.algorithms",),
    ("learners.config",),
    ("learners.update",),
    ("learners.runtime", "learners"),
    ("scripts.evaluate",),
    ("scripts.compare", "scripts.bench"),
    ("scripts.cli", "scripts.config_reference", "scripts"),
    ("scripts.papers",),
)


def room_of(module: str) -> tuple[str, int] | None:
    """(room, floor) of a project module by its longest listed prefix; None for tests."""
    best = None
    for floor, rooms in enumerate(FLOORS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and (
                    best is None or len(room) > len(best[0])):
                best = (room, floor)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import that points to a higher floor or across to another room of its floor."""
    wrong = []
    for module, imported in sorted(graph.items()):
        here = room_of(module)
        if here is None:
            continue
        for other in sorted(imported):
            there = room_of(other)
            if there is None:
                continue
            if there[1] > here[1] or (there[1] == here[1] and there[0] != here[0]):
                wrong.append(f"{module} -> {other}")
    return wrong


def test_the_floor_check_catches_an_import_pointing_up_or_across():
    assert upward_imports({"agents.agent": {"envs.runner"}}) == ["agents.agent -> envs.runner"]
    assert upward_imports({"learners.algorithms.ppo": {"learners.update.learner"}})
    assert upward_imports({"scripts.bench.command": {"scripts.compare.trials"}})
    assert upward_imports({"scripts.cli": {"scripts.compare.command", "agents.agent"},
                           "learners.runtime.trainer": {"learners.update.learner"}}) == []


def test_every_package_module_has_a_floor():
    missing = [m for m in import_graph() if not m.startswith("tests") and room_of(m) is None]
    assert not missing, f"modules outside FLOORS: {missing}"


def test_no_import_points_up_a_floor():
    wrong = upward_imports(import_graph())
    assert not wrong, "imports pointing up a floor or across rooms (docs/design.md):\n" + \
        "\n".join(wrong)


# ------------------------------------------------------------------ typed actor handles


def test_a_handle_method_the_wrapped_class_lacks_or_calls_otherwise_fails_at_definition():
    import pytest

    from learners.runtime.handles import ActorHandle, remote

    class Target:
        def step(self, weights, version=None): ...

    class Good(ActorHandle):
        wraps = Target

        @remote
        def step(self, weights, version=None):
            """Fine."""

    assert Good(Target(), in_process=True).step({}).value is None
    with pytest.raises(AttributeError, match="Target has no method 'stepp'"):
        class Misspelt(ActorHandle):
            wraps = Target

            @remote
            def stepp(self, weights, version=None):
                """No such method."""
    with pytest.raises(TypeError, match="differ in parameters"):
        class Outdated(ActorHandle):
            wraps = Target

            @remote
            def step(self, weights):
                """One parameter short."""


def test_an_actor_handle_calling_a_method_its_class_lacks_fails_at_import():
    """A misspelt method, or one whose parameters differ, fails where the handle is defined.

    Not on a remote call at run time.
    """
    import pytest

    from learners.runtime.handles import HANDLES, ActorHandle, get, remote

    class Wrapped:
        def rollout(self, weights, version):
            return weights, version

    with pytest.raises(AttributeError, match="Wrapped has no method 'rolout'"):
        class Misspelt(ActorHandle):
            wraps = Wrapped

            @remote
            def rolout(self, weights, version): ...
    with pytest.raises(TypeError, match="differ in parameters"):
        class OtherArguments(ActorHandle):
            wraps = Wrapped

            @remote
            def rollout(self, weights): ...

    class Right(ActorHandle):
        wraps = Wrapped

        @remote
        def rollout(self, weights, version): ...

    assert get(Right(Wrapped(), in_process=True).rollout(1, 2)) == (1, 2)
    for handle in HANDLES:  # each shipped handle calls at least one method
        assert any(hasattr(f, "remote_method") for f in vars(handle).values()), handle


def test_the_mira_commands_never_import_the_paper_checks():
    graph = import_graph()
    papers = {m for m in graph if m.startswith("scripts.papers")}
    assert len(papers) > 5, "the paper checks live in scripts/papers/"
    wrong = {m: sorted(graph[m] & papers) for m in graph
             if not m.startswith(("scripts.papers", "tests")) and graph[m] & papers}
    assert not wrong, f"modules outside scripts/papers/ import paper checks: {wrong}"
