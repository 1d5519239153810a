"""``learner.compile``: each minibatch's forward and loss compiled by ``torch.compile``.

On CPU the compiled update must equal the eager one to float32 rounding (the same check as a
CUDA update against a CPU one, ``tests/test_gpu.py``), for both algorithms, for IMPALA's
per-step targets, and for the LSTM, stepped inside the compiled graph against the eager
update's fused rows layout. On CUDA the same option runs in ``reduce-overhead`` mode (CUDA
graphs); that path is exercised by ``tests/test_gpu.py``'s CUDA tests when a GPU exists.
"""

import pytest
import torch

from envs.runner import EnvRunner
from tests.test_gpu import assert_same_update, eager_and_compiled, updated

CASES = {
    "impala": {"learner.name": "impala"},
    "impala-fixed-targets-rows": {"learner.name": "impala", "learner.impala.fixed_targets": True,
                                  "agent.core_options": "{hidden_size: 32, resets: rows}"},
    "ppo": {"learner.name": "ppo"},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_update_matches_eager(small_cfg, case):
    over = {"learner.device": "cpu", "learner.minibatches": 2, **CASES[case]}
    cfg, compiled = small_cfg(**over), small_cfg(**over, **{"learner.compile": True})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    spec = runner.spec()
    from learners.update.learner import Learner

    torch._dynamo.reset()  # compiled afresh for this case, its frames counted from zero
    torch._dynamo.utils.counters.clear()
    first = Learner(cfg, spec)
    weights = first.get_weights()
    traj = runner.rollout(weights, 0)
    eager = updated(cfg, spec, weights, traj)
    assert not torch._dynamo.utils.counters["frames"]["ok"]  # nothing compiled eagerly
    assert_same_update(weights, updated(compiled, spec, weights, traj), eager)
    assert torch._dynamo.utils.counters["frames"]["ok"] > 0  # the compiled update ran
    assert not all((eager[0][k] == weights[k]).all() for k in weights)  # it did update


@pytest.mark.slow
def test_static_batch_buffers_keep_the_update_and_its_graphs(small_cfg):
    """The batch staged in static buffers (CUDA graphs' path, here on CPU) changes nothing.

    Two updates on two batches, compiled with the batch in ``StaticBatch``'s buffers, against
    the same two eager: the same weights to float32 rounding; the buffers are made once and
    keep their addresses, and the second update compiles nothing new.
    """
    from learners.update.learner import Learner
    from learners.update.staging import StaticBatch

    over = {"learner.device": "cpu", "learner.minibatches": 2, "learner.name": "impala",
            "learner.impala.fixed_targets": True, "learner.recurrence": 5,
            "agent.core_options": "{hidden_size: 32, resets: rows}"}
    cfg, compiled, spec, weights, trajs = eager_and_compiled(small_cfg, over)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    after, frames, addresses = {}, [], []
    for name, c in (("eager", cfg), ("compiled", compiled)):
        lrn = Learner(c, spec)
        lrn.agent.load_state_dict(weights)
        if name == "compiled":
            lrn.static_batch = StaticBatch()
        metrics = []
        for t in trajs:
            metrics.append(lrn.update(t))
            frames.append(torch._dynamo.utils.counters["frames"]["ok"])
            if lrn.static_batch is not None:
                addresses.append([b.data_ptr() for b in lrn.static_batch.buffers])
        after[name] = (lrn.get_weights(), metrics[-1])
    assert_same_update(weights, after["compiled"], after["eager"])
    assert frames[0] == frames[1] == 0 and frames[2] > 0 and frames[3] == frames[2]
    assert lrn.static_batch.allocations == 1 and addresses[0] == addresses[1]


@pytest.mark.slow
def test_profiler_count_agrees_with_dispatcher_and_sees_compiled_graphs(small_cfg):
    """``count_update_calls`` (the profiler) against ``count_update_ops`` (the dispatcher).

    On an eager update the kernels they count agree within 10%; on a compiled one the
    profiler sees the compiled graphs' calls (a forward, a backward and a clipping graph a
    step) and counts fewer kernels outside them than the eager update launches.
    """
    from learners.update.learner import Learner
    from scripts.bench.dispatch import count_update_calls, count_update_ops

    over = {"learner.device": "cpu", "learner.minibatches": 2,
            "agent.core_options": "{hidden_size: 32, resets: rows}"}
    runner = EnvRunner(small_cfg(**over).env, small_cfg(**over).agent, envs_per_runner=4,
                       unroll_length=5)
    spec, traj = runner.spec(), runner.rollout()
    steps = 5 * 4

    def counted(count, cfg):
        learner = Learner(cfg, spec)
        return count(lambda: learner.update(traj), steps)

    eager_cfg = small_cfg(**over)
    by_dispatcher = counted(count_update_ops, eager_cfg)
    by_profiler = counted(count_update_calls, eager_cfg)
    assert by_profiler["graphs"] == 0 and by_profiler["outside_graphs"] == by_profiler["kernels"]
    assert by_profiler["kernels"] == pytest.approx(by_dispatcher["kernels"], rel=0.1)
    torch._dynamo.reset()
    compiled = counted(count_update_calls, small_cfg(**over, **{"learner.compile": True}))
    # 2 minibatches: a forward, a backward and a clipping graph each
    assert compiled["graphs"] == 2 * 3
    assert compiled["outside_graphs"] < by_profiler["kernels"] / 2


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adam", "rmsprop_tf"])
def test_compiled_clip_matches_eager_over_updates_with_a_moving_rate(small_cfg, optimizer):
    """Gradient clipping as a graph of its own (``CompiledClip``) changes nothing.

    Three updates, the torso in a group of its own (two rates), the rate warming up and then
    decaying within them, the clip active: the compiled learner's weights and metrics equal
    the eager one's to float32 rounding, and the third update compiles nothing new.
    """
    from learners.update.learner import Learner

    over = {"learner.device": "cpu", "learner.minibatches": 2, "learner.name": "impala",
            "learner.optimizer.name": optimizer, "learner.optimizer.torso_lr_scale": 0.5,
            "learner.optimizer.lr_warmup_frames": 40, "learner.optimizer.lr_decay_frames": 400,
            "learner.optimizer.max_grad_norm": 0.05}
    cfg, compiled, spec, weights, trajs = eager_and_compiled(small_cfg, over)
    trajs.append(trajs[0])
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    after, frames, rates = {}, [], []
    for name, c in (("eager", cfg), ("compiled", compiled)):
        lrn = Learner(c, spec)
        lrn.agent.load_state_dict(weights)
        metrics = []
        for t in trajs:
            metrics.append(lrn.update(t))
            frames.append(torch._dynamo.utils.counters["frames"]["ok"])
            rates.append([g["lr"] for g in lrn.optimizer.param_groups])
        after[name] = (lrn.get_weights(), metrics[-1])
    assert_same_update(weights, after["compiled"], after["eager"])
    assert metrics[-1]["grad_norm"] > 0.05  # clipped
    assert rates[:3] == rates[3:] and rates[1] != rates[2] and rates[1][0] == rates[1][1] / 2
    assert frames[2] == 0 and frames[3] > 0 and frames[5] == frames[4]
    assert lrn.compiled_clip is not None


def test_kept_outputs_copy_what_outlives_a_replay():
    """What outlives a CUDA graph's replay is copied out of the graph's memory.

    The metrics (stacked into one copy where they can be, one copy each where not) and the
    minibatch's kept value targets and task ids are copied; the loss, spent within the step,
    and the metrics that are plain numbers are not.
    """
    from learners.update.outputs import kept_outputs

    loss, targets, task = torch.tensor(1.0), torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.long)
    stackable = {"policy_loss": torch.tensor(0.5), "entropy": torch.tensor(2.5), "grad_norm": 2.0}
    mixed = {"policy_loss": torch.tensor(0.5), "count": torch.tensor(3), "grad_norm": 2.0}
    for metrics in (stackable, mixed):
        for kept in (None, (targets, task), (None, task)):
            kept_loss, copied, copied_kept = kept_outputs(loss, metrics, kept)
            assert kept_loss is loss and copied["grad_norm"] == 2.0
            assert list(copied) == list(metrics)
            for k, v in metrics.items():
                if torch.is_tensor(v):
                    assert copied[k].data_ptr() != v.data_ptr() and torch.equal(copied[k], v)
                    assert copied[k].dtype == v.dtype and copied[k].dim() == 0
            if kept is None:
                assert copied_kept is None
                continue
            for original, copy in zip(kept, copied_kept):
                assert (copy is None) == (original is None)
                if original is not None:
                    assert copy.data_ptr() != original.data_ptr() and torch.equal(copy, original)
