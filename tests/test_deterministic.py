"""Replayable runs (``run.deterministic``) and paired seeds (the torso's weights by seed)."""

from __future__ import annotations

import json

import pytest
import torch

from learners.config.schema import load_config
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from tests.conftest import small_overrides


def test_agents_with_different_cores_and_heads_share_the_torso_at_one_seed(tmp_path):
    """The learner seeds torch with run.seed and the agent builds its torso first."""
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    def torso(seed: int, core: str, head: str, before: int) -> dict:
        cfg = load_config(None, small_overrides(tmp_path, **{
            "run.seed": seed, "agent.core": core, "agent.head": head}))
        spec = EnvRunner(cfg.env, cfg.agent, envs_per_runner=1, unroll_length=5).spec()
        torch.manual_seed(before)  # torch's state before the learner: it must not matter
        return Learner(cfg, spec).agent.torso.state_dict()

    torsos = [torso(0, "lstm", "linear", 11), torso(0, "alstm", "multiplicative", 12),
              torso(0, "mi_lstm", "linear", 13)]
    for other in torsos[1:]:
        assert other.keys() == torsos[0].keys()
        assert all(torch.equal(other[k], torsos[0][k]) for k in other)
    different = torso(1, "lstm", "linear", 11)  # another run.seed, other weights
    assert not all(torch.equal(different[k], torsos[0][k]) for k in different)


def _run(tmp_path, name: str, deterministic: bool) -> tuple[dict, dict]:
    cfg = load_config(None, small_overrides(
        tmp_path, **{"run.dir": str(tmp_path / name), "run.total_frames": 3000,
                     "runtime.num_runners": 2, "learner.batch_size": 8,
                     "run.deterministic": str(deterministic).lower()}))
    run = RunDir.create(cfg, None)
    try:
        summary = Trainer(cfg, run, quiet=True).train()
    finally:
        torch.use_deterministic_algorithms(False)  # the in-process part of the run set nothing
    state = RunDir.load_checkpoint(run.latest_checkpoint())["learner"]["agent"]
    return summary, state


@pytest.mark.ray
def test_deterministic_runs_with_ray_runners_repeat_bit_for_bit(tmp_path, ray_local):
    """Two runs of one config and seed, 2 Ray runners: the same weights and episodes."""
    first, weights_a = _run(tmp_path, "a", True)
    second, weights_b = _run(tmp_path, "b", True)
    assert first["frames"] == second["frames"] >= 3000
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    same = ("episodes", "episode_return_mean", "updates", "episode_return_mean_per_task")
    assert json.dumps({k: first[k] for k in same}) == json.dumps({k: second[k] for k in same})


def _logged(run_dir) -> set[tuple[str, int, float]]:
    """Every scalar of a run's event files as (tag, step, value)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {(tag, e.step, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}


def test_replays_log_the_same_scalars_at_the_same_steps(tmp_path):
    """run.deterministic logs every run.log_every_s updates: two replays' event files match.

    In-process (no Ray), MiniGrid, 24 updates logged every 4; the scalars measured on the
    clock (CLOCK_SCALARS) are logged at the same steps with their own values.
    """
    from learners.runtime.logbook import CLOCK_SCALARS

    logs = []
    for name in ("a", "b"):
        cfg = load_config(None, small_overrides(
            tmp_path, **{"run.dir": str(tmp_path / name), "run.total_frames": 480,
                         "run.log_every_s": 4, "run.deterministic": "true"}))
        try:
            Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
        finally:
            torch.use_deterministic_algorithms(False)
        logs.append(_logged(tmp_path / name))
    a, b = logs
    assert {(t, s) for t, s, _ in a} == {(t, s) for t, s, _ in b}
    steps = sorted({s for t, s, _ in a if t == "policy_loss"})
    assert steps == [80, 160, 240, 320, 400, 480]  # every 4 updates of 4 envs x 5 steps
    replayed = {(t, s, v) for t, s, v in a if t not in CLOCK_SCALARS}
    assert replayed == {(t, s, v) for t, s, v in b if t not in CLOCK_SCALARS}
    assert {t for t, _, _ in a} - set(CLOCK_SCALARS) > {"policy_loss", "episode_return_mean100"}
