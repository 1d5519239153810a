r"""``python -m scripts.bench.torsos``: each torso's size and training cost on Atari frames.

The figures of docs/components.md's torso table. For every registered torso, and ``nature`` at
Kostrikov's widths (``channels: [32, 64, 32]``), built as ``configs/impala_atari.yaml`` builds it
(``agent.torso=NAME``, the preset's orthogonal init; the agent an LSTM of 256 and a linear head,
6 actions, frames 4 x 84 x 84):

- parameters of the torso, and of the whole agent;
- multiply-adds per frame of its convs and linear layers, counted by forward hooks (pooling,
  additions and ReLUs not counted);
- forward + backward wall time per frame on the preset's minibatch (32 steps x 8 envs) with
  ``--threads`` threads, of the torso alone and of the whole agent (the sum of the outputs as
  the loss; the torso's channels-last training layout, as the learner runs it), the median of
  ``--repeats`` passes after ``--warmup``, and each relative to ``shallow``.

Times are wall clock: run it alone on an idle machine, and compare figures from one run.

    python -m scripts.bench.torsos                 # all torsos, 2 threads
    python -m scripts.bench.torsos --torsos shallow resnet --repeats 50
    python -m scripts.bench.torsos --csv docs/results/data/bench_torsos.csv   # the rows too
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

PRESET = "configs/impala_atari.yaml"
FRAMES = {"pixels": (4, 84, 84)}
ACTIONS = 6
WIDTHS_3264 = "nature-32-64-32"  # nature at Kostrikov's widths


def variants(names: list[str]) -> list[tuple[str, list[str]]]:
    """(label, overrides of the preset) for each torso asked for."""
    out = []
    for name in names:
        if name == WIDTHS_3264:
            out.append((name, ["agent.torso=nature", "agent.torso_options.init=orthogonal",
                               "agent.torso_options.channels=[32,64,32]"]))
        else:
            out.append((name, [f"agent.torso={name}", "agent.torso_options.init=orthogonal"]))
    return out


def build(overrides: list[str]):
    """The agent ``configs/impala_atari.yaml`` builds with ``overrides``, seeded."""
    from agents.agent import Agent
    from learners.config.schema import load_config

    cfg = load_config(PRESET, overrides)
    torch.manual_seed(0)
    return Agent(cfg.agent, FRAMES, ACTIONS)


def batch(T: int, B: int) -> dict:
    """A time-major ``[T, B]`` batch of random frames, actions and rewards."""
    g = torch.Generator().manual_seed(0)
    return {"pixels": torch.randint(0, 256, (T, B, *FRAMES["pixels"]), generator=g,
                                    dtype=torch.uint8),
            "last_action": torch.randint(0, ACTIONS, (T, B), generator=g),
            "last_reward": torch.randn(T, B, generator=g).clamp(-1, 1),
            "reset": torch.zeros(T, B, dtype=torch.bool)}


def multiply_adds(torso: nn.Module, data: dict) -> float:
    """Multiply-adds per frame of ``torso``'s convs and linear layers on ``data``'s frames."""
    total = [0]

    def hook(module, args, out):
        if isinstance(module, nn.Conv2d):
            k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
            total[0] += out.numel() * k
        elif isinstance(module, nn.Linear):
            total[0] += out.numel() * module.in_features

    handles = [m.register_forward_hook(hook) for m in torso.modules()
               if isinstance(m, nn.Conv2d | nn.Linear)]
    try:
        with torch.no_grad():
            torso({"pixels": data["pixels"]}, data["last_action"], data["last_reward"])
    finally:
        for h in handles:
            h.remove()
    return total[0] / data["pixels"][..., 0, 0, 0].numel()


def seconds(step, warmup: int, repeats: int) -> float:
    """Median wall seconds of ``step()`` over ``repeats`` calls after ``warmup``."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(overrides: list[str], data: dict, warmup: int, repeats: int) -> dict:
    """One torso's parameters, multiply-adds and ms per frame (torso alone, whole agent)."""
    agent = build(overrides)
    torso = agent.torso
    frames = data["pixels"][..., 0, 0, 0].numel()

    def torso_step():
        torso.zero_grad(set_to_none=True)
        torso({"pixels": data["pixels"]}, data["last_action"], data["last_reward"]).sum().backward()

    def agent_step():
        agent.zero_grad(set_to_none=True)
        out, _ = agent(data, agent.initial_state(data["pixels"].shape[1]))
        (out.logits.sum() + out.value.sum()).backward()

    return {"torso_params": sum(p.numel() for p in torso.parameters()),
            "agent_params": sum(p.numel() for p in agent.parameters()),
            "madds": multiply_adds(torso, data),
            "torso_ms": 1e3 * seconds(torso_step, warmup, repeats) / frames,
            "agent_ms": 1e3 * seconds(agent_step, warmup, repeats) / frames}


def main(argv: list[str] | None = None) -> int:
    """Print the table; 0, or 2 for a bad argument (one line on stderr)."""
    from agents.torsos import TORSOS

    names = ["shallow", *(n for n in TORSOS.names() if n != "shallow"), WIDTHS_3264]
    p = argparse.ArgumentParser(prog="python -m scripts.bench.torsos", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torsos", nargs="+", default=names, metavar="NAME",
                   help=f"which to measure (default all: {', '.join(names)})")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--steps", type=int, default=32, help="T of the minibatch (default 32)")
    p.add_argument("--envs", type=int, default=8, help="B of the minibatch (default 8)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--csv", metavar="PATH", help="also write one row per torso here, with the "
                   "settings, the code revision and the date")
    args = p.parse_args(argv)
    if unknown := [n for n in args.torsos if n not in names]:
        print(f"error: unknown torso {unknown[0]!r}; choose from {', '.join(names)}",
              file=sys.stderr)
        return 2
    for option, value, least in (("threads", args.threads, 1), ("steps", args.steps, 1),
                                 ("envs", args.envs, 1), ("repeats", args.repeats, 1),
                                 ("warmup", args.warmup, 0)):
        if value < least:
            print(f"error: --{option} must be at least {least}, got {value}", file=sys.stderr)
            return 2
    if args.csv:  # a path that cannot be written is said before the minutes of measuring
        try:
            Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
            if Path(args.csv).is_dir() or not os.access(Path(args.csv).parent, os.W_OK):
                raise OSError(f"{args.csv} is a folder or its folder is not writable")
        except OSError as e:
            print(f"error: cannot write {args.csv}: {e.strerror or e}", file=sys.stderr)
            return 1
    torch.set_num_threads(args.threads)
    data = batch(args.steps, args.envs)
    print(f"{PRESET}'s agent, frames 4x84x84, {ACTIONS} actions; forward + backward on "
          f"{args.steps} x {args.envs} frames, {args.threads} threads, median of "
          f"{args.repeats}", flush=True)
    print("| torso | parameters: torso; agent | multiply-adds / frame | ms / frame: torso; "
          "agent | relative to shallow: torso; agent |")
    print("| --- | --- | ---: | --- | --- |")
    base, rows = None, []
    for label, overrides in variants(args.torsos):
        m = measure(overrides, data, args.warmup, args.repeats)
        if label == "shallow":
            base = m
        rel = (f"{m['torso_ms'] / base['torso_ms']:.2f}; {m['agent_ms'] / base['agent_ms']:.2f}"
               if base else "n/a (shallow not measured first)")
        print(f"| {label} | {m['torso_params']:,}; {m['agent_params']:,} | "
              f"{m['madds'] / 1e6:.1f}M | {m['torso_ms']:.3f}; {m['agent_ms']:.3f} | {rel} |",
              flush=True)
        rows.append({"torso": label, **m})
    if args.csv:
        try:
            write_csv(args.csv, rows, args)
        except OSError as e:
            print(f"error: cannot write {args.csv}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"rows written to {args.csv}")
    return 0


def write_csv(path: str, rows: list[dict], args) -> None:
    """``rows`` (one per torso, as ``measure`` gives them) and the settings, to ``path``."""
    from learners.runtime.run_dir import git_revision

    stamp = {"threads": args.threads, "steps": args.steps, "envs": args.envs,
             "warmup": args.warmup, "repeats": args.repeats, "code": git_revision(),
             "date": datetime.date.today().isoformat()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0], *stamp])
        w.writeheader()
        for row in rows:
            w.writerow({**row, "madds": int(row["madds"]), "torso_ms": round(row["torso_ms"], 4),
                        "agent_ms": round(row["agent_ms"], 4), **stamp})


if __name__ == "__main__":
    sys.exit(main())
