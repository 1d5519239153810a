"""Gradient clipping and the optimizer step as compiled graphs, under ``learner.compile``.

Compiling the minibatch's forward and loss (``Learner.eager_minibatch_loss``) leaves, at each
optimizer step, the eager tail of the step outside any graph: the global gradient norm and its
clipping (``clip_grad_norm_``: a norm per tensor, a stack, the norm of norms, the
coefficient's arithmetic, the scaling) and the optimizer's step. On a GPU each of those is a
kernel launch of its own, about 20 a step, more than the forward and backward graphs
together. Here they are two graphs, with the divergence guard's host read between them:

- ``clip(loss)``: ``torch.nn.utils.clip_grad_norm_``: the global norm of the gradients, the
  coefficient ``min(1, max_norm / (norm + 1e-6))`` and the gradients scaled by it; returns
  ``[loss, norm]`` as one tensor, so the host reads the step's loss and norm in one copy.
- ``step()``: the optimizer's step. (Torch's optimizers break a graph where their step begins,
  so the scaling cannot share its graph.)

So a step whose loss or norm is not finite is skipped before the weights or the optimizer's
state move, as in the eager step (``Learner.step``). On CUDA both compile in
``reduce-overhead`` mode, each replayed as one CUDA graph; on CPU (tests, the bench's count)
as inductor's C++ kernels.

The optimizer must be traceable: Adam's fused kernel is not (torch leaves it to eager), so
under ``learner.compile`` Adam and RMSProp are built with their multi-tensor step,
``capturable`` and the learning rate a tensor (``make_optimizer``; the same update up to float
rounding), which the learner sets in place each step (``set_lr``), so a new rate is a new
value, not a new graph. ``RMSpropTF`` takes a float rate; with it the step stays eager and
only the clipping is compiled.
"""

from __future__ import annotations

import torch


def set_lr(group: dict, value: float) -> None:
    """Set an optimizer group's learning rate: in place where it is a tensor (a compiled step)."""
    if torch.is_tensor(group["lr"]):
        group["lr"].fill_(value)
    else:
        group["lr"] = value


class GraphStep:
    """``clip(loss)`` then ``step()``: clipping and the optimizer step, compiled.

    ``agent``: the module whose gradients are clipped; ``optimizer``: its optimizer (stepped
    in the graph when its rate is a tensor, else eagerly); ``max_norm``: the clipping norm;
    ``graphs``: compile in ``reduce-overhead`` mode (CUDA graphs).
    """

    def __init__(self, agent: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 max_norm: float, graphs: bool):
        self.params = [p for p in agent.parameters() if p.requires_grad]
        self.optimizer, self.max_norm = optimizer, float(max_norm)
        mode = "reduce-overhead" if graphs else None
        self.traced_step = all(torch.is_tensor(g["lr"]) for g in optimizer.param_groups)
        self.lr = [g["lr"] for g in optimizer.param_groups] if self.traced_step else None
        self.clip = torch.compile(self._clip, mode=mode, dynamic=False)
        self.step = (torch.compile(self._step, mode=mode, dynamic=False) if self.traced_step
                     else optimizer.step)

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params if p.grad is not None]

    def _clip(self, loss: torch.Tensor) -> torch.Tensor:
        """``[loss, norm]``; the gradients scaled as ``clip_grad_norm_`` scales them."""
        grads = self._grads()
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, torch.clamp(self.max_norm / (norm + 1e-6), max=1.0))
        return torch.stack([loss.detach().float(), norm.float()])

    def _step(self) -> None:
        self.optimizer.step()

    def keep_lr(self) -> None:
        """Put back the rate tensors the graphs were traced with.

        An optimizer's ``load_state_dict`` puts copies of the saved ones in their place.
        """
        if self.lr is not None:
            for group, lr in zip(self.optimizer.param_groups, self.lr):
                group["lr"] = lr
