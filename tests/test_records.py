"""A compare's kept records: a trial whose run directory is lost comes back from its record."""

import csv
import json
import shutil

import pytest
import yaml

from scripts.compare import load_spec, run_compare
from scripts.report import learning_curve, param_count
from scripts.trials import eval_is_current, make_job, needs_work, run_trial, trial_state
from tests.test_compare import write_compare


def _table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_lost_run_directory_is_restored_from_its_kept_record(tmp_path, capsys):
    keep, table = tmp_path / "kept", tmp_path / "study.csv"
    path = write_compare(tmp_path, keep=str(keep), csv={"path": str(table), "columns": {
        "variant": "variant", "seed": "seed", "frames": "frames", "score": "score",
        "wall": "wall_time_s"}})
    spec, trials, out = load_spec(path)
    for t in trials:  # finished and evaluated in this process (no Ray)
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    before = run_compare(str(path), quiet=True, report_only=True)["results"]
    rows, curves = _table(table), {t.slug: learning_curve(t.dir) for t in trials}
    params = {t.slug: param_count(t.dir) for t in trials}
    plan = json.loads((out / "plan.json").read_text())
    assert json.loads((keep / "plan.json").read_text()) == plan
    for t in trials:  # the report kept each trial's record: a few small files, no checkpoint
        kept = sorted(p.name for p in (keep / t.slug).iterdir())
        assert kept == ["config.yaml", "eval.json", "meta.json", "record.json", "summary.json"]
        record = json.loads((keep / t.slug / "record.json").read_text())
        assert record["params"] == params[t.slug] > 0 and record["curves"]

    shutil.rmtree(out)  # the machine is handed back with runs/
    capsys.readouterr()
    after = run_compare(str(path), report_only=True)["results"]
    err = capsys.readouterr().err
    assert err.count("restored from its kept record") == 4 and "no checkpoint" in err
    assert "plan.json restored" in err  # the plan's declaration and its looks carry on
    restored_plan = json.loads((out / "plan.json").read_text())
    assert restored_plan["first_seen"] == plan["first_seen"]
    assert len(restored_plan["reports"]) == len(plan["reports"]) + 1  # this report's look
    for t in trials:
        assert trial_state(t.dir, t.cfg.run.total_frames) == "done"
        assert eval_is_current(t.dir, spec.evaluate.episodes)
        assert not needs_work(make_job(t, spec, t.cfg.run.total_frames, [], True))
        assert param_count(t.dir) == params[t.slug]
        frames, values = learning_curve(t.dir)
        assert list(frames) == list(curves[t.slug][0])
        assert list(values) == pytest.approx(list(curves[t.slug][1]), abs=1e-6)
    assert not after["unfinished"] and all(r["restored"] for r in after["trials"])
    assert not any(r["restored"] for r in before["trials"])
    assert "4 trial(s) restored from their kept records" in (out / "report.md").read_text()
    assert after["variants"] == before["variants"] and after["primary"] == before["primary"]
    assert _table(table) == rows  # the study's table is whole again, not cut to what ran here
    # A second report does not rewrite the records from the restored copies.
    stamp = {t.slug: (keep / t.slug / "record.json").stat().st_mtime_ns for t in trials}
    run_compare(str(path), quiet=True, report_only=True)
    assert stamp == {t.slug: (keep / t.slug / "record.json").stat().st_mtime_ns for t in trials}

    # More frames than a record holds: nothing to extend, so the trial trains from the start.
    shutil.rmtree(out)
    data = yaml.safe_load(path.read_text())
    data["overrides"]["run.total_frames"] *= 2
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    status = run_compare(str(path), report_only=True)["trials"]
    assert set(status.values()) == {"new"}
    err = capsys.readouterr().err
    assert err.count("has no checkpoint to extend: it trains from the start") == 4


def test_trials_only_the_table_holds_are_rebuilt_from_it(tmp_path, capsys):
    keep, table = tmp_path / "kept", tmp_path / "study.csv"
    path = write_compare(tmp_path, keep=str(keep), csv={"path": str(table), "columns": {
        "variant": "variant", "seed": "seed", "frames": "frames", "task": "task",
        "score": "score"}}, plan={"pairs": [["hidden-size-32", "hidden-size-16"]],
                                  "score": "eval", "bounds": [0.0, 1.0]})
    spec, trials, out = load_spec(path)
    for t in trials:
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    before = run_compare(str(path), quiet=True, report_only=True)["results"]
    rows = _table(table)
    # The records and run directories are lost; only the committed table is left.
    shutil.rmtree(out)
    shutil.rmtree(keep)
    capsys.readouterr()
    after = run_compare(str(path), report_only=True)["results"]
    err = capsys.readouterr().err
    assert err.count("final scores only") == 4 and err.count("restored from its kept") == 4
    assert _table(table) == rows  # the table written again from the rebuilt records
    assert all(r["restored"] == "table" and r["wall_time_s"] is None for r in after["trials"])
    for name, v in after["variants"].items():  # the same final scores, seeds and intervals
        assert v["scores_per_seed"] == before["variants"][name]["scores_per_seed"]
        assert v["params"] == before["variants"][name]["params"]
        assert v["wall_time_s_mean"] is None
    assert after["primary"] == before["primary"]  # the plan scores the final evaluation
    report = (out / "report.md").read_text()
    assert "4 trial(s) rebuilt from the compare's table" in report
    for t in trials:
        assert trial_state(t.dir, t.cfg.run.total_frames) == "done"
        assert eval_is_current(t.dir, spec.evaluate.episodes)
