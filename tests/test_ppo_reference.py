"""PPO's loss against a hand computation, at settings that are not the defaults.

The reference below starts from the raw trajectory fields (rewards, terminated / truncated
flags, the runner's values and logits) and computes, one scalar at a time in plain loops:
the shaped reward and discount of every step, GAE as the explicit sum of Schulman et al.
2016, eq. 16, the advantage normalisation over the real steps, the clipped surrogate of
Schulman et al. 2017, eq. 7, the clipped value loss, the entropy and the total. It is
compared with ``add_advantages`` + ``ppo_loss``: every metric, the total and its gradient.
Each setting (gamma, lambda, clip_eps, clip_value, both costs, the reward shaping, the
normalisation, padding) differs from its default, so one that fails to reach the loss, or
a flipped sign or a ``min`` for a ``max``, changes the numbers.
"""

import dataclasses
import math

import pytest
import torch

from agents.agent import AgentOutput
from learners.algorithms.batch import Batch
from learners.algorithms.ppo import add_advantages, ppo_loss
from learners.config.schema import LearnerConfig
from tests.conftest import random_batch

T, B, A = 6, 4, 3
DT = torch.float64
# The data are float64, but the discounts are built from float32 flags (``step_targets``), so
# gamma carries float32's rounding: agreement to 1e-6, far below any real defect's effect.
TOL = dict(rtol=1e-6, atol=1e-8)


def make_case(seed: int, padded: bool):
    """A float64 batch with terminations, a truncation, big rewards, and the learner's output.

    The learner's logits and values are the runner's moved by noise, so the ratios fall both
    inside and outside the trust region and some values move past the value clip.
    """
    g = torch.Generator().manual_seed(seed)
    raw = random_batch(T, B, A, g)
    for k in ("behaviour_logits", "behaviour_value", "reward", "final_value", "last_reward"):
        raw[k] = raw[k].to(DT)
    raw["reward"] = 4.0 * raw["reward"]  # soft_asymmetric squeezes these
    raw["terminated"][:, 1] = False
    raw["truncated"][2, 1] = True  # a time limit mid-unroll, bootstrapped from final_value
    raw["final_value"][2, 1] = 1.7
    raw["terminated"][3, 0] = True
    if padded:
        raw["mask"] = torch.ones(T + 1, B, dtype=DT)
        raw["mask"][:, 3] = 0.0
    batch = Batch.from_dict(raw)
    logits = (batch.behaviour_logits + 0.7 * torch.randn(T + 1, B, A, generator=g, dtype=DT))
    value = batch.behaviour_value + 0.6 * torch.randn(T + 1, B, generator=g, dtype=DT)
    return batch, AgentOutput(logits.requires_grad_(), value.requires_grad_())


def soft_asymmetric(r: float) -> float:
    """IMPALA's DMLab reward shaping, one reward: 5 tanh(r / 5), times 0.3 below zero."""
    squeezed = 5.0 * math.tanh(r / 5.0)
    return 0.3 * squeezed if r < 0 else squeezed


def log_softmax_at(logits_row, a: int):
    """The log-probability log pi(a) of one step's logits [A], as a sum over the actions."""
    z = sum(torch.exp(logits_row[j]) for j in range(len(logits_row)))
    return logits_row[a] - torch.log(z)


def naive_ppo(batch: Batch, out: AgentOutput, gamma, lam, eps, clip_value, c_value, c_entropy,
              normalize_advantages):
    """PPO's loss and metrics, one scalar at a time (module docstring)."""
    f = lambda x: float(x.detach()) if torch.is_tensor(x) else float(x)  # noqa: E731
    real = [(t, b) for t in range(T) for b in range(B)
            if batch.mask is None or f(batch.mask[t, b]) == 1.0]
    n = len(real)

    # Rewards and discounts; a truncated step adds gamma * V(final obs) and stops there.
    r = [[0.0] * B for _ in range(T)]
    d = [[0.0] * B for _ in range(T)]
    for t in range(T):
        for b in range(B):
            term, trunc = bool(batch.terminated[t, b]), bool(batch.truncated[t, b])
            r[t][b] = soft_asymmetric(f(batch.reward[t, b]))
            if trunc:
                r[t][b] += gamma * f(batch.final_value[t, b])
            d[t][b] = 0.0 if (term or trunc) else gamma
    V_old = [[f(batch.behaviour_value[t, b]) for b in range(B)] for t in range(T + 1)]

    # GAE, eq. 16: A_t = sum_k (prod_{i<k} d_i lambda) delta_k, over the rest of the unroll.
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            weight = 1.0
            for k in range(t, T):
                delta = r[k][b] + d[k][b] * V_old[k + 1][b] - V_old[k][b]
                adv[t][b] += weight * delta
                weight *= d[k][b] * lam
    ret = [[adv[t][b] + V_old[t][b] for b in range(B)] for t in range(T)]

    if normalize_advantages:
        mean = sum(adv[t][b] for t, b in real) / n
        std = math.sqrt(sum((adv[t][b] - mean) ** 2 for t, b in real) / n)
        adv = [[(adv[t][b] - mean) / (std + 1e-8) for b in range(B)] for t in range(T)]

    policy = value = neg_entropy = 0.0
    entropy_sum = kl_sum = clipped = v_sum = 0.0
    for t, b in real:
        a = int(batch.action[t, b])
        logp = log_softmax_at(out.logits[t, b], a)
        old_logp = f(log_softmax_at(batch.behaviour_logits[t, b], a))
        ratio = torch.exp(logp - old_logp)
        clipped_ratio = min(max(ratio, torch.tensor(1.0 - eps, dtype=DT)),
                            torch.tensor(1.0 + eps, dtype=DT))
        policy = policy - min(ratio * adv[t][b], clipped_ratio * adv[t][b])

        v = out.value[t, b]
        err = (v - ret[t][b]) ** 2
        if clip_value:
            moved = min(max(v - V_old[t][b], torch.tensor(-eps, dtype=DT)),
                        torch.tensor(eps, dtype=DT))
            err = max(err, (V_old[t][b] + moved - ret[t][b]) ** 2)
        value = value + 0.5 * err

        h = 0.0
        for j in range(A):
            logp_j = log_softmax_at(out.logits[t, b], j)
            h = h - torch.exp(logp_j) * logp_j
        neg_entropy = neg_entropy - h
        entropy_sum += f(h)
        kl_sum += (f(ratio) - 1.0) - (f(logp) - old_logp)
        clipped += 1.0 if abs(f(ratio) - 1.0) > eps else 0.0
        v_sum += f(v)

    policy, value, neg_entropy = policy / n, value / n, neg_entropy / n
    total = policy + c_value * value + c_entropy * neg_entropy
    metrics = dict(policy_loss=f(policy), value_loss=f(value), entropy=entropy_sum / n,
                   approx_kl=kl_sum / n, clip_frac=clipped / n, value_mean=v_sum / n)
    return total, metrics, adv, ret


@pytest.mark.parametrize("seed,padded,normalize", [(0, True, True), (1, False, False),
                                                   (2, True, False)])
def test_ppo_loss_equals_the_hand_computation(seed, padded, normalize):
    cfg = LearnerConfig(name="ppo", gamma=0.8, lambda_=0.7, clip_eps=0.25, clip_value=True,
                        baseline_cost=0.7, entropy_cost=0.03, reward_clip="soft_asymmetric",
                        normalize_advantages=normalize, loss_reduction="mean")
    batch, out = make_case(seed, padded)
    with_targets = add_advantages(batch, cfg)
    loss, metrics = ppo_loss(out, with_targets, cfg)
    ref_loss, ref_metrics, _, ret = naive_ppo(batch, out, cfg.gamma, cfg.lambda_, cfg.clip_eps,
                                              True, cfg.baseline_cost, cfg.entropy_cost,
                                              normalize)
    # The targets themselves (before normalisation) match the loops.
    torch.testing.assert_close(with_targets.returns, torch.tensor(ret, dtype=DT))
    # The case reaches every branch: some ratios clipped, some not.
    assert 0.0 < ref_metrics["clip_frac"] < 1.0
    for k, v in ref_metrics.items():
        torch.testing.assert_close(float(metrics[k]), v, **TOL, msg=k)
    torch.testing.assert_close(loss, ref_loss, **TOL)
    grads = torch.autograd.grad(loss, [out.logits, out.value])
    ref_grads = torch.autograd.grad(ref_loss, [out.logits, out.value])
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, **TOL)


def test_the_value_clip_binds_in_the_reference_case():
    """Some values moved past ``clip_eps`` and some did not: both branches of the max count."""
    batch, out = make_case(0, padded=False)
    moved = (out.value[:T] - batch.behaviour_value[:T]).abs()
    assert (moved > 0.25).any() and (moved < 0.25).any()
    cfg = LearnerConfig(name="ppo", gamma=0.8, lambda_=0.7, clip_eps=0.25, clip_value=True,
                        reward_clip="soft_asymmetric", normalize_advantages=True,
                        loss_reduction="mean")
    clipped = ppo_loss(out, add_advantages(batch, cfg), cfg)[1]["value_loss"]
    plain_cfg = dataclasses.replace(cfg, clip_value=False)
    plain = ppo_loss(out, add_advantages(batch, plain_cfg), plain_cfg)[1]["value_loss"]
    ref = naive_ppo(batch, out, 0.8, 0.7, 0.25, False, 0.5, 0.01, True)[1]["value_loss"]
    torch.testing.assert_close(float(plain), ref, **TOL)
    assert float(clipped) > float(plain)
