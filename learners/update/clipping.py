"""Gradient clipping as a compiled graph of its own, under ``learner.compile``.

Compiling the minibatch's forward and loss (``Learner.eager_minibatch_loss``) leaves, at each
optimizer step, the global gradient norm and its clipping outside any graph:
``clip_grad_norm_`` runs a norm per tensor, a stack, the norm of the norms, the coefficient's
arithmetic and the scaling, each a kernel launch of its own on a GPU. ``CompiledClip`` is
that as one graph: ``clip(loss)`` computes the norm, scales the gradients by
``min(1, max_norm / (norm + 1e-6))`` as ``clip_grad_norm_`` does, and returns ``[loss, norm]``
as one tensor, so the host reads the step's loss and norm, for the divergence guard, in one
copy. The optimizer's step stays eager: Adam's fused kernel (the presets') is one launch
for all the parameters, cannot be traced, and a traced multi-tensor step would need a tensor
learning rate and ``capturable`` state that cannot step eagerly on CPU.

On CUDA the graph compiles in ``reduce-overhead`` mode, replayed as one CUDA graph; the
gradients it scales are the backward graph's outputs, which a CUDA-graph replay may update
in place only while the forward, the backward and the clipping belong to one step of the
CUDA-graph trees: ``Learner.fit`` marks each optimizer step's start
(``torch.compiler.cudagraph_mark_step_begin``). On CPU it compiles to inductor's C++ kernels
(tests, the bench's count).
"""

from __future__ import annotations

import torch


class CompiledClip:
    """``clip(loss)``: ``clip_grad_norm_`` over ``agent``'s gradients as one compiled graph.

    ``max_norm``: the clipping norm; ``graphs``: compile in ``reduce-overhead`` mode (CUDA
    graphs).
    """

    def __init__(self, agent: torch.nn.Module, max_norm: float, graphs: bool):
        self.params = [p for p in agent.parameters() if p.requires_grad]
        self.max_norm = float(max_norm)
        self.clip = torch.compile(self._clip, mode="reduce-overhead" if graphs else None,
                                  dynamic=False)

    def _clip(self, loss: torch.Tensor) -> torch.Tensor:
        """``[loss, norm]``; the gradients scaled as ``clip_grad_norm_`` scales them."""
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, torch.clamp(self.max_norm / (norm + 1e-6), max=1.0))
        return torch.stack([loss.detach().float(), norm.float()])
