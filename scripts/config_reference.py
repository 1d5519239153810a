"""Write ``docs/configuration.md``, the configuration reference, from the typed configs.

Every key of a training config (``learners.config.schema.ExperimentConfig`` and the sections it
composes: each suite's ``env`` options, ``AgentConfig``, the optimizer, the algorithms' own
sections) and every option of every registered torso, core and head, with its default, its
allowed range (declared on the field, ``agents.registry.ranged``) or values and the
one-line comment written beside the field in the source. The page is
generated, so it cannot drift from the code: ``tests/test_docs.py`` checks that the
committed page equals what this script writes.

    python -m scripts.config_reference            # rewrite docs/configuration.md
    python -m scripts.config_reference --check    # exit 1 if the page is out of date
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
import typing
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment: the one on its line, after the block directly above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, row = [], node.lineno - 1
        while row >= 1 and lines[row - 1].strip().startswith("#"):
            above.insert(0, comments[row])
            row -= 1
        own = comments.get(node.lineno) if node.end_lineno == node.lineno else None
        text = " ".join(above + ([own] if own else []))
        out[node.target.id] = text.replace("|", "\\|")
    return out


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _show(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" else f"`{value}`"
    if isinstance(value, float) and value and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"`{value:g}`"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"`{value:_}`".replace("_", ",")
    return f"`{value}`"


def _range(bounds: tuple) -> str:
    low, high, low_open, high_open = bounds
    if high is None:
        return f"{'>' if low_open else '>='} {low}"
    return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def _allowed(key: str, f: dataclasses.Field, tp, value, ranges: dict, option: bool) -> str:
    """Choices of a Literal, the field's declared range, the rule for component options."""
    from agents.registry import choices

    name = f.name
    kinds = choices(tp)
    if kinds:
        return ", ".join(f"`{k}`" for k in kinds)
    if key in ranges:
        return ranges[key]
    if "range" in f.metadata:
        return _range(f.metadata["range"])
    if option and isinstance(value, int) and not isinstance(value, bool):
        return ">= 1"
    if option and isinstance(value, float) and name.endswith("dropout"):
        return "[0, 1)"
    return ""


def table(cls: type, prefix: str, ranges: dict, option: bool = False,
          notes: dict | None = None, skip: tuple[str, ...] = ()
          ) -> tuple[list[str], list[tuple[type, str]]]:
    """Markdown rows for ``cls``'s fields under ``prefix``; nested dataclass fields returned."""
    hints = typing.get_type_hints(cls)
    docs = {}
    for klass in reversed(cls.__mro__[:-1]):  # a suite's options: the suite's comment too
        if klass.__dict__.get("__source_less__"):
            continue  # built from a registry (learner.<algorithm>): its sections are tables
        docs.update(field_comments(klass))
    rows, nested = [], []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        value = _default(f)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            nested.append((type(value), f"{key}."))
            continue
        allowed = _allowed(key, f, hints[f.name], value, ranges, option)
        meaning = docs.get(f.name, "")
        if notes and key in notes:
            meaning = f"{meaning} {notes[key]}".strip()
        shown = _show(value)
        if value is None and f.name in (notes or {}).get("_by_algorithm", {}):
            shown = notes["_by_algorithm"][f.name]
        rows.append(f"| `{key}` | {shown} | {allowed} | {meaning} |")
    return rows, nested


HEADER = ["| key | default | allowed | meaning |", "| --- | --- | --- | --- |"]


def section(cls: type, prefix: str, ranges: dict, notes: dict) -> list[str]:
    """The rows of a section and, after them, one table per nested section."""
    rows, nested = table(cls, prefix, ranges, notes=notes)
    out = [*HEADER, *rows, ""]
    for sub, sub_prefix in nested:
        out += [f"### `{sub_prefix.rstrip('.')}`", "", (inspect.getdoc(sub) or "").splitlines()[0],
                "", *section(sub, sub_prefix, ranges, notes)]
    return out


def env_section(base: type, suites, ranges: dict) -> list[str]:
    """The ``env`` section: ``env.suite``, then one table per suite's options class."""
    rows = table(base, "env.", ranges)[0]
    out = ["## `env`", "", (inspect.getdoc(base) or "").splitlines()[0], "", *HEADER, *rows, ""]
    by_options: dict[type, list[str]] = {}
    for name in suites.names():
        by_options.setdefault(suites.get(name).Options, []).append(name)
    for options, names in by_options.items():
        which = ", ".join(f"`{n}`" for n in names)
        out += [f"### `env.suite: {'` / `'.join(names)}`", "",
                (inspect.getdoc(options) or "").splitlines()[0], ""]
        rows = table(options, "env.", ranges, skip=("suite",))[0]
        out += ([*HEADER, *rows] if rows else [f"{which}: no key besides `env.suite`."]) + [""]
    return out


def render() -> str:
    """The whole page."""
    import envs  # noqa: F401  (registers every suite)
    from agents.cores import CORES
    from agents.heads import HEADS
    from agents.torsos import TORSOS
    from envs.suites import ENVS, EnvConfig
    from learners.algorithms import LEARNERS
    from learners.config.schema import ExperimentConfig

    by_algorithm = {}
    for name in LEARNERS.names():
        for key, value in dataclasses.asdict(LEARNERS.get(name).defaults).items():
            by_algorithm.setdefault(key, []).append(f"{name}: {_show(value)}")
    notes: dict = {"_by_algorithm": {k: ", ".join(v) for k, v in by_algorithm.items()}}
    # Keys whose values are registry names (the ranges are declared on the fields).
    ranges = {}
    named = {"env.suite": ENVS, "agent.torso": TORSOS, "agent.core": CORES, "agent.head": HEADS,
             "learner.name": LEARNERS}
    ranges.update({k: ", ".join(f"`{n}`" for n in r.names()) for k, r in named.items()})
    ranges["learner.device"] = "`auto`, `cpu`, `cuda`, `cuda:N`"
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m scripts.config_reference` from the typed configs; do not",
        "edit by hand. tests/test_docs.py checks that this page equals what the script writes. -->",
        "",
        "Every key of a training config, with its default, what it may be and what it means. Set",
        "a key in the YAML file (`learner: {batch_size: 32}`) or on the command line",
        "(`learner.batch_size=32`; values are YAML). Ranges are checked when a config is loaded:",
        "a value outside them, an unknown key or a wrong type is a one-line error naming the key.",
        "A default listed per algorithm is filled in on load and written to the run's",
        "`config.yaml`. The `env` section holds `env.suite` and the keys of that suite alone;",
        "setting a key the chosen suite does not read is refused.",
        "",
    ]
    root = ExperimentConfig()
    for f in dataclasses.fields(ExperimentConfig):
        cls = type(getattr(root, f.name))
        if f.name == "env":
            lines += env_section(EnvConfig, ENVS, ranges)
            continue
        doc = (inspect.getdoc(cls) or "").splitlines()[0]
        lines += [f"## `{f.name}`", "", doc, "", *section(cls, f"{f.name}.", ranges, notes)]
    lines += [
        "## Component options",
        "",
        "`agent.torso_options`, `agent.core_options` and `agent.head_options` take the options",
        "of the component that `agent.torso`, `agent.core` and `agent.head` name. Switching the",
        "component on the command line drops the file's options for the old one, with a notice.",
        "",
    ]
    for kind, registry in (("torso", TORSOS), ("core", CORES), ("head", HEADS)):
        for name in registry.names():
            option_cls = getattr(registry.get(name), "Config", None)
            lines += [f"### `agent.{kind}: {name}`", ""]
            rows = table(option_cls, f"agent.{kind}_options.", {}, option=True)[0] \
                if option_cls else []
            lines += ([*HEADER, *rows] if rows else ["No options."]) + [""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page, or with ``--check`` say whether the committed one is current."""
    parser = argparse.ArgumentParser(prog="python -m scripts.config_reference",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/configuration.md differs from what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text() if PAGE.is_file() else ""
        if current != text:
            print(f"{PAGE} is out of date: run python -m scripts.config_reference",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
