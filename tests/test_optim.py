"""RMSpropTF against TF1's RMSPropOptimizer update written out naively.

Also how it differs from torch.optim.RMSprop with the same numbers (why the IMPALA Atari preset
names it).
"""

import copy
import math

import pytest
import torch

from learners.config.schema import ConfigError, load_config
from learners.update.optim import RMSpropTF, make_optimizer


def tf1_rmsprop(w, grads, lr, rho, eps, momentum):
    """tf.train.RMSPropOptimizer, one scalar at a time: ms starts at 1, eps inside the sqrt."""
    w, ms, mom = list(w), [1.0] * len(w), [0.0] * len(w)
    for g in grads:
        for i in range(len(w)):
            ms[i] = rho * ms[i] + (1 - rho) * g[i] ** 2
            mom[i] = momentum * mom[i] + lr * g[i] / math.sqrt(ms[i] + eps)
            w[i] -= mom[i]
    return w


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_matches_tf1_formula(momentum):
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(5, generator=g, dtype=torch.float64)
    grads = [torch.randn(5, generator=g, dtype=torch.float64) * 10 ** float(k % 4 - 3)
             for k in range(12)]
    p = torch.nn.Parameter(w0.clone())
    opt = RMSpropTF([p], lr=6e-4, alpha=0.99, eps=0.01, momentum=momentum)
    for grad in grads:
        p.grad = grad.clone()
        opt.step()
    ref = tf1_rmsprop(w0.tolist(), [x.tolist() for x in grads], 6e-4, 0.99, 0.01, momentum)
    torch.testing.assert_close(p.detach(), torch.tensor(ref, dtype=torch.float64),
                               rtol=1e-12, atol=1e-15)


def test_small_gradients_take_smaller_steps_than_torch_rmsprop():
    # The paper's eps = 0.01 inside the sqrt bounds the denominator below by 0.1; PyTorch's
    # sqrt(ms) + eps only by 0.01, and PyTorch's ms starts at 0. For a gradient of 1e-3 (the
    # size of the shallow torso's on a Pong batch) the first TF step is ~lr * 1e-3, PyTorch's
    # ~lr * 0.09.
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    tf, pt = (RMSpropTF([a], lr=1.0, eps=0.01),
              torch.optim.RMSprop([b], lr=1.0, alpha=0.99, eps=0.01))
    a.grad, b.grad = torch.full((1,), 1e-3), torch.full((1,), 1e-3)
    tf.step(), pt.step()
    assert abs(a.item()) == pytest.approx(1e-3 / math.sqrt(0.99 + 0.01e-6 + 0.01), rel=1e-6)
    assert abs(b.item()) > 50 * abs(a.item())


def test_config_names_it_and_learner_builds_it():
    cfg = load_config(None, ["learner.optimizer.name=rmsprop_tf"])
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg.learner.optimizer)
    assert isinstance(opt, RMSpropTF)
    with pytest.raises(ConfigError, match="rmsprop_tf"):
        load_config(None, ["learner.optimizer.name=rmsprob"])


def test_adam_runs_fused_and_stays_fused_after_a_resume(small_cfg):
    """Adam takes its step as one fused kernel, and stays fused after a resume.

    A checkpoint an unfused Adam wrote (older runs) loads into a fused learner, which then
    steps as the learner it resumes.
    """
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    cfg = small_cfg(**{"learner.optimizer.name": "adam"})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=2, unroll_length=4)
    learner = Learner(cfg, runner.spec())
    assert all(group["fused"] for group in learner.optimizer.param_groups)
    learner.update(runner.rollout(learner.get_weights(), 0))
    state = learner.state_dict()
    for group in state["optimizer"]["param_groups"]:
        group["fused"] = None  # as torch.optim.Adam's default wrote it
    resumed = Learner(cfg, runner.spec())
    resumed.load_state_dict(state)
    assert all(group["fused"] for group in resumed.optimizer.param_groups)
    traj = runner.rollout(learner.get_weights(), learner.version)
    learner.update(traj)
    resumed.update(traj)
    for k, v in learner.agent.state_dict().items():
        assert torch.equal(resumed.agent.state_dict()[k], v), k


def test_unfused_adam_takes_the_fused_step_up_to_rounding(small_cfg):
    """``learner.optimizer.fused: false`` is PyTorch's per-tensor Adam: the same update.

    Two learners from the same weights, one of each, updated on one batch: their weights
    agree to float rounding, and only the fused one's groups say fused.
    """
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    cfg = small_cfg(**{"learner.optimizer.name": "adam"})
    plain_cfg = small_cfg(**{"learner.optimizer.name": "adam", "learner.optimizer.fused": False})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=2, unroll_length=4)
    fused, plain = Learner(cfg, runner.spec()), Learner(plain_cfg, runner.spec())
    plain.agent.load_state_dict(fused.agent.state_dict())
    assert not any(group["fused"] for group in plain.optimizer.param_groups)
    traj = runner.rollout(fused.get_weights(), 0)
    fused.update(traj)
    plain.update(traj)
    plain_weights = plain.agent.state_dict()
    for k, v in fused.agent.state_dict().items():
        torch.testing.assert_close(plain_weights[k], v, atol=1e-6, rtol=1e-5)
    moved = max(float((p - q).detach().abs().max()) for p, q in
                zip(fused.agent.parameters(), runner.agent.parameters()))
    assert moved > 1e-5  # the update moved the weights, so agreeing is not vacuous


def test_state_round_trips_through_state_dict():
    p = torch.nn.Parameter(torch.ones(3))
    opt = RMSpropTF([p], lr=0.1, momentum=0.9)
    for g in (3.0, -2.0, 0.5):
        p.grad = torch.full((3,), g)
        opt.step()
    q = torch.nn.Parameter(p.detach().clone())
    opt2 = RMSpropTF([q], lr=0.1, momentum=0.9)
    # as a checkpoint would: no shared tensors
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for key in ("square_avg", "momentum_buffer"):
        torch.testing.assert_close(opt2.state[q][key], opt.state[p][key])
    assert float(opt.state[p]["square_avg"][0]) != 1.0  # the state moved away from a fresh one
    for o, x in ((opt, p), (opt2, q)):
        x.grad = torch.full((3,), 0.7)
        o.step()
    torch.testing.assert_close(p, q)


def test_torso_lr_scale_steps_the_torso_at_that_fraction_of_the_rate(small_cfg):
    """``learner.optimizer.torso_lr_scale``: the torso's own Adam group at the scaled rate.

    With a gradient of 1 on every weight, Adam's first step moves each by its group's rate
    (times 1 / (1 + eps), here 1e-8); the torso's weights by a quarter of the rest's. A resume
    keeps the groups, and one that adds or drops the scale keeps every weight's Adam state.
    """
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    over = {"learner.optimizer.name": "adam", "learner.optimizer.lr": 1e-3,
            "learner.optimizer.eps": 1e-8, "learner.optimizer.lr_schedule": "constant",
            "learner.optimizer.max_grad_norm": 1e9}
    cfg = small_cfg(**over, **{"learner.optimizer.torso_lr_scale": 0.25})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=2, unroll_length=4)
    learner = Learner(cfg, runner.spec())
    agent = learner.agent
    before = {n: p.detach().clone() for n, p in agent.named_parameters()}
    learner.step(sum(p.sum() for p in agent.parameters()))
    moved = {n: (p.detach() - before[n]).abs() for n, p in agent.named_parameters()}
    torso = [m for n, m in moved.items() if n.startswith("torso.")]
    rest = [m for n, m in moved.items() if not n.startswith("torso.")]
    assert torso and rest
    for m in torso:
        assert torch.allclose(m, torch.full_like(m, 0.25e-3), rtol=1e-3)
    for m in rest:
        assert torch.allclose(m, torch.full_like(m, 1e-3), rtol=1e-3)
    resumed = Learner(cfg, runner.spec())
    resumed.load_state_dict(learner.state_dict())
    assert [g["lr_scale"] for g in resumed.optimizer.param_groups] == [0.25, 1.0]
    # Resumed without the scale (one group) and back: every weight keeps its Adam state.
    plain = Learner(small_cfg(**over), runner.spec())
    assert len(plain.optimizer.param_groups) == 1
    plain.load_state_dict(learner.state_dict())
    resumed.load_state_dict(plain.state_dict())
    for p in learner.agent.parameters():
        for q in (plain, resumed):
            twin = dict(zip(learner.agent.parameters(), q.agent.parameters()))[p]
            assert torch.equal(q.optimizer.state[twin]["exp_avg"],
                               learner.optimizer.state[p]["exp_avg"])
    assert [g["lr_scale"] for g in resumed.optimizer.param_groups] == [0.25, 1.0]
    with pytest.raises(ConfigError, match="torso_lr_scale"):
        small_cfg(**{"learner.optimizer.torso_lr_scale": 0})
