"""mira compare's stopping rules on a tiny study.

A decided study run again decides at the same seed; the settled rule stops once no declared
seed can decide its pair; the decided rule looks after each seed with a report; --next-seeds
runs a long study a piece at a time.
"""

import json
from pathlib import Path

import pytest

from learners.config.schema import ConfigError
from scripts.compare.command import load_spec, run_compare
from tests.test_compare import write_compare


def test_a_decided_study_run_again_decides_at_the_same_seed_and_reports_every_trial(
        tmp_path, capsys):
    # Ten finished seeds (rebuilt from the study's table), the first variant ahead by 0.8 at
    # each: the rule's looks read seeds 0..i, so it decides at the eighth seed, as it did when
    # those seeds ran one at a time, and the trials that ran after it stay in the report.
    columns = ["variant", "seed", "frames", "task", "score", "train_return"]
    table = ",".join(columns) + "\n" + "".join(
        f"hidden-size-{w},{seed},400,MiniGrid-Empty-5x5-v0,{r},{r}\n"
        for w, r in ((16, 0.1), (32, 0.9)) for seed in range(10))
    (tmp_path / "tiny.csv").write_text(table)
    path = write_compare(tmp_path, seeds=list(range(10)), keep=str(tmp_path / "kept"),
                         csv={"path": str(tmp_path / "tiny.csv"),
                              "columns": {c: c for c in columns}},
                         plan={"pairs": [["hidden-size-32", "hidden-size-16"]], "score": "train",
                               "bounds": [0.0, 1.0], "stop": "decided"})
    for _ in range(2):
        result = run_compare(str(path))
        assert set(result["trials"].values()) == {"skipped"}, result["trials"]
        assert "decided after 8 seed(s)" in capsys.readouterr().err
        res = result["results"]
        assert len(res["trials"]) == 20
        (primary,) = res["primary"]
        assert primary["seeds"] == list(range(10)) and primary["low"] > 0


def test_settled_rule_stops_once_no_declared_seed_can_decide_the_pair(tmp_path, capsys):
    # Twenty seeds declared, eight finished (rebuilt from a table): the first variant won at
    # W L L L W W W L. After the eighth look not even twelve straight wins could exclude 1/2,
    # so `settled` runs no further seed; `decided` would go on to the twentieth.
    columns = ["variant", "seed", "frames", "task", "score", "train_return"]
    wins = [1, 0, 0, 0, 1, 1, 1, 0]
    table = ",".join(columns) + "\n" + "".join(
        f"hidden-size-{w},{seed},400,MiniGrid-Empty-5x5-v0,{r},{r}\n"
        for seed, won in enumerate(wins) for w, r in ((16, 0.5), (32, 0.1 + 0.8 * won)))
    (tmp_path / "tiny.csv").write_text(table)
    path = write_compare(tmp_path, seeds=list(range(20)), keep=str(tmp_path / "kept"),
                         csv={"path": str(tmp_path / "tiny.csv"),
                              "columns": {c: c for c in columns}},
                         plan={"pairs": [["hidden-size-32", "hidden-size-16"]], "score": "train",
                               "statistic": "win", "stop": "settled"})
    result = run_compare(str(path))
    err = capsys.readouterr().err
    assert "settled after 8 seed(s)" in err
    assert ("over 8 seed(s), includes 0.5; cannot exclude 0.5 within the declared seeds, "
            "whatever the 12 left bring") in err
    later = {s for s, v in result["trials"].items() if v == "not needed"}
    assert later == {f"hidden-size-{w}-seed{k}" for w in (16, 32) for k in range(8, 20)}
    (primary,) = result["results"]["primary"]
    assert primary["undecidable"] and primary["seeds_left"] == 12
    assert "which ends the compare under its rule (stop: settled)" in (
        Path(result["out"]) / "report.md").read_text()


@pytest.mark.ray
def test_decided_rule_looks_after_each_seed_with_a_report(tmp_path, ray_local, capsys):
    # One seed at a time; after each (but the last) the console gives every primary interval
    # and the report is rewritten with the trials so far, so a long study's report is never
    # more than one seed old.
    path = write_compare(tmp_path, plan={"pairs": [["hidden-size-32", "hidden-size-16"]],
                                         "score": "train", "statistic": "win",
                                         "stop": "decided"})
    result = run_compare(str(path))
    err = capsys.readouterr().err
    look = err.index("hidden-size-32 vs hidden-size-16: win")
    assert "over 1 seed(s), includes 0.5" in err[look:]
    assert "report.md: 2 of 4 trial(s) finished and evaluated" in err[look:]
    assert set(result["trials"].values()) == {"trained"}  # one seed cannot decide a win rate
    assert "Partial report" not in (Path(result["out"]) / "report.md").read_text()
    # Run again, everything finished: no new data, so no look after seed 0, only the final report.
    looks = len(json.loads((Path(result["out"]) / "plan.json").read_text())["reports"])
    assert set(run_compare(str(path), quiet=True)["trials"].values()) == {"skipped"}
    assert len(json.loads((Path(result["out"]) / "plan.json").read_text())["reports"]) == looks + 1
    # A trial that failed before a look is in that look's report with its error, not among
    # the unfinished ones.
    from scripts.compare.command import _partial_report

    spec, trials, out = load_spec(path)
    status = {t.slug: "done" for t in trials} | {"hidden-size-16-seed1": "resume"}
    part = _partial_report(spec, trials, out, status, False,
                           {"hidden-size-16-seed1": "RuntimeError: the emulator died"})
    assert part["results"]["unfinished"] == []
    assert ("| hidden-size-16-seed1 | failed: RuntimeError: the emulator died |"
            in (out / "report.md").read_text())
    assert "3 of 4 trial(s) finished and evaluated, 1 failed" in capsys.readouterr().err


@pytest.mark.ray
def test_next_seeds_runs_a_long_study_a_piece_at_a_time(tmp_path, ray_local, capsys):
    # --next-seeds 1 on a rule read seed by seed: one seed's trials per run, its look and
    # report, then the later seeds wait; the next run takes up the first waiting seed.
    plan = {"pairs": [["hidden-size-32", "hidden-size-16"]], "score": "train",
            "statistic": "win", "stop": "decided"}
    path = write_compare(tmp_path, seeds=[0, 1, 2], plan=plan)
    with pytest.raises(ConfigError, match="--next-seeds must be at least 1, got 0"):
        run_compare(str(path), next_seeds=0)
    first = run_compare(str(path), next_seeds=1)["trials"]
    assert first == {"hidden-size-16-seed0": "trained", "hidden-size-32-seed0": "trained"} | {
        f"hidden-size-{w}-seed{k}": "waiting" for w in (16, 32) for k in (1, 2)}
    err = capsys.readouterr().err
    assert "over 1 seed(s)" in err and "report.md: 2 of 6 trial(s) finished" in err
    assert "seed(s) 1, 2 wait: the same command continues from them" in err
    second = run_compare(str(path), next_seeds=1)["trials"]
    assert [second[f"hidden-size-32-seed{k}"] for k in range(3)] == ["skipped", "trained",
                                                                     "waiting"]
    # Without a sequential rule the next seeds' trials run together, then the report so far.
    path = write_compare(tmp_path, seeds=[0, 1], plan={**plan, "stop": "all seeds"},
                         out=str(tmp_path / "all"))
    status = run_compare(str(path), next_seeds=1)["trials"]
    assert sorted(status.values()) == ["trained", "trained", "waiting", "waiting"]
    assert "report.md: 2 of 4 trial(s) finished" in capsys.readouterr().err
