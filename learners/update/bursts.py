"""Gradient bursts: a step kept whole, and its gradient recomputed from what was kept.

With ``learner.capture_grad_norm`` set, ``Learner.step`` keeps a step whose pre-clip gradient
norm exceeds it or is not finite, or whose loss is not finite (``record``: the minibatch, its
core state, the learner's state before the step and every parameter's gradient norm); the
driver writes them to ``<run>/bursts/``, and ``replay`` recomputes such a step's gradient and
the loss's terms (``python -m scripts.bench.burst``).
"""

from __future__ import annotations

import dataclasses

import torch

from learners.algorithms.batch import Batch, pick
from learners.update.device import to_cpu


def grad_norms(agent: torch.nn.Module) -> dict[str, float]:
    """Each parameter's gradient norm now, by name (one device sync)."""
    named = [(n, p.grad) for n, p in agent.named_parameters() if p.grad is not None]
    values = torch.stack([g.norm() for _, g in named]).tolist() if named else []
    return dict(zip((n for n, _ in named), values))


def record(learner, grad_norm: float, norms: dict[str, float], batch: Batch, state: tuple,
           idx: torch.Tensor | None, index: int) -> dict:
    """The step ``learner`` is about to take, as CPU tensors and numbers: what ``replay`` reads.

    Made before the optimizer steps (or skips a non-finite step), so the learner's state is
    the step's starting point; ``norms`` are the parameters' pre-clip gradient norms. The
    step's minibatch is ``batch``'s and ``state``'s sequences ``idx`` (``pick``), the ``index``-th
    step of the update.
    """
    batch, state = pick(batch, state, idx)
    fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)
              if f.name != "chunk_states"}
    return {
        "update": learner.version, "step": index, "frames": learner.frames, "lr": learner.lr(),
        "grad_norm": grad_norm, "threshold": learner.lcfg.capture_grad_norm,
        "grad_norms": dict(sorted(norms.items(), key=lambda kv: -kv[1])),
        "learner": learner.state_dict(), "batch": to_cpu(fields), "state": to_cpu(state),
        "spec": learner.spec,
    }


def replay(learner, capture: dict) -> tuple[dict[str, float], dict[str, float]]:
    """``(norms, terms)`` recomputed from a ``record`` on ``learner`` (no step is taken).

    ``norms``: each parameter's gradient norm; ``terms``: the loss and its metrics
    (``policy_loss``, ``value_loss``, ...), which say where a non-finite loss broke. Loads the
    capture's learner state and runs the minibatch's loss as the step did (the forward, the
    algorithm's targets where they are not fixed per batch, the loss:
    ``Learner.eager_minibatch_loss``); the learner keeps the capture's state afterwards.
    """
    learner.load_state_dict(capture["learner"])
    data = capture["batch"]
    batch = Batch(obs=data["obs"], **{k: v for k, v in data.items() if k != "obs"})
    batch = batch.map(lambda v: v.to(learner.device))
    state = tuple(s.to(learner.device) for s in capture["state"])
    loss, metrics, _ = learner.eager_minibatch_loss(batch, state, None)
    terms = {k: float(torch.as_tensor(v).detach())
             for k, v in {"loss": loss, **metrics}.items()}
    learner.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norms = grad_norms(learner.agent)
    learner.optimizer.zero_grad(set_to_none=True)
    return norms, terms
