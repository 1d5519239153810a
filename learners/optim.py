"""Optimizers the presets name that PyTorch does not ship in the form the papers used.

``RMSpropTF`` is TensorFlow 1's ``tf.train.RMSPropOptimizer``, the optimizer IMPALA's
hyper-parameters were tuned with (scalable_agent; Espeholt et al. 2018, appendix G):

    ms   <- rho * ms + (1 - rho) * g^2          (ms starts at 1, not 0)
    mom  <- momentum * mom + lr * g / sqrt(ms + eps)
    w    <- w - mom

It differs from ``torch.optim.RMSprop`` in two ways that matter with the paper's
``eps = 0.01``: the epsilon sits *inside* the square root (so the denominator is at least
sqrt(0.01) = 0.1, where PyTorch's ``sqrt(ms) + eps`` is at least 0.01: ten times larger
steps for every parameter whose gradient is small), and the square average starts at 1
(PyTorch: 0, so its first steps are sign-like, about ``lr / sqrt(1 - rho)`` = 10 lr).
The IMPALA Atari preset's measurements of both are in docs/results/pong.md.
"""

from __future__ import annotations

import torch


class RMSpropTF(torch.optim.Optimizer):
    """TF1's RMSProp, the update above: ``alpha`` is rho, ``eps`` sits inside the square root."""

    def __init__(self, params, lr: float, alpha: float = 0.99, eps: float = 0.01,
                 momentum: float = 0.0):
        if lr <= 0 or eps <= 0 or not 0 <= alpha < 1 or momentum < 0:
            raise ValueError("RMSpropTF: need lr > 0, eps > 0, 0 <= alpha < 1, momentum >= 0; "
                             f"got {lr}, {eps}, {alpha}, {momentum}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, momentum=momentum))

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient; returns ``closure()``'s loss, if any."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, rho, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                state = self.state[p]
                if "square_avg" not in state:
                    state["square_avg"] = torch.ones_like(p, memory_format=torch.preserve_format)
                if momentum and "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            square_avgs = [self.state[p]["square_avg"] for p in params]
            # One multi-tensor kernel per line (as torch.optim's foreach paths), not one per
            # parameter.
            torch._foreach_mul_(square_avgs, rho)
            torch._foreach_addcmul_(square_avgs, grads, grads, value=1.0 - rho)
            denominators = torch._foreach_add(square_avgs, eps)
            torch._foreach_sqrt_(denominators)
            if momentum:
                buffers = [self.state[p]["momentum_buffer"] for p in params]
                torch._foreach_mul_(buffers, momentum)
                torch._foreach_addcdiv_(buffers, grads, denominators, value=lr)
                torch._foreach_sub_(params, buffers)
            else:
                torch._foreach_addcdiv_(params, grads, denominators, value=-lr)
        return loss
