"""The learning-rate schedule a config describes, and the note when a resume leaves it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from learners.config.schema import ExperimentConfig


def lr_at(cfg: ExperimentConfig, frames: int) -> float:
    """The learning rate ``cfg`` schedules at ``frames``.

    ``learner.optimizer.lr`` decayed linearly to 0 at ``lr_decay_frames`` (when set) or at
    ``run.total_frames``; ``lr_schedule: constant`` keeps ``lr`` throughout. With
    ``lr_warmup_frames`` the rate is also scaled by ``min(1, frames / lr_warmup_frames)``: the
    linear warmup from 0 of Ma & Yarats (2021), ``omega_t = min(1, t (1 - beta2) / 2)`` over
    optimizer steps ``t``, counted here in frames as the rest of the schedule is (so the
    first update, at 0 frames, steps at 0).
    """
    o = cfg.learner.optimizer
    warm = min(1.0, frames / o.lr_warmup_frames) if o.lr_warmup_frames else 1.0
    if o.lr_schedule == "constant":
        return o.lr * warm
    return o.lr * warm * max(0.0, 1.0 - frames / (o.lr_decay_frames or cfg.run.total_frames))


def _schedule_words(cfg: ExperimentConfig) -> str:
    o = cfg.learner.optimizer
    warm = (f", warmed up from 0 over its first {o.lr_warmup_frames:,} frames"
            if o.lr_warmup_frames else "")
    if o.lr_schedule == "constant":
        return f"constant {o.lr:.3g}{warm}"
    return (f"{o.lr:.3g} decayed to 0 at frame {o.lr_decay_frames or cfg.run.total_frames:,}"
            f"{warm}")


def lr_schedule_change(old: ExperimentConfig, new: ExperimentConfig, frames: int) -> str | None:
    """One line when a run resumed at ``frames`` under ``new`` jumps off ``old``'s lr schedule.

    The linear schedule ends at ``run.total_frames`` unless ``lr_decay_frames`` fixes it, so
    raising the total to extend a finished run restarts a decayed learning rate; None when the
    learning rate at ``frames`` is the same under both.
    """
    a, b = lr_at(old, frames), lr_at(new, frames)
    if abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12):
        return None
    return (f"the learning rate at {frames:,} frames jumps from {a:.3g} to {b:.3g} "
            f"(was {_schedule_words(old)}, now {_schedule_words(new)}); to extend a run on one "
            "schedule, set learner.optimizer.lr_decay_frames from its start")
