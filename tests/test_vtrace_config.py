"""V-trace's settings travel from the config into IMPALA's loss.

``learner.impala.clip_rho_threshold`` (rho-bar of the value targets),
``clip_pg_rho_threshold`` (rho-bar of the policy gradient), ``clip_c_threshold`` (c-bar of
the traces), ``learner.lambda_`` and ``learner.gamma`` are set to values other than their
defaults, through every way a config is written (command-line overrides, the keys' older
spelling, a YAML file, a saved run's config), and the loss's targets, policy and value terms
are compared with the naive V-trace of ``tests/test_returns.py`` (IMPALA eq. 1 in loops)
with those values. The case is built so that every threshold binds: the same reference with
any one setting at its default gives other numbers, so a setting that does not reach the
loss fails here.
"""

import dataclasses

import pytest
import torch

from agents.agent import AgentOutput
from learners.algorithms.batch import Batch
from learners.algorithms.impala import impala_loss, impala_targets
from learners.config.schema import load_config, save_config
from tests.conftest import random_batch, small_overrides
from tests.test_returns import naive_vtrace

SETTINGS = dict(clip_rho_threshold=1.6, clip_pg_rho_threshold=0.7, clip_c_threshold=0.5)
LAMBDA, GAMMA = 0.75, 0.85
DEFAULTS = dict(clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, clip_c_threshold=1.0,
                lambda_=1.0)
T, B, A = 6, 4, 3
DT = torch.float64
TOL = dict(rtol=1e-5, atol=1e-5)  # the loss runs in float32


def overrides(spelling: str) -> list[str]:
    section = "learner.impala." if spelling == "overrides" else "learner."  # older spelling
    return ([f"{section}{k}={v}" for k, v in SETTINGS.items()]
            + [f"learner.lambda_={LAMBDA}", f"learner.gamma={GAMMA}", "learner.reward_clip=none"])


def config(spelling: str, tmp_path, extra: list[str] = ()):
    """The experiment config with ``SETTINGS``, written the way ``spelling`` names."""
    if spelling in ("overrides", "legacy"):
        return load_config(None, overrides(spelling) + list(extra))
    if spelling == "yaml":
        path = tmp_path / "vtrace.yaml"
        thresholds = "\n".join(f"    {k}: {v}" for k, v in SETTINGS.items())
        path.write_text(f"learner:\n  lambda_: {LAMBDA}\n  gamma: {GAMMA}\n"
                        f"  reward_clip: none\n  impala:\n{thresholds}\n")
        return load_config(path, list(extra))
    assert spelling == "saved"
    save_config(load_config(None, overrides("overrides")), tmp_path / "config.yaml")
    return load_config(tmp_path / "config.yaml", list(extra))


def naive_targets(out: AgentOutput, batch: Batch, **settings):
    """(vs, pg advantages, log pi(a), log rho) [T, B] from the naive V-trace, float64.

    ``settings`` replace any of ``SETTINGS`` / lambda_ (the defaults' check uses them).
    """
    s = {**SETTINGS, "lambda_": LAMBDA, **settings}
    steps = out.value.shape[0] - 1
    logp = torch.log_softmax(out.logits[:steps].detach().to(DT), -1)
    blogp = torch.log_softmax(batch.behaviour_logits[:steps].to(DT), -1)
    a = batch.action[:steps].unsqueeze(-1)
    pi_a, mu_a = logp.gather(-1, a).squeeze(-1), blogp.gather(-1, a).squeeze(-1)
    term = batch.terminated[:steps].to(DT)
    trunc = batch.truncated[:steps].to(DT)
    rewards = batch.reward[:steps].to(DT) + GAMMA * trunc * batch.final_value[:steps].to(DT)
    discounts = GAMMA * (1 - term) * (1 - trunc)
    values = out.value.detach().to(DT)
    vs, adv = naive_vtrace(pi_a - mu_a, discounts, rewards, values[:steps], values[steps],
                           s["clip_rho_threshold"], s["clip_pg_rho_threshold"],
                           s["clip_c_threshold"], s["lambda_"])
    return vs, adv, pi_a, pi_a - mu_a


def naive_loss_terms(out: AgentOutput, vs, adv, pi_a, log_rhos, surrogate_clip=0.0,
                     pg_rho_bar=None):
    """IMPALA's summed policy and value terms, one step at a time."""
    steps, cols = vs.shape
    policy = value = 0.0
    for t in range(steps):
        for b in range(cols):
            v = float(out.value[t, b].detach())
            value += 0.5 * (float(vs[t, b]) - v) ** 2
            if surrogate_clip:
                # The ratio carries the importance weight: the advantage without rho's clip.
                ratio = float(torch.exp(log_rhos[t, b]))
                a = float(adv[t, b]) / min(ratio, pg_rho_bar)
                clipped = min(max(ratio, 1 - surrogate_clip), 1 + surrogate_clip)
                policy += max(-a * ratio, -a * clipped)
            else:
                policy += -float(pi_a[t, b]) * float(adv[t, b])
    return policy, value


def random_case(seed=0):
    """A float32 batch with episode ends and a truncation, and the learner's output.

    The output is far enough from the behaviour policy that rho falls below, between and
    above the thresholds.
    """
    g = torch.Generator().manual_seed(seed)
    raw = random_batch(T, B, A, g)
    raw["truncated"][2, 1] = True
    raw["terminated"][2, 1] = False
    raw["final_value"][2, 1] = 0.9
    batch = Batch.from_dict(raw)
    logits = batch.behaviour_logits + 1.2 * torch.randn(T + 1, B, A, generator=g)
    value = torch.randn(T + 1, B, generator=g)
    return batch, AgentOutput(logits.requires_grad_(), value.requires_grad_())


def assert_every_setting_binds(out, batch):
    """Each setting at its default alone changes V-trace's numbers here, far beyond ``TOL``."""
    vs, adv = naive_targets(out, batch)[:2]
    for name, default in DEFAULTS.items():
        other_vs, other_adv = naive_targets(out, batch, **{name: default})[:2]
        gap = max(float((other_vs - vs).abs().max()), float((other_adv - adv).abs().max()))
        assert gap > 100 * TOL["atol"], f"{name} does not bind in this case: {gap}"


@pytest.mark.parametrize("spelling", ["overrides", "legacy", "yaml", "saved"])
def test_config_thresholds_and_lambda_reach_impala_loss(spelling, tmp_path):
    cfg = config(spelling, tmp_path).learner
    read = dataclasses.asdict(cfg.impala) | {"lambda_": cfg.lambda_, "gamma": cfg.gamma}
    assert read.items() >= (SETTINGS | {"lambda_": LAMBDA, "gamma": GAMMA}).items()
    batch, out = random_case()
    assert_every_setting_binds(out, batch)
    targets = impala_targets(out, batch, cfg)
    loss, metrics = impala_loss(out, targets, cfg)
    value_targets = targets.value_targets
    vs, adv, pi_a, log_rhos = naive_targets(out, batch)
    torch.testing.assert_close(value_targets, vs.float(), **TOL)
    policy, value = naive_loss_terms(out, vs, adv, pi_a, log_rhos)
    torch.testing.assert_close(float(metrics["policy_loss"]), policy, **TOL)
    torch.testing.assert_close(float(metrics["value_loss"]), value, **TOL)
    logp = torch.log_softmax(out.logits[:T].detach(), -1)
    neg_entropy = float((logp.exp() * logp).sum())
    total = policy + cfg.baseline_cost * value + cfg.entropy_cost * neg_entropy
    torch.testing.assert_close(float(loss.detach()), total, **TOL)
    # clip_frac is the share of rho above the value targets' rho-bar, the configured one.
    share = float((log_rhos.exp() > SETTINGS["clip_rho_threshold"]).to(DT).mean())
    torch.testing.assert_close(float(metrics["clip_frac"]), share, **TOL)


def runner_batch(cfg):
    """A real MiniGrid unroll for ``cfg``'s agent, made off-policy for the learner.

    The behaviour logits are moved by noise, as if another weights version had acted, so that
    rho spreads over the thresholds.
    """
    from envs.runner import EnvRunner

    torch.manual_seed(0)  # the runner's agent: the same weights whatever ran before
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5, seed=1)
    runner.rollout()
    traj = runner.rollout()
    g = torch.Generator().manual_seed(3)
    traj.behaviour_logits += 1.5 * torch.randn(traj.behaviour_logits.shape, generator=g).numpy()
    return runner, traj


def learner_on_batch(tmp_path, setting: str):
    """A Learner with the thresholds of ``overrides`` and ``setting``, its off-policy batch.

    Returns the learner, the trajectory, its batch and the learner's output on it before any
    update, after checking that every threshold reached that output's batch.
    """
    from learners.update.learner import Learner

    cfg = load_config(None, small_overrides(tmp_path) + overrides("overrides") + [setting])
    runner, traj = runner_batch(cfg)
    learner = Learner(cfg, runner.spec())
    batch, state = learner.to_batch([traj])
    with torch.no_grad():
        out = learner.forward(batch, state)
    assert_every_setting_binds(out, batch)
    return learner, traj, batch, out


def test_fixed_targets_use_the_configured_thresholds(tmp_path):
    """``learner.impala.fixed_targets``: V-trace once per batch, through the Learner's config."""
    learner, _, batch, out = learner_on_batch(tmp_path, "learner.impala.fixed_targets=true")
    fixed = impala_targets(out, batch, learner.lcfg, learner.popart)
    vs, adv = naive_targets(out, batch)[:2]
    torch.testing.assert_close(fixed.returns, vs.float(), **TOL)
    torch.testing.assert_close(fixed.advantages, adv.float(), **TOL)


@pytest.mark.parametrize("surrogate_clip", [0.0, 0.3])
def test_learner_update_reports_the_configured_vtrace_loss(tmp_path, surrogate_clip):
    """``Learner.update`` (one step, the paper's): its loss metrics are the reference's.

    The metrics are the loss before the step, so they equal the naive terms on the pre-update
    output. With ``surrogate_clip`` the policy term is PPO's surrogate on rho with V-trace's
    advantage divided by its pg rho-bar clip.
    """
    learner, traj, batch, out = learner_on_batch(tmp_path,
                                                 f"learner.impala.surrogate_clip={surrogate_clip}")
    policy, value = naive_loss_terms(out, *naive_targets(out, batch), surrogate_clip,
                                     SETTINGS["clip_pg_rho_threshold"])
    metrics = learner.update(traj)
    torch.testing.assert_close(metrics["policy_loss"], policy, **TOL)
    torch.testing.assert_close(metrics["value_loss"], value, **TOL)
