"""PPO (Schulman et al. 2017) with recurrent minibatches, on the same runners as IMPALA.

Loss (eq. 7 clipped surrogate, eq. 9 total), for ``r_t = pi(a_t|x_t) / pi_old(a_t|x_t)``:

- policy: ``-E[min(r_t A_t, clip(r_t, 1-eps, 1+eps) A_t)]``;
- value: ``0.5 * E[max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)]`` when
  ``clip_value`` (as Kostrikov's and baselines' PPO2 code; the paper's eq. 9 has no clip),
  else ``0.5 * E[(V - R)^2]``;
- entropy bonus; total = policy + ``baseline_cost`` * value + ``entropy_cost`` * (-entropy).

Advantages are GAE (Schulman et al. 2016) over the whole unroll with the values the
runners recorded (all acted with this one weights version), computed once before the
epochs. A minibatch is whole sequences, each re-run from the core state at its first
step, with resets inside where episodes end, so it works for every core. With
``learner.recurrence = k < T`` the unroll is first cut into ``T / k`` chunks of ``k``
steps per env, and a minibatch is a random subset of all (env, chunk) sequences; the core
state at each chunk's start is the one the runner had there (recorded while acting; without
it, one no-grad pass of the pre-update agent over the batch, the same states for a lock-step
batch), and is kept through the epochs, as Sample Factory's and R2D2's stored states are.
Shorter sequences in wider minibatches cut the learner's sequential core steps (with the
preset's 4 x 4 minibatches of T = 128 and k = 32, from 2,048 to 640 per batch, the state
pass included).
Metrics share names with IMPALA;
``approx_kl`` is the ``(r - 1) - log r`` estimator, ``clip_frac`` the share of
``|r - 1| > eps``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agents.registry import ranged
from learners.algorithms.batch import Batch
from learners.algorithms.returns import gae
from learners.algorithms.terms import (
    AlgorithmDefaults,
    action_log_probs,
    batch_mask,
    clipped_policy_term,
    entropy_term,
    normalize,
    reduce,
    step_targets,
    value_term,
)


@dataclass(frozen=True)
class PPOConfig:
    """The ``learner.ppo:`` section: the settings only PPO's update reads.

    The rest (clip_eps, clip_value, epochs, minibatches, lambda_, ...) is ``learner``'s,
    shared with IMPALA's APPO options.
    """

    # stop an update's epochs once approx KL exceeds this (0 = off)
    target_kl: float = ranged(0.0, 0)


# Kostrikov's and CleanRL's PPO: on-policy lock-step batches, 4 epochs x 4 minibatches,
# advantages normalised per minibatch, the loss averaged over the steps, the value clip on.
DEFAULTS = AlgorithmDefaults(lock_step=True, epochs=4, minibatches=4,
                             normalize_advantages=True, loss_reduction="mean", clip_value=True)


def ppo_loss(out, batch: Batch, cfg) -> tuple[torch.Tensor, dict]:
    """PPO's loss (module docstring) on one batch or minibatch: ``(loss, metrics)``.

    ``out`` over at least ``T`` rows (``T + 1`` for whole unrolls, ``k`` for chunks);
    ``batch`` carries ``gae_targets``'s ``advantages``, ``returns`` and ``old_values`` [T, B]
    (in the head's value space) besides the trajectory fields; ``cfg``: the learner config,
    the algorithm's defaults filled in.
    """
    T = batch.steps
    mask = batch_mask(batch, T)
    actions = batch.action[:T]
    logp = action_log_probs(out.logits[:T], actions)
    old_logp = action_log_probs(batch.behaviour_logits[:T], actions)
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    adv = batch.advantages
    if cfg.normalize_advantages:
        adv = normalize(adv, mask)
    eps = cfg.clip_eps
    how = cfg.loss_reduction
    policy_loss = clipped_policy_term(ratio, adv, eps, mask, how)

    values = out.value[:T]
    value_loss = value_term(values, batch.returns, mask, how, batch.old_values,
                            eps if cfg.clip_value else 0.0)
    entropy_loss, mean_entropy = entropy_term(out.logits[:T], mask, how)
    loss = policy_loss + cfg.baseline_cost * value_loss + cfg.entropy_cost * entropy_loss
    with torch.no_grad():
        metrics = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": mean_entropy,
            "approx_kl": reduce((ratio - 1.0) - log_ratio, mask, "mean"),
            "clip_frac": reduce(((ratio - 1.0).abs() > eps).float(), mask, "mean"),
            "value_mean": reduce(values.detach(), mask, "mean"),
        }
    return loss, metrics


def gae_targets(out, batch: Batch, cfg, value_transform=None) -> Batch:
    """The batch with GAE targets from the values the runners recorded: PPO's targets.

    ``out`` is not read (the runners' values are those of this update's weights, all acting
    with one version), so the learner passes None. The new batch has ``advantages``,
    ``returns`` and ``old_values`` [T, B] (returns in the head's value space) and, with
    ``value_transform`` (PopArt), ``value_targets``: the returns at return scale, which
    PopArt's statistics move toward after the epochs.
    """
    T = batch.unroll_length
    values = batch.behaviour_value
    final_value = None
    if value_transform is not None:
        values = value_transform.denormalize(values, batch.task_id)
        final_value = value_transform.denormalize(batch.final_value, batch.task_id)[:T]
    rewards, discounts = step_targets(batch, cfg.gamma, cfg.reward_clip, final_value)
    adv, returns = gae(rewards, values[:T], values[T], discounts, lambda_=cfg.lambda_)
    value_targets = None
    if value_transform is not None:
        returns, adv = value_transform.normalize_targets(returns, adv, batch.task_id)
        value_targets = value_transform.denormalize(returns, batch.task_id)
    return batch.replace(advantages=adv, returns=returns, old_values=batch.behaviour_value[:T],
                         value_targets=value_targets)


def add_advantages(batch: Batch, cfg, value_transform=None) -> Batch:
    """``gae_targets`` of ``batch`` (which reads no agent output)."""
    return gae_targets(None, batch, cfg, value_transform)


def stop_early(metrics: dict, cfg) -> bool:
    """End the update's epochs after this step: its approx KL passed ``learner.ppo.target_kl``."""
    return bool(cfg.ppo.target_kl and metrics["approx_kl"] > cfg.ppo.target_kl)
