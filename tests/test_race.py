"""scripts/bench/race.py: minutes and frames to a last-100 mean, read from event files."""

import json
import time

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from scripts.bench import race


def test_last100_is_the_mean_of_up_to_the_last_100():
    x = np.arange(250, dtype=float)
    got = race.last100(x)
    naive = [x[max(0, i - 99):i + 1].mean() for i in range(len(x))]
    np.testing.assert_allclose(got, naive)


def _cleanrl_run(path, returns, seconds_per_game=6.0, steps_per_game=1000):
    t0 = time.time()
    w = SummaryWriter(str(path))
    # the first event (file version) is stamped when the writer opens: the run's start
    for i, r in enumerate(returns):
        w.add_scalar("charts/episodic_return", r, (i + 1) * steps_per_game,
                     walltime=t0 + 5.0 + (i + 1) * seconds_per_game)
    w.add_scalar("charts/SPS", 100, len(returns) * steps_per_game + 500,
                 walltime=t0 + 5.0 + len(returns) * seconds_per_game + 3)
    w.close()


def test_cleanrl_row_finds_the_first_crossing(tmp_path, monkeypatch):
    returns = [-21.0] * 100 + [21.0] * 300
    _cleanrl_run(tmp_path / "c", returns)
    row = race.cleanrl_row(tmp_path / "c", 18.0)
    # the last-100 mean first reaches 18 after k games of 21 with (100 - k) of -21: k >= 93
    first = 100 + 93
    assert row["frames_to_target"] == first * 1000 * 4
    assert row["final_mean100"] == pytest.approx(21.0)
    assert row["frames"] == (400 * 1000 + 500) * 4
    # stamped 5 s after the writer opened, then 6 s a game
    assert row["minutes_to_target"] == pytest.approx((5.0 + first * 6.0) / 60, abs=0.05)


def test_cleanrl_row_not_reached(tmp_path):
    _cleanrl_run(tmp_path / "c", [-21.0] * 50 + [10.0] * 200)
    row = race.cleanrl_row(tmp_path / "c", 18.0)
    assert row["frames_to_target"] is None and row["minutes_to_target"] is None
    assert "not reached" in race.markdown([row], 18.0)


def test_mira_row_reads_its_wall_time_at_the_crossing(tmp_path):
    run = tmp_path / "m"
    w = SummaryWriter(str(run))
    for i, (mean, wall) in enumerate([(-20.0, 60.0), (10.0, 120.0), (18.5, 180.0),
                                      (19.0, 240.0)]):
        frames = (i + 1) * 100_000
        w.add_scalar("episode_return_mean100", mean, frames)
        w.add_scalar("wall_time_s", wall, frames)
    w.close()
    (run / "summary.json").write_text(json.dumps({"frames": 400_000, "wall_time_s": 250.0}))
    row = race.mira_row(run, 18.0)
    assert row["frames_to_target"] == 300_000
    assert row["minutes_to_target"] == pytest.approx(3.0)
    assert row["final_mean100"] == pytest.approx(19.0)
    assert row["fps"] == pytest.approx(1600.0)


def test_a_directory_without_event_files_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        race.main(["--mira", str(tmp_path)])
    assert "no TensorBoard event file" in str(e.value)
