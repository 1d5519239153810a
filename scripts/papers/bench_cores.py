"""Step time and parameter count of every registered core at one hidden width, on one CPU thread.

Two timings per core, the median over rounds after a warm-up (each round times every core in
turn, so load from other processes hits all cores alike):

- ``act``: inference forward of one step (T=1, B=32, ``torch.no_grad``, eval mode), what an
  actor pays per environment step;
- ``learn``: forward + backward over an unroll (T=20, B=32, train mode), what the learner pays.

Every core gets the same total width ``--hidden`` (RIMs: ``num_units * unit_size = --hidden``,
so the default 252 = 6 x 42) and the same input width ``--input-size``. The table gives the
ratio of each timing to the LSTM's. ``torch.set_num_threads(1)``.

    python -m scripts.papers.bench_cores [--hidden 252] [--input-size 256] [--cores lstm rims ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

import agents.cores.alstm  # noqa: F401  (registers the cores even before agents/cores imports them)
import agents.cores.mi_lstm  # noqa: F401
import agents.cores.rims  # noqa: F401
from agents.cores import CORES


def width_options(name: str, hidden: int) -> dict:
    """Options giving core ``name`` a total state width of ``hidden``.

    ``hidden_size`` where the Config has one; for RIMs, ``unit_size = hidden // num_units`` (the
    total width must divide); no options for a core with neither.
    """
    fields = {f.name: f for f in dataclasses.fields(CORES[name].Config)}
    if "hidden_size" in fields:
        return {"hidden_size": hidden}
    if "unit_size" in fields and "num_units" in fields:
        units = fields["num_units"].default
        if hidden % units:
            raise ValueError(f"--hidden {hidden} is not a multiple of {name}'s num_units={units}; "
                             f"pick a multiple of {units} "
                             f"(e.g. {units * max(1, hidden // units)}).")
        return {"unit_size": hidden // units}
    return {}


def _time_ms(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1000 * (time.perf_counter() - start) / calls


def _bench_fns(name: str, hidden: int, input_size: int, batch: int, unroll: int):
    """Build core ``name`` and return ``(row, act, learn)``.

    ``row`` holds the core's name, parameter count and output size; ``act`` runs one inference
    step, ``learn`` one forward+backward over the unroll.
    """
    torch.manual_seed(0)
    core = CORES[name](input_size, **width_options(name, hidden))
    row = {"core": name, "params": sum(p.numel() for p in core.parameters()),
           "output_size": core.output_size}
    state = core.initial_state(batch)
    x1, r1 = torch.randn(1, batch, input_size), torch.zeros(1, batch, dtype=torch.bool)
    # The input wants its gradient, as the torso's output does in the learner.
    xt = torch.randn(unroll, batch, input_size, requires_grad=True)
    rt = torch.zeros(unroll, batch, dtype=torch.bool)

    def act():
        core.eval()
        with torch.no_grad():
            core(x1, state, r1)

    def learn():
        core.train()
        y, _ = core(xt, state, rt)
        y.sum().backward()
        core.zero_grad(set_to_none=True)

    return row, act, learn


def bench(names: list[str], hidden: int, input_size: int, batch: int, unroll: int,
          rounds: int) -> list[dict]:
    """Median ``act_ms`` and ``learn_ms`` of each core over ``rounds`` rounds.

    Each round times every core in turn, so a busy machine slows all cores alike and the ratios
    stay meaningful.
    """
    built = [_bench_fns(n, hidden, input_size, batch, unroll) for n in names]
    for _, act, learn in built:  # warm-up
        _time_ms(act, 10)
        _time_ms(learn, 2)
    act_ms = {n: [] for n in names}
    learn_ms = {n: [] for n in names}
    for _ in range(rounds):
        for (row, act, learn) in built:
            act_ms[row["core"]].append(_time_ms(act, 10))
            learn_ms[row["core"]].append(_time_ms(learn, 1))
    rows = []
    for row, _, _ in built:
        rows.append({**row, "act_ms": statistics.median(act_ms[row["core"]]),
                     "learn_ms": statistics.median(learn_ms[row["core"]])})
    return rows


def format_table(rows: list[dict], batch: int, unroll: int) -> str:
    """``bench``'s rows as a markdown table, each timing also as a ratio to the LSTM's.

    Without an LSTM row, the ratios are to the first row.
    """
    base = next((r for r in rows if r["core"] == "lstm"), rows[0])
    lines = [
        f"| core | H | params | act T=1 B={batch} (ms) | x {base['core']} | "
        f"learn T={unroll} B={batch} fwd+bwd (ms) | x {base['core']} |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['core']} | {r['output_size']} | {r['params']:,} | {r['act_ms']:.3f} | "
            f"{r['act_ms'] / base['act_ms']:.2f} | {r['learn_ms']:.2f} | "
            f"{r['learn_ms'] / base['learn_ms']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    """Time every core in ``--cores`` (the LSTM first), print the table; return its rows."""
    parser = argparse.ArgumentParser(prog="python -m scripts.papers.bench_cores",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cores", nargs="+", default=None,
                        help="core names (default: every registered core)")
    parser.add_argument("--hidden", type=int, default=252,
                        help="total state width of every core (RIMs: 6 x 42)")
    parser.add_argument("--input-size", type=int, default=256,
                        help="width of the core's input (torso output)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--unroll", type=int, default=20, help="T of the forward+backward timing")
    parser.add_argument("--rounds", type=int, default=20,
                        help="timing rounds (each: 10 act steps, 1 learn step per core)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    names = args.cores or CORES.names()
    if "lstm" in names:  # the baseline first
        names = ["lstm"] + [n for n in names if n != "lstm"]
    rows = bench(names, args.hidden, args.input_size, args.batch_size, args.unroll, args.rounds)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"input {args.input_size}, hidden {args.hidden}")
    print(format_table(rows, args.batch_size, args.unroll))
    return rows


if __name__ == "__main__":
    main()
