"""Shared fixtures: small configs so every test runs in seconds on 2 CPU cores."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def small_overrides(tmp_path, **extra) -> list[str]:
    """A tiny in-process IMPALA run on MiniGrid: 2 x 4 envs, T=5, hidden 32."""
    base = {
        "run.dir": str(tmp_path / "run"),
        "run.total_frames": 400,
        "run.log_every_s": 1,
        "runtime.num_runners": 0,
        "runtime.envs_per_runner": 4,
        "learner.unroll_length": 5,
        "learner.batch_size": 4,
        "learner.reward_clip": "none",
        "agent.core_options": "{hidden_size: 32}",
        "agent.torso_options": "{hidden_size: 32}",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


@pytest.fixture(autouse=True)
def _torch_threads_as_found():
    """Each test starts with the thread count the suite started with.

    Commands called in-process (the benchmarks, the probe, the trainer) set torch's intra-op
    thread count for their own process and leave it there; without this a test's speed would
    depend on which test ran before it.
    """
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def small_cfg(tmp_path):
    from learners.config.schema import load_config

    def make(**extra):
        return load_config(None, small_overrides(tmp_path, **extra))

    return make


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for all tests marked ``ray`` (Ray takes seconds to start)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        # "local": a new instance always. With no address Ray connects to the cluster named in
        # /tmp/ray/ray_current_cluster, which a head node killed by signal leaves behind, stale.
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def random_batch(T: int, B: int, A: int, g) -> dict:
    """A learner batch of random trajectory fields, [T + 1, B] (``g``: a torch.Generator)."""
    import torch

    return {
        "action": torch.randint(0, A, (T + 1, B), generator=g),
        "behaviour_logits": torch.randn(T + 1, B, A, generator=g),
        "behaviour_value": torch.randn(T + 1, B, generator=g),
        "reward": torch.randn(T + 1, B, generator=g),
        "terminated": torch.rand(T + 1, B, generator=g) < 0.2,
        "truncated": torch.zeros(T + 1, B, dtype=torch.bool),
        "final_value": torch.zeros(T + 1, B),
        "reset": torch.zeros(T + 1, B, dtype=torch.bool),
        "task_id": torch.zeros(T + 1, B, dtype=torch.long),
        "last_action": torch.zeros(T + 1, B, dtype=torch.long),
        "last_reward": torch.zeros(T + 1, B),
    }


def tensors(tree) -> list:
    """Every tensor in nested dicts, lists and tuples."""
    import torch

    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        tree = list(tree.values())
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in tensors(v)]
    return []


def saved_run(path, cfg, fmt: int | None):
    """A run directory at ``path`` holding ``cfg`` as mira saved it in config format ``fmt``.

    ``fmt`` None: a meta.json without ``config_format``, as format 1 wrote it.
    """
    import json

    from learners.config.schema import save_config

    (path / "checkpoints").mkdir(parents=True)
    save_config(cfg, path / "config.yaml")
    meta = {"seed": 0} if fmt is None else {"seed": 0, "config_format": fmt}
    (path / "meta.json").write_text(json.dumps(meta))
    return path
