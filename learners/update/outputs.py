"""What an update reads back from its steps: the metrics' means, and a CUDA graph's outputs.

``mean_metrics`` reads an update's metrics to the host once, after its epochs, instead of once
a step (on a GPU each read waits for the device); ``kept_outputs`` copies out what outlives a
compiled step's CUDA-graph replay (``learner.compile`` on CUDA), which the next replay
overwrites. Both serve ``Learner.fit`` (``learner.py``).
"""

from __future__ import annotations

import collections

import numpy as np
import torch


def mean_metrics(history: dict[str, list]) -> dict[str, float]:
    """Each metric's mean over the update's steps, read to the host once per device.

    A metric is a float or a 0-dim tensor at every step; means in float64, as numpy's.
    """
    result: dict[str, float] = {}
    on_device = collections.defaultdict(list)  # device -> [(name, mean tensor)]
    for name, values in history.items():
        if values and all(torch.is_tensor(v) for v in values):
            mean = torch.stack(values).double().mean()
            on_device[mean.device].append((name, mean))
        else:
            result[name] = float(np.mean([float(v) for v in values]))
    for pairs in on_device.values():
        result.update(zip((n for n, _ in pairs), torch.stack([m for _, m in pairs]).tolist()))
    return {name: result[name] for name in history}


def kept_outputs(loss: torch.Tensor, metrics: dict, kept: tuple | None) -> tuple:
    """A CUDA-graph replay's outputs that outlive its step, copied out of the graph's memory.

    Under ``learner.compile`` on CUDA each minibatch's graph writes its outputs into memory
    the next replay overwrites; the loss is spent within the step, but the metrics are read
    after the epochs, and ``kept`` (the minibatch's value targets and task ids, picked inside
    the graph) by PopArt. The metrics come out in one copy (stacked, where they are 0-dim
    tensors of one dtype, else one each), ``kept``'s tensors in one copy each.
    """
    names = [k for k, v in metrics.items() if torch.is_tensor(v)]
    values = [metrics[k] for k in names]
    if values and all(v.dim() == 0 and v.dtype == values[0].dtype for v in values):
        copies = torch.stack(values).unbind()
    else:
        copies = [v.clone() for v in values]
    metrics = {**metrics, **dict(zip(names, copies))}
    if kept is not None:
        kept = tuple(None if t is None else t.clone() for t in kept)
    return loss, metrics, kept
