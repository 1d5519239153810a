"""Short learning tests with thresholds: the whole stack has to work for these to pass."""

from pathlib import Path

import pytest

from learners.config.schema import load_config
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer

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


# About 190 s on 2 idle cores, 223 s beside a Pong trial; in a full suite run on a machine
# shared with a Pong trial it passed pyproject's 600 s limit per test, hence its own.
@pytest.mark.timeout(1200)
def test_impala_lstm_learns_breakout_on_the_vector_env(tmp_path):
    # The Atari preset on ale-py's vector env (the default backend), in-process with its 8 envs
    # per batch, for 5e5 frames, its rate decaying to 0 over them. Seeds 0, 1 and 2 ended at
    # 7.27, 7.29 and 3.63 (the last 100 whole games). Before the agent learns to return the
    # ball its games average 1.0-1.4 (seed 1 stayed there for 2.4e5 frames), so an agent that
    # does not learn fails: 2.5 is about twice that level and 1.1 below the lowest seed. Seed
    # 0's in-process, lock-step run was observed to repeat (7.27 here and in `mira train`),
    # though run.deterministic is off. Without the preset's warmup over 512,000 frames, as
    # those seeds ran (a 5e5-frame run would spend all of it warming up), and with PyTorch's
    # initialisation of the core and head, as they ran.
    cfg = load_config(ROOT / "configs/impala_atari.yaml", [
        f"run.dir={tmp_path / 'breakout'}", "env.game=Breakout", "run.total_frames=500000",
        "runtime.num_runners=0", "runtime.envs_per_runner=8",
        "learner.optimizer.lr_warmup_frames=0",
        "agent.core_options.init=torch", "agent.head_options.init=torch",
    ])
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["episode_return_mean"] >= 2.5, summary
