"""Short learning tests with thresholds: the whole stack has to work for these to pass."""

from pathlib import Path

import pytest

from learners.config import load_config
from learners.run_dir import RunDir
from learners.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_ppo_lstm_learns_the_quick_start_level(tmp_path):
    # In-process, with the preset's 16 envs per batch (2 runners x 8) in one runner. Seeds 0-4
    # measured at 24k frames with the preset's target_kl: 0.943, 0.927, 0.946, 0.953, 0.949
    # (without it, on the same code, seed 0 solved the level and then collapsed to 0.193).
    # Those were with advantages normalised; the preset leaves them unnormalised since
    # 2026-11-24 (its header), and seed 0 passes here with it.
    cfg = load_config(ROOT / "configs/ppo_minigrid.yaml", [
        f"run.dir={tmp_path / 'ppo'}", "run.total_frames=24000", "runtime.num_runners=0",
        "runtime.envs_per_runner=16",
    ])
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["episode_return_mean"] >= 0.8, summary


@pytest.mark.ray
def test_impala_lstm_learns_the_quick_start_level(tmp_path, ray_local):
    # The preset as shipped (2e5 frames, its rate decaying to 0 there). Cut to 1.6e5 frames,
    # seeds 0 and 1 ended at 0.955 on an idle machine, but one run inside the full suite ended
    # at 0.771: the asynchronous runners make each run different, and the shorter schedule
    # left too little margin.
    cfg = load_config(ROOT / "configs/impala_minigrid.yaml", [f"run.dir={tmp_path / 'impala'}"])
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["episode_return_mean"] >= 0.8, summary
