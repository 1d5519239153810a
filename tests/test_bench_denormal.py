"""``python -m scripts.bench.denormal``: a checkpoint's update, denormals kept and flushed.

On a tiny MiniGrid run: both rows print and count the same gradients, the process's own
setting comes back afterwards; a directory without a checkpoint is a one-line error.
"""

from __future__ import annotations

import torch

from learners.config.schema import load_config
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from scripts.bench import denormal
from tests.conftest import small_overrides


def test_it_times_a_checkpoints_update_both_ways(tmp_path, capsys):
    cfg = load_config(None, small_overrides(tmp_path))
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    rows = denormal.measure(tmp_path / "run", rounds=1, threads=1)
    assert [r["flush"] for r in rows] == [False, True]
    assert all(r["seconds"] > 0 and r["grads"] > 0 and 0 <= r["denormal"] <= r["grads"]
               for r in rows)
    assert rows[0]["grads"] == rows[1]["grads"]  # the same update from the same weights
    # the run's own setting (flushing, by default) is what the process keeps
    x = torch.full((8,), 1e-39)
    assert int((x * 1.0).count_nonzero()) == 0
    assert denormal.main([str(tmp_path / "run"), "--rounds", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "kept" in out[0] and "flushed" in out[1]


def test_a_directory_without_a_checkpoint_is_a_one_line_error(tmp_path, capsys):
    assert denormal.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run directory with a checkpoint" in err
