"""Toy multitask regression of Jayakumar et al. 2020 (section 6, figure 3, appendix D).

T tasks share one scalar input x. Half are affine, ``y = a x + b``; half are scaled
sines, ``y = a sin(10 x) + b``; ``a, b ~ U[0, 1]`` per task, drawn afresh for every
repetition. The task ID reaches the model as a one-hot ``z``. Models (appendix D):

- conditional MLP: ``concat(x, linear(20)(z)), linear(30), relu, linear(20), relu, linear(1)``
- multi-head MLP: ``linear(20), relu, linear(30), relu, linear(1)`` with the last
  linear separate per task
- MI: ``M([linear(30), relu, linear(20), relu](x), linear(20)(z))``, one full
  multiplicative interaction (agents/layers/multiplicative.py) to one output.

Training as the paper: Adam, learning rate 3e-3, 50 examples per task per step (batch
50 T), MSE. Reported: the log (natural) of the final training MSE, measured on fresh
inputs from the training distribution, mean and standard error over repetitions. The
paper trains 10,000 steps and repeats 60 times; the CPU defaults here are 2,000 steps
and 10 repetitions (``--steps``, ``--seeds``): most of the progress happens in the first
1,500 steps, and some repetitions of every model stall on a plateau, so the mean needs
repetitions more than steps (the median is printed too). The paper does not give the input
distribution; we use ``x ~ U[-1, 1]`` (``--x-range``).

Repetitions train in parallel: ``torch.func`` stacks one copy of the model per seed and
``vmap`` runs them as one batched model; Adam is element-wise and the loss is a sum of
per-seed losses, so each copy trains exactly as it would alone.

    python -m scripts.papers.toy_multitask [--tasks 20 40 60] [--steps 2000] [--seeds 10]
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

from agents.layers import MultiplicativeInteraction


class ConditionalMLP(nn.Module):
    """Appendix D's conditional MLP: ``concat(x, linear(20)(z))``, then a 30-20-1 ReLU MLP.

    ``z`` is task t's one-hot, kept as the ``one_hot [T, T]`` buffer.
    """

    def __init__(self, num_tasks: int):
        super().__init__()
        self.register_buffer("one_hot", torch.eye(num_tasks))
        self.embed = nn.Linear(num_tasks, 20)
        self.net = nn.Sequential(nn.Linear(21, 30), nn.ReLU(), nn.Linear(30, 20), nn.ReLU(),
                                 nn.Linear(20, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, n]`` (row t holds task t's inputs) -> ``[T, n]``."""
        z = self.embed(self.one_hot)[:, None, :].expand(*x.shape, 20)
        return self.net(torch.cat([x[..., None], z], dim=-1)).squeeze(-1)


class MultiHeadMLP(nn.Module):
    """Appendix D's multi-head MLP: a ``linear(20), relu, linear(30), relu`` trunk, a head per task.

    Head t is a ``linear(1)`` held as row t of ``head_weight [T, 30]`` and ``head_bias [T]``.
    """

    def __init__(self, num_tasks: int):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(1, 20), nn.ReLU(), nn.Linear(20, 30), nn.ReLU())
        bound = 1 / math.sqrt(30)  # nn.Linear(30, 1)'s initialisation, per task
        self.head_weight = nn.Parameter(torch.empty(num_tasks, 30).uniform_(-bound, bound))
        self.head_bias = nn.Parameter(torch.empty(num_tasks).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, n]`` (row t holds task t's inputs) -> ``[T, n]``, row t through head t."""
        return (torch.einsum("tnh,th->tn", self.trunk(x[..., None]), self.head_weight)
                + self.head_bias[:, None])


class ConditionalMI(nn.Module):
    """Appendix D's MI model: ``M([linear(30), relu, linear(20), relu](x), linear(20)(z))``.

    ``M`` is one full multiplicative interaction (eq. 1, agents/layers/multiplicative.py) to one
    output; ``z`` is task t's one-hot, kept as the ``one_hot [T, T]`` buffer.
    """

    def __init__(self, num_tasks: int):
        super().__init__()
        self.register_buffer("one_hot", torch.eye(num_tasks))
        self.trunk = nn.Sequential(nn.Linear(1, 30), nn.ReLU(), nn.Linear(30, 20), nn.ReLU())
        self.embed = nn.Linear(num_tasks, 20)
        self.mi = MultiplicativeInteraction(20, 20, 1, form="full")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [T, n]`` (row t holds task t's inputs) -> ``[T, n]``."""
        h = self.trunk(x[..., None])
        z = self.embed(self.one_hot)[:, None, :].expand(*h.shape[:-1], 20)
        return self.mi(h, z).squeeze(-1)


MODELS = {"conditional MLP": ConditionalMLP, "multi-head MLP": MultiHeadMLP, "MI": ConditionalMI}


def sample_tasks(num_seeds: int, num_tasks: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Per seed and task: ``a, b ~ U[0, 1]``; the first half affine, the rest sines."""
    is_sine = (torch.arange(num_tasks) >= num_tasks // 2).expand(num_seeds, num_tasks)
    return dict(a=torch.rand(num_seeds, num_tasks, generator=gen),
                b=torch.rand(num_seeds, num_tasks, generator=gen), is_sine=is_sine)


def sample_batch(tasks, per_task: int, x_range: float, gen: torch.Generator):
    """``x, y: [S, T, per_task]``."""
    a, b, is_sine = tasks["a"][..., None], tasks["b"][..., None], tasks["is_sine"][..., None]
    x = (torch.rand(*a.shape[:2], per_task, generator=gen) * 2 - 1) * x_range
    y = torch.where(is_sine, a * torch.sin(10 * x) + b, a * x + b)
    return x, y


def train(name: str, num_tasks: int, args) -> tuple[list[float], int]:
    """Train ``args.seeds`` copies of model ``name`` on ``num_tasks`` tasks at once.

    Returns each copy's final ln MSE and the model's parameter count.
    """
    gen = torch.Generator().manual_seed(1000 * num_tasks + args.seed)
    models = []
    for s in range(args.seeds):
        torch.manual_seed(10_000 * s + num_tasks + args.seed)
        models.append(MODELS[name](num_tasks))
    num_params = sum(p.numel() for p in models[0].parameters())
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def one_model(p, b, x):
        return functional_call(base, (p, b), (x,))

    ensemble = torch.vmap(one_model)
    tasks = sample_tasks(args.seeds, num_tasks, gen)
    opt = torch.optim.Adam(params.values(), lr=args.lr)
    for _ in range(args.steps):
        x, y = sample_batch(tasks, args.per_task, args.x_range, gen)
        per_seed = (ensemble(params, buffers, x) - y).pow(2).mean(dim=(1, 2))
        opt.zero_grad(set_to_none=True)
        per_seed.sum().backward()
        opt.step()
    with torch.no_grad():
        x, y = sample_batch(tasks, args.eval_points, args.x_range, gen)
        mse = (ensemble(params, buffers, x) - y).pow(2).mean(dim=(1, 2))
    return mse.log().tolist(), num_params


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    m = sum(values) / n
    var = sum((v - m) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return m, math.sqrt(var / n)


def main(argv: list[str] | None = None) -> dict:
    """Train all models at every T in ``--tasks``, print the table; return ``run``'s results."""
    parser = argparse.ArgumentParser(prog="python -m scripts.papers.toy_multitask",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[20, 40, 60],
                        help="numbers of tasks T (even)")
    parser.add_argument("--steps", type=int, default=2000,
                        help="Adam steps per run (paper: 10,000)")
    parser.add_argument("--seeds", type=int, default=10,
                        help="repetitions per model and T (paper: 60)")
    parser.add_argument("--per-task", type=int, default=50,
                        help="examples per task per step (paper: 50)")
    parser.add_argument("--lr", type=float, default=3e-3,
                        help="Adam learning rate (paper: 3e-3)")
    parser.add_argument("--x-range", type=float, default=1.0,
                        help="inputs x ~ U[-r, r] (not given in the paper)")
    parser.add_argument("--eval-points", type=int, default=1000,
                        help="fresh inputs per task for the final MSE")
    parser.add_argument("--seed", type=int, default=0, help="base random seed")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (the models are tiny: 1 is fastest)")
    args = parser.parse_args(argv)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        results, seconds = run(args)
    finally:
        torch.set_num_threads(previous_threads)
    report(results, args, seconds)
    return results


def run(args) -> tuple[dict, tuple[float, float]]:
    """Train every model at every T; return the results and the (wall, CPU) seconds taken.

    ``results[model][T] = (mean ln MSE, its standard error, parameter count, median ln MSE)``.
    """
    results: dict[str, dict[int, tuple[float, float, int, float]]] = {name: {} for name in MODELS}
    start, cpu_start = time.time(), time.process_time()
    for num_tasks in args.tasks:
        for name in MODELS:
            logs, num_params = train(name, num_tasks, args)
            m, se = _mean_se(logs)
            results[name][num_tasks] = (m, se, num_params, statistics.median(logs))
    return results, (time.time() - start, time.process_time() - cpu_start)


def report(results: dict, args, seconds: tuple[float, float]) -> None:
    """Print ``run``'s results as a markdown table, a row per model and a column per T.

    Then the lowest model per T and MI's margin over the best baseline, in ln units.
    """
    print(f"Toy multitask regression (Jayakumar et al. 2020, appendix D): {args.steps} steps, "
          f"{args.seeds} seeds, batch {args.per_task}/task, Adam lr {args.lr}, "
          f"x ~ U[-{args.x_range}, {args.x_range}] (paper: 10,000 steps, 60 seeds); "
          f"{seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU.")
    print("Final ln(training MSE), mean ± s.e. over seeds [median] (lower is better); "
          "parameters in brackets.\n")
    print("| model | " + " | ".join(f"T={t}" for t in args.tasks) + " |")
    print("|---|" + "---|" * len(args.tasks))
    for name in MODELS:
        cells = [f"{m:.2f} ± {se:.2f} [{med:.2f}] ({n})"
                 for m, se, n, med in (results[name][t] for t in args.tasks)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    best = {t: min(MODELS, key=lambda n: results[n][t][0]) for t in args.tasks}
    gaps = [f"T={t}: "
            f"{min(results[n][t][0] for n in MODELS if n != 'MI') - results['MI'][t][0]:+.2f}"
            for t in args.tasks]
    print(f"\nLowest per T: {', '.join(f'T={t}: {n}' for t, n in best.items())}. "
          f"MI advantage over the best baseline (ln units): {', '.join(gaps)}.")


if __name__ == "__main__":
    main()
