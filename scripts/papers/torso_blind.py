r"""``python -m scripts.papers.torso_blind``: the torso-blindness rule, read from the probes.

Reads the probe table a compare writes (``csv.probes``: ``variant, seed, frames, tag, value``,
the torso monitor's series; ``learner.monitor``), or the same series from run directories
(a ``mira train`` run's own, e.g. the study's long check, continued from a trial), and
applies the definitions that ``configs/studies/study_torso_blind_pilot.yaml`` and
``study_torso_blind.yaml`` fixed before their trials ran (docs/results/torso-health.md).
Runs nothing.

- A probe is **blind** when some torso layer is wholly inactive (``torso/<layer>/inactive``
  = 1) or at least ``--fc-share`` (0.8) of the fc units are inactive (``torso/fc/inactive``).
- A trial is **blind from** the first of ``--run`` (3) blind probes in a row and **sees
  again** at the first of ``--run`` probes in a row that are not blind; a trial can go blind
  and see again several times (its spans).
- ``--pilot``: the main study's budget F, the smallest of 1.0, 1.5, 2.0 and 2.5M frames
  such that no trial is blind at its last probe at or before F and later sees
  again within its frames (a span that holds that probe and ends after it); the largest
  candidate when none qualifies or no trial goes blind.
- ``--budget F``: per variant, the trials blind at their last probe at or before F, k of n,
  with a 95% Clopper-Pearson (exact binomial) interval, and the trials ever blind before F.
- ``--budget F --paired SHIPPED FIX``: also rule 1 of the candidate fixes (torso-health.md),
  over the seeds where exactly one arm is blind at F, the arms told apart by those labels in
  the variants' names; where the probes hold the features' signal into the core
  (``torso/<features>/signal``), each arm's at F on the seeds where only the shipped arm is
  blind, and on how many of them the fix's is higher.

It prints a markdown table per trial (its spans, and at its last probe the fc share inactive
and the policy's spread) and the rule's outcome.

    python -m scripts.papers.torso_blind \
        docs/results/data/study_torso_blind_pilot_probes.csv --pilot
    python -m scripts.papers.torso_blind \
        docs/results/data/study_torso_blind_probes.csv --budget 2.5e6
    python -m scripts.papers.torso_blind runs/torso_blind_long/* --budget 6e6
    python -m scripts.papers.torso_blind \
        docs/results/data/study_torso_blind_input_norm_probes.csv --budget 2.5e6 \
        --paired input-norm-none input-norm-running
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

from learners.update.monitor import blind_layer

FC = "torso/fc/inactive"
SPREAD = "policy/spread"
CANDIDATES = (1.0e6, 1.5e6, 2.0e6, 2.5e6)


@dataclass
class Trial:
    """One trial's probes: ``frames`` ascending, each with its ``{tag: value}``."""

    variant: str
    seed: int
    probes: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def frames(self) -> list[int]:
        """The probes' frames, ascending."""
        return sorted(self.probes)

    def last_at(self, budget: float) -> int | None:
        """The frames of the last probe at or before ``budget``; None when there is none."""
        before = [f for f in self.frames if f <= budget]
        return before[-1] if before else None


def probed(tag: str) -> bool:
    """Whether ``tag`` is one of the monitor's probes.

    A table may also hold ReDo's counts (``redo/<layer>``), logged at frames of their own.
    """
    return tag.startswith("torso/") or tag == SPREAD


def read(path: Path) -> list[Trial]:
    """The probe table at ``path`` as trials, in the order they first appear."""
    trials: dict[tuple[str, int], Trial] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if not probed(row["tag"]):
                continue
            key = (row["variant"], int(row["seed"]))
            trial = trials.setdefault(key, Trial(*key))
            trial.probes.setdefault(int(row["frames"]), {})[row["tag"]] = float(row["value"])
    return list(trials.values())


def read_runs(dirs: list[Path]) -> list[Trial]:
    """The torso monitor's series of the run directories ``dirs`` as trials.

    A trial's variant is its directory's name without a trailing ``-seed<N>`` (a compare's
    trial names end so), its seed the run's ``run.seed``.
    """
    import yaml

    from scripts.compare.curves import probes

    trials = []
    for d in dirs:
        seed = int(yaml.safe_load((d / "config.yaml").read_text())["run"]["seed"])
        trial = Trial(re.sub(r"-seed\d+$", "", d.name), seed)
        for tag, (frames, values) in probes(d).items():
            for f, v in zip(frames, values) if probed(tag) else ():
                trial.probes.setdefault(int(f), {})[tag] = float(v)
        trials.append(trial)
    return trials


def is_blind(probe: dict[str, float], fc_share: float = 0.8) -> bool:
    """Whether one probe is blind: a wholly inactive layer, or the features at ``fc_share``.

    The run's own rule, ``learners.update.monitor.blind_layer``, with the features named: a
    table's tags are sorted, not in the torso's order.
    """
    return blind_layer(probe, fc_share, features="fc") is not None


def spans(trial: Trial, run: int = 3, fc_share: float = 0.8) -> list[tuple[int, int | None]]:
    """``[(blind_from, sees_again or None), ...]``: the trial's blind spans, in order.

    Blind from the first of ``run`` blind probes in a row; sees again at the first of ``run``
    probes in a row that are not blind (None: not within its probes).
    """
    frames = trial.frames
    flags = [is_blind(trial.probes[f], fc_share) for f in frames]
    out: list[tuple[int, int | None]] = []
    blind_since, i = None, 0
    while i + run <= len(flags):
        window = flags[i:i + run]
        if blind_since is None and all(window):
            blind_since = frames[i]
            i += run
            continue
        if blind_since is not None and not any(window):
            out.append((blind_since, frames[i]))
            blind_since = None
            i += run
            continue
        i += 1
    if blind_since is not None:
        out.append((blind_since, None))
    return out


def blind_at(trial: Trial, budget: float, run: int = 3,
             fc_share: float = 0.8) -> tuple[int, int | None] | None:
    """The span that holds the trial's last probe at or before ``budget``; None if none does."""
    last = trial.last_at(budget)
    if last is None:
        return None
    for start, end in spans(trial, run, fc_share):
        if start <= last and (end is None or end > last):
            return start, end
    return None


def pilot_budget(trials: list[Trial], candidates=CANDIDATES, run: int = 3,
                 fc_share: float = 0.8) -> tuple[float, dict[float, list[str]]]:
    """``(F, why)``: the pilot's rule (module docstring).

    ``why[candidate]`` names the trials blind at that candidate that saw again later. When no
    trial goes blind at all, F is the largest candidate (the rule's "none goes blind").
    """
    why: dict[float, list[str]] = {}
    if not any(spans(t, run, fc_share) for t in trials):
        return candidates[-1], why
    for budget in candidates:
        why[budget] = [f"{t.variant} seed {t.seed}" for t in trials
                       if (span := blind_at(t, budget, run, fc_share)) and span[1] is not None]
        if not why[budget]:
            return budget, why
    return candidates[-1], why


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """The 95% Clopper-Pearson interval of ``k`` successes in ``n`` trials."""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def trial_table(trials: list[Trial], run: int, fc_share: float) -> list[str]:
    """Markdown rows: each trial's spans and its last probe."""
    lines = ["| variant | seed | probes | last probe (frames) | fc inactive | policy spread "
             "| blind spans (from - sees again) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for t in trials:
        last = t.frames[-1]
        probe = t.probes[last]
        shown = ", ".join(f"{a:,} - {'' if b is None else f'{b:,}'}"
                          for a, b in spans(t, run, fc_share)) or "never blind"
        lines.append(f"| {t.variant} | {t.seed} | {len(t.frames)} | {last:,} "
                     f"| {probe.get(FC, float('nan')):.3f} | {probe.get(SPREAD, float('nan')):.4f} "
                     f"| {shown} |")
    return lines


def _short(t: Trial, budget: float) -> bool:
    """Whether the trial stopped short of ``budget`` (a probe due by then is missing).

    Its probes' own spacing says which probe was due; the last one at or before ``budget``
    is the budget's.
    """
    step = float(np.median(np.diff(t.frames))) if len(t.frames) > 1 else 0.0
    return t.frames[-1] + step <= budget


def budget_table(trials: list[Trial], budget: float, run: int, fc_share: float) -> list[str]:
    """Markdown rows per variant: blind at ``budget`` k of n with its interval, ever blind."""
    by: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        by[t.variant].append(t)
    lines = [f"| variant | blind at {budget:,.0f} frames | 95% Clopper-Pearson | ever blind "
             "before | short of the budget |", "| --- | ---: | --- | ---: | --- |"]
    for variant, group in by.items():
        k = sum(blind_at(t, budget, run, fc_share) is not None for t in group)
        ever = sum(any(a <= budget for a, _ in spans(t, run, fc_share)) for t in group)
        low, high = clopper_pearson(k, len(group))
        short = ", ".join(f"seed {t.seed} ({t.frames[-1]:,})" for t in group
                          if _short(t, budget)) or "none"
        lines.append(f"| {variant} | {k} of {len(group)} | [{low:.3f}, {high:.3f}] "
                     f"| {ever} of {len(group)} | {short} |")
    return lines


def paired_table(trials: list[Trial], budget: float, shipped: str, fix: str, run: int,
                 fc_share: float) -> list[str]:
    """Rule 1 of the candidate fixes: the seeds where exactly one arm is blind at ``budget``.

    The arms are the variants whose names hold ``shipped`` or ``fix`` (the matrix value in a
    compare's trial names, e.g. ``input-norm-none``); a cell is a variant's name without it,
    and a seed is paired when both arms of its cell ran it. Over the cells, the fix has fewer
    blind trials if the 95% Clopper-Pearson interval of the share of the discordant seeds
    where only the shipped arm is blind lies above 1/2 (McNemar's exact test).
    """
    arms: dict[tuple[str, int], dict[str, bool]] = defaultdict(dict)
    signals: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for t in trials:
        for arm, label in (("shipped", shipped), ("fix", fix)):
            if label in t.variant:
                cell = t.variant.replace(label, "").strip("_-")
                arms[(cell, t.seed)][arm] = blind_at(t, budget, run, fc_share) is not None
                if (value := signal_at(t, budget)) is not None:
                    signals[(cell, t.seed)][arm] = value
    cells: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for (cell, _), both in arms.items():
        row = cells[cell]
        if len(both) < 2:
            row[4] += 1
            continue
        row[[(True, False), (False, True), (True, True), (False, False)].index(
            (both["shipped"], both["fix"]))] += 1
    lines = [f"| cell | blind at {budget:,.0f}: {shipped} only | {fix} only | both | neither "
             "| unpaired |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {cell} | " + " | ".join(map(str, row)) + " |" for cell, row in cells.items()]
    k = sum(row[0] for row in cells.values())
    n = k + sum(row[1] for row in cells.values())
    lines.append("")
    if n == 0:
        return lines + ["No seed has exactly one arm blind: rule 1 does not hold (the fix "
                        "does not have fewer blind trials)."]
    low, high = clopper_pearson(k, n)
    p = binomtest(k, n, 0.5).pvalue
    verdict = ("holds: the fix has fewer blind trials" if low > 0.5 else
               "does not hold: the interval does not lie above 1/2")
    lines.append(f"Seeds with exactly one arm blind: {n}; only {shipped} blind on {k} of them, "
                 f"95% Clopper-Pearson [{low:.3f}, {high:.3f}], McNemar's exact p = {p:.3g}. "
                 f"Rule 1 {verdict}.")
    return lines + signal_lines(arms, signals, shipped, fix)


def signal_at(trial: Trial, budget: float) -> float | None:
    """The features' signal into the core (``torso/<features>/signal``) at ``budget``.

    At the trial's last probe at or before it; None where its probes do not hold it.
    """
    last = trial.last_at(budget)
    probe = trial.probes.get(last, {}) if last is not None else {}
    found = [v for tag, v in probe.items() if tag.endswith("/signal")]
    return found[0] if found else None


def signal_lines(arms, signals, shipped: str, fix: str) -> list[str]:
    """Each arm's signal on the seeds where only the shipped arm is blind, and the fix's lead.

    A fix that revives units the core does not read lowers the blind count without raising
    the signal. Nothing where the probes hold no signal.
    """
    seeds = [key for key, both in arms.items()
             if both.get("shipped") is True and both.get("fix") is False]
    if not signals or not seeds:
        return []
    lines = ["", f"| cell | seed | signal into the core at F: {shipped} | {fix} |",
             "| --- | ---: | ---: | ---: |"]
    higher = 0
    for cell, seed in sorted(seeds):
        got = signals.get((cell, seed), {})
        a, b = got.get("shipped"), got.get("fix")
        higher += a is not None and b is not None and b > a
        lines.append(f"| {cell} | {seed} | " + " | ".join(
            "missing" if v is None else f"{v:.4g}" for v in (a, b)) + " |")
    return lines + ["", f"On the {len(seeds)} seeds where only {shipped} is blind, {fix}'s "
                        f"signal into the core is higher on {higher}."]


def main(argv: list[str] | None = None) -> int:
    """Print the tables; 2 with a one-line error for a missing or empty table."""
    p = argparse.ArgumentParser(prog="python -m scripts.papers.torso_blind",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("probes", type=Path, nargs="+",
                   help="a compare's probe table (csv.probes), or run directories")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--pilot", action="store_true", help="apply the pilot's rule for F")
    mode.add_argument("--budget", type=float, help="blind trials at F frames per variant")
    p.add_argument("--paired", nargs=2, metavar=("SHIPPED", "FIX"),
                   help="with --budget: rule 1 of the fixes, between the variants whose names "
                        "hold these two labels (e.g. input-norm-none input-norm-running)")
    p.add_argument("--run", type=int, default=3, help="probes in a row that start or end a span")
    p.add_argument("--fc-share", type=float, default=0.8, help="fc share inactive that is blind")
    a = p.parse_args(argv)
    if a.paired and not a.budget:
        p.error("--paired needs --budget F")
    if a.budget is not None and not (a.budget > 0 and math.isfinite(a.budget)):
        p.error(f"--budget must be a positive number of frames, got {a.budget:g}")
    if a.run < 1:
        p.error(f"--run must be at least 1, got {a.run}")
    if not 0 < a.fc_share <= 1:
        p.error(f"--fc-share must be in (0, 1], got {a.fc_share:g}")
    dirs = [d for d in a.probes if d.is_dir()]
    if dirs:
        missing = [str(d) for d in a.probes if not (d / "config.yaml").is_file()]
        if missing:
            print(f"error: not run directories (no config.yaml): {', '.join(missing)}",
                  file=sys.stderr)
            return 2
        trials = read_runs(dirs)
    else:
        if len(a.probes) > 1 or not a.probes[0].is_file():
            print(f"error: no probe table at {a.probes[0]} (mira compare FILE --report writes "
                  "it); give one table or run directories", file=sys.stderr)
            return 2
        trials = read(a.probes[0])
    if not any(t.probes for t in trials):
        print(f"error: {' '.join(map(str, a.probes))} holds no probes yet", file=sys.stderr)
        return 2
    if a.paired:  # checked before any table is printed
        names = sorted({t.variant for t in trials})
        missing = [label for label in a.paired if not any(label in n for n in names)]
        if missing:
            print(f"error: no variant's name holds {', '.join(missing)}; the variants: "
                  f"{', '.join(names)}", file=sys.stderr)
            return 2
    print("\n".join(trial_table(trials, a.run, a.fc_share)))
    if a.pilot:
        budget, why = pilot_budget(trials, run=a.run, fc_share=a.fc_share)
        print()
        if not why:
            print("- no trial went blind")
        for candidate, names in why.items():
            print(f"- {candidate:,.0f}: " + (f"blind there and saw again later: {', '.join(names)}"
                                             if names else "no trial blind there saw again"))
        print(f"\nF = {budget:,.0f} frames")
    if a.budget:
        print()
        print("\n".join(budget_table(trials, a.budget, a.run, a.fc_share)))
    if a.paired:
        print()
        print("\n".join(paired_table(trials, a.budget, *a.paired, a.run, a.fc_share)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
