"""``LEARNERS``: the algorithms ``learner.name`` selects (docs/design.md, "Contracts").

An algorithm is pure functions of tensors and its own config; the learner
(``learners/update/learner.py``) owns the update around them (epochs, minibatches, chunks,
forward, backward, clipping, the non-finite guard, PopArt, the optimizer step, the version).
An entry says:

- ``targets(out, batch, cfg, value_transform) -> batch``: the batch with its targets
  (``advantages``, ``returns``, ``old_values``, ``value_targets``): V-trace, GAE;
- ``loss(out, batch, cfg) -> (loss, metrics)``: the loss of one (mini)batch with targets;
- ``fixed_targets(cfg)``: targets are computed once per batch at the update's start and kept
  through its epochs (else before each step, from that step's output);
- ``reads_output``: the once-per-batch targets read the agent's output at the update's start
  (IMPALA's V-trace), or only the batch (PPO's GAE from the runners' values);
- ``popart_from_last_pass``: PopArt's statistics move toward the value targets of the last
  pass's minibatches (IMPALA), or toward the whole batch's fixed targets (PPO);
- ``stop_early(metrics, cfg)`` (optional): end the epochs after this step (PPO's target_kl);
- ``defaults``: the learner settings left unset (None) take these values
  (``fill_defaults``); ``defaults.lock_step``: every runner acts with one weights version
  per batch (PPO, policy lag 0), or runners never wait and unrolls queue up for the learner
  (IMPALA; V-trace corrects the lag); IMPALA may be run in lock-step (synchronous, as A2C),
  PPO only so;
- ``unrolls_per_update(cfg)``: runner trajectories in one batch;
- ``check(cfg)``: a sentence saying what to change in the config, or None;
- ``options`` (optional): the config class of the settings this algorithm alone reads, its
  ``learner.<name>`` section (``ImpalaConfig``, ``PPOConfig``); the schema builds one section
  per entry that declares one (``learners.config.schema.learner_config``).

A new algorithm is one loss file plus one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from agents.registry import Registry
from learners.algorithms import impala, ppo
from learners.algorithms.terms import AlgorithmDefaults


@dataclass(frozen=True)
class Algorithm:
    """One ``LEARNERS`` entry: the parts the module docstring lists."""

    targets: Callable  # (out | None, batch, cfg, value_transform) -> Batch with targets
    loss: Callable  # (out, batch, cfg) -> (loss, metrics)
    fixed_targets: Callable  # (cfg) -> bool
    reads_output: bool
    popart_from_last_pass: bool
    defaults: AlgorithmDefaults
    unrolls_per_update: Callable  # (cfg) -> int
    check: Callable  # (cfg) -> Optional[str]
    stop_early: Callable | None = None  # (metrics, cfg) -> bool
    options: type | None = None  # the dataclass of its learner.<name> section


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


def fill_defaults(learner_cfg):
    """The ``learner`` settings left unset (None) given the algorithm's defaults.

    ``learner_cfg``: a ``LearnerConfig`` (frozen); returns a copy with the defaults filled (or
    the same object when nothing is unset). This is the one place the algorithm's
    ``defaults`` reach a config: ``load_config`` calls it, and so may a test that builds a
    ``LearnerConfig`` by hand. An unknown ``learner.name`` raises the registry's KeyError (the
    list of valid names).
    """
    defaults = LEARNERS.get(learner_cfg.name).defaults
    unset = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)
             if getattr(learner_cfg, f.name) is None}
    return dataclasses.replace(learner_cfg, **unset) if unset else learner_cfg


LEARNERS.register("impala")(Algorithm(
    targets=impala.impala_targets, loss=impala.impala_loss,
    fixed_targets=lambda cfg: cfg.impala.fixed_targets, reads_output=True,
    popart_from_last_pass=True, defaults=impala.DEFAULTS, check=_impala_check,
    options=impala.ImpalaConfig,
    unrolls_per_update=lambda cfg: cfg.learner.batch_size // cfg.runtime.envs_per_runner,
))
LEARNERS.register("ppo")(Algorithm(
    targets=ppo.gae_targets, loss=ppo.ppo_loss,
    fixed_targets=lambda cfg: True, reads_output=False,
    popart_from_last_pass=False, defaults=ppo.DEFAULTS, check=_ppo_check,
    stop_early=ppo.stop_early, options=ppo.PPOConfig,
    unrolls_per_update=lambda cfg: max(cfg.runtime.num_runners, 1),
))
