"""IMPALA loss (Espeholt et al. 2018, section 4): V-trace actor-critic.

- value: ``0.5 * sum (v_s - V(x_s))^2`` toward the V-trace targets (eq. 1);
- policy: ``-sum rho_s * log pi(a_s|x_s) * (r_s + gamma v_{s+1} - V(x_s))`` (section 4.2),
  the V-trace policy-gradient advantage with ``rho_s`` clipped at ``clip_pg_rho_threshold``
  (``learner.normalize_advantages: true`` divides these advantages by their batch standard
  deviation after centring them, as PPO does; not in the paper, off by default);
- entropy bonus ``-sum H(pi(.|x_s))``.

``learner.impala.surrogate_clip: eps`` (off by default, not in the paper) replaces the policy term
by PPO's clipped surrogate on the ratio to the behaviour policy, so that
``learner.epochs``/``minibatches`` can take many steps per batch (README, "IMPALA on Pong").
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
core's small gradients sit below eps and they move far slower than the head (README,
"IMPALA on Pong").
The behaviour policy's log-probabilities come from the trajectory's
``behaviour_logits``; the learner's values at row ``T`` bootstrap the unroll.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from agents.registry import ranged
from learners.batch import Batch, chunk_sequences, minibatches
from learners.returns import vtrace
from learners.terms import (
    action_log_probs,
    batch_mask,
    entropy_term,
    normalize,
    policy_gradient_term,
    reduce,
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
    # 0 = the paper's policy gradient; eps > 0 = PPO's clipped surrogate on pi/mu (RLlib's APPO)
    surrogate_clip: float = ranged(0.0, 0, 1, False, True)
    # V-trace once per batch from the weights at its start, kept through epochs and
    # minibatches (as PPO's GAE); false = at every step
    fixed_targets: bool = False


class LossOutput(NamedTuple):
    """What ``impala_loss`` returns: the scalar loss, its metrics and V-trace's targets."""

    loss: torch.Tensor
    metrics: dict
    # V-trace vs [T, B] ([k, B'] in chunks) at return scale (PopArt's statistics move toward them)
    value_targets: torch.Tensor


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

    Returns ``(returns, vs, pg_adv)``, with ``vs`` and ``pg_adv`` in the head's value space
    (PopArt-normalised when ``value_transform``) and ``pg_adv`` as the loss uses it (divided
    by the clipped rho when ``surrogate_clip``, whose ratio carries the importance weight
    instead).
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
    if cfg.impala.surrogate_clip:  # the ratio below carries the importance weight: not V-trace
        pg_adv = pg_adv / log_rhos.exp().clamp(max=cfg.impala.clip_pg_rho_threshold)
    return returns, vs, pg_adv


def impala_loss(out, batch: Batch, cfg, value_transform=None) -> LossOutput:
    """The IMPALA loss of one batch or minibatch: ``LossOutput(loss, metrics, value_targets)``.

    ``out``: the agent's output over all ``T + 1`` rows (``logits [T+1, B, A]``,
    ``value [T+1, B]``), or over a chunk's ``k`` rows when the batch was cut into chunks
    (``batch.steps``); ``batch``: the trajectory as tensors; ``cfg``: the learner config.

    ``value_transform`` (PopArt) maps the head's normalised values to returns and the
    V-trace targets back; identity when absent. A batch that carries ``advantages`` and
    ``returns`` (``learner.impala.fixed_targets``: V-trace computed once per batch) uses them
    instead of V-trace from ``out``'s values.
    """
    T = batch.steps
    mask = batch_mask(batch, T)
    how = cfg.loss_reduction or "sum"
    logits, values = out.logits[:T], out.value[:T]
    target_logp, behaviour_logp, log_rhos = log_probs(out, batch)
    if batch.advantages is not None:  # fixed for the whole update (impala.fixed_targets)
        pg_adv, vs, value_targets = batch.advantages, batch.returns, batch.value_targets
    else:
        returns, vs, pg_adv = vtrace_targets(out, batch, cfg, log_rhos, value_transform)
        value_targets = returns.vs
    if cfg.normalize_advantages:  # off by default for IMPALA (the paper's loss); as PPO's when on
        pg_adv = normalize(pg_adv, mask)
    if cfg.impala.surrogate_clip:
        # PPO's clipped surrogate (Schulman et al. 2017, eq. 7) on the ratio pi/mu to the
        # actors' policy with V-trace's advantage: many steps per batch without the policy
        # running away from the data (RLlib's APPO).
        ratio = (target_logp - behaviour_logp).exp()
        eps = cfg.impala.surrogate_clip
        surrogate = torch.max(-pg_adv * ratio, -pg_adv * ratio.clamp(1.0 - eps, 1.0 + eps))
        policy_loss = reduce(surrogate, mask, how)
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
    return LossOutput(loss, metrics, value_targets)


@torch.no_grad()
def with_fixed_targets(learner, batch: Batch, state: tuple) -> Batch:
    """The batch plus V-trace targets from the weights at the update's start.

    With ``learner.impala.fixed_targets`` they are kept through the update's epochs and minibatches,
    as PPO keeps its GAE (``advantages``: the policy gradient's, ``returns``: ``vs`` in the
    head's value space, ``old_values``: the values themselves, for ``learner.clip_value``,
    ``value_targets``: ``vs`` at return scale for PopArt's statistics). Recomputed at every
    step instead (the default), the values the same steps fit to this batch's returns shrink
    its advantages to what they failed to fit, which normalisation then scales back up to
    unit size.
    """
    out = learner.forward(batch, state)
    returns, vs, pg_adv = vtrace_targets(out, batch, learner.lcfg, log_probs(out, batch)[2],
                                         learner.popart)
    T = batch.unroll_length
    return batch.replace(advantages=pg_adv, returns=vs, old_values=out.value[:T],
                         value_targets=returns.vs)


def impala_update(learner, batch: Batch, state: tuple) -> dict:
    """RMSProp (or Adam) steps on the batch; PopArt statistics move after them.

    The paper's learner makes one step per batch (``learner.epochs: 1``,
    ``learner.minibatches: 1``, IMPALA's defaults). ``minibatches: n`` splits the batch's
    unrolls into ``n`` random groups, one step each, as Cleanba's IMPALA does
    (``num_minibatches``); ``epochs: k`` passes over the batch ``k`` times, each step
    recomputing V-trace with the current weights against the actors' behaviour policy
    (the off-policy correction that lets IMPALA learn from replayed unrolls, Espeholt et al.
    2018, section 5.2.1). Either gives more updates per frame. With fixed targets,
    ``learner.recurrence: k`` cuts the unrolls into chunks of ``k`` steps for the minibatches,
    as PPO does (``learners/ppo.py``).
    """
    cfg = learner.lcfg
    if cfg.impala.fixed_targets:
        batch = with_fixed_targets(learner, batch, state)
        if cfg.recurrence and cfg.recurrence < batch.steps:
            batch, state = chunk_sequences(learner, batch, state, cfg.recurrence)
    history = collections.defaultdict(list)
    generator = torch.Generator().manual_seed(learner.cfg.run.seed * 7 + learner.version)
    for _ in range(cfg.epochs):
        last_targets = []
        for mb, mb_state in minibatches(batch, state, cfg.minibatches, generator):
            loss, metrics, targets = impala_loss(learner.forward(mb, mb_state), mb, cfg,
                                                 learner.popart)
            metrics["grad_norm"] = learner.step(loss)
            last_targets.append((targets, mb.task_id))
            for k, v in metrics.items():
                history[k].append(float(v))
    result = {k: float(np.mean(v)) for k, v in history.items()}
    if learner.popart is not None and not learner.step_skipped:
        # The last pass's targets, at return scale, for the whole batch.
        result.update(learner.popart.update(torch.cat([t for t, _ in last_targets], 1),
                                            torch.cat([task for _, task in last_targets], 1)))
    return result
