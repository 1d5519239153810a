"""Replay a gradient burst that a run kept (``learner.capture_grad_norm``).

A run with ``learner.capture_grad_norm: X`` keeps each optimizer step whose pre-clip gradient
norm exceeds ``X`` or is not finite, or whose loss is not finite, in
``<run>/bursts/update<U>-step<S>.pt`` (the first 10 of the run, resumes included): the
minibatch, its core state, the learner's weights and optimizer state before the step, and every
parameter's gradient norm (none for a non-finite loss). This script rebuilds the learner from
the file alone, recomputes the gradient and prints, largest first, each parameter's norm as
kept and as replayed, the loss's terms (which of them broke, for a non-finite loss), then the
agent's diagnostics on that minibatch (RIMs: how often each unit was active). The replay
matches the kept figures up to float rounding (more where the run's learner used mixed
precision on a GPU), so the file is enough to study what made the burst.

    python -m scripts.bench.burst runs/NAME/bursts/update00001234-step3.pt [--top 12]
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
from pathlib import Path


def replay(path: str | Path) -> tuple[dict, dict[str, float], dict[str, float], dict]:
    """``(capture, replayed norms, replayed loss terms, diagnostics)`` of one burst file, on CPU."""
    import torch

    from learners.config.schema import load_saved_config
    from learners.update.learner import Learner

    capture = torch.load(path, map_location="cpu", weights_only=True)
    cfg = load_saved_config(capture, ["learner.device=cpu"])
    threads = torch.get_num_threads()
    try:
        learner = Learner(cfg, capture["spec"], threads=1)
        norms, terms = learner.replay(capture)
    finally:
        torch.set_num_threads(threads)
    diagnostics = {k: v.reshape(-1).tolist() for k, v in learner.agent.diagnostics().items()}
    return capture, norms, terms, diagnostics


def main(argv: list[str] | None = None) -> int:
    """Print one burst's parameters, kept and replayed; 0 on success, 2 on a bad file."""
    p = argparse.ArgumentParser(prog="python -m scripts.bench.burst", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="a <run>/bursts/*.pt file")
    p.add_argument("--top", type=int, default=12, help="parameters to list (default 12)")
    args = p.parse_args(argv)
    if not Path(args.file).is_file():
        p.error(f"{args.file} is not a file; bursts are kept in <run>/bursts/*.pt")
    try:
        capture, norms, terms, diagnostics = replay(args.file)
    except (KeyError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
        # not a burst file, a torn one, or a config this version cannot load
        p.error(f"{args.file} is not a burst file mira wrote ({type(e).__name__}: {e})")
    total = sum(v * v for v in norms.values()) ** 0.5
    print(f"{args.file}: update {capture['update']} (optimizer step {capture['step']} of it), "
          f"{capture['frames']:,} frames, lr {capture['lr']:.3g}")
    if capture["grad_norms"]:
        print(f"pre-clip gradient norm {capture['grad_norm']:.4g} (learner.capture_grad_norm "
              f"{capture['threshold']:g}); replayed {total:.4g}")
    else:
        print("the loss was not finite, so the run computed no gradient; replayed gradient "
              f"norm {total:.4g}")
    print("loss terms, replayed: " + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    width = max((len(k) for k in norms), default=9)
    print(f"{'parameter':<{width}}  {'kept':>10}  {'replayed':>10}")
    # no gradient kept (a non-finite loss): the replayed norms, non-finite first, then largest
    kept = capture["grad_norms"] or dict.fromkeys(
        sorted(norms, key=lambda k: -norms[k] if math.isfinite(norms[k]) else -math.inf),
        float("nan"))
    for name, value in list(kept.items())[:args.top]:
        print(f"{name:<{width}}  {value:>10.4g}  {norms.get(name, float('nan')):>10.4g}")
    for name, values in diagnostics.items():
        print(f"{name}: " + " ".join(f"{v:.3f}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
