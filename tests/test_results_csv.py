"""A compare's ``csv:`` table (scripts/compare/results_csv.py): its rows, columns and statuses."""

import json
from pathlib import Path

import numpy as np
import pytest

from learners.runtime.run_dir import RunDir
from scripts.compare.command import load_spec, main, run_compare
from tests.test_compare import write_compare


def test_the_csv_section_writes_one_row_per_trial_and_task(tmp_path, capsys):
    import csv

    from scripts.compare.report import learning_curve, time_to_threshold
    from scripts.compare.trials import make_job, run_trial

    table = tmp_path / "data" / "study.csv"
    columns = {"core_width": "agent.core_options.hidden_size", "seed": "seed",
               "frames": "frames", "task": "task", "score": "score", "return": "return",
               "to_frames": "frames_to_threshold", "to_minutes": "minutes_to_threshold"}
    # a threshold every curve reaches at its first point (MiniGrid returns are in [0, 1])
    path = write_compare(tmp_path, csv={"path": str(table), "columns": columns}, threshold=-1.0)
    spec, trials, out = load_spec(path)
    for t in trials:  # the trials, finished and evaluated in this process (no Ray)
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    result = run_compare(str(path), quiet=True, report_only=True)
    assert not result["results"]["unfinished"]
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == sorted(columns)  # the file's order (write_compare sorts its keys)
    # MiniGrid is one task: one row per trial, in the compare's (seed-major) order.
    assert [(r["core_width"], r["seed"]) for r in rows] == [
        ("16", "0"), ("32", "0"), ("16", "1"), ("32", "1")]
    evaluated = {r["trial"]: r for r in result["results"]["trials"]}
    for row, t in zip(rows, trials):
        (task, e), = evaluated[t.slug]["eval"]["tasks"].items()
        assert row["task"] == task and int(row["frames"]) == evaluated[t.slug]["frames"] >= 400
        # no score table for MiniGrid: the score is the raw mean return
        assert float(row["score"]) == pytest.approx(e["return_mean"]) == float(row["return"])
        # time to the threshold: the curve's first point, and the training time logged there
        frames, _ = learning_curve(t.dir)
        assert int(row["to_frames"]) == frames[0] and 0 <= float(row["to_minutes"]) <= 10
        assert time_to_threshold(t.dir, "episode_return_mean100", 2.0) == {
            "frames": None, "wall_time_s": None}  # never reached
    report = (Path(result["out"]) / "report.md").read_text()
    assert "## Time to -1" in report and "not reached" not in report


def test_a_status_column_puts_every_trial_that_started_in_the_csv(tmp_path):
    """Finished, unfinished and failed trials each get a row; a trial never started has none."""
    import csv

    from scripts.compare.results_csv import rows
    from scripts.compare.trials import make_job, run_trial

    table = tmp_path / "study.csv"
    columns = {"variant": "variant", "seed": "seed", "status": "status", "frames": "frames",
               "score": "score", "to_frames": "frames_to_threshold"}
    path = write_compare(tmp_path, seeds=[0, 1, 2], threshold=-1.0,
                         csv={"path": str(table), "columns": columns})
    spec, trials, out = load_spec(path)
    for t in trials[:3]:  # seed 0's and one of seed 1's, finished and evaluated
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    short = trials[3]  # seed 1's other trial stops short of its frames, with a checkpoint
    run_trial(make_job(short, spec, 200, [], False))
    at = RunDir.frames_of(RunDir(short.dir).latest_checkpoint())
    assert 0 < at < short.cfg.run.total_frames
    res = run_compare(str(path), quiet=True, report_only=True)["results"]
    assert res["unfinished"] == [t.slug for t in trials[3:]]
    with open(table, newline="") as f:
        got = list(csv.DictReader(f))
    assert [(r["variant"], r["seed"], r["status"]) for r in got] == [
        (t.variant, str(t.seed), "finished") for t in trials[:3]] + [
        (short.variant, "1", "unfinished")]  # seed 2 never started: no rows
    assert all(r["score"] and r["to_frames"] for r in got[:3])
    assert got[3]["frames"] == str(at) and got[3]["score"] == got[3]["to_frames"] == ""
    kept = json.loads((out / "plan.json").read_text())["settings"]  # and the plan's record
    assert kept["threshold"] == -1.0 and set(kept["variants"]) == {t.variant for t in trials}
    # a trial that diverged is failed, also when --report, which runs nothing, writes the table
    summary = json.loads((short.dir / "summary.json").read_text())
    summary["diverged"] = {"update": 3, "last_good_update": 2}
    (short.dir / "summary.json").write_text(json.dumps(summary))
    run_compare(str(path), quiet=True, report_only=True)
    with open(table, newline="") as f:
        assert list(csv.DictReader(f))[3]["status"] == "failed"
    # a failed trial: its frames at its latest checkpoint, no score; no status column, no row
    failed = {"trials": [], "failed": {short.slug: "RuntimeError: diverged"}}
    assert rows(failed, [], columns, [short]) == [
        {"variant": short.variant, "seed": 1, "status": "failed", "frames": at, "score": None,
         "to_frames": None}]
    assert rows(failed, [], {"seed": "seed", "score": "score"}, [short]) == []


def test_a_compare_without_evaluation_scores_variants_by_their_training_return(tmp_path):
    import csv

    from scripts.compare.trials import make_job, run_trial

    table = tmp_path / "study.csv"
    path = write_compare(tmp_path, evaluate={"episodes": 0}, csv={
        "path": str(table), "columns": {"seed": "seed", "task": "task", "score": "score"}})
    spec, trials, out = load_spec(path)
    for t in trials:  # trained in this process (no Ray), no evaluation
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    # an eval.json written into one trial by hand (mira evaluate RUN) leaves the mode alone
    (trials[0].dir / "eval.json").write_text(
        json.dumps({"score": "raw", "tasks": {}, "aggregates": {}}))
    res = run_compare(str(path), quiet=True, report_only=True)["results"]
    assert not res["unfinished"] and res["final"] == "training"
    for name, v in res["variants"].items():
        returns = [r["train_return_mean100"] for r in res["trials"] if r["variant"] == name]
        assert v["seeds"] == [0, 1] and v["tasks"] == list(res["trials"][0]["train_tasks"])
        assert v["aggregates"]["mean"]["value"] == pytest.approx(np.mean(returns))
    assert res["probability_of_improvement"]["matrix"][0][1] is not None
    report = (Path(out) / "report.md").read_text()
    assert "no final evaluation: a trial's score is its last-100 training return" in report
    assert "| hidden_size=16 | n/a |" not in report
    with open(table, newline="") as f:  # the csv holds the same per-task training scores
        rows = list(csv.DictReader(f))
    assert [float(r["score"]) for r in rows] == pytest.approx(
        [r["train_return_mean100"] for r in res["trials"]])
    assert all(r["task"] for r in rows)


def test_a_csv_column_that_names_nothing_is_one_line_before_anything_runs(tmp_path, capsys):
    for columns, words in (({"core": "agent.cor"}, "csv.columns.core: 'agent.cor' is not one of"),
                           ({"x": "scores"}, "'scores' is not one of variant, trial, seed"),
                           ({"m": "minutes_to_threshold"},
                            "minutes_to_threshold needs a threshold: set `threshold:`"),
                           ({"g": "env.game"},  # an Atari setting in a MiniGrid compare
                            "'env.game' is not a setting of this compare's trials (suite "
                            "minigrid)")):
        path = write_compare(tmp_path, csv={"path": "t.csv", "columns": columns})
        assert main([str(path), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    from scripts.compare.results_csv import rows

    # A trial with no evaluation (evaluate.episodes 0) still has its row, task columns empty.
    res = {"score_key": "return_mean", "trials": [
        {"variant": "v", "trial": "v-seed0", "seed": 0, "frames": 400, "wall_time_s": 1.0,
         "train_return_mean100": 0.5, "eval": None}]}
    assert rows(res, [], {"seed": "seed", "task": "task", "train": "train_return"}) == [
        {"seed": 0, "task": None, "train": 0.5}]
