"""Device rules of the learner, checked on CPU: which device it picks, what it hands out.

- ``resolve_device`` with a faked list of visible CUDA devices and of GPUs Ray reserved;
- every tensor leaving the learner (weights, checkpoints' optimizer and PopArt state) is a CPU
  copy sharing no storage with the learner, through ``to_cpu``, the one code path of CPU and
  CUDA learners;
- a runner in the learner's process holds a snapshot stamped with the version it is;
- actors that reserve no GPU see none (a Ray test);
- TF32 is off after a learner is built, and denormal floats are flushed on every thread of
  its process (run directories from before keep them).
"""

from __future__ import annotations

import pytest
import torch

from envs.runner import EnvRunner
from learners.config.schema import ConfigError
from learners.runtime.fleet import gpu_options
from learners.update.device import resolve_device, to_cpu
from learners.update.learner import Learner
from tests.conftest import tensors


def fake_gpus(monkeypatch, count: int) -> None:
    """Make torch report ``count`` visible CUDA devices (nothing CUDA is run)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


# ------------------------------------------------------------------ which device


@pytest.mark.parametrize("reserved", [None, 0, 1])
def test_without_a_visible_gpu_auto_is_cpu_and_cuda_an_error(monkeypatch, reserved):
    fake_gpus(monkeypatch, 0)
    assert resolve_device("auto", reserved) == torch.device("cpu")
    assert resolve_device("cpu", reserved) == torch.device("cpu")
    with pytest.raises(ConfigError, match="sees no CUDA device; use learner.device=auto or cpu"):
        resolve_device("cuda", reserved)


def test_a_cuda_learner_with_no_gpu_here_is_refused_before_a_run_directory_exists(
        monkeypatch, tmp_path, capsys):
    """``mira train`` on a local instance: one line, no run directory, Ray not started."""
    from pathlib import Path

    from scripts.cli import main

    fake_gpus(monkeypatch, 0)
    preset = str(Path(__file__).resolve().parents[1] / "configs/impala_minigrid.yaml")
    for device, says in (("cuda", "learner.device=cuda but this learner sees no CUDA device"),
                         ("cuda:x", "learner.device must be auto, cpu, cuda or cuda:N")):
        assert main(["train", preset, f"learner.device={device}",
                     f"run.dir={tmp_path / 'run'}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "run").exists()


def test_auto_uses_a_visible_gpu_only_where_ray_reserved_one(monkeypatch):
    fake_gpus(monkeypatch, 2)
    assert resolve_device("auto", None) == torch.device("cuda")  # not under Ray: all its own
    assert resolve_device("auto", 1) == torch.device("cuda")
    assert resolve_device("auto", 0) == torch.device("cpu")  # visible, but another actor's
    assert resolve_device("cpu", 1) == torch.device("cpu")
    assert resolve_device("cuda:1", None) == torch.device("cuda:1")
    with pytest.raises(ConfigError, match="Ray reserved no GPU for the learner"):
        resolve_device("cuda", 0)
    with pytest.raises(ConfigError, match=r"sees 2 CUDA device\(s\) \(cuda:0 to cuda:1\)"):
        resolve_device("cuda:2", None)


def test_learner_with_no_reserved_gpu_builds_on_cpu(monkeypatch, small_cfg):
    """The real constructor with ``auto``: a visible GPU Ray did not reserve is not used."""
    fake_gpus(monkeypatch, 1)
    cfg = small_cfg(**{"learner.device": "auto"})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    learner = Learner(cfg, runner.spec(), reserved_gpus=0)
    assert learner.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in learner.agent.parameters())


def test_actors_that_reserve_no_gpu_hide_every_gpu():
    assert gpu_options(0) == {"num_gpus": 0,
                              "runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}}
    assert gpu_options(1) == {"num_gpus": 1}  # Ray sets CUDA_VISIBLE_DEVICES to its GPU


@pytest.mark.ray
def test_runner_and_cpu_learner_actors_see_no_gpu(ray_local, small_cfg, monkeypatch):
    """The fleet's actors, as ``mira train`` builds them: an empty CUDA_VISIBLE_DEVICES.

    Ray 2.60 passes the node's CUDA_VISIBLE_DEVICES (here: unset) unchanged to an actor with
    no GPU; the fleet's runners and a learner without a GPU must see an empty one, so no device.
    """
    import os

    from learners.runtime.fleet import Fleet

    def seen(actor):
        return ray_local.get(actor.__ray_call__.remote(
            lambda self: os.environ.get("CUDA_VISIBLE_DEVICES")))

    cfg = small_cfg(**{"runtime.num_runners": 1, "learner.device": "auto"})
    fleet = Fleet(cfg)
    fleet.start()
    try:
        spec = ray_local.get(fleet.runners[0].spec())
        learner = fleet.make_learner(spec, gpus=0)
        assert seen(fleet.runners[0].actor) == ""
        assert seen(learner.actor) == ""
        device = ray_local.get(learner.actor.__ray_call__.remote(lambda self: str(self.device)))
        assert device == "cpu"
        learner.kill()
    finally:
        fleet.stop()


# ------------------------------------------------------------------ what leaves the learner


def live_storages(learner: Learner) -> set[int]:
    """Storage addresses of the learner's parameters, buffers, optimizer and PopArt state."""
    live = tensors(learner.agent.state_dict()) + tensors(list(learner.optimizer.state.values()))
    if learner.popart is not None:
        live += tensors(learner.popart.state_dict())
    return {t.untyped_storage().data_ptr() for t in live}


def make_learner(small_cfg, **over):
    cfg = small_cfg(**{"learner.device": "cpu", **over})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5,
                       popart=cfg.learner.popart)
    return Learner(cfg, runner.spec()), runner


def test_to_cpu_copies_every_tensor_and_keeps_the_structure():
    a, b = torch.ones(3), torch.zeros(2, dtype=torch.int64)
    tree = {"x": a, "y": [b, (a, 3)], "z": "text"}
    out = to_cpu(tree)
    assert out["z"] == "text" and out["y"][1][1] == 3 and isinstance(out["y"][1], tuple)
    for got, src in zip(tensors(out), tensors(tree)):
        assert got.device.type == "cpu" and torch.equal(got, src) and got.dtype == src.dtype
        assert got.untyped_storage().data_ptr() != src.untyped_storage().data_ptr()


def test_everything_leaving_the_learner_is_a_cpu_copy(small_cfg):
    """Weights, checkpoint state (optimizer, PopArt) and metrics, after real updates.

    On CPU ``.cpu()`` would return the live tensors themselves; ``to_cpu`` must copy there as it
    does from CUDA, so the storages are checked, not only the devices.
    """
    learner, runner = make_learner(small_cfg, **{"learner.popart": True})
    for _ in range(2):
        metrics = learner.update(runner.rollout(learner.get_weights(), learner.version))
    assert all(type(v) is float for v in metrics.values())
    state = learner.state_dict()
    assert state["optimizer"]["state"] and "popart" in state
    live = live_storages(learner)
    for out in (learner.get_weights(), state):
        for t in tensors(out):
            assert t.device.type == "cpu"
            assert t.untyped_storage().data_ptr() not in live
    # A held checkpoint does not change with the next update.
    held = {k: v.clone() for k, v in state["agent"].items()}
    avg = [s["square_avg"].clone() for s in state["optimizer"]["state"].values()]
    learner.update(runner.rollout(learner.get_weights(), learner.version))
    assert all(torch.equal(held[k], v) for k, v in state["agent"].items())
    assert all(torch.equal(a, s["square_avg"])
               for a, s in zip(avg, state["optimizer"]["state"].values()))
    # ... and loading one does not make the caller's tensors the live optimizer state.
    other, _ = make_learner(small_cfg, **{"learner.popart": True})
    other.load_state_dict(state)
    loaded = tensors(state)
    assert not {t.untyped_storage().data_ptr() for t in loaded} & live_storages(other)


def test_in_process_runner_holds_a_snapshot_stamped_with_its_version(small_cfg):
    """Weights taken at version v, loaded after update v + 1, are still version v's."""
    learner, runner = make_learner(small_cfg)
    weights = learner.get_weights()  # version 0
    at_v0 = {k: v.clone() for k, v in learner.agent.state_dict().items()}
    learner.update(runner.rollout(weights, 0))
    assert learner.version == 1
    runner.set_weights(weights, 0)
    held = runner.agent.state_dict()
    assert all(torch.equal(held[k], at_v0[k]) for k in at_v0)
    assert any(not torch.equal(held[k], v) for k, v in learner.agent.state_dict().items())
    live = live_storages(learner)
    assert not {t.untyped_storage().data_ptr() for t in weights.values()} & live
    assert not {t.untyped_storage().data_ptr() for t in held.values()} & live


def test_training_loop_stamps_every_runner_load_with_its_weights(small_cfg, monkeypatch):
    """The in-process loop (``runtime.num_runners: 0``): each load stamped v is version v.

    Spies record the learner's weights at each version and what the runner is given.
    """
    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer

    by_version, loads = {}, []
    learners = []
    learn, set_weights = Learner.learn, EnvRunner.set_weights

    def spy_learn(self, *trajectories):  # the method the loop calls (LearnerHandle.learn)
        if not by_version:
            by_version[self.version] = to_cpu(self.agent.state_dict())
        learners.append(self)
        out = learn(self, *trajectories)
        by_version[self.version] = to_cpu(self.agent.state_dict())
        return out

    def spy_set_weights(self, weights, version):
        loads.append((version, {k: v.clone() for k, v in weights.items()},
                      {v.untyped_storage().data_ptr() for v in weights.values()}))
        set_weights(self, weights, version)

    monkeypatch.setattr(Learner, "learn", spy_learn)
    monkeypatch.setattr(EnvRunner, "set_weights", spy_set_weights)
    cfg = small_cfg(**{"run.total_frames": 600})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert len(by_version) >= 4 and len(loads) >= 3
    live = live_storages(learners[0])
    for version, weights, ptrs in loads:
        expected = by_version[version]
        assert all(torch.equal(weights[k], expected[k]) for k in expected), version
        assert not ptrs & live


# ------------------------------------------------------------------ precision


def test_learner_turns_tf32_off(small_cfg):
    """TF32 (10-bit mantissa matmuls and convolutions on Ampere+ GPUs) is off after building."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = matmul.allow_tf32, cudnn.allow_tf32
    matmul.allow_tf32 = cudnn.allow_tf32 = True  # settable without CUDA
    try:
        make_learner(small_cfg)
        assert matmul.allow_tf32 is False and cudnn.allow_tf32 is False
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before


# A fresh process builds a learner of 2 threads, then multiplies 4M denormal floats: split
# over both threads (each takes half), so a thread left unflushed leaves its half nonzero.
FLUSH_PROBE = """
import sys, tempfile, torch
from pathlib import Path
from envs.runner import EnvRunner
from learners.config.schema import load_config
from learners.update.learner import Learner
from tests.conftest import small_overrides
cfg = load_config(None, small_overrides(Path(tempfile.mkdtemp()), **dict(
    a.split("=", 1) for a in sys.argv[1:])))
runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
Learner(cfg, runner.spec(), threads=2)
print(int((torch.full((4_000_000,), 1e-39) * 1.0).count_nonzero()))
"""


@pytest.mark.parametrize("flush, nonzero", [(None, 0), ("false", 4_000_000)])
def test_learner_flushes_denormals_on_every_thread(flush, nonzero):
    """Denormals slow a CPU backward ~3x; the learner flushes them in all its threads."""
    import subprocess
    import sys
    from pathlib import Path

    args = [] if flush is None else [f"learner.flush_denormal={flush}"]
    out = subprocess.run([sys.executable, "-c", FLUSH_PROBE, *args], capture_output=True,
                         text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == nonzero


def test_run_directories_from_before_the_flush_keep_denormals(small_cfg, tmp_path):
    """A run directory of format 4 resumes with learner.flush_denormal false, as it computed."""
    from learners.runtime.run_dir import CONFIG_FORMAT, RunDir
    from tests.conftest import saved_run

    cfg = small_cfg()
    assert cfg.learner.flush_denormal is True
    for fmt, expected in ((4, False), (CONFIG_FORMAT, True)):
        run = saved_run(tmp_path / f"format{fmt}", cfg, fmt)
        assert RunDir.open(run).load_config().learner.flush_denormal is expected, fmt
