"""``publish:`` in a compare file: the report, copied to where the repository keeps results.

A compare's report lives in its output directory (``runs/compare/<name>/``), which is not
committed. A study publishes it beside its csv, so the result travels with the code::

    publish: {path: docs/results/data/study_heads_lab6, figure: final_scores}

makes every report also write ``docs/results/data/study_heads_lab6.md`` (the report, its image links
pointing at the copies), ``docs/results/data/study_heads_lab6.png`` (the ``figure`` plot) and
``docs/results/data/study_heads_lab6_<plot>.png`` for the other plots the report has.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

PLOTS = ("learning_curves", "final_scores", "probability_of_improvement")


@dataclass
class PublishSpec:
    """The ``publish:`` section of a compare file; checked on load."""

    path: str = ""  # file stem, relative to the working directory; "": the report stays in out
    figure: str = "learning_curves"  # the plot published as <path>.png

    def __post_init__(self):
        if self.figure not in PLOTS:
            raise ValueError(f"publish.figure: {self.figure!r} is not one of {', '.join(PLOTS)}")
        self.path = str(Path(self.path).expanduser()) if self.path else ""
        if self.path and (self.path.endswith((".md", ".png", "/"))
                          or Path(self.path).name in ("", ".", "..")):
            raise ValueError(f"publish.path: {self.path!r} is not a file stem (give one without "
                             "a suffix, e.g. docs/results/data/study_heads_lab6)")


def destinations(spec: PublishSpec) -> dict[str, Path]:
    """Where each plot goes: ``<path>.png`` for the figure, ``<path>_<plot>.png`` otherwise."""
    stem = Path(spec.path)
    return {p: stem.with_name(stem.name + ("" if p == spec.figure else f"_{p}") + ".png")
            for p in PLOTS}


def write(out: Path, spec: PublishSpec) -> list[Path]:
    """Copy ``out``'s report and the plots it shows to ``spec.path``; returns the files written.

    Only plots the report links to are copied (an old plot left in ``out`` is not), and a
    published plot the report no longer shows is removed, so the published files are the
    report as written.
    """
    if not spec.path:
        return []
    stem = Path(spec.path)
    stem.parent.mkdir(parents=True, exist_ok=True)
    text, written = (out / "report.md").read_text(), []
    for plot, dest in destinations(spec).items():
        link = f"]({plot}.png)"
        if link in text and (out / f"{plot}.png").is_file():
            shutil.copyfile(out / f"{plot}.png", dest)
            text = text.replace(link, f"]({dest.name})")
            written.append(dest)
        elif dest.is_file():
            dest.unlink()
    report = stem.with_name(stem.name + ".md")
    report.write_text(text)
    return [report, *written]
