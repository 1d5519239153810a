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
