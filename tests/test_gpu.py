"""The learner's devices: CUDA placement, pinned-memory staging, bfloat16 autocast.

bfloat16 autocast is tested on CPU too. The CUDA tests run where CUDA exists and are skipped
cleanly elsewhere (CI and the dev machines have none); the CPU one runs everywhere. The device
rules that need no GPU (which device, CPU copies out, runner snapshots, hidden GPUs, TF32 off)
are in tests/test_device.py.
"""

import pytest
import torch

from envs.runner import EnvRunner
from learners.config.schema import ConfigError
from learners.update.device import resolve_device
from learners.update.learner import Learner
from tests.conftest import tensors

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
    state = lrn.state_dict()  # checkpoints: optimizer state too, not only the weights
    assert state["optimizer"]["state"]
    assert all(t.device.type == "cpu" for t in tensors(state))


# Metrics that are smooth functions of the weights and the batch (clip_frac counts ratios past
# the clip edge, which one ulp can move; update_s is a time).
SMOOTH_METRICS = ("policy_loss", "value_loss", "entropy", "grad_norm")


def updated(cfg, spec: dict, weights: dict, traj) -> tuple[dict, dict]:
    """(weights, metrics) after one update of a fresh learner from ``weights`` on ``traj``."""
    lrn = Learner(cfg, spec)
    lrn.agent.load_state_dict(weights)
    metrics = lrn.update(traj)
    return lrn.get_weights(), metrics


def eager_and_compiled(small_cfg, over: dict) -> tuple:
    """``(cfg, compiled cfg, spec, weights, two trajectories)`` for a compiled-update check.

    ``over`` the overrides of both configs; the compiled one adds ``learner.compile``. The
    trajectories are two rollouts of the starting ``weights`` (4 envs, 5 steps).
    """
    cfg, compiled = small_cfg(**over), small_cfg(**over, **{"learner.compile": True})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    spec = runner.spec()
    weights = Learner(cfg, spec).get_weights()
    return cfg, compiled, spec, weights, [runner.rollout(weights, 0) for _ in range(2)]


def assert_same_update(before: dict, a: tuple[dict, dict], b: tuple[dict, dict]) -> None:
    """Two learners' updates from the same weights agree to float32 rounding.

    Tolerances: every parameter within 1e-4 relative (1e-6 absolute near zero); every tensor's
    change ``after - before`` within 1e-3 of its norm (the sharper check: a change is ~1e-3 of
    a weight, so a wrong gradient hides in the first but not here); the smooth metrics within
    1e-4 relative; RIMs' activation frequencies (which units each step chose) equal up to
    float32 rounding.
    """
    (wa, ma), (wb, mb) = a, b
    for k, v in before.items():
        if not v.is_floating_point():
            assert torch.equal(wa[k], wb[k]), k
            continue
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-6, msg=k)
        da, db = wa[k] - v, wb[k] - v
        assert float((da - db).norm()) <= 1e-3 * float(db.norm()) + 1e-7, k
    for k in SMOOTH_METRICS:
        assert ma[k] == pytest.approx(mb[k], rel=1e-4, abs=1e-6), k
    # A frequency is the mean of 0/1 choices over the batch's steps; the devices' float32
    # means of the same choices differed by one ulp on an H200 (a division against a
    # multiplication by 1/steps), while one differing choice moves it by 1/steps (1/20 here).
    freq = sorted(k for k in mb if k.startswith("activation_frequency/"))
    assert [ma[k] for k in freq] == pytest.approx([mb[k] for k in freq], rel=0, abs=1e-6)


@cuda
@pytest.mark.parametrize("core", ["lstm", "rims"])
@pytest.mark.parametrize("learner", ["impala", "ppo"])
def test_cuda_update_matches_cpu_update(small_cfg, core, learner):
    """One learner update on CUDA equals the same update on CPU (tolerances: assert_same_update).

    Same weights, same batch, full float32 (TF32 off): only the order of float32 sums differs.
    With ``rims`` the unroll starts from the zero state, where every RIM ties; the tie rule must
    choose the same units on both devices (``topk``'s did not).
    """
    over = {"agent.core": core, "agent.core_options": "{}" if core == "rims" else
            "{hidden_size: 32}", "learner.name": learner, "learner.minibatches": 2}
    cpu_cfg = small_cfg(**over, **{"learner.device": "cpu"})
    cuda_cfg = small_cfg(**over, **{"learner.device": "cuda"})
    runner = EnvRunner(cpu_cfg.env, cpu_cfg.agent, envs_per_runner=4, unroll_length=5)
    spec = runner.spec()
    weights = Learner(cpu_cfg, spec).get_weights()
    traj = runner.rollout(weights, 0)
    on_cpu = updated(cpu_cfg, spec, weights, traj)
    on_cuda = updated(cuda_cfg, spec, weights, traj)
    assert all(t.device.type == "cpu" for t in on_cuda[0].values())
    assert not all(torch.equal(on_cpu[0][k], weights[k]) for k in weights)  # it did update
    assert_same_update(weights, on_cuda, on_cpu)


@cuda
@pytest.mark.parametrize("popart", [False, True])
def test_cuda_compiled_update_matches_eager(small_cfg, popart):
    """``learner.compile`` on CUDA (``reduce-overhead``: CUDA graphs) gives the eager update.

    Two updates, so the second replays the graphs the first recorded; the metrics and, with
    PopArt, the value targets of each minibatch outlive its replay (``kept_outputs``). Every
    graph ran as a CUDA graph: none was skipped (an input mutated outside the graphs' memory,
    such as gradients the clipping graph scales, would skip it and run it kernel by kernel).
    """
    over = {"learner.device": "cuda", "learner.minibatches": 2, "learner.popart": popart,
            "learner.optimizer.name": "adam",
            "agent.core_options": "{hidden_size: 32, resets: rows}"}
    cfg, compiled, spec, weights, trajs = eager_and_compiled(small_cfg, over)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    after = {}
    for name, c in (("eager", cfg), ("compiled", compiled)):
        lrn = Learner(c, spec)
        lrn.agent.load_state_dict(weights)
        metrics = [lrn.update(t) for t in trajs]
        after[name] = (lrn.get_weights(), metrics[-1])
    assert_same_update(weights, after["compiled"], after["eager"])
    assert not torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]


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


COPYING = ["--batch-size", "4", "--hidden", "24", "--train-dormant", "3", "--test-dormant", "6",
           "--eval-batch-size", "8", "--eval-every", "2"]


@cuda
def test_copying_trains_on_cuda_as_on_cpu(tmp_path):
    """``--device cuda``: the same batches as on the CPU, so the same model up to rounding."""
    from scripts.papers import copying

    on = {d: copying.main(["--cores", "lstm", "--steps", "3", "--device", d] + COPYING)[0]
          for d in ("cpu", "cuda")}
    for key in ("ce_train_length", "ce_test_length"):
        assert on["cuda"][key] == pytest.approx(on["cpu"][key], abs=1e-4)


@cuda
def test_copying_on_cuda_continues_the_same_run(tmp_path):
    """A checkpoint written on CUDA continues there, RIMs' dropout generator included."""
    from scripts.papers import copying

    args = ["--cores", "rims", "--device", "cuda"] + COPYING
    copying.main(args + ["--steps", "6", "--out", str(tmp_path / "a")])
    copying.main(args + ["--steps", "3", "--out", str(tmp_path / "b")])
    copying.main(args + ["--steps", "6", "--out", str(tmp_path / "b")])
    a = torch.load(tmp_path / "a" / "rims-seed0.pt", map_location="cpu", weights_only=False)
    b = torch.load(tmp_path / "b" / "rims-seed0.pt", map_location="cpu", weights_only=False)
    assert a["step"] == b["step"] == 6
    assert all(torch.allclose(a["model"][k], b["model"][k], atol=1e-6) for k in a["model"])
