"""``LEARNERS``: the algorithms ``learner.name`` selects (docs/design.md, "Contracts").

An algorithm says how the learner turns one batch into parameter updates, how the driver
collects batches for it, and what it asks of the config:

- ``update(learner, batch, state) -> metrics``: the optimizer step(s) on one batch;
- ``defaults["lock_step"]`` (``learner.lock_step``): every runner acts with one weights
  version per batch (PPO, policy lag 0), or runners never wait and unrolls queue up for the
  learner (IMPALA; V-trace corrects the lag); IMPALA may be run in lock-step
  (synchronous, as A2C), PPO only so;
- ``unrolls_per_update(cfg)``: runner trajectories in one batch;
- ``check(cfg)``: a sentence saying what to change in the config, or None.

A new algorithm is one loss file plus one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agents.registry import Registry
from learners.impala import impala_update
from learners.ppo import ppo_update


@dataclass(frozen=True)
class Algorithm:
    """One ``LEARNERS`` entry: the four parts the module docstring lists."""

    update: Callable  # (learner, batch, state) -> dict of metrics
    unrolls_per_update: Callable  # (cfg) -> int
    check: Callable  # (cfg) -> Optional[str]
    defaults: dict  # learner settings left unset (None) in the config take these values on load


LEARNERS: Registry[Algorithm] = Registry("learner")


def _recurrence_check(L) -> str | None:
    if L.recurrence < 0 or L.recurrence > L.unroll_length or (
            L.recurrence and L.unroll_length % L.recurrence):
        return (f"learner.recurrence={L.recurrence} must be 0 (whole unrolls) or divide "
                f"learner.unroll_length={L.unroll_length}")
    return None


def _impala_check(cfg) -> str | None:
    L = cfg.learner
    for key, on in (("recurrence", L.recurrence), ("clip_value", L.clip_value)):
        if on and not L.impala.fixed_targets:
            return (f"learner.{key} needs targets fixed for the whole update: "
                    "set learner.impala.fixed_targets=true "
                    f"(or learner.{key}={'0' if key == 'recurrence' else 'false'})")
    if (problem := _recurrence_check(L)) is not None:
        return problem
    if (cfg.learner.batch_size < cfg.runtime.envs_per_runner
            or cfg.learner.batch_size % cfg.runtime.envs_per_runner):
        return ("IMPALA batches whole runner trajectories: "
                f"learner.batch_size={cfg.learner.batch_size} must be "
                f"a multiple of runtime.envs_per_runner={cfg.runtime.envs_per_runner}")
    if cfg.learner.lock_step and cfg.learner.batch_size != (
            max(cfg.runtime.num_runners, 1) * cfg.runtime.envs_per_runner):
        return ("learner.lock_step: a batch is one unroll from every runner, so "
                f"learner.batch_size={cfg.learner.batch_size} must be "
                "runtime.num_runners x runtime.envs_per_runner = "
                f"{max(cfg.runtime.num_runners, 1) * cfg.runtime.envs_per_runner}")
    chunks = L.unroll_length // L.recurrence if L.recurrence else 1
    if (L.batch_size * chunks) % L.minibatches:
        what = (f"{L.batch_size} unrolls x {chunks} chunks" if chunks > 1
                else f"{L.batch_size} unrolls")
        return (f"IMPALA splits each batch's sequences (learner.batch_size={what}) into "
                f"learner.minibatches={L.minibatches} equal groups; "
                "make the sequence count divisible by it")
    return None


def _ppo_check(cfg) -> str | None:
    L = cfg.learner
    if not L.lock_step:
        return "PPO learns from on-policy batches: learner.lock_step must be true (or left out)"
    n_envs = max(cfg.runtime.num_runners, 1) * cfg.runtime.envs_per_runner
    if (problem := _recurrence_check(L)) is not None:
        return problem
    chunks = L.unroll_length // L.recurrence if L.recurrence else 1
    sequences = n_envs * chunks
    if sequences % L.minibatches:
        what = f"{n_envs} envs x {chunks} chunks of learner.recurrence={L.recurrence} steps" \
            if chunks > 1 else f"whole unrolls of its {n_envs} envs"
        return (f"PPO splits its {sequences} sequences ({what}; envs = runtime.num_runners x "
                f"runtime.envs_per_runner) into learner.minibatches={L.minibatches} minibatches; "
                "make the sequence count divisible by it")
    return None


LEARNERS.register("impala")(Algorithm(
    impala_update, check=_impala_check,
    # The paper's: one step per batch on the loss summed over its steps (scalable_agent).
    defaults=dict(lock_step=False, epochs=1, minibatches=1, normalize_advantages=False,
                  loss_reduction="sum", clip_value=False),
    unrolls_per_update=lambda cfg: cfg.learner.batch_size // cfg.runtime.envs_per_runner,
))
LEARNERS.register("ppo")(Algorithm(
    ppo_update, check=_ppo_check,
    defaults=dict(lock_step=True, epochs=4, minibatches=4, normalize_advantages=True,
                  loss_reduction="mean", clip_value=True),
    unrolls_per_update=lambda cfg: max(cfg.runtime.num_runners, 1),
))
