"""scripts/papers/atari_panel.py: its compare file, the table beside the RIMs paper and the plot."""

import numpy as np
import pytest
import yaml

from scripts.papers import atari_panel


def test_dry_run_lists_both_presets_on_every_game(tmp_path, capsys):
    assert atari_panel.main(["--dry-run", "--frames", "2e6", "--seeds", "0", "1",
                             "--out", str(tmp_path), "runtime.num_runners=3",
                             "learner.batch_size=12"]) == 0
    spec = yaml.safe_load((tmp_path / "panel_compare.yaml").read_text())
    assert spec["matrix"]["env.game"] == list(atari_panel.GAMES)
    assert [atari_panel.learner_of(b) for b in spec["matrix"]["base"]] == ["impala", "ppo"]
    assert (spec["overrides"] == {"run.total_frames": 2e6,
                                  "learner.optimizer.lr_decay_frames": 4e7,
                                  "runtime.num_runners": 3, "learner.batch_size": 12}
            and spec["seeds"] == [0, 1])
    assert capsys.readouterr().err.count(" new ") == 16  # 2 presets x 4 games x 2 seeds


def test_unknown_game_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        atari_panel.main(["--dry-run", "--games", "Pongg", "--out", str(tmp_path)])
    assert e.value.code == 2 and "unknown atari task 'Pongg'" in capsys.readouterr().err


def test_table_puts_scores_beside_the_paper_and_human(tmp_path):
    curve = (np.array([1e6, 2e6, 3e6]), np.array([-20.0, -5.0, 19.0]))
    cells = {("Pong", "impala", "lstm"): {"seeds": [0, 1], "frames": [3_000_000, 3_000_000],
                                          "wall_time_s": [600.0, 660.0],
                                          "returns": [18.0, 20.0], "curves": [curve, curve]}}
    text = atari_panel.table(cells, ["Pong", "Boxing"], ["impala", "ppo"])
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines()[2:]}
    pong = rows[("Pong", "impala")]
    # 19.0 on Pong: 100 (19 + 20.7) / (14.6 + 20.7) = 112.5 % of human;
    # the paper's LSTM-PPO: 20 +- 1.
    assert "| lstm | 3,000,000 | 2 | 10 min | 19.0 | 112 % | 20 ± 1 | 14.6 |" in pong
    assert "not run" in rows[("Pong", "ppo")] and "80 ± 3" in rows[("Boxing", "impala")]
    atari_panel.plot(cells, ["Pong", "Boxing"], ["impala", "ppo"], tmp_path / "panel.png")
    # With a core axis each core stands beside its own column of Table 7
    # (Boxing: LSTM 80 +- 3, RIMs 95 +- 10).
    text = atari_panel.table({}, ["Boxing"], ["ppo"], ["lstm", "rims"])
    assert ("| Boxing | ppo | lstm | not run |" in text and "80 ± 3" in text
            and "| Boxing | ppo | rims |" in text)
    assert "95 ± 10" in text
    assert (tmp_path / "panel.png").stat().st_size > 10_000


def test_rims_study_uses_the_paper_widths(tmp_path, capsys):
    assert atari_panel.main(["--dry-run", "--learners", "ppo", "--games", "Pong",
                             "--cores", "lstm", "rims",
                             "--paper-widths", "--out", str(tmp_path)]) == 0
    from scripts.compare.command import load_spec

    _, trials, _ = load_spec(tmp_path / "panel_compare.yaml")
    by_core = {t.cfg.agent.core: t.cfg.agent.core_options for t in trials}
    assert by_core["lstm"].hidden_size == 512
    assert (by_core["rims"].num_units, by_core["rims"].unit_size,
            by_core["rims"].k_active) == (6, 85, 5)
    assert all(t.cfg.env.episodic_life for t in trials)  # the PPO preset's, as Kostrikov's wrappers
    # Without --paper-widths: mira's parameter-matched widths, still k_A = 5 as Table 7.
    assert atari_panel.main(["--dry-run", "--learners", "ppo", "--games", "Pong",
                             "--cores", "lstm", "rims", "--out", str(tmp_path / "m")]) == 0
    _, trials, _ = load_spec(tmp_path / "m" / "panel_compare.yaml")
    by_core = {t.cfg.agent.core: t.cfg.agent.core_options for t in trials}
    assert by_core["lstm"].hidden_size == 256
    assert (by_core["rims"].num_units, by_core["rims"].unit_size,
            by_core["rims"].k_active) == (6, 42, 5)
    # With IMPALA's preset (an orthogonal LSTM) the LSTM arm starts as RIMs do, from its defaults.
    assert atari_panel.main(["--dry-run", "--learners", "impala", "--games", "Pong",
                             "--cores", "lstm", "rims", "--out", str(tmp_path / "i")]) == 0
    _, trials, _ = load_spec(tmp_path / "i" / "panel_compare.yaml")
    by_core = {t.cfg.agent.core: t.cfg.agent.core_options for t in trials}
    assert by_core["lstm"].init == "torch"


def test_report_shows_unfinished_and_finished_trials(tmp_path, capsys):
    """--report runs nothing and tables the trials as they stand, an unfinished one marked so."""
    import json

    from torch.utils.tensorboard import SummaryWriter

    from scripts.compare.command import load_spec

    args = ["--learners", "impala", "--games", "Pong", "--frames", "2e6", "--out", str(tmp_path)]
    assert atari_panel.main(["--dry-run", *args]) == 0
    (trial,) = load_spec(tmp_path / "panel_compare.yaml")[1]
    writer = SummaryWriter(str(trial.dir))
    for frames, ret in [(500_000, -20.0), (1_000_000, -15.5)]:
        writer.add_scalar("episode_return_mean100", ret, frames)
    writer.close()
    assert atari_panel.main(["--report", *args]) == 0
    row = next(line for line in (tmp_path / "panel.md").read_text().splitlines()
               if line.startswith("| Pong |"))
    assert "| 1,000,000 (unfinished) | 1 | not finished | -15.5 |" in row
    assert not (tmp_path / "summary.json").exists() and "started" not in capsys.readouterr().err
    lines = (tmp_path / "curves.csv").read_text().splitlines()
    assert lines[0] == "game,learner,core,seed,frames,episode_return_mean100"
    assert lines[1:] == ["Pong,impala,lstm,0,500000,-20.000", "Pong,impala,lstm,0,1000000,-15.500"]
    # finished: the summary's figures, with its wall time
    (trial.dir / "summary.json").write_text(json.dumps(
        {"frames": 2_000_000, "episode_return_mean": -14.0, "wall_time_s": 900.0,
         "interrupted": False}))
    assert atari_panel.main(["--report", *args]) == 0
    assert "| 2,000,000 | 1 | 15 min | -14.0 |" in (tmp_path / "panel.md").read_text()


# ---- scripts/papers/atari5.py: the Atari-5 panel's tables, curves and csv ----

STUDY = "configs/studies/study_atari5_panel.yaml"
A5_GAMES = ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"]


def _keep(records, game, seed, train, evaluation, frames=10_000_000, episodes=30, curve=True):
    """A kept record of one trial, as a compare's keep: writes it (summary, eval, curves)."""
    import json

    d = records / f"game-{game}-seed{seed}"
    d.mkdir(parents=True)
    ckpt = f"checkpoints/ckpt_{frames:012d}.pt"
    (d / "summary.json").write_text(json.dumps(
        {"frames": frames, "episode_return_mean": train, "interrupted": False,
         "wall_time_s": 2000.0}))
    (d / "eval.json").write_text(json.dumps({"checkpoint": ckpt, "tasks": {game: {
        "return_mean": evaluation, "return_std": 1.5, "episodes": episodes,
        "normalized_score": None}}}))
    curves = ({"episode_return_mean100": {"frames": [frames // 2, frames],
                                          "values": [train / 2, train]}} if curve else {})
    kept = {"checkpoint": ckpt.split("/")[-1], "curves": curves}
    (d / "record.json").write_text(json.dumps(kept))


def test_atari5_study_declares_the_panel():
    """15 trials: impala_atari.yaml as shipped on the five games x seeds 0-2, 1e7 frames."""
    from scripts.compare.spec import load_spec

    spec, trials, _ = load_spec(STUDY)
    assert len(trials) == 15 and spec.seeds == [0, 1, 2] and spec.evaluate.episodes == 30
    assert sorted({t.cfg.env.game for t in trials}) == sorted(A5_GAMES)
    from learners.config.schema import load_config

    shipped = load_config("configs/impala_atari.yaml")  # the preset as shipped, its schedule too
    assert all(t.cfg.run.total_frames == shipped.run.total_frames == 10_000_000
               and t.cfg.learner == shipped.learner and t.cfg.agent == shipped.agent
               and t.cfg.runtime == shipped.runtime and t.cfg.env.protocol == "dqn"
               for t in trials)
    assert {"game", "seed", "frames", "score"} <= set(spec.csv.columns)


def test_atari5_report_names_a_missing_seed_and_writes_the_csv(tmp_path):
    from envs.scores import human_normalized
    from scripts.papers import atari5

    records = tmp_path / "keep"
    train = {g: [100.0 * (i + 1) + s for s in range(3)] for i, g in enumerate(A5_GAMES)}
    evaluation = {g: [x + 10 for x in v] for g, v in train.items()}
    for g in A5_GAMES:
        for s in range(3):
            if (g, s) != ("Phoenix", 2):  # a trial that left no record
                _keep(records, g, s, train[g][s], evaluation[g][s])
    games, seeds, found = atari5.collect(STUDY, records, out=str(tmp_path / "out"))
    assert games == A5_GAMES and seeds == [0, 1, 2] and len(found) == 14
    text = atari5.markdown(games, seeds, found, reps=200)
    phoenix = next(line for line in text.splitlines() if line.startswith("| Phoenix | 2 of 3"))
    assert "(seed 2 missing)" in phoenix and "not in the table | not in the table |" in phoenix
    assert "(n=2)" in phoenix
    assert "| Phoenix | 2 | missing | | | | | | | |" in text and "Phoenix seed 2" in text
    assert text.count("| 14 of 15 |") == 2  # training and evaluation, over games
    assert "17,366.7" in text and "21,000 ± 232" in text  # BattleZone's references
    assert ("| BattleZone | 0 | finished | 10,000,000 | 100.0 | 110.0 ± 1.5 (30) | "
            "n/a | 2,000 s | not monitored | kept record |" in text)
    # the aggregates' point estimates against a naive computation over the 14 scores
    hns = {g: [human_normalized(g, x) for s, x in enumerate(train[g]) if (g, s) != ("Phoenix", 2)]
           for g in A5_GAMES}
    pooled = np.sort(np.concatenate([hns[g] for g in A5_GAMES]))
    naive_iqm = pooled[3:-3].mean()  # 14 scores: drop floor(14 / 4) = 3 from each end
    naive_mean = np.mean([np.mean(hns[g]) for g in A5_GAMES])
    agg = atari5.aggregates(hns, reps=200)
    assert agg["iqm"].estimate == pytest.approx(naive_iqm)
    assert agg["mean"].estimate == pytest.approx(naive_mean)
    assert agg["iqm"].low <= naive_iqm <= agg["iqm"].high
    # the csv: every curve point, and the missing trial as a row of its own
    atari5.write_csv(games, seeds, found, tmp_path / "panel.csv")
    rows = (tmp_path / "panel.csv").read_text().splitlines()
    assert rows[0] == "game,seed,status,frames,score,hns"
    assert "Phoenix,2,missing,,," in rows and len(rows) == 1 + 14 * 2 + 1
    first = human_normalized("BattleZone", 50.0)
    assert rows[1] == f"BattleZone,0,finished,5000000,50.000,{first:.2f}"
    atari5.plot(games, seeds, found, tmp_path / "panel.png")
    assert (tmp_path / "panel.png").stat().st_size > 10_000
    assert atari5.main([STUDY, "--records", str(records), "--out", str(tmp_path / "o")]) == 0
    assert {p.name for p in (tmp_path / "o").iterdir()} == {
        "atari5_panel.md", "atari5_panel.csv", "atari5_panel.png"}


def test_atari5_names_each_trials_code_and_torso_verdict(tmp_path):
    """The per-trial row: the revisions a trial ran on and its monitor's last-layer shares."""
    import json

    from scripts.papers import atari5

    records = tmp_path / "keep"
    _keep(records, "Qbert", 0, 500.0, 600.0)
    _keep(records, "Qbert", 1, 400.0, 300.0)
    fc = [0.2, 0.9, 0.85, 0.3]
    for seed, blind in ((0, None), (1, {"frames": 1_250_000, "sees_again": 3_500_000})):
        d = records / f"game-Qbert-seed{seed}"
        summary = json.loads((d / "summary.json").read_text())
        summary["monitor"] = {"last": {"torso/conv1/inactive": 0.5, "torso/fc/inactive": 0.3},
                              "blind": blind}
        (d / "summary.json").write_text(json.dumps(summary))
        kept = json.loads((d / "record.json").read_text())
        kept["curves"]["torso/fc/inactive"] = {"frames": [1, 2, 3, 4], "values": fc}
        (d / "record.json").write_text(json.dumps(kept))
    (records / "game-Qbert-seed0" / "meta.json").write_text(json.dumps(
        {"git_revision": "a" * 40 + "-dirty", "resumed_on": [
            {"git_revision": "b" * 40, "frames": 160_000}, {"git_revision": "b" * 40}]}))
    r0 = atari5.read_trial(records / "game-Qbert-seed0", "Qbert", 0, 10_000_000)
    r1 = atari5.read_trial(records / "game-Qbert-seed1", "Qbert", 1, 10_000_000)
    assert r0.code == "aaaaaaa-dirty; bbbbbbb from 0.16M" and r1.code == "n/a"
    assert r0.torso == "never blind; fc at most 90%, 30% at the last probe"
    assert r1.torso == ("blind from 1.25M frames, saw again at 3.50M; fc at most 90%, "
                        "30% at the last probe")
    text = atari5.markdown(["Qbert"], [0, 1], {("Qbert", 0): r0, ("Qbert", 1): r1}, reps=50)
    assert "| aaaaaaa-dirty; bbbbbbb from 0.16M | 2,000 s | never blind; fc at most 90%" in text


def test_atari5_refuses_a_non_atari_study_and_a_missing_records_folder(tmp_path, capsys):
    from pathlib import Path

    from scripts.papers import atari5

    root = Path(__file__).resolve().parents[1]
    minigrid = str(root / "configs/compare_cores_minigrid.yaml")
    assert atari5.main([minigrid, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "trains on minigrid; atari5 reads an Atari panel" in err[-1], err  # after load notes
    assert atari5.main(["--records", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("none: no such directory"), err
    assert not (tmp_path / "o").exists()


def test_atari5_stratified_bootstrap_against_a_naive_loop():
    """Per game its own seeds, resampled with replacement; equal counts: envs.statistics'."""
    from envs import statistics as st
    from scripts.papers import atari5

    rng = np.random.default_rng(3)
    groups = [rng.normal(size=n) for n in (3, 3, 2, 3)]
    got = st.stratified_bootstrap_groups(groups, st.mean_of_means, reps=500, seed=7)
    naive, draw = [], np.random.default_rng(7)
    for _ in range(500):
        resampled = []
        for g in groups:
            resampled.append(np.array([g[draw.integers(0, len(g))] for _ in range(len(g))]))
        naive.append(np.mean([r.mean() for r in resampled]))
    low, high = np.percentile(naive, [2.5, 97.5])
    assert got.estimate == pytest.approx(np.mean([g.mean() for g in groups]))
    assert (got.low, got.high) == pytest.approx((low, high))
    # equal seed counts: the aggregates are envs.statistics' on the [seeds, games] matrix
    scores = {f"g{i}": list(rng.normal(size=3)) for i in range(5)}
    matrix = np.array(list(scores.values())).T
    agg = atari5.aggregates(scores, reps=300)
    assert agg["iqm"] == st.stratified_bootstrap_ci(matrix, st.iqm, reps=300)
    assert agg["mean"] == st.stratified_bootstrap_ci(matrix, st.mean, reps=300)
    # and the ragged resampling agrees with it in distribution (different random streams)
    ragged = st.stratified_bootstrap_groups([matrix[:, j] for j in range(5)], st.mean_of_means,
                                            reps=4000)
    full = st.stratified_bootstrap_ci(matrix, st.mean, reps=4000)
    assert ragged.low == pytest.approx(full.low, abs=0.05)
    assert ragged.high == pytest.approx(full.high, abs=0.05)


def test_atari5_counts_only_finished_trials_and_names_the_rest(tmp_path):
    """An unfinished, stopped or stale trial is listed but enters no figure; no curve, one row."""
    from scripts.papers import atari5

    records, runs = tmp_path / "keep", tmp_path / "out"
    for g in A5_GAMES:
        for s in range(3):
            if g == "BattleZone" and s == 1:  # stopped at 2M frames: its score must not count
                _keep(records, g, s, 800.0, 900.0, frames=2_000_000)
            elif g == "Qbert" and s == 0:  # evaluated with 10 episodes, not the declared 30
                _keep(records, g, s, 500.0, 99_999.0, episodes=10)
            elif g == "Phoenix" and s == 0:  # a record with no curve
                _keep(records, g, s, 700.0, 710.0, curve=False)
            elif (g, s) != ("Phoenix", 2):
                _keep(records, g, s, 5000.0 + s, 5010.0 + s)
    # Phoenix seed 2: its process was killed, leaving checkpoints and no summary
    stopped = runs / "trials" / "game-Phoenix-seed2"
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "checkpoints" / "ckpt_000003000000.pt").write_bytes(b"")
    (stopped / "config.yaml").write_text("{}")
    games, seeds, found = atari5.collect(STUDY, records, out=str(runs))
    assert found[("Phoenix", 2)].status == "stopped, no summary"
    assert found[("Phoenix", 2)].frames == 3_000_000
    text = atari5.markdown(games, seeds, found, reps=200)
    bz = next(line for line in text.splitlines() if line.startswith("| BattleZone | 2 of 3"))
    assert "seed 1 unfinished at 2.00M frames, left out" in bz
    assert "5,001.0 [5,000.0, 5,002.0] (n=2)" in bz  # 800 is not averaged in
    qbert = next(line for line in text.splitlines() if line.startswith("| Qbert | 3 of 3"))
    assert "99,999" not in qbert and "(n=2)" in qbert  # the stale evaluation left out
    assert "stale: not of its last weights or not the declared episodes" in text
    assert "seed 2 stopped, no summary at 3.00M frames, left out" in text
    assert "budget not stated" in text and "45 HNS points" in text
    atari5.write_csv(games, seeds, found, tmp_path / "panel.csv")
    rows = (tmp_path / "panel.csv").read_text().splitlines()
    assert "Phoenix,0,finished,10000000,700.000," in "\n".join(rows)


def test_atari5_one_seed_per_game_gives_no_interval(tmp_path):
    from scripts.papers import atari5

    records = tmp_path / "keep"
    for g in A5_GAMES:
        _keep(records, g, 0, 1000.0, 1100.0)
    games, seeds, found = atari5.collect(STUDY, records, out=str(tmp_path / "out"))
    text = atari5.markdown(games, seeds, found, reps=200)
    assert text.count("(one seed per game: no interval)") == 6  # IQM, median, mean; 2 scores
