"""The pieces both losses are made of, so they share terms and metric names.

They are: reward shaping of the batch, log-probabilities, the policy-gradient, clipped
surrogate, value and entropy terms, and masked reductions.

Shapes: ``logits [T, B, A]``, everything else ``[T, B]``. ``mask [T, B]`` is 1 on real
steps and 0 on padding; every term multiplies by it before reducing, so padding never
changes a loss. ``reduce`` is ``"sum"`` (IMPALA: the paper's hyper-parameters are tuned
for sums over time and batch, as in scalable_agent) or ``"mean"`` (PPO, as in
Kostrikov's and CleanRL's implementations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from learners.algorithms.batch import Batch


@dataclass(frozen=True)
class AlgorithmDefaults:
    """The learner settings whose default depends on the algorithm, as one algorithm sets them.

    Each algorithm declares one (``DEFAULTS`` beside its loss); a ``learner`` setting left
    unset (None) in a config takes the chosen algorithm's value on load
    (``learners.algorithms.fill_defaults``), and the run saves the value it took.
    """

    lock_step: bool  # runners act with one weights version per batch
    epochs: int  # passes over each batch
    minibatches: int  # steps per pass, each on a random group of whole sequences
    normalize_advantages: bool  # advantages / their std per (mini)batch
    loss_reduction: Literal["sum", "mean"]  # the loss over the (mini)batch's steps
    clip_value: bool  # clip the value update around the update's starting values


def clip_rewards(rewards: torch.Tensor, mode: str) -> torch.Tensor:
    """Rewards ``[T, B]`` shaped by ``learner.reward_clip`` ``mode``.

    ``none``; ``clip`` to [-1, 1] (Atari, Mnih et al. 2015); ``soft_asymmetric`` (IMPALA's
    DMLab choice, scalable_agent): ``5 tanh(r / 5)``, scaled by 0.3 when r < 0.
    """
    if mode == "none":
        return rewards
    if mode == "clip":
        return rewards.clamp(-1.0, 1.0)
    if mode == "soft_asymmetric":
        squeezed = torch.tanh(rewards / 5.0)
        return torch.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
    raise ValueError(f"unknown reward_clip {mode!r}; valid: none, clip, soft_asymmetric")


def step_targets(batch: Batch, gamma: float, reward_clip: str,
                 final_value: torch.Tensor | None = None):
    """Per-step rewards and discounts ``[T, B]`` for the return math.

    ``discount_t = gamma * (1 - terminated_t) * (1 - truncated_t)``; a truncated step
    gets ``gamma * V(final observation)`` added to its (clipped) reward instead of a
    bootstrap through the next row, which belongs to a new episode. ``final_value``
    overrides the batch's (PopArt passes de-normalised values).
    """
    T = batch.unroll_length
    terminated = batch.terminated[:T].float()
    truncated = batch.truncated[:T].float()
    if final_value is None:
        final_value = batch.final_value[:T]
    rewards = clip_rewards(batch.reward[:T], reward_clip) + gamma * truncated * final_value
    discounts = gamma * (1.0 - terminated) * (1.0 - truncated)
    return rewards, discounts


def action_log_probs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``log pi(a_t | x_t)``: ``logits [T, B, A]``, ``actions [T, B]`` -> ``[T, B]``."""
    return F.log_softmax(logits, dim=-1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical policy per step, ``[T, B]``."""
    log_p = F.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def reduce(x: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """The scalar sum (``how="sum"``) or mean (``"mean"``) of ``x`` over the real steps."""
    total = (x * mask).sum()
    return total if how == "sum" else total / mask.sum().clamp(min=1.0)


def policy_gradient_term(log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                         how: str) -> torch.Tensor:
    """``-E[log pi(a|x) * A]`` with advantages treated as constants."""
    return reduce(-log_probs * advantages.detach(), mask, how)


def clipped_policy_term(ratio: torch.Tensor, advantages: torch.Tensor, clip: float,
                        mask: torch.Tensor, how: str) -> torch.Tensor:
    """PPO's clipped surrogate as a loss (Schulman et al. 2017, eq. 7), both losses' form.

    ``-E[min(r A, clip(r, 1 - clip, 1 + clip) A)]``, written as the max of the negatives;
    ``ratio`` is ``pi / mu`` per step (PPO: to the policy that collected the batch; IMPALA
    with ``learner.impala.surrogate_clip``: to the runners' policy), ``advantages`` are used
    as given (callers pass targets computed without gradient).
    """
    surrogate = torch.max(-advantages * ratio,
                          -advantages * ratio.clamp(1.0 - clip, 1.0 + clip))
    return reduce(surrogate, mask, how)


def value_term(values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, how: str,
               old_values: torch.Tensor | None = None, clip: float = 0.0) -> torch.Tensor:
    """``0.5 * E[(target - V)^2]``, targets treated as constants, or PPO2's clipped form.

    With ``old_values`` and ``clip > 0``, PPO2's clipped form (baselines' and Kostrikov's
    code; not in the PPO paper's eq. 9):
    ``0.5 * E[max((V - R)^2, (V_old + clip(V - V_old, -clip, clip) - R)^2)]``.
    """
    targets = targets.detach()
    err = (values - targets) ** 2
    if old_values is not None and clip:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.max(err, (clipped - targets) ** 2)
    return reduce(0.5 * err, mask, how)


def entropy_term(logits: torch.Tensor, mask: torch.Tensor,
                 how: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss = -E[entropy], mean entropy per step for logging)."""
    ent = entropy(logits)
    return reduce(-ent, mask, how), reduce(ent.detach(), mask, "mean")


def batch_mask(batch: Batch, T: int) -> torch.Tensor:
    """``batch.mask[:T]`` if present (1 = real step, 0 = padding), else ones."""
    if batch.mask is None:
        return torch.ones_like(batch.reward[:T])
    return batch.mask[:T].float()


def normalize(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(A - mean) / (std + 1e-8)`` over the real steps (PPO's per-minibatch normalisation)."""
    n = mask.sum().clamp(min=1.0)
    mean = (advantages * mask).sum() / n
    std = (((advantages - mean) ** 2 * mask).sum() / n).sqrt()
    return (advantages - mean) / (std + 1e-8)
