"""PopArt per task (Hessel et al. 2019, "Multi-task deep RL with PopArt"; van Hasselt et al. 2016).

For each task ``i`` the learner keeps running moments of the value targets with step
size ``beta`` (eq. 4 of Hessel et al.): ``mu_i <- (1-beta) mu_i + beta E[G]``,
``nu_i <- (1-beta) nu_i + beta E[G^2]``, ``sigma_i = sqrt(nu_i - mu_i^2)`` clipped to
``[sigma_min, sigma_max]``. The agent's value output is *normalised*: ``n_i(x)``; the
return-scale value is ``V_i(x) = sigma_i n_i(x) + mu_i``.

- value loss on normalised targets: ``((v_s - mu_i) / sigma_i - n_i(x))^2``;
- policy-gradient advantages computed with de-normalised values, then divided by
  ``sigma_i`` (Hessel et al., section 3: the IMPALA update with PopArt);
- after each statistics update the last value layer is rescaled so that every output
  is preserved exactly ("Preserving Outputs Precisely", eq. 2):
  ``w_i <- w_i sigma_old / sigma_new``, ``b_i <- (sigma_old b_i + mu_old - mu_new) / sigma_new``.

Which layer is rescaled: the agent's per-task affine value output
(``agents.agent.TaskValueOutput``, ``n_i(x) = w_i v(x) + b_i`` on top of whatever the head
computes). Because it is the last layer for every head, linear, multi-head and
multiplicative heads alike, the rescaling preserves the outputs of all of them exactly,
and no head needs PopArt-specific code. For the multiplicative head in particular, the
bilinear layer ``M(h, c)`` is untouched: it produces ``v(x)``, the per-task affine maps
it to ``n_i(x)``, and only that affine map is rescaled. The deviation from Hessel et al.
(one output row per task of the value layer) is that task values share the head's
value feature ``v(x)`` up to a per-task scale and shift.

Values recorded by runners (``final_value`` of truncated episodes; PPO's ``behaviour_value``)
are normalised with the statistics of the weights they acted with and de-normalised here
with the current ones. PPO's lock-step batches make the two the same; for IMPALA they differ
by the policy lag's few updates, each moving the statistics by a fraction ``beta`` (3e-4).
"""

from __future__ import annotations

import torch
from torch import nn


class PopArt(nn.Module):
    """Per-task return statistics ``mu``, ``nu`` ``[num_tasks]`` and the output rescaling above."""

    def __init__(self, output: nn.Module, num_tasks: int, beta: float = 3e-4,
                 sigma_min: float = 1e-4, sigma_max: float = 1e6):
        """``output``: the agent's ``TaskValueOutput`` (parameters ``weight [N]``, ``bias [N]``)."""
        super().__init__()
        self.output = [output]  # a reference, not a submodule: the agent owns the parameters
        self.beta, self.sigma_min, self.sigma_max = beta, sigma_min, sigma_max
        self.register_buffer("mu", torch.zeros(num_tasks))
        self.register_buffer("nu", torch.ones(num_tasks))

    @property
    def sigma(self) -> torch.Tensor:
        """``sigma [num_tasks]``: ``sqrt(nu - mu^2)`` clipped to ``[sigma_min, sigma_max]``."""
        return (self.nu - self.mu**2).clamp(min=self.sigma_min**2).sqrt().clamp(max=self.sigma_max)

    def denormalize(self, normalized: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """``[T, B]`` normalised values -> return scale, per row's task.

        ``task``: the rows' task IDs, at least as many rows.
        """
        task = task[: normalized.shape[0]]
        return self.sigma[task] * normalized + self.mu[task]

    def normalize_targets(self, targets: torch.Tensor, advantages: torch.Tensor,
                          task: torch.Tensor):
        """(value targets -> normalised, advantages / sigma), per row's task."""
        task = task[: targets.shape[0]]
        sigma = self.sigma[task]
        return (targets - self.mu[task]) / sigma, advantages / sigma

    @torch.no_grad()
    def update_stats(self, targets: torch.Tensor, task: torch.Tensor) -> None:
        """Move the moments toward each present task's targets, then rescale the output layer."""
        mu_old, sigma_old = self.mu.clone(), self.sigma.clone()
        for i in task.unique().tolist():
            g = targets[task == i]
            self.mu[i] = (1 - self.beta) * self.mu[i] + self.beta * g.mean()
            self.nu[i] = (1 - self.beta) * self.nu[i] + self.beta * (g**2).mean()
        sigma_new = self.sigma
        out = self.output[0]
        out.weight.mul_(sigma_old / sigma_new)
        out.bias.copy_((sigma_old * out.bias + mu_old - self.mu) / sigma_new)

    @torch.no_grad()
    def update(self, targets: torch.Tensor, task: torch.Tensor) -> dict:
        """After an optimizer step, move the statistics toward ``targets``; rescale the output.

        ``targets`` ``[T, B]`` are the return-scale targets that the loss normalised (V-trace
        ``vs`` for IMPALA, GAE returns for PPO), of tasks ``task``. Returns the statistics as
        metrics. The loss hands the targets over as a value, not through state kept here.

        Statistics move one update after the targets are used (van Hasselt et al.'s
        Algorithm 1 moves them just before); with ``beta = 3e-4`` the difference is negligible.
        """
        self.update_stats(targets.detach().reshape(-1), task[: targets.shape[0]].reshape(-1))
        return {f"popart_sigma/{i}": float(s) for i, s in enumerate(self.sigma)} | {
            f"popart_mu/{i}": float(m) for i, m in enumerate(self.mu)
        }
