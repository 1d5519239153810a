"""The GPU path of the learner: device placement, pinned-memory staging, bfloat16 autocast.

Runs where CUDA exists and is skipped cleanly elsewhere (CI and the dev machines have none)."""

import pytest
import torch

from envs.runner import EnvRunner
from learners.config import ConfigError
from learners.learner import Learner, resolve_device

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_auto_device_falls_back_to_cpu_without_cuda():
    if torch.cuda.is_available():
        assert resolve_device("auto").type == "cuda"
    else:
        assert resolve_device("auto").type == "cpu"
        with pytest.raises(ConfigError, match="no CUDA device"):
            resolve_device("cuda")


@cuda
@pytest.mark.parametrize("mixed_precision", [False, True])
@pytest.mark.parametrize("learner", ["impala", "ppo"])
def test_cuda_learner_update(small_cfg, mixed_precision, learner):
    cfg = small_cfg(**{"learner.device": "cuda", "learner.mixed_precision": mixed_precision, "learner.name": learner,
                       "learner.minibatches": 2})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    lrn = Learner(cfg, runner.spec())
    assert next(lrn.agent.parameters()).is_cuda
    metrics = lrn.update(runner.rollout())
    assert metrics["grad_norm"] > 0 and all(v == v for v in metrics.values())
    weights = lrn.get_weights()
    assert all(not v.is_cuda for v in weights.values())  # runners get CPU tensors
    runner.set_weights(weights, 1)
