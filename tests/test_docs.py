"""The documentation: built strictly, generated where it can drift, and about the software."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Words about how the software was made, not what it does; and files that are not in the repo.
FORBIDDEN = re.compile(
    r"\bsessions?\b|\bsittings?\b|\bissue[s']?\s*#?\d+|\bthe issue\b|\bissue's\b|last night"
    r"|\btonight\b|\btoday\b|\byesterday\b|\bthis round\b|development machine|from memory"
    r"|\bthis commit\b|(?-i:DESIGN\.md|STYLE\.md)|\.\./shared|\bshared/|\bseeds/[\w-]+\.md"
    r"|\blater note\b|\barithmetic slip\b|\bthis page will\b|\bcommit messages?\b"
    r"|\baimed at\b|\bsame evening\b",
    re.IGNORECASE)
PY_DIRS = ("agents", "envs", "learners", "scripts", "tests")


def _python_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment in a Python file."""
    source = path.read_text(encoding="utf-8")
    out = [(tok.start[0], tok.string) for tok in
           tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def _texts():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
                 *sorted((ROOT / "configs").rglob("*.yaml")),
                 *sorted((ROOT / "envs" / "data").glob("*.md"))]:
        yield path, [(1, path.read_text(encoding="utf-8"))]
    for folder in PY_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path, _python_prose(path)


def test_the_text_speaks_of_the_software_not_of_how_it_was_made():
    hits = []
    for path, parts in _texts():
        for line, text in parts:
            for m in FORBIDDEN.finditer(text):
                at = line + text.count("\n", 0, m.start())
                hits.append(f"{path.relative_to(ROOT)}:{at}: {m.group(0)!r}")
    assert not hits, "\n".join(hits)


def test_the_forbidden_words_check_can_fail():
    for text in ("as measured last night", "this session's run", "see DESIGN.md",
                 "(issue 11, item 4)", "two sittings", "../shared/data/README.md",
                 "(Later note: seed 2)", "recorded in the commit messages", "the 2x aimed at"):
        assert FORBIDDEN.search(text), text
    for text in ("see docs/design.md", "a known issue with Ray", "since the run started"):
        assert not FORBIDDEN.search(text), text


def test_the_configuration_page_is_generated_from_the_code():
    from scripts.config_reference import PAGE, render

    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date: run python -m scripts.config_reference")


def test_every_config_key_is_on_the_configuration_page():
    import dataclasses

    from learners.config.schema import ExperimentConfig

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")

    def keys(cls, prefix):
        for f in dataclasses.fields(cls):
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            if dataclasses.is_dataclass(value):
                yield from keys(type(value), f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"

    missing = [k for k in keys(ExperimentConfig, "") if f"| `{k}` |" not in page]
    assert not missing, missing


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs not installed")
def test_the_documentation_site_builds_strictly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_readme_is_a_landing_page_and_ci_runs_its_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "mira train configs/impala_minigrid.yaml" in readme
    pip = re.search(r'pip install -c \.ci/constraints\.txt -e "(\.\[[a-z,]+\])" && '
                    r"python -m pytest -q", readme)
    assert pip, "README's test command"
    assert f'-e "{pip.group(1)}"' in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_the_evaluation_page_lists_what_each_suite_reports():
    """docs/evaluating.md's table names the aggregates ``score_table`` gives each suite."""
    import numpy as np

    from envs.evaluation import score_table

    page = (ROOT / "docs" / "evaluating.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| `(\w+)`[^|]*\| [^|]+ \| ([^|]+) \|$", page, re.MULTILINE)}
    names = {"median": "median", "mean": "mean", "iqm": "IQM", "capped_mean": "capped mean"}
    rng = np.random.default_rng(0)
    for suite, score_suite, task in (("minigrid", "none", "MiniGrid-Empty-5x5-v0"),
                                     ("atari", "atari", "Pong")):
        result = score_table({task: list(rng.normal(size=4))}, score_suite, reps=50)
        documented = [n.strip() for n in rows[suite].split(",")]
        assert documented == [names[k] for k in result["aggregates"]], (suite, documented)
