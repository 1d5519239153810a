"""Batch buffers that keep their addresses from update to update, for CUDA-graph replays.

Under ``learner.compile`` on CUDA each minibatch's graph is recorded once and replayed
(``reduce-overhead`` mode). A replay copies every input that is not static into the graph's
own buffers, and the whole batch goes into each minibatch's graph (the pick runs inside it,
``Learner.eager_minibatch_loss``): without these buffers every replay would copy the whole
batch again. ``StaticBatch`` copies each update's batch and core state once into buffers it
allocates at the first update and marks static (``torch._dynamo.mark_static_address``), so a
replay copies only the minibatch's sequences. A batch of another shape, dtype or layout gets
new buffers (and so new graphs), as it would new graphs anyway.
"""

from __future__ import annotations

import torch

from learners.algorithms.batch import Batch


def _signature(tensors: list[torch.Tensor]) -> list[tuple]:
    return [(t.shape, t.stride(), t.dtype, t.device) for t in tensors]


class StaticBatch:
    """``stage(batch, state)``: the same values in buffers whose addresses do not change."""

    def __init__(self):
        self.buffers: list[torch.Tensor] | None = None
        self.signature: list[tuple] | None = None
        self.allocations = 0  # times new buffers were made (one per batch shape)

    def stage(self, batch: Batch, state: tuple) -> tuple[Batch, tuple]:
        """``batch`` and ``state`` copied into the static buffers (``batch.chunk_states`` dropped).

        The copies keep each tensor's layout (its strides), so a channels-last training layout
        stays one; one ``_foreach_copy_`` for all of them.
        """
        tensors: list[torch.Tensor] = []
        batch.map(lambda v: tensors.append(v) or v)
        tensors += list(state)
        signature = _signature(tensors)
        if signature != self.signature:
            self.buffers = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                                device=t.device) for t in tensors]
            for b in self.buffers:
                torch._dynamo.mark_static_address(b)
            self.signature = signature
            self.allocations += 1
        torch._foreach_copy_(self.buffers, tensors)
        staged = iter(self.buffers)
        return batch.map(lambda v: next(staged)), tuple(staged)
