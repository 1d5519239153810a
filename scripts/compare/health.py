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
number twice. A trial whose torso went **blind** (its features off on every probe frame,
``learners/update/monitor.py``; its ``summary.json`` says from which frame) is named too.

For a core with a competition (RIMs log each unit's share of active steps,
``activation_frequency/<k>``), the **frozen** share is the share of logged updates at which
some unit was active on at most ``FROZEN`` of the steps: the competition has stopped
choosing it, and a swap of the unit left out can come with a burst.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scripts.compare import records
from scripts.compare.curves import family, learning_curve
from scripts.compare.trials import read_json

BURST = 10.0  # a logged update's pre-clip gradient norm over this many times the median
EDGE = 0.05  # share of logged updates whose entropy is averaged at the start and the end
FROZEN = 0.01  # a unit active on at most this share of an update's steps is frozen out


def summary(run_dir: Path) -> dict | None:
    """The trial's health from its kept record or its event files; None where neither has it.

    Keys: ``updates`` (logged), ``grad_norm_median``, ``grad_norm_max``, ``bursts``,
    ``first_burst_frames`` (None without bursts), ``skipped`` (non-finite updates skipped in
    all), ``entropy_first`` and ``entropy_last`` (None where no entropy was logged),
    ``frozen`` (share of logged updates with a unit frozen out; None for a core without a
    competition), ``blind`` (the torso monitor's verdict: ``frames``, ``layer``,
    ``inactive``, ``probes``, ``sees_again`` and ``spans``, ``[from, to or None]``; None
    where the run did not go blind or did not say).
    """
    if (kept := records.record(run_dir)) is not None:  # restored: no event files to read
        h = kept.get("health")
        if h is not None and "blind" not in h and (said := blind(run_dir)) is not None:
            h = {**h, "blind": said}  # kept before the monitor: its summary.json says
        return h
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
            "entropy_last": float(entropy[-edge:].mean()) if entropy.size else None,
            "frozen": frozen_share(run_dir), "blind": blind(run_dir)}


def blind(run_dir: Path) -> dict | None:
    """The blind verdict of the run's ``summary.json`` (``Trainer.train``), or None."""
    monitor = (read_json(Path(run_dir) / "summary.json") or {}).get("monitor") or {}
    if (said := monitor.get("blind")) is None:
        return None
    return {**said, "spans": monitor["spans"]} if "spans" in monitor else said


def frozen_share(run_dir: Path) -> float | None:
    """Share of the logged updates at which some unit's activation frequency is <= FROZEN.

    Counted over the frame counts every unit logged; None where the run logs no unit.
    """
    units = family(run_dir, "activation_frequency/")
    if not units:
        return None
    lowest: dict[float, float] = {}
    for frames, values in units.values():
        for f, v in zip(frames.tolist(), values.tolist()):
            lowest[f] = min(lowest.get(f, v), v)
    common = set.intersection(*(set(f.tolist()) for f, _ in units.values()))
    if not common:
        return None
    return sum(lowest[f] <= FROZEN for f in common) / len(common)


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}" if abs(x) < 1e4 else f"{x:.1e}"


def _frozen(hs: list[dict]) -> str:
    """A variant's frozen shares, one per trial in order, or a dash for a core without one."""
    shares = [h.get("frozen") for h in hs]
    return "—" if all(x is None for x in shares) else ", ".join(
        "—" if x is None else f"{x:.0%}" for x in shares)


def markdown(trials: list[dict], labels: dict[str, str]) -> list[str]:
    """The report's section: one row per variant, then each flagged trial by name.

    ``trials``: the report's trial rows, each with its ``health`` (``summary``) and
    ``variant``; ``labels``: variant -> its label in the report.
    """
    rows = [r for r in trials if r.get("health")]
    if not rows:
        return []
    comp = any(r["health"].get("frozen") is not None for r in rows)  # a core with a competition
    lines = ["", "## Training health", "",
             f"From each trial's logged learner updates: the pre-clip gradient norm (median; "
             f"largest), bursts (updates over {BURST:g}x the trial's median norm; every update is "
             f"clipped before the step), updates skipped as non-finite, and the policy's entropy "
             f"(nats) over the first and last {EDGE:.0%} of logged updates"
             + (f"; for cores with a competition, the share of logged updates at which some unit "
                f"was active on at most {FROZEN:.0%} of steps (frozen out)" if comp else "")
             + ". Trials rebuilt from the compare's table have no logs and are not counted.", "",
             "| variant | trials | median norm (range) | largest norm | trials with bursts | "
             "skipped updates | entropy first -> last (mean) |" + " frozen (per trial) |" * comp,
             "| --- | ---: | --- | ---: | ---: | ---: | --- |" + " --- |" * comp]
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
                     f"{entropy} |" + (f" {_frozen(hs)} |" if comp else ""))
    lines.append("")
    for r in rows:  # the torso monitor's verdict: the policy stopped reading the screen
        if b := r["health"].get("blind"):
            # spans: kept since the rule read every layer; a record from before says only when
            spans = ", ".join(f"{a:,} to " + (f"{z:,}" if z is not None else "the end")
                              for a, z in b.get("spans") or [])
            lines.append(f"- {r['trial']}: the torso went blind from {b['frames']:,} frames "
                         f"({b['inactive']:.0%} of its {b['layer']} units inactive on every "
                         f"probe frame, {b['probes']} probes in a row)"
                         + (f"; blind in frames {spans}." if spans else "."))
    flagged = [r for r in rows if r["health"]["bursts"] or r["health"]["skipped"]]
    if not flagged:
        return lines + ["No trial had a burst or a skipped update."]
    for r in flagged:
        h = r["health"]
        burst = (f"{h['bursts']:,} of {h['updates']:,} logged updates over {BURST:g}x its median "
                 f"norm {_num(h['grad_norm_median'])} (largest {_num(h['grad_norm_max'])}), the "
                 f"first at {h['first_burst_frames']:,} frames" if h["bursts"] else "no bursts")
        entropy = ("" if h["entropy_first"] is None
                   else f"; entropy {h['entropy_first']:.2f} -> {h['entropy_last']:.2f}")
        frozen = ("" if h.get("frozen") is None
                  else f"; a unit frozen out on {h['frozen']:.0%} of logged updates")
        lines.append(f"- {r['trial']}: {burst}; {h['skipped']} skipped{entropy}{frozen}.")
    return lines
