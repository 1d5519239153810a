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
The IMPALA Atari preset's measurements of both are in docs/results/impala-atari.md.

``make_optimizer`` builds the optimizer a config names over the agent's ``parameter_groups``.
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


def parameter_groups(agent, opt_cfg) -> list[dict]:
    """The agent's parameters as the optimizer's groups, each with its ``lr_scale``.

    One group, or with ``torso_lr_scale`` below 1 two: the torso's parameters, stepped at that
    fraction of the scheduled rate, and the rest at the whole rate.
    """
    scale = opt_cfg.torso_lr_scale
    if scale == 1.0:
        return [{"params": list(agent.parameters()), "lr_scale": 1.0}]
    torso = {id(p) for p in agent.torso.parameters()}
    return [{"params": [p for p in agent.parameters() if id(p) in torso], "lr_scale": scale},
            {"params": [p for p in agent.parameters() if id(p) not in torso], "lr_scale": 1.0}]


def make_optimizer(params, opt_cfg) -> torch.optim.Optimizer:
    """The ``learner.optimizer.name`` optimizer over ``params``: rmsprop_tf, rmsprop or adam."""
    if opt_cfg.name == "rmsprop_tf":
        # IMPALA's own optimizer, TF1 semantics (this module): what its settings assume.
        return RMSpropTF(params, lr=opt_cfg.lr, alpha=opt_cfg.alpha, eps=opt_cfg.eps,
                         momentum=opt_cfg.momentum)
    if opt_cfg.name == "rmsprop":
        # IMPALA: RMSProp, eps 0.01, decay (alpha) 0.99, momentum 0 (Espeholt et al. 2018,
        # table D.3).
        return torch.optim.RMSprop(params, lr=opt_cfg.lr, alpha=opt_cfg.alpha, eps=opt_cfg.eps,
                                   momentum=opt_cfg.momentum)
    # fused: the whole step in one kernel, not a handful of operations per tensor; the same
    # update up to float rounding, and on CPU about 3x faster (1.2M parameters: 0.85 ms
    # against 2.6 on one thread). torch.optim takes it on CPU and CUDA; fused: false is
    # PyTorch's default step, for an A/B of the kernel.
    return torch.optim.Adam(params, lr=opt_cfg.lr, eps=opt_cfg.eps, fused=opt_cfg.fused or None)


def match_groups(saved: dict, own_groups: list[dict]) -> None:
    """Regroup an optimizer ``state_dict`` (``saved``, in place) into ``own_groups``' sizes.

    A resume that changes whether the torso has its own rate: both groupings hold the agent's
    parameters in one order, the torso's first (``parameter_groups``), so each parameter keeps
    its state by index; the saved hyper-parameters of the first group serve every group.
    """
    if len(saved["param_groups"]) == len(own_groups):
        return
    first, template = 0, saved["param_groups"][0]
    saved["param_groups"] = []
    for own in own_groups:
        count = len(own["params"])
        saved["param_groups"].append({**template, "params": list(range(first, first + count))})
        first += count
