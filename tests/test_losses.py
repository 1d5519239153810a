"""The IMPALA loss: padding changes nothing, terms match a hand computation, reward clipping."""

import dataclasses

import pytest
import torch

from agents.agent import AgentOutput
from learners.algorithms import fill_defaults
from learners.algorithms.batch import Batch
from learners.algorithms.impala import ImpalaConfig, impala_loss, impala_targets
from learners.algorithms.returns import vtrace
from learners.algorithms.terms import action_log_probs, clip_rewards, step_targets
from learners.config.schema import LearnerConfig
from tests.conftest import random_batch


def loss_of(out, batch, cfg):
    """IMPALA's loss with V-trace from ``out`` (the paper's per-step targets).

    ``cfg`` gets IMPALA's defaults for the settings it leaves unset, as a loaded config has.
    """
    cfg = fill_defaults(cfg)
    return impala_loss(out, impala_targets(out, batch, cfg), cfg)


def batch_and_output(T=5, B=4, A=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = random_batch(T, B, A, g)
    logits = torch.randn(T + 1, B, A, generator=g, requires_grad=True)
    value = torch.randn(T + 1, B, generator=g, requires_grad=True)
    return batch, AgentOutput(logits, value)


def test_padding_columns_change_nothing():
    cfg = LearnerConfig(reward_clip="none")
    batch, out = batch_and_output()
    loss, metrics = loss_of(out, Batch.from_dict(batch), cfg)[:2]
    # Pad with 3 garbage columns masked out.
    pb, po = batch_and_output(B=3, seed=9)
    padded = {k: torch.cat([batch[k], pb[k]], dim=1) for k in batch}
    padded["mask"] = torch.cat([torch.ones(6, 4), torch.zeros(6, 3)], dim=1)
    pout = AgentOutput(*(torch.cat([a, b], dim=1) for a, b in zip(out, po)))
    ploss, pmetrics = loss_of(pout, Batch.from_dict(padded), cfg)[:2]
    torch.testing.assert_close(loss, ploss)
    for k in ("policy_loss", "value_loss", "entropy"):
        torch.testing.assert_close(metrics[k], pmetrics[k])


def test_loss_equals_hand_computation():
    cfg = LearnerConfig(reward_clip="none", gamma=0.9, entropy_cost=0.02, baseline_cost=0.5)
    batch, out = batch_and_output()
    loss, _ = loss_of(out, Batch.from_dict(batch), cfg)[:2]
    T = 5
    logp = torch.log_softmax(out.logits[:T], -1)
    blogp = torch.log_softmax(batch["behaviour_logits"][:T], -1)
    a = batch["action"][:T].unsqueeze(-1)
    pi_a, mu_a = logp.gather(-1, a).squeeze(-1), blogp.gather(-1, a).squeeze(-1)
    disc = 0.9 * (~batch["terminated"][:T]).float()
    vt = vtrace((pi_a - mu_a).detach(), disc, batch["reward"][:T], out.value[:T].detach(),
                out.value[T].detach())
    pg = -(pi_a * vt.pg_advantages).sum()
    base = 0.5 * ((vt.vs - out.value[:T]) ** 2).sum()
    ent = (logp.exp() * logp).sum()
    torch.testing.assert_close(loss, pg + 0.5 * base + 0.02 * ent)


def test_mean_reduction_is_the_sum_over_the_real_steps():
    """``learner.loss_reduction: mean`` divides every term by the number of real steps."""
    batch, out = batch_and_output()
    batch["mask"] = torch.ones(6, 4)
    batch["mask"][:, 3] = 0.0  # one padding column: 5 x 3 = 15 real steps
    summed = loss_of(out, Batch.from_dict(batch),
                     LearnerConfig(reward_clip="none", loss_reduction="sum"))
    mean = loss_of(out, Batch.from_dict(batch),
                   LearnerConfig(reward_clip="none", loss_reduction="mean"))
    torch.testing.assert_close(mean.loss, summed.loss / 15)
    for k in ("policy_loss", "value_loss"):
        torch.testing.assert_close(mean.metrics[k], summed.metrics[k] / 15)


def test_fixed_targets_are_the_per_step_targets_at_the_first_step(small_cfg):
    """``learner.impala.fixed_targets`` at an update's first step is the per-step V-trace.

    An update of one step (one epoch, one minibatch) from the same weights on the same batch
    moves the weights the same way with targets fixed per batch as with targets recomputed
    at the step (what differs is only the later steps of an update).
    """
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    over = {"learner.minibatches": 1, "learner.epochs": 1, "learner.unroll_length": 6,
            "learner.impala.surrogate_clip": 0.2}
    cfg = small_cfg(**over)
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=6)
    fixed = Learner(small_cfg(**over, **{"learner.impala.fixed_targets": "true"}),
                    runner.spec())
    per_step = Learner(cfg, runner.spec())
    per_step.agent.load_state_dict(fixed.agent.state_dict())
    start = {k: v.clone() for k, v in fixed.agent.state_dict().items()}
    traj = runner.rollout(fixed.get_weights(), 0)
    fixed.update(traj)
    per_step.update(traj)
    moved = 0
    for k, v in fixed.agent.state_dict().items():
        torch.testing.assert_close(v, per_step.agent.state_dict()[k], rtol=1e-5, atol=1e-6,
                                   msg=k)
        moved += int(not torch.equal(v, start[k]))
    assert moved > 0  # the step moved the weights


def test_truncated_step_bootstraps_from_final_value():
    batch, _ = batch_and_output(T=3, B=1)
    batch["terminated"][:] = False
    batch["truncated"][1, 0] = True
    batch["final_value"][1, 0] = 2.0
    rewards, discounts = step_targets(Batch.from_dict(batch), 0.5, "none")
    assert discounts[1, 0] == 0.0 and discounts[0, 0] == 0.5
    torch.testing.assert_close(rewards[1, 0], batch["reward"][1, 0] + 0.5 * 2.0)


def test_reward_clipping():
    r = torch.tensor([-10.0, -0.5, 0.0, 0.5, 10.0])
    torch.testing.assert_close(clip_rewards(r, "clip"), torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0]))
    soft = clip_rewards(r, "soft_asymmetric")
    torch.testing.assert_close(soft, torch.where(r < 0, 0.3, 1.0) * 5 * torch.tanh(r / 5))
    assert soft[0] > -1.6 and soft[-1] < 5.0
    torch.testing.assert_close(clip_rewards(r, "none"), r)


def test_gradient_flows_to_policy_and_value_only_through_the_loss_terms():
    cfg = LearnerConfig(reward_clip="none")
    batch, out = batch_and_output()
    loss, _ = loss_of(out, Batch.from_dict(batch), cfg)[:2]
    loss.backward()
    assert out.logits.grad[:5].abs().sum() > 0 and out.value.grad[:5].abs().sum() > 0
    # Row T only bootstraps (a constant target), so no gradient reaches it.
    assert out.logits.grad[5].abs().sum() == 0 and out.value.grad[5].abs().sum() == 0


def test_normalized_advantages_option_scales_only_the_policy_term():
    cfg = LearnerConfig(reward_clip="none", gamma=0.9)
    batch, out = batch_and_output(T=6, B=5)
    _, plain = loss_of(out, Batch.from_dict(batch), cfg)[:2]
    cfg = dataclasses.replace(cfg, normalize_advantages=True)  # configs are frozen
    _, normed = loss_of(out, Batch.from_dict(batch), cfg)[:2]
    T = 6
    logp = torch.log_softmax(out.logits[:T], -1)
    a = batch["action"][:T].unsqueeze(-1)
    pi_a = logp.gather(-1, a).squeeze(-1)
    mu_a = torch.log_softmax(batch["behaviour_logits"][:T], -1).gather(-1, a).squeeze(-1)
    disc = 0.9 * (~batch["terminated"][:T]).float()
    adv = vtrace((pi_a - mu_a).detach(), disc, batch["reward"][:T], out.value[:T].detach(),
                 out.value[T].detach()).pg_advantages
    adv = (adv - adv.mean()) / adv.std(unbiased=False)
    torch.testing.assert_close(normed["policy_loss"], -(pi_a * adv).sum().detach(),
                               rtol=1e-5, atol=1e-5)
    for k in ("value_loss", "entropy"):
        torch.testing.assert_close(normed[k], plain[k])


def test_impala_minibatches_are_the_papers_step_on_each_group_of_unrolls(small_cfg):
    """learner.minibatches: n = one ordinary IMPALA step on each of n random groups of unrolls.

    The groups are whole unrolls, in the order the update's generator draws them.
    """
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    cfg = small_cfg(**{"learner.minibatches": 2, "learner.unroll_length": 6})
    assert cfg.learner.epochs == 1
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=6)
    split = Learner(cfg, runner.spec())
    manual = Learner(small_cfg(**{"learner.unroll_length": 6}), runner.spec())
    manual.agent.load_state_dict(split.agent.state_dict())
    traj = runner.rollout(split.get_weights(), 0)

    batch, state = manual.to_batch([traj])
    order = torch.randperm(4, generator=torch.Generator().manual_seed(cfg.run.seed * 7 + 0))
    for idx in order.chunk(2):
        mb = batch.map(lambda v, idx=idx: v[:, idx])
        loss = loss_of(manual.forward(mb, tuple(s[idx] for s in state)), mb, manual.lcfg).loss
        manual.step(loss)
    split.update(traj)
    for k, v in split.agent.state_dict().items():
        torch.testing.assert_close(v, manual.agent.state_dict()[k], msg=k)


def test_fixed_targets_keep_the_first_steps_vtrace_through_the_update(small_cfg):
    """learner.impala.fixed_targets: every step of a 2 x 2 update uses the first step's V-trace.

    That is V-trace from the weights the update started with (the same steps taken by hand with
    those targets).
    """
    from envs.runner import EnvRunner
    from learners.algorithms.impala import log_probs, policy_advantages, vtrace_targets
    from learners.update.learner import Learner

    over = {"learner.minibatches": 2, "learner.epochs": 2, "learner.unroll_length": 6,
            "learner.impala.surrogate_clip": 0.2}
    cfg = small_cfg(**over, **{"learner.impala.fixed_targets": "true"})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=6)
    fixed = Learner(cfg, runner.spec())
    manual = Learner(small_cfg(**over), runner.spec())
    manual.agent.load_state_dict(fixed.agent.state_dict())
    traj = runner.rollout(fixed.get_weights(), 0)

    batch, state = manual.to_batch([traj])
    with torch.no_grad():
        out = manual.forward(batch, state)
        log_rhos = log_probs(out, batch)[2]
        returns, vs, pg_adv = vtrace_targets(out, batch, manual.lcfg, log_rhos)
    batch = batch.replace(advantages=policy_advantages(pg_adv, log_rhos, manual.lcfg),
                          returns=vs, old_values=out.value[:6],
                          value_targets=returns.vs)
    generator = torch.Generator().manual_seed(cfg.run.seed * 7 + 0)
    for _ in range(2):
        for idx in torch.randperm(4, generator=generator).chunk(2):
            mb = batch.map(lambda v, idx=idx: v[:, idx])
            manual.step(impala_loss(manual.forward(mb, tuple(s[idx] for s in state)), mb,
                                    manual.lcfg).loss)
    fixed.update(traj)
    for k, v in fixed.agent.state_dict().items():
        torch.testing.assert_close(v, manual.agent.state_dict()[k], msg=k)


@pytest.mark.parametrize("popart", ["false", "true"])
def test_on_policy_targets_read_the_runners_output_and_equal_a_forward_pass(small_cfg, popart):
    """Policy lag 0: V-trace from the runners' recorded logits and values is the targets' pass's.

    The runner acted with the learner's weights, so its logits and values over the unroll
    (its last row included) are the learner's forward pass up to float rounding, and the
    importance weights are exactly 1; with PopArt the values are in the same normalised
    space. An update on such a batch skips the pass; one on a stale batch (lag 1) does not.
    """
    from envs.runner import EnvRunner
    from learners.algorithms.impala import log_probs
    from learners.update.learner import Learner, behaviour_output

    over = {"learner.minibatches": 2, "learner.epochs": 2, "learner.unroll_length": 6,
            "learner.impala.surrogate_clip": 0.2, "learner.impala.fixed_targets": "true",
            "learner.clip_value": "true", "learner.popart": popart}
    cfg = small_cfg(**over)
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=6,
                       popart=cfg.learner.popart)
    learner = Learner(cfg, runner.spec())
    learner.update(runner.rollout(learner.get_weights(), 0))  # PopArt's statistics move
    traj = runner.rollout(learner.get_weights(), learner.version)
    batch, state = learner.to_batch([traj])
    with torch.no_grad():
        recorded = behaviour_output(batch)
        passed = learner.forward(batch, state)
    torch.testing.assert_close(recorded.logits, passed.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(recorded.value, passed.value, rtol=1e-5, atol=1e-5)
    assert torch.equal(log_probs(recorded, batch)[2], torch.zeros(6, 4))
    a, b = (impala_targets(o, batch, learner.lcfg, learner.popart) for o in (recorded, passed))
    assert (learner.popart is not None) == (popart == "true")
    if learner.popart is not None:
        assert float(learner.popart.sigma.max()) != 1.0
    for name in ("advantages", "returns", "old_values", "value_targets"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-5,
                                   msg=name)

    calls = []
    forward = learner.forward
    learner.forward = lambda *args: calls.append(1) or forward(*args)
    learner.update(traj)  # lag 0: only the 2 x 2 minibatch steps' passes
    assert len(calls) == 4
    learner.update(traj)  # the same unroll is now one version old: the targets' pass runs
    assert len(calls) == 4 + 5


def test_learner_step_counts_default_by_algorithm(small_cfg):
    from learners.config.schema import ConfigError

    impala, ppo = small_cfg(), small_cfg(**{"learner.name": "ppo", "learner.minibatches": 2})
    assert (impala.learner.epochs, impala.learner.minibatches,
            impala.learner.normalize_advantages) == (1, 1, False)
    assert (ppo.learner.epochs, ppo.learner.minibatches,
            ppo.learner.normalize_advantages) == (4, 2, True)
    assert (impala.learner.lock_step, ppo.learner.lock_step) == (False, True)
    assert (impala.learner.loss_reduction, ppo.learner.loss_reduction) == ("sum", "mean")
    with pytest.raises(ConfigError, match="learner.minibatches=3"):
        small_cfg(**{"learner.minibatches": 3})
    with pytest.raises(ConfigError, match="learner.lock_step must be true"):
        small_cfg(**{"learner.name": "ppo", "learner.minibatches": 2, "learner.lock_step": "false"})
    with pytest.raises(ConfigError, match="learner.batch_size=4 must be runtime.num_runners x "
                                          "runtime.envs_per_runner = 8"):
        small_cfg(**{"runtime.num_runners": 2, "learner.lock_step": "true"})


def test_old_run_directories_keep_impala_at_one_step_per_batch(small_cfg, tmp_path):
    """Old run directories keep IMPALA at one step per batch.

    Run directories from before config_format 2 saved PPO's epochs/minibatches (4, 4) in IMPALA
    configs, which IMPALA ignored then; loading them must not turn them on.
    """
    from learners.runtime.run_dir import RunDir
    from tests.conftest import saved_run

    cfg = small_cfg(**{"learner.epochs": 4, "learner.minibatches": 2})
    run = saved_run(tmp_path / "old", cfg, None)
    old = RunDir.open(run)
    assert (old.load_config().learner.epochs, old.load_config().learner.minibatches) == (1, 1)
    assert old.resume_config(["learner.epochs=2"]).learner.epochs == 2
    assert RunDir.open(run).load_config().learner.epochs == 2  # the explicit choice is kept


def test_a_run_directory_whose_meta_json_is_cut_short_is_a_one_line_error(small_cfg, tmp_path):
    from learners.config.schema import ConfigError
    from learners.runtime.run_dir import RunDir
    from tests.conftest import saved_run

    run = saved_run(tmp_path / "run", small_cfg(), 5)
    (run / "meta.json").write_text('{"seed": 0, "config_fo')
    with pytest.raises(ConfigError, match=r"cannot read .*meta.json .*restore it"):
        RunDir.open(run).load_config()


def test_old_run_directories_keep_impala_without_the_value_clip(small_cfg, tmp_path):
    """Old run directories keep IMPALA without the value clip.

    Formats 1-2 saved PPO's clip_value: true in IMPALA configs too, which IMPALA ignored; from
    format 3 it reads it (with fixed targets), so older directories load it as false.
    """
    from learners.runtime.run_dir import CONFIG_FORMAT, RunDir
    from tests.conftest import saved_run

    cfg = small_cfg(**{"learner.impala.fixed_targets": "true", "learner.clip_value": "true"})
    for fmt, expected in ((2, False), (CONFIG_FORMAT, True)):
        run = saved_run(tmp_path / f"format{fmt}", cfg, fmt)
        assert RunDir.open(run).load_config().learner.clip_value is expected, fmt


def test_surrogate_clip_survives_a_rho_that_underflows():
    # pi gives each taken action e^-200 of mu's weight: pi / mu underflows to 0 in float32,
    # and V-trace's advantage (rho times the TD term) is 0 there; undoing rho must not give
    # 0 / 0. The surrogate's gradient there is ~0 anyway (its ratio is ~0).
    batch, out = batch_and_output()
    batch["behaviour_logits"] = out.logits.detach().clone()
    logits = (out.logits.detach() - 200.0 * torch.nn.functional.one_hot(
        batch["action"].long(), out.logits.shape[-1])).requires_grad_(True)
    cfg = LearnerConfig(reward_clip="none", entropy_cost=0.0, baseline_cost=0.0,
                        impala=ImpalaConfig(surrogate_clip=0.2))
    loss = loss_of(AgentOutput(logits, out.value), Batch.from_dict(batch), cfg).loss
    assert torch.isfinite(loss)
    assert torch.isfinite(torch.autograd.grad(loss, logits)[0]).all()


def test_surrogate_clip_is_the_papers_gradient_on_policy_and_clips_off_policy():
    """On-policy (pi = mu) the clipped surrogate's gradient is the V-trace policy gradient's.

    A ratio outside [1 - eps, 1 + eps] in the advantage's direction gets no gradient.
    """
    batch, out = batch_and_output()
    batch["behaviour_logits"] = out.logits.detach().clone()
    grads = []
    for clip in (0.0, 0.2):
        logits = out.logits.detach().clone().requires_grad_(True)
        loss = loss_of(AgentOutput(logits, out.value), Batch.from_dict(batch),
                       LearnerConfig(reward_clip="none", entropy_cost=0.0, baseline_cost=0.0,
                                     impala=ImpalaConfig(surrogate_clip=clip))).loss
        grads.append(torch.autograd.grad(loss, logits)[0])
    torch.testing.assert_close(grads[0], grads[1])

    # every taken action 1/e^5 as likely under mu
    far = dict(batch, behaviour_logits=batch["behaviour_logits"]
               - 5.0 * torch.nn.functional.one_hot(batch["action"].long(), out.logits.shape[-1]))
    logits = out.logits.detach().clone().requires_grad_(True)
    cfg = LearnerConfig(reward_clip="none", entropy_cost=0.0, baseline_cost=0.0,
                        impala=ImpalaConfig(surrogate_clip=0.2, clip_rho_threshold=None,
                                            clip_pg_rho_threshold=1.0))
    loss = loss_of(AgentOutput(logits, out.value), Batch.from_dict(far), cfg).loss
    grad = torch.autograd.grad(loss, logits)[0]
    T = batch["action"].shape[0] - 1
    b = Batch.from_dict(far)
    rewards, discounts = step_targets(b, cfg.gamma, "none")
    log_rhos = (action_log_probs(out.logits[:T], b.action[:T])
                - action_log_probs(b.behaviour_logits[:T], b.action[:T]))
    adv = vtrace(log_rhos, discounts, rewards, out.value[:T].detach(), out.value[T].detach(),
                 clip_rho_threshold=None,
                 clip_pg_rho_threshold=None).pg_advantages / log_rhos.exp()
    per_step = grad[:T].abs().sum(-1)
    assert (adv > 0).any() and (adv < 0).any()
    assert torch.all(per_step[adv > 0] == 0) and torch.all(per_step[adv < 0] > 0)


@pytest.mark.parametrize("core", ["lstm", "feedforward"])
def test_fixed_target_options_equal_the_whole_unroll_update_at_one_step(small_cfg, core):
    """learner.recurrence and learner.clip_value with fixed targets, at an update's first step.

    The batch cut into chunks (each restarted from the runner's core state there) with the value
    clip on has the loss of whole unrolls without them (the clip is centred on the values
    themselves, a mean over chunks is the mean over the batch). For a memoryless core the step is
    the same too; a recurrent core's gradient stops at the chunk starts.
    """
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    over = {"learner.unroll_length": 8, "learner.impala.fixed_targets": "true",
            "learner.loss_reduction": "mean", "learner.normalize_advantages": "true",
            "learner.impala.surrogate_clip": 0.2, "agent.core": core}
    if core == "feedforward":
        over["agent.core_options"] = "{}"
    chunked_cfg = small_cfg(**over, **{"learner.recurrence": 4, "learner.clip_value": "true"})
    runner = EnvRunner(chunked_cfg.env, chunked_cfg.agent, envs_per_runner=4, unroll_length=8,
                       state_every=4)
    chunked = Learner(chunked_cfg, runner.spec())
    whole = Learner(small_cfg(**over), runner.spec())
    whole.agent.load_state_dict(chunked.agent.state_dict())
    traj = runner.rollout(chunked.get_weights(), 0)
    assert traj.chunk_states is not None
    m_chunked, m_whole = chunked.update(traj), whole.update(traj)
    for k in ("policy_loss", "value_loss", "entropy"):
        # At the first step the policy loss is a mean of normalised advantages (mean 0) times
        # ratios of 1 up to the rounding between two LSTM kernels (the fused pass against the
        # runner's steps): about 1e-7 by itself, so its absolute tolerance is 1e-6.
        assert m_chunked[k] == pytest.approx(m_whole[k], rel=1e-5, abs=1e-6), k
    if core == "feedforward":
        for k, v in chunked.agent.state_dict().items():
            torch.testing.assert_close(v, whole.agent.state_dict()[k], rtol=1e-4, atol=1e-6, msg=k)


def test_impala_value_clip_around_the_updates_starting_values():
    """clip_value: the value term is PPO2's clipped form around ``old_values`` (written out)."""
    batch, out = batch_and_output()
    b = Batch.from_dict(batch)
    T = b.unroll_length
    returns = torch.randn(T, b.reset.shape[1])
    old = out.value.detach()[:T] - 1.0  # the values have moved by 1 since the update's start
    cfg = LearnerConfig(reward_clip="none", clip_value=True, clip_eps=0.2, loss_reduction="mean")
    fixed = b.replace(advantages=torch.zeros_like(returns), returns=returns, old_values=old,
                      value_targets=returns)
    got = impala_loss(out, fixed, fill_defaults(cfg)).metrics["value_loss"]
    v = out.value.detach()[:T]
    expected = 0.5 * torch.max((v - returns) ** 2, (old + 0.2 - returns) ** 2).mean()
    torch.testing.assert_close(got, expected)
    plain = impala_loss(out, fixed, fill_defaults(LearnerConfig(
        reward_clip="none", loss_reduction="mean"))).metrics["value_loss"]
    torch.testing.assert_close(plain, 0.5 * ((v - returns) ** 2).mean())


def test_impala_chunk_and_clip_options_need_fixed_targets(small_cfg):
    from learners.config.schema import ConfigError

    for key, value in (("learner.recurrence", 4), ("learner.clip_value", "true")):
        with pytest.raises(ConfigError, match=f"{key} needs targets fixed"):
            small_cfg(**{"learner.unroll_length": 8, key: value})
    with pytest.raises(ConfigError, match="learner.recurrence=3 must be 0"):
        small_cfg(**{"learner.unroll_length": 8, "learner.impala.fixed_targets": "true",
                     "learner.recurrence": 3})
