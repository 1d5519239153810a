"""Gradient bursts kept by ``learner.capture_grad_norm`` and replayed by ``scripts.bench.burst``."""

from __future__ import annotations

import logging

import pytest
import torch

from learners.config.migrations import CONFIG_FORMAT
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from learners.update.learner import CAPTURE_LIMIT, Learner


def test_a_kept_burst_is_the_step_s_starting_point_and_replays_to_the_same_gradient(
        small_cfg, caplog, capsys):
    from scripts.bench.burst import main, replay

    # PPO takes 4 epochs x 2 minibatches = 8 steps per update; a threshold every step
    # exceeds keeps the first CAPTURE_LIMIT of them, over two updates.
    cfg = small_cfg(**{"agent.core": "rims", "agent.core_options": "{}", "learner.name": "ppo",
                       "learner.minibatches": 2, "run.total_frames": 200,
                       "learner.capture_grad_norm": 1e-9})
    with caplog.at_level(logging.WARNING, logger="mira"):
        summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["updates"] >= 2
    files = sorted((RunDir(cfg.run.dir).path / "bursts").glob("*.pt"))
    assert [f.name for f in files][:2] == ["update00000000-step0.pt", "update00000000-step1.pt"]
    assert len(files) == CAPTURE_LIMIT and files[-1].name == "update00000001-step1.pt"
    lines = [r.getMessage() for r in caplog.records if "capture_grad_norm" in r.getMessage()]
    assert len(lines) == CAPTURE_LIMIT and "update 0: pre-clip gradient norm" in lines[0]

    first = torch.load(files[0], weights_only=True)
    assert first["config_format"] == CONFIG_FORMAT  # scripts.bench.burst loads what it meant then
    fresh = Learner(cfg, first["spec"])  # the same seed builds the same initial weights
    assert all(torch.equal(v, first["learner"]["agent"][k])
               for k, v in fresh.agent.state_dict().items())
    assert first["learner"]["optimizer"]["state"] == {}  # no step taken yet
    kept = first["grad_norms"]
    assert sum(v * v for v in kept.values()) ** 0.5 == pytest.approx(first["grad_norm"], rel=1e-5)
    assert list(kept.values()) == sorted(kept.values(), reverse=True)

    # A later step (Adam's moments present, a minibatch of the second update) replays to the
    # gradient the run computed, from the file alone.
    capture, replayed, terms, diagnostics = replay(files[-1])
    assert capture["learner"]["optimizer"]["state"] != {}
    assert replayed == pytest.approx(capture["grad_norms"], rel=1e-4, abs=1e-7)
    assert sum(diagnostics["activation_frequency"]) == pytest.approx(4.0)  # k_active of 6 RIMs

    assert main([str(files[-1]), "--top", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{files[-1]}: update 1 (optimizer step 1 of it)")
    assert "replayed" in out[1] and out[2].startswith("loss terms, replayed: loss ")
    assert len(out) == 4 + 3 + 1  # header lines, 3 rows, diagnostics


def test_no_threshold_keeps_nothing_and_a_missing_file_is_one_line(small_cfg, capsys):
    from scripts.bench.burst import main

    cfg = small_cfg(**{"run.total_frames": 200})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert not (RunDir(cfg.run.dir).path / "bursts").exists()
    with pytest.raises(SystemExit) as stop:
        main([str(RunDir(cfg.run.dir).path / "bursts" / "nothing.pt")])
    assert stop.value.code == 2
    assert "bursts are kept in <run>/bursts/*.pt" in capsys.readouterr().err
    torn = RunDir(cfg.run.dir).path / "torn.pt"
    torn.write_bytes(b"")
    with pytest.raises(SystemExit) as stop:
        main([str(torn)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and "is not a burst file mira wrote (EOFError" in err[-1]


@pytest.mark.parametrize("how", ["grad", "loss"])
def test_a_non_finite_gradient_or_loss_is_kept_before_the_step_is_skipped(
        small_cfg, monkeypatch, tmp_path, capsys, how):
    from envs.runner import EnvRunner
    from learners.config.schema import to_dict
    from scripts.bench.burst import main
    from tests.test_run_safety import _nonfinite_loss_after

    cfg = small_cfg(**{"learner.capture_grad_norm": 1e9})  # no finite norm reaches it
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    learner = Learner(cfg, runner.spec())
    assert learner.learn(runner.rollout()).captures == 0
    _nonfinite_loss_after(monkeypatch, 0, how)
    report = learner.learn(runner.rollout())
    assert report.metrics["skipped_updates"] == 1 and report.captures == 1
    (kept,) = learner.take_captures()
    assert kept["update"] == 1 and not kept["grad_norm"] < float("inf")
    assert (kept["grad_norms"] == {}) == (how == "loss")  # a non-finite loss has no gradient
    assert learner.take_captures() == []
    path = tmp_path / "burst.pt"
    torch.save({**kept, "config": to_dict(cfg), "config_format": CONFIG_FORMAT}, path)
    assert main([str(path), "--top", "2"]) == 0  # replayed under the same broken loss
    out = capsys.readouterr().out.splitlines()
    assert ("the loss was not finite" in out[1]) == (how == "loss")
    assert out[2].startswith("loss terms, replayed: loss " + ("nan" if how == "loss" else ""))
    assert "policy_loss nan" not in out[2]  # the broken part is after the terms were summed
