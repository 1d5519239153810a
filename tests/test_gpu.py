"""The learner's devices: CUDA placement, pinned-memory staging, bfloat16 autocast.

bfloat16 autocast is tested on CPU too. The CUDA tests run where CUDA exists and are skipped
cleanly elsewhere (CI and the dev machines have none); the CPU one runs everywhere.
"""

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
    cfg = small_cfg(**{"learner.device": "cuda", "learner.mixed_precision": mixed_precision,
                       "learner.name": learner, "learner.minibatches": 2})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    lrn = Learner(cfg, runner.spec())
    assert next(lrn.agent.parameters()).is_cuda
    metrics = lrn.update(runner.rollout())
    assert metrics["grad_norm"] > 0 and all(v == v for v in metrics.values())
    weights = lrn.get_weights()
    assert all(not v.is_cuda for v in weights.values())  # runners get CPU tensors
    runner.set_weights(weights, 1)


@pytest.mark.parametrize("learner", ["impala", "ppo"])
def test_cpu_mixed_precision_matches_float32(small_cfg, learner):
    """learner.mixed_precision on CPU: the forward runs in bfloat16, comes back as float32.

    Its outputs differ from float32 by bfloat16's rounding, not more, and an update is finite.
    """
    over = {"learner.device": "cpu", "learner.name": learner, "learner.minibatches": 2}
    cfg, bf16_cfg = small_cfg(**over), small_cfg(**over, **{"learner.mixed_precision": "true"})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    full, half = Learner(cfg, runner.spec()), Learner(bf16_cfg, runner.spec())
    half.agent.load_state_dict(full.agent.state_dict())
    batch, state = full.to_batch([runner.rollout(full.get_weights(), 0)])
    with torch.no_grad():
        a, b = full.forward(batch, state), half.forward(batch, state)
    assert b.logits.dtype == b.value.dtype == torch.float32
    assert not torch.equal(a.logits, b.logits)  # bfloat16 did run
    torch.testing.assert_close(b.logits, a.logits, atol=0.05, rtol=0.05)
    torch.testing.assert_close(b.value, a.value, atol=0.05, rtol=0.05)
    metrics = half.update(runner.rollout(half.get_weights(), 0))
    assert metrics["grad_norm"] > 0 and all(v == v for v in metrics.values())
