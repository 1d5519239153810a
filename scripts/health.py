"""A compare's training health: did a trial's updates blow up, did its policy stay uniform?

A variant can lose a comparison because its trials failed to train rather than because it
is worse once trained. The report's "Training health" section reads, for each trial, the
learner's logged updates (``records.HEALTH_TAGS``): the pre-clip gradient norm, the updates
skipped as non-finite (a running total), and the policy's entropy. A **burst** is a logged
update whose pre-clip norm is over ``BURST`` times the trial's median; the learner clips
every gradient to ``learner.optimizer.max_grad_norm`` before the optimizer sees it, so a
burst's size does not reach the weights, but its direction, set by whatever blew up, does.
Trials with bursts or skipped updates are listed by name; entropy is shown over the first
and the last 5% of logged updates, so a policy that never left uniform shows the same
number twice.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scripts import records
from scripts.curves import learning_curve

BURST = 10.0  # a logged update's pre-clip gradient norm over this many times the median
EDGE = 0.05  # share of logged updates whose entropy is averaged at the start and the end


def summary(run_dir: Path) -> dict | None:
    """The trial's health from its kept record or its event files; None where neither has it.

    Keys: ``updates`` (logged), ``grad_norm_median``, ``grad_norm_max``, ``bursts``,
    ``first_burst_frames`` (None without bursts), ``skipped`` (non-finite updates skipped in
    all), ``entropy_first`` and ``entropy_last`` (None where no entropy was logged).
    """
    if (kept := records.record(run_dir)) is not None:  # restored: no event files to read
        return kept.get("health")
    frames, norms = learning_curve(run_dir, "grad_norm")
    if not norms.size:
        return None
    median = float(np.median(norms))
    burst = norms > BURST * median
    entropy = learning_curve(run_dir, "entropy")[1]
    skipped = learning_curve(run_dir, "skipped_updates")[1]
    edge = max(1, int(EDGE * entropy.size))
    return {"updates": int(norms.size), "grad_norm_median": median,
            "grad_norm_max": float(norms.max()), "bursts": int(burst.sum()),
            "first_burst_frames": int(frames[burst][0]) if burst.any() else None,
            "skipped": int(skipped.max()) if skipped.size else 0,
            "entropy_first": float(entropy[:edge].mean()) if entropy.size else None,
            "entropy_last": float(entropy[-edge:].mean()) if entropy.size else None}


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}" if abs(x) < 1e4 else f"{x:.1e}"


def markdown(trials: list[dict], labels: dict[str, str]) -> list[str]:
    """The report's section: one row per variant, then each flagged trial by name.

    ``trials``: the report's trial rows, each with its ``health`` (``summary``) and
    ``variant``; ``labels``: variant -> its label in the report.
    """
    rows = [r for r in trials if r.get("health")]
    if not rows:
        return []
    lines = ["", "## Training health", "",
             f"From each trial's logged learner updates: the pre-clip gradient norm (median; "
             f"largest), bursts (updates over {BURST:g}x the trial's median norm; every update is "
             f"clipped before the step), updates skipped as non-finite, and the policy's entropy "
             f"(nats) over the first and last {EDGE:.0%} of logged updates. Trials rebuilt from "
             "the compare's table have no logs and are not counted.", "",
             "| variant | trials | median norm (range) | largest norm | trials with bursts | "
             "skipped updates | entropy first -> last (mean) |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    by_variant: dict[str, list[dict]] = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(r["health"])
    for variant, hs in by_variant.items():
        medians = [h["grad_norm_median"] for h in hs]
        first = [h["entropy_first"] for h in hs if h["entropy_first"] is not None]
        last = [h["entropy_last"] for h in hs if h["entropy_last"] is not None]
        entropy = (f"{np.mean(first):.2f} -> {np.mean(last):.2f}" if first and last else "—")
        median = float(np.median(medians))
        lines.append(f"| {labels.get(variant, variant)} | {len(hs)} | {_num(median)}"
                     f" ({_num(min(medians))}-{_num(max(medians))}) | "
                     f"{_num(max(h['grad_norm_max'] for h in hs))} | "
                     f"{sum(h['bursts'] > 0 for h in hs)} | {sum(h['skipped'] for h in hs)} | "
                     f"{entropy} |")
    flagged = [r for r in rows if r["health"]["bursts"] or r["health"]["skipped"]]
    lines.append("")
    if not flagged:
        return lines + ["No trial had a burst or a skipped update."]
    for r in flagged:
        h = r["health"]
        burst = (f"{h['bursts']:,} of {h['updates']:,} logged updates over {BURST:g}x its median "
                 f"norm {_num(h['grad_norm_median'])} (largest {_num(h['grad_norm_max'])}), the "
                 f"first at {h['first_burst_frames']:,} frames" if h["bursts"] else "no bursts")
        entropy = ("" if h["entropy_first"] is None
                   else f"; entropy {h['entropy_first']:.2f} -> {h['entropy_last']:.2f}")
        lines.append(f"- {r['trial']}: {burst}; {h['skipped']} skipped{entropy}.")
    return lines
