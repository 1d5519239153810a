"""Copying task of Goyal et al. 2019 (RIMs), section 4.1, Table 1 and Appendix D.1.

A sequence starts with 10 random digits (8 symbols, tokens 1-8), then a dormant phase of
``dormant`` blanks (token 0), then the delimiter (token 9), then 10 blanks during which the
model must output the 10 digits in order. Models are ``embedding -> core -> linear`` over the
registered cores; the loss is the cross-entropy on the last 10 positions (the paper's "CE for
last 10 time steps"; chance is ln 8 = 2.08). Training uses dormant phases of
``--train-dormant`` (50), testing additionally ``--test-dormant`` (200): zero-shot length
generalisation, where the paper finds RIMs at 0.00 and the LSTM at 3-4 nats (Table 1).

The paper trains 600-unit models (RIMs: 6 x 100) with Adam at 1e-3 for 150 epochs on a GPU.
The defaults here are CPU-sized and much smaller, about 10 minutes on 2 cores for the four
default cores: width ``--hidden 120`` (RIMs: 6 x 20, 4 active), ``--steps 400`` Adam steps at
1e-3 with batch ``--batch-size 64`` (about 1/100 of the paper's training), gradient-norm
clipping at 1.0 (ours; the paper names none), RIMs with one input-attention head and four
communication heads (Appendix D.1: "For copy task, we used 1 head in input attention, and 4
heads for RIMs communication"; ``--input-heads``), one torch thread (``--threads``; on a shared
2-core machine two OpenMP threads per process were 20x slower). Expect these defaults to show
whether a core starts to learn the task at all, not the paper's numbers.

``--paper`` sets the paper's size: width 600 (RIMs 6 x 100, 4 active), embedding 600, and
30,000 Adam steps of batch 64 = 150 epochs x 200 batches (the authors' ``train_copying.py``
draws 200 batches per epoch; ``experiment_copying.sh`` sets the embedding to the width). It is
GPU-sized: hours per core on 2 CPU cores. ``--device cuda`` trains on a GPU; the sequences are
still drawn on the CPU from the seed's generator, so a seed sees the same batches on either
device. The runs are not the same model across devices: float rounding differs, and RIMs'
dropout draws its masks from the device's own generator. A run therefore stays on the device
it started on (continuing a checkpoint on the other one is refused).

Both columns matter: the train-length CE must be near 0 (the task learnt) before the
test-length CE says anything about length generalisation.

Denormal floats are flushed to zero (``torch.set_flush_denormal``) while it trains: an LSTM
stuck at chance slowed from 0.2 to 0.6 s per step between steps 4,500 and 9,000 of a
15,000-step run (width 120, one thread, beside a RIMs run; its gates' tiny gradients are the
likely denormals), and ran 0.15 s per step past step 6,000 with them flushed (2026-11-25).

Ctrl-C (SIGINT, e.g. ``timeout -s INT 1h``) stops training at the end of the step under way,
evaluates the model as it stands and prints the table with the steps it reached, marked
"(stopped)"; cores after it in ``--cores`` are not trained. A second Ctrl-C stops at once
(with ``--out``, the last checkpoint stays as it was).

Long runs: ``--out DIR`` keeps, per core and seed, a checkpoint ``DIR/<core>-seed<S>.pt``
(model, Adam, the batch generator, torch's generator for dropout, the step; written at
every evaluation, every ``--checkpoint-every-s`` and on Ctrl-C) and a curve
``DIR/<core>-seed<S>.csv``: every ``--eval-every`` steps, the CE and accuracy on fresh
sequences at both lengths, so the step where the train length is learnt and the test
length's CE there come from one run. The same command continues from the
checkpoint (a larger ``--steps`` extends the run); a continued run draws the same batches
as an uninterrupted one, so it trains the same model. The finished row goes to
``DIR/<core>-seed<S>.json``.

    python -m scripts.papers.copying [--cores lstm rims mi_lstm alstm] [--steps 400] [--hidden 120]
                              [--paper] [--device cpu] [--out DIR [--eval-every 500]]
    python -m scripts.papers.copying --out DIR --join CSV   # every curve in one csv, the result
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import signal
import threading
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from agents.cores import CORES
from scripts.papers.bench_cores import width_options  # also registers rims, mi_lstm, alstm
from scripts.papers.copying_curves import CURVE_COLUMNS, write_joined

BLANK, DELIMITER, NUM_SYMBOLS, COPY_LENGTH = 0, 9, 8, 10
VOCAB = 10


def copying_batch(batch: int, dormant: int,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of copying sequences: inputs ``[T, B]`` (T = dormant + 21), targets ``[10, B]``.

    A target is the symbol index 0-7 of the digit to output at each of the last 10 steps.
    """
    digits = torch.randint(1, NUM_SYMBOLS + 1, (COPY_LENGTH, batch), generator=generator)
    x = torch.cat([
        digits,
        torch.full((dormant, batch), BLANK),
        torch.full((1, batch), DELIMITER),
        torch.full((COPY_LENGTH, batch), BLANK),
    ])
    return x, digits - 1


class CopyModel(nn.Module):
    """Token embedding -> core -> linear readout to the 8 symbols."""

    def __init__(self, core_name: str, hidden: int, embed: int, input_heads: int = 1,
                 comm_gate: bool = True):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, embed)
        options = width_options(core_name, hidden)
        fields = {f.name for f in dataclasses.fields(CORES[core_name].Config)}
        if "input_heads" in fields:
            options["input_heads"] = input_heads  # RIMs: 1 for the copying task (Appendix D.1)
        if "comm_gate" in fields:
            options["comm_gate"] = comm_gate  # RIMs: False for the ungated communication
        self.core = CORES[core_name](embed, **options)
        self.readout = nn.Linear(self.core.output_size, NUM_SYMBOLS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tokens [T, B] -> logits of the last 10 steps [10, B, 8]."""
        T, B = tokens.shape
        y, _ = self.core(self.embed(tokens), self.core.initial_state(B, tokens.device),
                         torch.zeros(T, B, dtype=torch.bool, device=tokens.device))
        return self.readout(y[-COPY_LENGTH:])


def last10_metrics(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, float]:
    """CE (a tensor, for backward) and accuracy of ``logits [10, B, 8]`` on ``targets [10, B]``."""
    loss = F.cross_entropy(logits.reshape(-1, NUM_SYMBOLS), targets.reshape(-1))
    accuracy = (logits.argmax(-1) == targets).float().mean().item()
    return loss, accuracy


@torch.no_grad()
def evaluate(model: CopyModel, dormant: int, sequences: int, batch: int,
             seed: int) -> tuple[float, float]:
    """Mean CE (nats) and accuracy on the last 10 steps over ``sequences`` fresh sequences."""
    model.eval()
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)  # sequences drawn on the CPU, the same on any device
    total_ce, total_acc, seen = 0.0, 0.0, 0
    while seen < sequences:
        n = min(batch, sequences - seen)
        x, target = copying_batch(n, dormant, g)
        ce, acc = last10_metrics(model(x.to(device)), target.to(device))
        total_ce += ce.item() * n
        total_acc += acc * n
        seen += n
    model.train()
    return total_ce / seen, total_acc / seen


# what a checkpoint must agree on with the command that continues it
SAME_RUN = ("hidden", "embed", "input_heads", "batch_size", "lr", "clip", "train_dormant",
            "test_dormant", "eval_batch_size", "seed")


def both_lengths(model: CopyModel, args: argparse.Namespace) -> dict:
    """CE and accuracy at the train and test lengths on fresh sequences (fixed per seed)."""
    eval_batch = min(args.eval_batch_size, 256)
    ce_train, acc_train = evaluate(model, args.train_dormant, args.eval_batch_size, eval_batch,
                                   args.seed + 1)
    ce_test, acc_test = evaluate(model, args.test_dormant, args.eval_batch_size, eval_batch,
                                 args.seed + 2)
    return {"ce_train_length": ce_train, "acc_train_length": acc_train,
            "ce_test_length": ce_test, "acc_test_length": acc_test}


class RunFiles:
    """``--out``'s files of one core and seed: checkpoint, curve csv, final row."""

    def __init__(self, out: str, name: str, args: argparse.Namespace):
        self.dir = Path(out)
        if self.dir.exists() and not self.dir.is_dir():
            raise SystemExit(f"copying: --out {out} is a file; give a directory")
        stem = f"{name}-seed{args.seed}"
        self.ckpt, self.curve = self.dir / f"{stem}.pt", self.dir / f"{stem}.csv"
        self.row = self.dir / f"{stem}.json"
        self.settings = {k: getattr(args, k) for k in SAME_RUN}
        self.rims = name == "rims"
        if self.rims:  # the ungated RIMs (--no-comm-gate; before comm_gate) is another model
            self.settings["comm_gate"] = not args.no_comm_gate
        self.steps, self.device = args.steps, args.device

    def check(self) -> dict | None:
        """The checkpoint, if any, after checking it belongs to this command (one-line exits)."""
        if not self.ckpt.is_file():
            return None
        state = torch.load(self.ckpt, map_location="cpu", weights_only=False)
        saved = state["settings"]
        if self.rims:  # checkpoints from before comm_gate hold the ungated core
            saved = {"comm_gate": False, **saved}
        differ = {k: (saved.get(k), v) for k, v in self.settings.items() if saved.get(k) != v}
        if differ:
            raise SystemExit(f"copying: {self.ckpt} was trained with other settings "
                             f"(checkpoint, now): {differ}; use another --out")
        if state.get("device", "cpu") != self.device:
            raise SystemExit(f"copying: {self.ckpt} was trained on {state.get('device', 'cpu')}; "
                             f"continue it with --device {state.get('device', 'cpu')} (dropout "
                             "draws from the device's own generator, so a run keeps its device)")
        if state["step"] > self.steps:
            raise SystemExit(f"copying: {self.ckpt} is at step {state['step']}, past --steps "
                             f"{self.steps}; give --steps {state['step']} or more")
        return state

    def load(self, model, optimizer, g) -> tuple[int, float]:
        """Restore a checkpoint if there is one; returns (steps done, training seconds).

        The curve keeps only the points up to the checkpoint's step: a run killed after an
        evaluation but before its next checkpoint writes those points again.
        """
        state = self.check()
        if state is None:
            return 0, 0.0
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        g.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])  # RIMs' dropout draws from it (on the CPU)
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda_rng"])  # ... and from this one on CUDA
        if self.curve.is_file():
            with self.curve.open(newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= state["step"]]
            self.curve.unlink()
            for r in rows:
                self.add_point(r)
        return state["step"], state["seconds"]

    def save(self, model, optimizer, g, step: int, seconds: float) -> None:
        """Write the checkpoint (a temporary file renamed over the old one)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "generator": g.get_state(), "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None,
                    "step": step, "seconds": seconds, "settings": self.settings,
                    "device": self.device}, tmp)
        tmp.replace(self.ckpt)

    def add_point(self, point: dict) -> None:
        """Append one evaluated point to the curve csv (header on a new file)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        new = not self.curve.is_file()
        with self.curve.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CURVE_COLUMNS, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(point)


class StepBoundaryInterrupt:
    """Ctrl-C (SIGINT) asks training to stop at the next step boundary; a second one quits now.

    A step cut in the middle would leave the batch generator past a batch the model never
    trained on, or Adam part-way through its parameters, and the checkpoint would then not
    continue the run it came from.
    """

    def __init__(self):
        self.count, self._old = 0, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def train_core(name: str, args: argparse.Namespace) -> dict:
    """Train core ``name`` at the training length, then evaluate it at both dormant lengths.

    Returns its table row: core parameter count, CE and accuracy at the train and test lengths,
    training seconds, and the core's ``diagnostics()`` (as lists) where it has them. With
    ``args.out``, continues from and keeps a checkpoint and an evaluated curve (``RunFiles``).
    """
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = CopyModel(name, args.hidden, args.embed, args.input_heads,
                      comm_gate=not args.no_comm_gate).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    files = RunFiles(args.out, name, args) if args.out else None
    done, before = files.load(model, optimizer, g) if files else (0, 0.0)
    if done:
        print(f"[{name}] continuing from step {done} ({files.ckpt})", flush=True)
    log_every = max(1, args.steps // 10)
    start = time.perf_counter()

    def seconds() -> float:  # training time, earlier runs of this checkpoint included
        return before + time.perf_counter() - start

    last_save, stopped, quit_now = time.perf_counter(), False, False
    g_before = g.get_state()
    with StepBoundaryInterrupt() as interrupt:
        try:
            for step in range(done + 1, args.steps + 1):
                g_before = g.get_state()
                if interrupt.count:
                    raise KeyboardInterrupt
                x, target = copying_batch(args.batch_size, args.train_dormant, g)
                loss, acc = last10_metrics(model(x.to(device)), target.to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), args.clip)
                optimizer.step()
                done = step
                if step % log_every == 0 or step == args.steps:
                    print(f"[{name}] step {step}/{args.steps}  train CE {loss.item():.3f}  "
                          f"acc {acc:.2f}  {seconds():.0f}s", flush=True)
                evaluated = files and args.eval_every and step % args.eval_every == 0
                if evaluated:
                    point = {"step": step, "seconds": round(seconds(), 1),
                             **both_lengths(model, args)}
                    files.add_point(point)
                    print(f"[{name}] step {step}: CE {point['ce_train_length']:.3f} at dormant "
                          f"{args.train_dormant}, {point['ce_test_length']:.3f} at dormant "
                          f"{args.test_dormant}", flush=True)
                if files and (evaluated
                              or time.perf_counter() - last_save >= args.checkpoint_every_s):
                    files.save(model, optimizer, g, step, seconds())
                    last_save = time.perf_counter()
        except KeyboardInterrupt:  # Ctrl-C: evaluate what the steps so far have trained
            stopped, quit_now = True, interrupt.count > 1
            if done < step:  # the step was cut before its update: its batch is drawn again
                g.set_state(g_before)
            print(f"[{name}] stopped at step {done}/{args.steps}; evaluating the model as it is",
                  flush=True)
    train_seconds = seconds()
    if files and not quit_now:  # a second Ctrl-C may have cut Adam's step: keep the last one
        files.save(model, optimizer, g, done, train_seconds)
    row = {"core": name, "params": sum(p.numel() for p in model.core.parameters()),
           **both_lengths(model, args), "train_seconds": train_seconds,
           "steps": done, "stopped": stopped, "device": args.device}
    diagnostics = getattr(model.core, "diagnostics", None)
    if diagnostics is not None:
        row.update({k: v.tolist() for k, v in diagnostics().items()})
    if files and not stopped:
        files.row.write_text(json.dumps({**row, "settings": files.settings}, indent=1) + "\n")
    return row


def format_table(rows: list[dict], args: argparse.Namespace) -> str:
    """The ``train_core`` rows as a markdown table, one line per core."""
    lines = [
        f"| core | core params | CE dormant {args.train_dormant} (train length) | "
        f"CE dormant {args.test_dormant} (test length) | acc {args.train_dormant} | "
        f"acc {args.test_dormant} | steps | train time (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        steps = f"{r['steps']:,}" + (" (stopped)" if r["stopped"] else "")
        lines.append(f"| {r['core']} | {r['params']:,} | {r['ce_train_length']:.3f} | "
                     f"{r['ce_test_length']:.3f} | {r['acc_train_length']:.2f} | "
                     f"{r['acc_test_length']:.2f} | {steps} | {r['train_seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    """Train and evaluate every core in ``--cores``; print the table and return its rows."""
    parser = argparse.ArgumentParser(prog="python -m scripts.papers.copying",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cores", nargs="+", default=["lstm", "rims", "mi_lstm", "alstm"],
                        help="registered core names")
    parser.add_argument("--steps", type=int, default=400,
                        help="Adam steps per core (paper: 150 epochs)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sequences per step (paper, Table 3: 64)")
    parser.add_argument("--hidden", type=int, default=120,
                        help="core width; RIMs: num_units * unit_size (paper: 600)")
    parser.add_argument("--input-heads", type=int, default=1,
                        help="input-attention heads of cores that have them "
                             "(RIMs; Appendix D.1: 1)")
    parser.add_argument("--embed", type=int, default=32, help="token embedding width")
    parser.add_argument("--no-comm-gate", action="store_true",
                        help="RIMs: add the communication's read to the state ungated (section "
                             "2.4's equation; the core before comm_gate)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (Appendix D.1)")
    parser.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping")
    parser.add_argument("--train-dormant", type=int, default=50,
                        help="blank steps between digits and delimiter, training")
    parser.add_argument("--test-dormant", type=int, default=200,
                        help="blank steps at test time (length generalisation)")
    parser.add_argument("--eval-batch-size", type=int, default=512,
                        help="test sequences per dormant length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the model trains (a run keeps it); the sequences are drawn "
                             "on the CPU, so a seed trains on the same batches on either")
    parser.add_argument("--out", default=None,
                        help="directory for each core's checkpoint, curve and row; the same "
                             "command continues from the checkpoint")
    parser.add_argument("--eval-every", type=int, default=500,
                        help="with --out: steps between evaluations at both lengths (0: none)")
    parser.add_argument("--checkpoint-every-s", type=float, default=300.0,
                        help="with --out: seconds between checkpoints")
    parser.add_argument("--paper", action="store_true",
                        help="the paper's size: width 600, embedding 600, 30,000 steps "
                             "(150 epochs x 200 batches)")
    parser.add_argument("--join", metavar="CSV", default=None,
                        help="train nothing: join the curves under --out into CSV (columns "
                             "core, seed, then the curve's) and print the study's result")
    args = parser.parse_args(argv)
    if args.join:
        if not args.out or not Path(args.out).is_dir():
            raise SystemExit("copying: --join needs --out, the directory the runs wrote their "
                             "curves to")
        return write_joined(args.out, args.join)
    if args.paper:
        args.hidden, args.embed, args.steps = 600, 600, 30_000
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here; use --device cpu")
    unknown = [n for n in args.cores if n not in CORES]
    if unknown:
        parser.error(f"unknown core(s) {unknown}; valid cores: {', '.join(CORES.names())}")

    if args.out:  # a checkpoint of other settings stops the command before any core trains
        for name in args.cores:
            RunFiles(args.out, name, args).check()
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    flush = torch.set_flush_denormal(True)  # see the module docstring
    try:
        rows = []
        for name in args.cores:
            rows.append(train_core(name, args))
            if rows[-1]["stopped"]:  # Ctrl-C ends the run: the cores after it are not trained
                skipped = args.cores[len(rows):]
                if skipped:
                    print(f"[copying] not trained after Ctrl-C: {', '.join(skipped)}", flush=True)
                break
    finally:
        torch.set_num_threads(threads)  # main() is also called from tests
        if flush:
            torch.set_flush_denormal(False)
    print(f"\nCopying task: {args.steps} steps x batch {args.batch_size}, width {args.hidden}, "
          f"seed {args.seed}, {args.device}{' (--paper)' if args.paper else ''}; CE (nats) on "
          f"the last 10 steps, chance ln 8 = {math.log(8):.2f}; the train-length CE must be "
          f"near 0 before the test-length CE means anything")
    print(format_table(rows, args))
    return rows


if __name__ == "__main__":
    main()
