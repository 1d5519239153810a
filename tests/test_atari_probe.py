"""scripts.papers.atari_probe on real Pong frames and a real Atari run's checkpoint."""

import math
from pathlib import Path

import pytest

from learners.config.schema import load_config
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from scripts.papers import atari_probe

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["agent.core_options={hidden_size: 32}", "agent.torso_options={hidden_size: 32}"]


def test_readout_runs_on_real_frames():
    # A smoke run at toy size (the docs' Pong figures come from the defaults: 60 batches
    # of 20 x 32 steps, 400 updates); at this size the fit itself is too noisy to assert.
    history = atari_probe.readout(str(ROOT / "configs/impala_atari_paper.yaml"), SMALL,
                                  updates=20, T=4, B=4, batches=12, every=10)
    assert [k for k, _ in history] == [0, 10, 20]
    assert all(math.isfinite(ev) and ev <= 1.0 for _, ev in history)


def test_checkpoint_probe_reads_a_run(tmp_path):
    cfg = load_config(ROOT / "configs/impala_atari_paper.yaml", SMALL + [
        f"run.dir={tmp_path / 'pong'}", "run.total_frames=640", "runtime.num_runners=0",
        "runtime.envs_per_runner=4", "learner.batch_size=4", "learner.unroll_length=10"])
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    result = atari_probe.checkpoint(str(tmp_path / "pong"))
    assert len(result["policy_mean"]) == 6 and abs(sum(result["policy_mean"]) - 1) < 1e-5
    assert 0.0 <= result["inactive_fc"] <= 1.0 and result["value_spread"] >= 0.0
    # Its pass over the 4 consecutive unrolls reproduces the logits the runner acted with.
    assert result["replay_error"] < 1e-5, result["replay_error"]


def test_checkpoint_probe_reads_a_lab6_run(tmp_path):
    # The lab suite: six tasks with a task ID (the preset's multiplicative task-ID head reads
    # it) and an instruction in the observation (the torso embeds it).
    cfg = load_config(ROOT / "configs/impala_lab6.yaml", SMALL + [
        f"run.dir={tmp_path / 'lab6'}", "run.total_frames=480", "runtime.num_runners=0",
        "runtime.runners_per_task=0", "runtime.envs_per_runner=6", "learner.batch_size=6",
        "learner.unroll_length=10", "learner.recurrence=5", "eval.every_frames=0"])
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    result = atari_probe.checkpoint(str(tmp_path / "lab6"))
    assert len(result["policy_mean"]) == 7 and abs(sum(result["policy_mean"]) - 1) < 1e-5
    assert 0.0 <= result["inactive_conv1"] <= 1.0 and 0.0 <= result["inactive_fc"] <= 1.0
    # 12 envs (2 per level): every level's frames, each with its own spread.
    assert len(result["policy_spread_per_task"]) == 6
    assert all(math.isfinite(v) and v >= 0.0 for v in result["policy_spread_per_task"].values())
    assert result["replay_error"] < 1e-5, result["replay_error"]


def test_checkpoint_command_takes_several_run_dirs(tmp_path, capsys):
    cfg = load_config(ROOT / "configs/impala_lab6.yaml", SMALL + [
        f"run.dir={tmp_path / 'a'}", "run.total_frames=240", "runtime.num_runners=0",
        "runtime.runners_per_task=0", "runtime.envs_per_runner=6", "learner.batch_size=6",
        "learner.unroll_length=10", "learner.recurrence=5", "eval.every_frames=0"])
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert atari_probe.main(["checkpoint", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert out.count("inactive on all") == 2 and out.count("spread across the frames of each") == 2


def test_checkpoint_every_probes_each_kept_checkpoint(tmp_path, capsys):
    # A checkpoint at every update, the last three kept: one row each, fewest frames first.
    cfg = load_config(ROOT / "configs/impala_atari_paper.yaml", SMALL + [
        f"run.dir={tmp_path / 'pong'}", "run.total_frames=800", "runtime.num_runners=0",
        "runtime.envs_per_runner=4", "learner.batch_size=4", "learner.unroll_length=10",
        "run.checkpoint_every_s=1e-6", "run.keep_checkpoints=3"])
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    paths = RunDir.open(tmp_path / "pong").checkpoint_paths()
    assert len(paths) == 3
    assert atari_probe.main(["checkpoint", "--every", str(tmp_path / "pong")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    assert [int(row.split("|")[1].replace(",", "")) for row in rows] == [
        RunDir.frames_of(p) for p in paths]


def test_initial_probe_reads_the_weights_a_run_starts_from(capsys):
    # The weights depend on the seed alone: the same seed twice gives the same figures, another
    # seed others. At the orthogonal init about half the fc units are off on every Pong frame
    # (the frames differ in a few pixels, so each unit is on for all of them or for none).
    config = str(ROOT / "configs/impala_atari.yaml")
    first, again, other = atari_probe.initial(config, SMALL, [0, 0, 1])
    assert first["frames"] == 0 and first["checkpoint"] == "seed 0, initial weights"
    assert first["inactive_fc"] == again["inactive_fc"] and first["fc_rms"] == again["fc_rms"]
    assert first["fc_rms"] != other["fc_rms"]
    assert 0.2 <= first["inactive_fc"] <= 0.8, first["inactive_fc"]
    assert first["replay_error"] < 1e-5, first["replay_error"]
    capsys.readouterr()
    assert atari_probe.main(["initial", config, *SMALL, "--seeds", "2", "3"]) == 0
    assert capsys.readouterr().out.count("initial weights: policy") == 2
    with pytest.raises(SystemExit, match="atari_probe initial: agent.torso_options.norm must be"):
        atari_probe.main(["initial", config, "agent.torso_options.norm=batch"])
