"""The compare report's markdown tables (scripts/compare/report.py)."""

from scripts.compare.report import per_task_markdown


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
    from scripts.compare.publish import PublishSpec, write

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
    from scripts.compare.trials import left_out

    unfinished = ["a-seed5", *(f"{v}-seed{s}" for s in (6, 7, 9) for v in "abc")]
    finished = ["a-seed0", "b-seed0", "c-seed0", "b-seed5", "c-seed5"]
    assert left_out(unfinished, finished) == "a-seed5, seeds 6-7, seed 9 (every variant)"
    assert left_out(["x-seed1"], ["x-seed0"]) == "x-seed1"  # one variant: trials by name


def test_curves_are_read_once_per_state_of_the_event_files(tmp_path, monkeypatch):
    """A compare's looks read a finished trial's curves once; a run that goes on is read again."""
    from tensorboard.backend.event_processing import event_accumulator
    from torch.utils.tensorboard import SummaryWriter

    from scripts.compare.curves import learning_curve

    loads = []
    reload = event_accumulator.EventAccumulator.Reload
    monkeypatch.setattr(event_accumulator.EventAccumulator, "Reload",
                        lambda self: loads.append(1) or reload(self))
    run = tmp_path / "run"
    with SummaryWriter(str(run)) as w:
        for step, value in ((100, 1.0), (200, 2.0), (200, 2.5)):  # a resume repeats a step
            w.add_scalar("episode_return_mean100", value, step)
            w.add_scalar("wall_time_s", step / 10, step)
    frames, values = learning_curve(run)
    assert frames.tolist() == [100, 200] and values.tolist() == [1.0, 2.5]
    values[:] = 0  # a caller's change stays with the caller
    assert learning_curve(run)[1].tolist() == [1.0, 2.5]
    assert learning_curve(run, "wall_time_s")[1].tolist() == [10.0, 20.0]
    assert len(loads) == 1
    with SummaryWriter(str(run)) as w:  # the run resumes and logs on
        w.add_scalar("episode_return_mean100", 3.0, 300)
    assert learning_curve(run)[0].tolist() == [100, 200, 300] and len(loads) == 2
    assert learning_curve(run, "no_such_tag")[0].size == 0
