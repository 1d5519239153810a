"""The compare report's markdown tables (scripts/report.py)."""

from scripts.report import per_task_markdown


def _variant(label: str, tasks: list[str], values: list[float]) -> dict:
    return {"label": label, "tasks": tasks,
            "per_task": [{"value": x, "ci95": [x - 1, x + 1]} for x in values]}


def test_per_task_table_has_every_variants_tasks():
    """Variants on different games (one game per variant) each keep their row and column."""
    lines = per_task_markdown([_variant("core=lstm, game=Asterix", ["Asterix"], [1737.0]),
                               _variant("core=lstm, game=Kangaroo", ["Kangaroo"], [7438.0]),
                               {"label": "not scored yet", "tasks": [], "per_task": []}])
    assert lines[3] == "| variant | Asterix | Kangaroo |"
    assert lines[5:] == ["| core=lstm, game=Asterix | 1737.00 [1736.00, 1738.00] | — |",
                         "| core=lstm, game=Kangaroo | — | 7438.00 [7437.00, 7439.00] |"]
    same = per_task_markdown([_variant("a", ["x", "y"], [1.0, 2.0]),
                              _variant("b", ["x", "y"], [3.0, 4.0])])
    assert same[3] == "| variant | x | y |" and len(same) == 7
    assert per_task_markdown([_variant("a", [f"t{i}" for i in range(31)], [0.0] * 31)]) == []


def test_publish_copies_what_the_report_shows_and_drops_what_it_no_longer_does(tmp_path):
    from scripts.publish import PublishSpec, write

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("![a](learning_curves.png)\n![b](final_scores.png)\n")
    for plot in ("learning_curves", "final_scores", "probability_of_improvement"):
        (out / f"{plot}.png").write_bytes(plot.encode())  # the last: left from an older report
    stale = tmp_path / "s_probability_of_improvement.png"
    stale.write_bytes(b"published by an older report")
    written = write(out, PublishSpec(path=str(tmp_path / "s"), figure="final_scores"))
    assert [p.name for p in written] == ["s.md", "s_learning_curves.png", "s.png"]
    assert not stale.exists()
    assert (tmp_path / "s.png").read_bytes() == b"final_scores"
    assert (tmp_path / "s.md").read_text() == "![a](s_learning_curves.png)\n![b](s.png)\n"


def test_a_partial_report_names_whole_seeds_left_out_as_ranges():
    from scripts.trials import left_out

    unfinished = ["a-seed5", *(f"{v}-seed{s}" for s in (6, 7, 9) for v in "abc")]
    finished = ["a-seed0", "b-seed0", "c-seed0", "b-seed5", "c-seed5"]
    assert left_out(unfinished, finished) == "a-seed5, seeds 6-7, seed 9 (every variant)"
    assert left_out(["x-seed1"], ["x-seed0"]) == "x-seed1"  # one variant: trials by name
