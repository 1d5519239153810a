"""IMPALA loss (Espeholt et al. 2018, section 4): V-trace actor-critic.

- value: ``0.5 * sum (v_s - V(x_s))^2`` toward the V-trace targets (eq. 1);
- policy: ``-sum rho_s * log pi(a_s|x_s) * (r_s + gamma v_{s+1} - V(x_s))`` (section 4.2),
  the V-trace policy-gradient advantage with ``rho_s`` clipped at ``clip_pg_rho_threshold``
  (``learner.normalize_advantages: true`` divides these advantages by their batch standard
  deviation after centring them, as PPO does; not in the paper, off by default);
- entropy bonus ``-sum H(pi(.|x_s))``.

``learner.impala.surrogate_clip: eps`` (off by default, not in the paper) replaces the policy term
by PPO's clipped surrogate on the ratio to the behaviour policy, so that
``learner.epochs``/``minibatches`` can take many steps per batch (docs/results/impala-atari.md).
With ``learner.impala.fixed_targets`` (V-trace once per batch, as PPO's GAE), ``learner.clip_value``
clips the value update around the values at the update's start (PPO2's value clip, half-width
``learner.clip_eps``) and ``learner.recurrence`` cuts the unrolls into chunks for the
minibatches, as PPO's; all three are off by default.

Total = policy + ``baseline_cost`` * value + ``entropy_cost`` * entropy, summed over time
and batch as in the paper's code (scalable_agent), which its hyper-parameters assume
(``learner.loss_reduction: sum``, the default). ``mean`` averages over the steps instead,
as PPO's loss does. The choice is not a rescaling of the learning rate: RMSProp and Adam
divide by the gradient's RMS plus ``eps``, so the reduction sets which gradients ``eps``
damps. Summed over a 640-step batch, every weight's gradient dwarfs Adam's eps 1e-5 and
every weight moves by about the learning rate per step; averaged (PPO), the torso's and
core's small gradients sit below eps and they move far slower than the head
(docs/results/impala-atari.md). The behaviour policy's log-probabilities come from the trajectory's
``behaviour_logits``; the learner's values at row ``T`` bootstrap the unroll.

This module gives IMPALA's targets (``impala_targets``) and loss (``impala_loss``); the update
around them is the learner's (``Learner.fit``). The paper's learner makes one step per batch
(``learner.epochs: 1``, ``learner.minibatches: 1``); ``minibatches: n`` splits the unrolls into
``n`` random groups, one step each (Cleanba's ``num_minibatches``), and ``epochs: k`` passes
over the batch ``k`` times, each step recomputing V-trace with the current weights against the
actors' policy (the off-policy correction that lets IMPALA learn from replayed unrolls,
Espeholt et al. 2018, section 5.2.1), unless the targets are fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from agents.registry import ranged
from learners.algorithms.batch import Batch
from learners.algorithms.returns import vtrace
from learners.algorithms.terms import (
    AlgorithmDefaults,
    action_log_probs,
    batch_mask,
    clipped_policy_term,
    entropy_term,
    normalize,
    policy_gradient_term,
    step_targets,
    value_term,
)


@dataclass(frozen=True)
class ImpalaConfig:
    """The ``learner.impala:`` section: the settings only IMPALA's loss and update read.

    The rest (discount, costs, lambda, epochs, minibatches, ...) is ``learner``'s, shared
    with PPO.
    """

    # V-trace rho-bar of the value targets (eq. 1)
    clip_rho_threshold: float = ranged(1.0, 0, None, True)
    # V-trace rho-bar of the policy gradient (section 4.2)
    clip_pg_rho_threshold: float = ranged(1.0, 0, None, True)
    clip_c_threshold: float = ranged(1.0, 0, None, True)  # V-trace c-bar of the traces (eq. 1)
    # 0 = the paper's policy gradient; eps > 0 = PPO's clipped surrogate on pi/mu, mu the
    # runners' policy (with lock-step runners the policy at the update's start)
    surrogate_clip: float = ranged(0.0, 0, 1, False, True)
    # V-trace once per batch from the weights at its start, kept through epochs and
    # minibatches (as PPO's GAE); false = at every step
    fixed_targets: bool = False


# The paper's: one step per batch on the loss summed over its steps (scalable_agent);
# runners never wait for the learner (V-trace corrects their lag).
DEFAULTS = AlgorithmDefaults(lock_step=False, epochs=1, minibatches=1,
                             normalize_advantages=False, loss_reduction="sum", clip_value=False)


class LossOutput(NamedTuple):
    """What ``impala_loss`` returns: the scalar loss and its metrics."""

    loss: torch.Tensor
    metrics: dict


def log_probs(out, batch: Batch):
    """``(log pi(a|x), log mu(a|x), log rho)``, each [T, B], of the batch's actions.

    pi is ``out``'s policy, mu the actors'; ``log rho`` carries no gradient.
    """
    T = batch.steps
    actions = batch.action[:T]
    target_logp = action_log_probs(out.logits[:T], actions)
    behaviour_logp = action_log_probs(batch.behaviour_logits[:T], actions)
    return target_logp, behaviour_logp, target_logp.detach() - behaviour_logp


def vtrace_targets(out, batch: Batch, cfg, log_rhos, value_transform=None):
    """V-trace for ``out``'s values (all ``T + 1`` rows) with importance weights ``log_rhos``.

    Returns ``(returns, vs, pg_adv)``: ``returns`` as ``returns.vtrace`` gives them
    (return scale), ``vs`` and ``pg_adv`` in the head's value space (PopArt-normalised when
    ``value_transform``).
    """
    T = batch.unroll_length
    task = batch.task_id
    values_raw = (out.value if value_transform is None
                  else value_transform.denormalize(out.value, task))
    final_value = (None if value_transform is None
                   else value_transform.denormalize(batch.final_value, task)[:T])
    rewards, discounts = step_targets(batch, cfg.gamma, cfg.reward_clip, final_value)
    returns = vtrace(
        log_rhos, discounts, rewards, values_raw[:T].detach(), values_raw[T].detach(),
        clip_rho_threshold=cfg.impala.clip_rho_threshold,
        clip_pg_rho_threshold=cfg.impala.clip_pg_rho_threshold,
        clip_c_threshold=cfg.impala.clip_c_threshold, lambda_=cfg.lambda_,
    )
    pg_adv, vs = returns.pg_advantages, returns.vs
    if value_transform is not None:
        vs, pg_adv = value_transform.normalize_targets(vs, pg_adv, task)
    return returns, vs, pg_adv


def policy_advantages(pg_adv: torch.Tensor, log_rhos: torch.Tensor, cfg) -> torch.Tensor:
    """The advantages ``[T, B]`` the policy term weighs: V-trace's, or the surrogate's.

    With ``learner.impala.surrogate_clip`` the surrogate's ratio ``pi / mu`` carries the
    importance weight, so V-trace's advantage is divided by the clipped rho it already
    holds. The division uses the rhos of the targets' own pass (``log_rhos`` [T, B]): with
    ``learner.impala.fixed_targets`` those of the weights at the update's start, which the
    minibatches' losses no longer see. Where rho underflows to 0 (pi / mu below about 1e-45
    in float32) V-trace's advantage is exactly 0 and the TD term cannot be recovered: it
    stays 0 (divided by 1, not 0 / 0), and the surrogate's gradient there is about 0 anyway
    (its ratio is).
    """
    if not cfg.impala.surrogate_clip:
        return pg_adv
    rho = log_rhos.exp().clamp(max=cfg.impala.clip_pg_rho_threshold)
    return pg_adv / torch.where(rho > 0, rho, 1.0)


@torch.no_grad()
def impala_targets(out, batch: Batch, cfg, value_transform=None) -> Batch:
    """The batch with V-trace targets from ``out``: IMPALA's targets (no gradient).

    ``out``: the agent's output over all ``T + 1`` rows of ``batch``. The learner calls this
    once per batch with the weights at the update's start (``learner.impala.fixed_targets``,
    kept through epochs and minibatches as PPO keeps its GAE; at policy lag 0 ``out`` is the
    runners' recorded output, ``learners.update.learner.behaviour_output``), or before each step's
    loss with that step's output (the paper's). Adds ``advantages`` (the policy term's,
    ``policy_advantages``), ``returns`` (``vs`` in the head's value space), ``old_values``
    (the values themselves, the centre of ``learner.clip_value``) and ``value_targets``
    (``vs`` at return scale, for PopArt's statistics), each [T, B]. Recomputed at every step
    the values the same steps fit to this batch's returns shrink its advantages to what they
    failed to fit, which normalisation then scales back up to unit size.
    """
    log_rhos = log_probs(out, batch)[2]
    returns, vs, pg_adv = vtrace_targets(out, batch, cfg, log_rhos, value_transform)
    T = batch.unroll_length
    return batch.replace(advantages=policy_advantages(pg_adv, log_rhos, cfg), returns=vs,
                         old_values=out.value[:T].detach(), value_targets=returns.vs)


def impala_loss(out, batch: Batch, cfg) -> LossOutput:
    """The IMPALA loss of one batch or minibatch: ``LossOutput(loss, metrics)``.

    ``out``: the agent's output over all ``T + 1`` rows (``logits [T+1, B, A]``,
    ``value [T+1, B]``), or over a chunk's ``k`` rows when the batch was cut into chunks
    (``batch.steps``); ``batch``: the trajectory as tensors with ``impala_targets``'s
    targets; ``cfg``: the learner config, the algorithm's defaults filled in.
    """
    T = batch.steps
    mask = batch_mask(batch, T)
    how = cfg.loss_reduction
    logits, values = out.logits[:T], out.value[:T]
    target_logp, behaviour_logp, log_rhos = log_probs(out, batch)
    pg_adv, vs = batch.advantages, batch.returns
    if cfg.normalize_advantages:  # off by default for IMPALA (the paper's loss); as PPO's when on
        pg_adv = normalize(pg_adv, mask)
    if cfg.impala.surrogate_clip:
        # PPO's clipped surrogate (Schulman et al. 2017, eq. 7) on the ratio pi/mu to the
        # actors' policy with V-trace's advantage: many steps per batch without the policy
        # running away from the data (APPO). With lock-step runners mu is the policy at the
        # update's start, PPO's pi_old; with asynchronous ones it lags that by the policy lag,
        # and the clip is then also a trust region around the stale mu (RLlib's APPO clips
        # against its target network's policy instead).
        ratio = (target_logp - behaviour_logp).exp()
        policy_loss = clipped_policy_term(ratio, pg_adv, cfg.impala.surrogate_clip, mask, how)
    else:
        policy_loss = policy_gradient_term(target_logp, pg_adv, mask, how)
    # learner.clip_value (fixed targets only): PPO2's clip around the update's starting values.
    value_loss = value_term(values, vs, mask, how, batch.old_values,
                            cfg.clip_eps if cfg.clip_value else 0.0)
    entropy_loss, mean_entropy = entropy_term(logits, mask, how)
    loss = policy_loss + cfg.baseline_cost * value_loss + cfg.entropy_cost * entropy_loss
    rho = log_rhos.exp()
    metrics = {
        "policy_loss": policy_loss.detach(),
        "value_loss": value_loss.detach(),
        "entropy": mean_entropy,
        "approx_kl": ((-log_rhos) * mask).sum() / mask.sum(),  # E_behaviour[log mu - log pi]
        "clip_frac": (((rho > rho_bar).float() * mask).sum() / mask.sum())
                     if (rho_bar := cfg.impala.clip_rho_threshold) else torch.tensor(0.0),
        "value_mean": (values.detach() * mask).sum() / mask.sum(),
    }
    return LossOutput(loss, metrics)
