"""mira compare: up-front validation, and a tiny matrix on Ray.

The matrix covers the report, results, plots, skipping finished trials and resuming an interrupted
one. The stopping rules are in test_compare_rules.py, population-based training in test_pbt.py.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from learners.config.schema import ConfigError, load_config, parse_overrides
from learners.runtime.run_dir import RunDir
from scripts.compare.command import load_spec, main, run_compare
from tests.conftest import small_overrides

ROOT = Path(__file__).resolve().parents[1]
PNGS = ("learning_curves.png", "final_scores.png", "probability_of_improvement.png")


def write_compare(tmp_path, **changes) -> Path:
    """2 variants (core width 16, 32) x 2 seeds of the conftest's tiny in-process IMPALA run."""
    common = dict(parse_overrides([o for o in small_overrides(tmp_path)
                                   if not o.startswith("run.dir=")]))
    data = {
        "name": "tiny", "base": str(ROOT / "configs" / "impala_minigrid.yaml"),
        "out": str(tmp_path / "out"),
        "overrides": common, "matrix": {"agent.core_options.hidden_size": [16, 32]},
        "seeds": [0, 1],
        "evaluate": {"episodes": 2},
        "plan": {"pairs": [["hidden-size-32", "hidden-size-16"]], "score": "train",
                 "bounds": [0.0, 1.0]},
    }
    data.update(changes)
    path = tmp_path / "compare.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_run_with_out_leaves_the_studys_own_files(tmp_path, capsys):
    """The study's table holds every trial, so the report has trials to write."""
    columns = ["variant", "seed", "frames", "task", "score", "train_return"]
    table = ",".join(columns) + "\n" + "".join(
        f"hidden-size-{w},{seed},400,MiniGrid-Empty-5x5-v0,0.9,0.9\n"
        for w in (16, 32) for seed in (0, 1))
    study = {"pub/tiny.md": "published", "tiny.csv": table, "kept/notes.txt": "kept"}
    for name, text in study.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    path = write_compare(tmp_path, publish={"path": str(tmp_path / "pub" / "tiny")},
                         keep=str(tmp_path / "kept"),
                         csv={"path": str(tmp_path / "tiny.csv"),
                              "columns": {c: c for c in columns}})
    run_compare(str(path), report_only=True, out=str(tmp_path / "elsewhere"))
    err = capsys.readouterr().err
    assert "leaves the study's report" in err and "records" in err
    assert {name: (tmp_path / name).read_text() for name in study} == study
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["notes.txt"]
    assert (tmp_path / "elsewhere" / "report.md").is_file()
    assert (tmp_path / "elsewhere" / "results.csv").is_file()


def test_a_bad_publish_section_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^publish\.figure: 'curves' is not one of"):
        load_spec(write_compare(tmp_path, publish={"path": "x", "figure": "curves"}))
    for bad in ("x.md", "."):
        with pytest.raises(ConfigError, match=rf"publish.path: '{bad}' is not a file stem"):
            load_spec(write_compare(tmp_path, publish={"path": bad}))


def test_every_trial_is_validated_before_anything_runs(tmp_path, capsys):
    bad_key = write_compare(tmp_path, matrix={"agent.haed": ["linear", "linear2"]})
    with pytest.raises(ConfigError,
                       match=r"variant haed-linear \(seed 0\): unknown config key 'agent.haed'"):
        run_compare(str(bad_key))
    assert not (tmp_path / "out").exists()
    bad_value = write_compare(tmp_path, matrix={"agent.head": ["linear", "nope"]})
    assert main([str(bad_value)]) == 2
    err = capsys.readouterr().err
    assert "variant head-nope" in err and "valid heads: linear" in err
    assert main([str(write_compare(tmp_path, matrx={}))]) == 2
    assert "unknown config key 'matrx'" in capsys.readouterr().err


def test_dry_run_lists_trials_and_their_run_dirs(tmp_path, capsys):
    path = write_compare(tmp_path)
    assert main([str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    for slug in ("hidden-size-16-seed0", "hidden-size-16-seed1",
                 "hidden-size-32-seed0", "hidden-size-32-seed1"):
        assert slug in err
    spec, trials, out = load_spec(path)
    # seed-major, the order they run in: a compare stopped part-way is balanced over variants
    assert [t.cfg.agent.core_options.hidden_size for t in trials] == [16, 32, 16, 32]
    assert [t.cfg.run.seed for t in trials] == [0, 0, 1, 1]
    assert trials[0].dir == out / "trials" / "hidden-size-16-seed0" and not out.exists()
    # a plan says before anything runs how many seeds a decision needs at the earliest
    plan = {"pairs": [["hidden-size-32", "hidden-size-16"]], "statistic": "win"}
    assert main([str(write_compare(tmp_path, plan=plan)), "--dry-run"]) == 0
    assert ("plan: 1 primary pair(s) at alpha 0.05/1 each; a pair can exclude no difference "
            "after 7 seeds at the earliest (every seed one way); 2 declared, too few to decide "
            "any pair") in capsys.readouterr().err


def test_progress_line_counts_trial_hours_left_at_each_variants_pace(tmp_path):
    from scripts.compare.trials import progress_line, trained_frames

    spec, trials, out = load_spec(write_compare(tmp_path))
    target = trials[0].cfg.run.total_frames
    by_name = {t.slug: t for t in trials}
    summaries = {"hidden-size-16-seed0": {"frames": target, "wall_time_s": 3600.0},
                 "hidden-size-16-seed1": {"frames": target // 2, "wall_time_s": 1800.0},
                 "hidden-size-32-seed0": {"frames": target, "wall_time_s": 7200.0},
                 "hidden-size-32-seed1": {"frames": 0, "wall_time_s": 0.0}}  # not timed
    for slug, summary in summaries.items():
        by_name[slug].dir.mkdir(parents=True)
        (by_name[slug].dir / "summary.json").write_text(json.dumps(summary))
    # a checkpoint past the target counts as the target
    (by_name["hidden-size-16-seed1"].dir / "checkpoints").mkdir()
    (by_name["hidden-size-16-seed1"].dir / "checkpoints" / f"ckpt_{10 * target:012d}.pt").touch()
    assert trained_frames(by_name["hidden-size-16-seed1"].dir, "resume", target) == target
    assert trained_frames(by_name["hidden-size-32-seed1"].dir, "new", target) == 0
    assert trained_frames(by_name["hidden-size-32-seed1"].dir, "done", target) == target
    status = {"hidden-size-16-seed0": "done", "hidden-size-16-seed1": "resume",
              "hidden-size-32-seed0": "done", "hidden-size-32-seed1": "new"}
    behind = {"hidden-size-16-seed0": target, "hidden-size-16-seed1": target // 2,
              "hidden-size-32-seed0": target, "hidden-size-32-seed1": 0}
    line = progress_line(trials, status, behind, may_stop=True)
    # left: half of width 16's trial at its 5,400 s per 1.5 targets (0.5 h) and width 32's
    # whole trial at 7,200 s per target (2 h)
    assert line == (f"progress: 2 of 4 trial(s) done, 1 to resume, 1 new; {int(2.5 * target):,} "
                    f"of {4 * target:,} frames trained (62%); about 2.5 trial-hours "
                    "left at the pace so far; the stopping rule may end it sooner")


def test_a_seed_axis_in_the_matrix_is_the_seeds_list(tmp_path):
    """The documented example puts ``run.seed: [0, 1, 2]`` in the matrix: seeds, not variants."""
    data = yaml.safe_load(write_compare(tmp_path).read_text())
    data.pop("seeds")
    data["matrix"]["run.seed"] = [3, 4, 5]
    path = tmp_path / "seed_matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    spec, trials, _ = load_spec(path)
    assert spec.seeds == [3, 4, 5] and "run.seed" not in spec.matrix
    assert sorted({t.variant for t in trials}) == ["hidden-size-16", "hidden-size-32"]
    assert [t.cfg.run.seed for t in trials] == [3, 3, 4, 4, 5, 5]  # seed-major
    with pytest.raises(ConfigError, match="seeds are given twice"):
        load_spec(write_compare(tmp_path, matrix={"run.seed": [7, 8]}))
    with pytest.raises(ConfigError, match="overrides.run.seed"):
        load_spec(write_compare(tmp_path, overrides={"run.seed": 3}))



def _png_ok(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


@pytest.mark.ray
def test_compare_runs_reports_and_resumes(tmp_path, ray_local, capsys, monkeypatch):
    import scripts.compare.command as command

    path = write_compare(tmp_path, publish={"path": str(tmp_path / "pub" / "tiny"),
                                            "figure": "final_scores"})
    kept = []  # each trial is offered for keeping as it finishes, before any report
    monkeypatch.setattr(command, "_keep_one", lambda spec, trials, out, quiet, slug: kept.append(
        (slug, (out / "report.md").exists())))
    first = run_compare(str(path), quiet=True)
    assert first["trials"] == {s: "trained" for s in first["trials"]} and len(first["trials"]) == 4
    assert sorted(kept) == sorted((s, False) for s in first["trials"])
    out = Path(first["out"])
    for name in PNGS:
        assert _png_ok(out / name), name
    report = (out / "report.md").read_text()
    # publish: the report beside the csv, its links on the copies
    pub = tmp_path / "pub"
    assert sorted(p.name for p in pub.iterdir()) == [
        "tiny.md", "tiny.png", "tiny_learning_curves.png", "tiny_probability_of_improvement.png"]
    assert (pub / "tiny.png").read_bytes() == (out / "final_scores.png").read_bytes()
    assert (pub / "tiny.md").read_text() == report.replace(
        "](final_scores.png)", "](tiny.png)").replace(
        "](learning_curves.png)", "](tiny_learning_curves.png)").replace(
        "](probability_of_improvement.png)", "](tiny_probability_of_improvement.png)")
    assert ("raw episode return" in report and "Exploratory: probability of improvement" in report
            and "hidden_size=32" in report)
    # Each trial's code: one revision here, so no note that the trials span several.
    from learners.runtime.run_dir import git_revision
    assert f"| {git_revision()[:7]}" in report.split("## Trials")[1]
    assert "code revisions" not in report
    # The plan: stored as first seen, the primary pair's anytime-valid interval, paired seeds.
    assert "## Plan" in report and "Primary comparisons (anytime-valid)" in report
    assert "No change to the plan after a report was written" in report
    (primary,) = json.loads((out / "results.json").read_text())["primary"]
    assert primary["pair"] == ["hidden-size-32", "hidden-size-16"] and primary["seeds"] == [0, 1]
    assert primary["low"] <= primary["estimate"] <= primary["high"]
    res = json.loads((out / "results.json").read_text())
    assert len(res["trials"]) == 4 and all(r["frames"] >= 400 and r["eval"] for r in res["trials"])
    variants = list(res["variants"].values())
    assert variants[0]["params"] < variants[1]["params"]  # core width 16 < 32
    for v in variants:
        assert v["seeds"] == [0, 1]
        for a in v["aggregates"].values():
            assert a["ci95"][0] - 1e-9 <= a["value"] <= a["ci95"][1] + 1e-9
    p = res["probability_of_improvement"]["matrix"]
    assert p[0][0] is None and p[0][1]["value"] + p[1][0]["value"] == pytest.approx(1.0)
    assert p[0][1]["ci95"][0] <= p[0][1]["value"] <= p[0][1]["ci95"][1]

    # The same file again: nothing to do. An interrupted trial is resumed, the rest skipped.
    assert set(run_compare(str(path), quiet=True)["trials"].values()) == {"skipped"}
    summary_path = out / "trials" / "hidden-size-16-seed1" / "summary.json"
    summary_path.write_text(json.dumps(dict(json.loads(summary_path.read_text()),
                                            interrupted=True)))
    # The listing says how far the compare is.
    capsys.readouterr()
    run_compare(str(path), dry_run=True)
    err = capsys.readouterr().err
    assert "(at 400)" in err and "progress: 3 of 4 trial(s) done, 1 to resume, 0 new" in err
    assert "1,600 of 1,600 frames trained (100%); about 0.0 trial-hours left" in err
    # --report runs nothing: the report of the three finished trials, naming the fourth.
    partial = run_compare(str(path), quiet=True, report_only=True)
    assert partial["trials"]["hidden-size-16-seed1"] == "resume"
    assert partial["results"]["unfinished"] == ["hidden-size-16-seed1"]
    assert [r["trial"] for r in partial["results"]["trials"]] == [
        "hidden-size-16-seed0", "hidden-size-32-seed0", "hidden-size-32-seed1"]
    report = (out / "report.md").read_text()
    assert "Partial report" in report and "hidden-size-16-seed1" in report.split("## Trials")[0]
    assert "| hidden_size=16 | " in report and "n/a (one seed)" in report
    third = run_compare(str(path), quiet=True)["trials"]
    assert third.pop("hidden-size-16-seed1") == "resumed" and set(third.values()) == {"skipped"}
    assert json.loads(summary_path.read_text())["interrupted"] is False

    # Raising run.total_frames extends the finished trials; their decayed lr restarts, and the
    # listing says so (not when lr_decay_frames fixes the schedule's end).
    data = yaml.safe_load(path.read_text())
    data["overrides"]["run.total_frames"] = 2 * data["overrides"]["run.total_frames"]
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert set(run_compare(str(path), dry_run=True)["trials"].values()) == {"resume"}
    err = capsys.readouterr().err
    assert "note: 4 trial(s) resume off their schedule" in err and "jumps from 0 to" in err
    # After reports were written, the raised frames are an unplanned look, dated in plan.json
    # (the --report run trains nothing; the next report lists it).
    run_compare(str(path), quiet=True, report_only=True)
    (change,) = json.loads((out / "plan.json").read_text())["changes"]
    assert change["after_report"] and change["what"] == ["frames raised 400 -> 800"]


def test_a_trial_that_diverges_fails_with_why_and_is_not_evaluated(tmp_path, monkeypatch):
    # A diverged run stops short of its frames with its last good weights: in a compare it is
    # a failed trial (reported with the error, retried by the next run), not a finished one.
    from scripts.compare.trials import make_job, run_trial
    from tests.test_run_safety import _nonfinite_loss_after

    _nonfinite_loss_after(monkeypatch, 3)
    overrides = dict(yaml.safe_load(write_compare(tmp_path).read_text())["overrides"],
                     **{"run.total_frames": 10**6, "learner.max_skipped_updates": 4})
    spec, trials, _ = load_spec(write_compare(tmp_path, overrides=overrides, matrix={},
                                              seeds=[0], plan={}))
    (trial,) = trials
    job = make_job(trial, spec, trial.cfg.run.total_frames, [], True)
    with pytest.raises(RuntimeError, match=r"diverged: updates 4-7 had a non-finite loss or "
                                           r"gradient; its checkpoint holds update 3's weights"):
        run_trial(job)
    assert not (trial.dir / "eval.json").exists()



@pytest.mark.ray
def test_ctrl_c_to_the_process_group_leaves_each_trial_its_checkpoint(tmp_path):
    """A terminal's Ctrl-C (here ``killpg``, as ``timeout -s INT`` sends it) stops a compare.

    The compare asks its trials to stop rather than cancelling them: Ray repeats a cancel until
    the task ends, and the repeat was the trainer's second interrupt, which quit without the
    checkpoint (with runner actors a loop turn outlasted the repeat). Periodic checkpoints are
    off, so the checkpoint can only be the interrupt's.
    """
    overrides = dict(yaml.safe_load(write_compare(tmp_path).read_text())["overrides"],
                     **{"run.total_frames": 10_000_000, "run.checkpoint_every_s": 1e9,
                        "run.log_every_s": 0.5, "runtime.num_runners": 2})
    path = write_compare(tmp_path, overrides=overrides, matrix={}, seeds=[0], evaluate={},
                         plan={})
    proc = subprocess.Popen([sys.executable, "-m", "scripts.cli", "compare", str(path)],
                            cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            # a shell's background job starts with SIGINT ignored, which Python
                            # keeps: give the compare a terminal's default however pytest runs
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = tmp_path / "out" / "trials" / "base-seed0" / "train.log"
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (log.exists() and "fps" in log.read_text()):
            time.sleep(0.5)
        training = log.exists() and "fps" in log.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=240)
    finally:  # a compare left running would train beside the rest of the suite
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert training, f"the trial logged no training within 180 s: {err[-2000:]}"
    assert proc.returncode == 130, err
    ckpt = RunDir(log.parent).latest_checkpoint()
    assert ckpt is not None, log.read_text()[-2000:]
    assert RunDir.load_checkpoint(ckpt)["progress"]["frames"] > 0
    assert json.loads((log.parent / "summary.json").read_text())["interrupted"]


@pytest.mark.ray
def test_each_trial_task_runs_in_a_fresh_worker_process(ray_local):
    # A worker kept from an earlier trial would run the code it imported then, not the
    # checkout's revision the new trial records: each trial task gets a process of its own.
    from scripts.compare.trial_runner import ResourcesSpec, trial_task

    task = trial_task(ray_local, lambda: os.getpid(), ResourcesSpec())
    pids = [ray_local.get(task.remote()) for _ in range(3)]  # one after another
    assert len(set(pids)) == 3 and os.getpid() not in pids




def test_max_concurrent_is_capped_at_what_the_cluster_holds(tmp_path):
    """--max-concurrent is capped at what the cluster holds, with a note.

    Trials started beyond what fits wait on each other's runner actors for ever (a panel on 2
    cores with --max-concurrent 2 hung at 'starting').
    """
    from scripts.compare.trial_runner import trials_at_once

    spec = load_spec(str(write_compare(tmp_path)))[0].resources
    actors = load_config(str(ROOT / "configs" / "ppo_atari.yaml"), ["learner.device=cpu"])
    per_trial = 1 + actors.runtime.num_runners + actors.runtime.learner_cpus
    have = {"CPU": float(per_trial)}
    limit, note = trials_at_once(have, spec, actors, 2)
    assert limit == 1 and f"holds 1 trial(s) at once (each takes {per_trial:g} CPU(s)" in note
    assert trials_at_once({"CPU": 2.0 * per_trial}, spec, actors, 2) == (2, None)
    assert trials_at_once(have, spec, actors, None) == (1, None)  # the default: what fits
    in_process = load_config(None, ["runtime.num_runners=0"])
    assert trials_at_once({"CPU": 4.0}, spec, in_process, None) == (4, None)
    assert trials_at_once({"CPU": 4.0}, spec, in_process, 3) == (3, None)


def test_explicit_variants_cross_the_matrix_and_carry_their_options(tmp_path):
    variants = [{"agent.head": "linear"},
                {"agent.head": "multiplicative", "agent.head_options": {"context": "learnt"}}]
    spec, trials, _ = load_spec(write_compare(tmp_path, variants=variants, seeds=[0], plan={}))
    assert [t.variant for t in trials] == ["head-linear_hidden-size-16",
                                           "head-linear_hidden-size-32",
                                           "head-multiplicative_context-learnt_hidden-size-16",
                                           "head-multiplicative_context-learnt_hidden-size-32"]
    assert [getattr(t.cfg.agent.head_options, "context", None) for t in trials] == [None, None,
                                                                          "learnt", "learnt"]
    assert trials[3].cfg.agent.core_options.hidden_size == 32
    with pytest.raises(ConfigError, match=r"variants\[1\]: expected a mapping"):
        load_spec(write_compare(tmp_path, variants=[{"agent.head": "linear"}, "multi_head"],
                                plan={}))


@pytest.mark.parametrize("plan, message", [
    ({"pairs": [["hidden-size-32", "hidden-size-64"]]},
     "plan.pairs[0]: unknown variant 'hidden-size-64'; variants: hidden-size-16, hidden-size-32"),
    ({"pairs": [], "stop": "decided"}, "plan.stop 'decided' cannot be evaluated"),
    ({"pairs": [], "stop": "settled"}, "plan.stop 'settled' cannot be evaluated"),
    ({"pairs": [["hidden-size-32", "hidden-size-16"]], "statistic": "win", "stop": "settled"},
     "plan.stop 'settled' with 2 seed(s): no pair can exclude no difference at alpha 0.05/1 "
     "before 7 seeds"),
    ({"stop": "when it looks good"},
     "plan.stop must be one of 'all seeds', 'decided', 'settled', got 'when it looks good'"),
    ({"pairs": [["hidden-size-32", "hidden-size-16"]], "bounds": []}, "plan.bounds must be"),
    ({"pairs": [["hidden-size-32", "hidden-size-16"]], "bounds": [0, 1], "seeds": 5},
     "plan.seeds is 5 but the compare lists 2 seeds"),
])
def test_a_plan_that_cannot_be_carried_out_is_one_line_before_anything_runs(tmp_path, capsys,
                                                                           plan, message):
    assert main([str(write_compare(tmp_path, plan=plan))]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_match_params_sets_a_width_within_two_percent_and_refuses_a_missing_one(tmp_path, capsys):
    from scripts.compare.param_match import param_count

    variants = [{"agent.head": "linear"},
                {"agent.head": "multiplicative", "agent.head_options": {"context": "learnt"},
                 "match_params": {
                    "reference": "head-linear", "width": "agent.core_options.hidden_size"}}]
    spec, trials, _ = load_spec(write_compare(tmp_path, matrix={}, variants=variants, seeds=[0],
                                              plan={}))
    linear, multi = trials
    assert multi.variant == "head-multiplicative_context-learnt"
    assert multi.matched["reference"] == "head-linear"
    width = multi.matched["value"]
    assert multi.cfg.agent.core_options.hidden_size == width < 32  # more heads, a narrower core
    ref, got = param_count(linear.cfg), param_count(multi.cfg)
    assert multi.matched["params"] == got and abs(got - ref) <= 0.02 * ref
    unmatched = load_config(multi.base, linear.overrides + ["agent.head=multiplicative",
                                                            "agent.head_options={context: learnt}"])
    assert abs(param_count(unmatched) - ref) > 0.02 * ref  # the check can fail
    variants[1]["match_params"]["width"] = "agent.core_options.hidden_width"
    assert main([str(write_compare(tmp_path, matrix={}, variants=variants, plan={}))]) == 2
    err = capsys.readouterr().err
    assert ("variant head-multiplicative_context-learnt: match_params.width "
            "'agent.core_options.hidden_width': agent.core_options has no setting "
            "'hidden_width'") in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
