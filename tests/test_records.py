"""A compare's kept records: a trial whose run directory is lost comes back from its record."""

import csv
import json
import shutil

import pytest
import yaml

from learners.config.schema import ConfigError
from scripts.compare.command import load_spec, run_compare
from scripts.compare.report import learning_curve, param_count
from scripts.compare.trials import eval_is_current, make_job, needs_work, run_trial, trial_state
from tests.test_compare import ROOT, write_compare


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
        assert record["health"]["updates"] > 0  # the training health the report shows

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
    health = {r["trial"]: r["health"] for r in before["trials"]}
    assert {r["trial"]: r["health"] for r in after["trials"]} == health  # from the records
    assert "## Training health" in (out / "report.md").read_text()
    assert _table(table) == rows  # the study's table is whole again, not cut to what ran here
    # A second report does not rewrite the records from the restored copies.
    stamp = {t.slug: (keep / t.slug / "record.json").stat().st_mtime_ns for t in trials}
    run_compare(str(path), quiet=True, report_only=True)
    assert stamp == {t.slug: (keep / t.slug / "record.json").stat().st_mtime_ns for t in trials}

    # Another evaluation than the record's: no checkpoint to evaluate, so it trains again.
    shutil.rmtree(out)
    data = yaml.safe_load(path.read_text())
    data["evaluate"]["episodes"] = 3
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert set(run_compare(str(path), dry_run=True)["trials"].values()) == {"new"}
    assert "4 trial(s) have kept records" in capsys.readouterr().err
    assert set(run_compare(str(path), report_only=True)["trials"].values()) == {"new"}
    assert capsys.readouterr().err.count("no checkpoint to evaluate again") == 4

    # More frames than a record holds: nothing to extend, so the trial trains from the start,
    # and what it leaves is its own, not the record's.
    data["evaluate"]["episodes"] = 2
    data["overrides"]["run.total_frames"] *= 2
    path.write_text(yaml.safe_dump(data))
    status = run_compare(str(path), report_only=True)["trials"]
    assert set(status.values()) == {"new"}
    assert capsys.readouterr().err.count("has no checkpoint to extend: it trains") == 4
    spec, trials, out = load_spec(path)
    t = trials[0]
    t.dir.mkdir(parents=True)
    for name in ("summary.json", "eval.json", "record.json"):  # as a record restored earlier
        shutil.copyfile(keep / t.slug / name, t.dir / name)
    run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    assert not (t.dir / "record.json").exists() and trial_state(t.dir, 800) == "done"
    assert learning_curve(t.dir)[0][-1] > curves[t.slug][0][-1]  # its own, longer curve


def test_a_trial_is_kept_as_it_finishes_without_a_report(tmp_path, capsys):
    """The compare keeps each finished trial's record at once; a report (a look) is not needed."""
    from scripts.compare.command import _keep_one

    keep = tmp_path / "kept"
    spec, trials, out = load_spec(write_compare(tmp_path, keep=str(keep)))
    done, waiting = trials[0], trials[1]
    run_trial(make_job(done, spec, done.cfg.run.total_frames, [], True))
    _keep_one(spec, trials, out, False, waiting.slug)  # not started: nothing to keep
    assert not (keep / waiting.slug).exists()
    _keep_one(spec, trials, out, False, done.slug)
    assert f"kept     {done.slug}'s record in {keep}" in capsys.readouterr().err
    assert sorted(p.name for p in (keep / done.slug).iterdir()) == [
        "config.yaml", "eval.json", "meta.json", "record.json", "summary.json"]
    assert not (out / "report.md").exists()  # no report written, so no look logged
    assert not (out / "plan.json").is_file() or not json.loads(
        (out / "plan.json").read_text())["reports"]


def test_a_checkouts_revision_is_dirty_for_code_not_for_docs(tmp_path):
    import subprocess

    from learners.runtime.run_dir import git_revision

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "docs").mkdir()
    (tmp_path / "run.py").write_text("x = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    clean = git_revision(tmp_path)
    assert len(clean) == 40 and not clean.endswith("-dirty")
    (tmp_path / "docs" / "rows.csv").write_text("a\n")  # a study's rows, kept records
    assert git_revision(tmp_path) == clean
    (tmp_path / "run.py").write_text("x = 2\n")
    assert git_revision(tmp_path) == clean + "-dirty"


def test_kept_records_and_the_probe_table_hold_the_torso_monitors_series(tmp_path, capsys):
    """Every torso/* tag and policy/spread: in record.json, in csv.probes, and back again."""
    from scripts.compare.curves import learning_curve as read_curve
    from scripts.compare.curves import probes

    keep, table = tmp_path / "kept", tmp_path / "probes.csv"
    overrides = yaml.safe_load(write_compare(tmp_path).read_text())["overrides"]
    path = write_compare(tmp_path, keep=str(keep), seeds=[0], csv={"probes": str(table)},
                         overrides={**overrides, "learner.monitor.every": 2,
                                    "run.log_every_s": 1e-6})  # a TensorBoard point a probe
    spec, trials, out = load_spec(path)
    for t in trials:
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    run_compare(str(path), quiet=True, report_only=True)
    frames_per_update = 5 * 4  # T x B, frame skip 1: 20 updates, a probe every 2
    series = {}
    for t in trials:
        curves = json.loads((keep / t.slug / "record.json").read_text())["curves"]
        tags = sorted(tag for tag in curves if tag.startswith(("torso/", "policy/")))
        assert tags == sorted(probes(t.dir)) and "policy/spread" in tags
        assert {"torso/fc/inactive", "torso/fc/dormant"} <= set(tags)
        for tag in tags:  # as the event files hold them
            frames, values = read_curve(t.dir, tag)
            assert curves[tag]["frames"] == [int(f) for f in frames]
            assert curves[tag]["frames"] == [f * frames_per_update for f in range(1, 20, 2)]
            assert curves[tag]["values"] == pytest.approx(list(values), abs=1e-6)
        series[t.slug] = curves
    rows = _table(table)
    assert list(rows[0]) == ["variant", "seed", "frames", "tag", "value"]
    by_trial = {t.slug: t for t in trials}
    want = [(by_trial[slug].variant, "0", str(f), tag, v)  # the record's 6 decimals
            for slug, curves in series.items() for tag in sorted(curves)
            if tag.startswith(("torso/", "policy/"))
            for f, v in zip(curves[tag]["frames"], curves[tag]["values"])]
    got = [(r["variant"], r["seed"], r["frames"], r["tag"], float(r["value"])) for r in rows]
    assert sorted(got) == sorted(want)

    shutil.rmtree(out)  # the run directories are gone: the records bring the series back
    capsys.readouterr()
    run_compare(str(path), report_only=True)
    assert capsys.readouterr().err.count("restored from its kept record") == len(trials)
    for t in trials:
        assert trial_state(t.dir, t.cfg.run.total_frames) == "done"
        assert {tag: (list(f), list(v)) for tag, (f, v) in probes(t.dir).items()} == {
            tag: (c["frames"], c["values"]) for tag, c in series[t.slug].items()
            if tag.startswith(("torso/", "policy/"))}
    assert _table(table) == rows  # the table written again from the records alone

    run_compare(str(path), quiet=True, report_only=True, out=str(tmp_path / "elsewhere"))
    assert _table(tmp_path / "elsewhere" / "probes.csv") == rows  # the study's table left be


def test_keep_refuses_a_file_and_a_pbt_population(tmp_path, capsys):
    (tmp_path / "kept").write_text("")
    for changes, words in (({"keep": str(tmp_path / "kept")}, "keep: "),
                           ({"keep": str(tmp_path / "k"), "pbt": {"enabled": True}},
                            "keep: a PBT population")):
        path = write_compare(tmp_path, **changes)
        with pytest.raises(ConfigError, match=words):
            load_spec(path)


def test_trials_only_the_table_holds_are_rebuilt_from_it(tmp_path, capsys):
    keep, table = tmp_path / "kept", tmp_path / "study.csv"
    columns = {"variant": "variant", "seed": "seed", "frames": "frames", "task": "task",
               "score": "score", "return": "return", "wall": "wall_time_s",
               "train": "train_return", "to_frames": "frames_to_threshold",
               "to_minutes": "minutes_to_threshold"}
    plan = {"pairs": [["hidden-size-32", "hidden-size-16"]], "score": "eval",
            "bounds": [0.0, 1.0]}
    path = write_compare(tmp_path, keep=str(keep), threshold=-1.0,
                         csv={"path": str(table), "columns": columns}, plan=plan)
    spec, trials, out = load_spec(path)
    for t in trials:
        run_trial(make_job(t, spec, t.cfg.run.total_frames, [], True))
    before = run_compare(str(path), quiet=True, report_only=True)["results"]
    rows = _table(table)
    # The records and run directories are lost; only the committed table is left. The compare
    # file has since gained a status column, which that table was written without.
    shutil.rmtree(out)
    shutil.rmtree(keep)
    write_compare(tmp_path, keep=str(keep), threshold=-1.0, plan=plan, csv={
        "path": str(table), "columns": {**columns, "status": "status"}})
    capsys.readouterr()
    after = run_compare(str(path), report_only=True)["results"]
    err = capsys.readouterr().err
    assert err.count("final scores only") == 4 and err.count("restored from its kept") == 4
    # every column of the table comes back, times included
    assert _table(table) == [{**r, "status": "finished"} for r in rows]
    assert all(r["restored"] == "table" for r in after["trials"])
    for name, v in after["variants"].items():  # the same final scores, seeds and intervals
        assert v["scores_per_seed"] == before["variants"][name]["scores_per_seed"]
        assert v["params"] == before["variants"][name]["params"]
        assert v["wall_time_s_mean"] == pytest.approx(before["variants"][name]["wall_time_s_mean"],
                                                      abs=0.1)
    assert after["primary"] == before["primary"]  # the plan scores the final evaluation
    report = (out / "report.md").read_text()
    assert "4 trial(s) rebuilt from the compare's table" in report
    for t in trials:
        assert trial_state(t.dir, t.cfg.run.total_frames) == "done"
        assert eval_is_current(t.dir, spec.evaluate.episodes)
        assert learning_curve(t.dir)[0].size == 0  # no curve to draw


def test_a_normalised_table_is_rebuilt_as_normalised_scores(tmp_path):
    # The lab suites' tables hold reference-normalised scores: rebuilt as normalised, with the
    # raw return where the table has a return column, and nothing trains.
    from scripts.compare import records

    table = tmp_path / "lab.csv"
    table.write_text("variant,seed,frames,task,score,return\n"
                     "head-linear,0,2001408,CollectGoodObjects,92.5,8.5\n"
                     "head-linear,0,2001408,ExploreGoalLocations,61.0,3.2\n")
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump({
        "name": "lab", "base": str(ROOT / "configs" / "impala_lab6.yaml"),
        "out": str(tmp_path / "out"), "variants": [{"agent.head": "linear"}], "seeds": [0, 1],
        "overrides": {"run.total_frames": 2.0e+6}, "keep": str(tmp_path / "kept"),
        "csv": {"path": str(table), "columns": {"variant": "variant", "seed": "seed",
                                                "frames": "frames", "task": "task",
                                                "score": "score", "return": "return"}}}))
    spec, trials, out = load_spec(path)
    lines = records.from_table(trials, spec.csv, spec.keep, 30, "eval")
    assert len(lines) == 1 and "head-linear-seed0: record rebuilt" in lines[0]  # seed 1: no rows
    evaluation = json.loads((tmp_path / "kept" / "head-linear-seed0" / "eval.json").read_text())
    assert evaluation["score"] == "reference-normalised"
    assert evaluation["tasks"]["CollectGoodObjects"] == {
        "normalized_score": 92.5, "return_mean": 8.5, "episodes": 30}
    # A table without a task column cannot rebuild anything, and says so.
    spec.csv.columns.pop("task")
    (line,) = records.from_table(trials, spec.csv, str(tmp_path / "other"), 30, "eval")
    assert "2 row(s) beyond" in line and "cannot rebuild them: it has no task column" in line
    # ... but only where it holds rows of a trial without its record: seed 0's record is kept
    # and seed 1 has not run, so nothing is lost and nothing is said.
    assert records.from_table(trials, spec.csv, spec.keep, 30, "eval") == []


def test_mira_command_makes_absolute_paths_relative(tmp_path):
    from learners.runtime.run_dir import mira_command

    argv = ["compare", str(tmp_path / "configs" / "x.yaml"), "--out", str(tmp_path / "runs"),
            f"run.dir={tmp_path / 'runs' / 'a'}", "--max-concurrent", "2"]
    assert mira_command(argv, start=tmp_path) == (
        "mira compare configs/x.yaml --out runs run.dir=runs/a --max-concurrent 2")
    assert mira_command(["train", "my config.yaml"]) == "mira train 'my config.yaml'"


def test_a_kept_record_names_the_mira_command_and_no_machine(tmp_path, monkeypatch):
    """A trial trained by a Ray worker records the driver's command, relative paths, no host."""
    monkeypatch.chdir(tmp_path)
    path = write_compare(tmp_path, keep="kept", seeds=[0], out="out")
    spec, trials, _ = load_spec(path)
    elsewhere = tmp_path / "worker"  # a worker's own working directory and command line
    elsewhere.mkdir()
    monkeypatch.setattr("sys.argv", ["/opt/ray/default_worker.py", "--node-ip-address=192.0.2.7"])
    for t in trials:
        job = make_job(t, spec, t.cfg.run.total_frames, [], True)
        job.update(command="mira compare compare.yaml", cwd=str(tmp_path))
        monkeypatch.chdir(elsewhere)
        run_trial(job)
        monkeypatch.chdir(tmp_path)
    run_compare(str(path), quiet=True, report_only=True)
    for t in trials:
        kept = tmp_path / "kept" / t.slug
        meta = json.loads((kept / "meta.json").read_text())
        assert meta["command"] == "mira compare compare.yaml" and "host" not in meta
        run_dir = yaml.safe_load((kept / "config.yaml").read_text())["run"]["dir"]
        assert (tmp_path / run_dir).resolve() == t.dir.resolve() and not run_dir.startswith("/")
        checkpoint = json.loads((kept / "eval.json").read_text())["checkpoint"]
        assert checkpoint.startswith("checkpoints/ckpt_")
        for f in kept.iterdir():
            text = f.read_text()
            assert str(tmp_path) not in text and "192.0.2.7" not in text, f.name


def test_an_older_run_directory_is_kept_without_its_machine(tmp_path, monkeypatch):
    from scripts.compare.records import portable

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "t"
    meta = {"seed": 0, "command": ["/x/default_worker.py", "--node-ip-address=192.0.2.7"],
            "host": "node-3"}
    kept = json.loads(portable("meta.json", json.dumps(meta), run_dir))
    assert kept == {"seed": 0}
    assert portable("config.yaml", f"run:\n  dir: {run_dir}\n", run_dir) == "run:\n  dir: runs/t\n"
    mira = {"seed": 0, "command": "mira compare configs/studies/study_x.yaml"}
    assert json.loads(portable("meta.json", json.dumps(mira), run_dir)) == mira


def test_mira_train_records_its_own_command(tmp_path, monkeypatch):
    import shlex

    from scripts.cli import main
    from tests.conftest import small_overrides

    monkeypatch.chdir(tmp_path)
    shutil.copyfile(ROOT / "configs" / "impala_minigrid.yaml", tmp_path / "preset.yaml")
    overrides = small_overrides(tmp_path)
    assert main(["train", str(tmp_path / "preset.yaml"), *overrides, "--quiet"]) == 0
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert shlex.split(meta["command"])[:4] == ["mira", "train", "preset.yaml", "run.dir=run"]
    assert "host" not in meta and str(tmp_path) not in meta["command"]
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["run"]["dir"] == "run"


def test_a_trials_code_is_the_revision_it_started_on_then_each_it_resumed_on(tmp_path):
    from scripts.compare.records import code_cell, code_revisions

    a, b = "a" * 40, "b" * 40 + "-dirty"
    (tmp_path / "meta.json").write_text(json.dumps({"git_revision": a, "resumed_on": [
        {"frames": 1_060_000, "git_revision": a}, {"frames": 2_000_000, "git_revision": b}]}))
    code = code_revisions(tmp_path)
    assert code == [{"frames": 0, "revision": a}, {"frames": 2_000_000, "revision": b}]
    assert code_cell(code) == "aaaaaaa; bbbbbbb-dirty from 2.00M"
    (tmp_path / "meta.json").unlink()  # a trial rebuilt from a table has none
    assert code_revisions(tmp_path) == [] and code_cell([]) == "n/a"
