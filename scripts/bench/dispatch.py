"""How launch-bound a learner update is: the operators it dispatches per collected agent step.

    python -m scripts.bench.learner configs/impala_atari.yaml env.game=Pong --count-ops

A GPU runs each operator as one or more kernel launches, and a small operator costs the host
about the same few microseconds to dispatch and launch whatever its size. So an update whose
operators are many and small leaves the GPU waiting on the host: its rate is set by how many
operators it dispatches, not by its arithmetic. This module counts them on CPU, where the
count is the same as on a GPU up to the fused kernels' internals (oneDNN's LSTM on CPU and
cuDNN's on CUDA are each one operator forward and one backward): every ATen operator that
reaches the dispatcher during one whole update (``Learner.update``: the batch's copy to the
device, the targets, every epoch's minibatches forward and backward, gradient clipping and
the optimizer steps), backward included, counted with a ``TorchDispatchMode``. Views
(``view``, ``select``, ``detach``, ...) are dispatched too but launch no kernel; they are
counted apart. The update is the second on the same batch, so the optimizer's state exists,
as in a run.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts every ATen operator dispatched while active (``counts``: by operator name)."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.views = 0  # of which views: no kernel runs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        if func.is_view or func.overloadpacket is torch.ops.aten.detach:
            self.views += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Every operator dispatched so far."""
        return sum(self.counts.values())


def count_update_ops(update: Callable[[], object], steps: int) -> dict:
    """Operators one call of ``update``, a whole learner update of ``steps`` steps, dispatches.

    ``update`` runs twice, counted the second time, so the optimizer's state exists as in a
    run. Returns ``ops`` (all), ``kernels`` (all but views), both per step as
    ``ops_per_step`` and ``kernels_per_step``, and ``top``: the ten most dispatched operators
    with their counts.
    """
    update()
    with OpCounter() as counter:
        update()
    ops, kernels = counter.total, counter.total - counter.views
    return {"ops": ops, "kernels": kernels, "steps": steps, "ops_per_step": ops / steps,
            "kernels_per_step": kernels / steps, "top": counter.counts.most_common(10)}


def describe(counts: dict) -> str:
    """One line: operators per collected step, kernels (views aside), and the update's totals."""
    return (f"{counts['ops_per_step']:.2f} operators dispatched per collected step "
            f"({counts['kernels_per_step']:.2f} not views), {counts['ops']} in an update of "
            f"{counts['steps']} steps")
