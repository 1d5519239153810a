r"""``python -m scripts.papers.fixed_budget``: rule 2 of the torso fixes, from a compare's rows.

Rule 2 of docs/results/torso-health.md's candidate fixes ("no loss at a fixed budget"), as
``configs/studies/study_torso_blind_input_norm_budget.yaml`` declares it: per game, the fix's
mean last-100 training return at the budget is at least the shipped arm's mean minus one
standard deviation of the shipped arm's seeds (the sample standard deviation, n - 1), and no
seed of the fix is below the shipped arm's lowest. The rule's third part, no declared pair
decided against the fix, is the compare report's plan section (``mira compare FILE
--report``); this reads the first two. Runs nothing.

Reads the study's compare file for its trials (every game x seed x arm it declares) and the
rows csv its compare writes (its ``csv.path``, or ``--rows``; columns ``variant, game, seed,
status, final_return``), the arms told apart by two labels in the variants' names. The rule is
read only when every declared trial of both arms has finished; before that it prints the rows
as they stand, a trial with no row as not started.

    python -m scripts.papers.fixed_budget \
        configs/studies/study_torso_blind_input_norm_budget.yaml \
        --paired input-norm-none input-norm-running
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def arm_of(variant: str, shipped: str, fix: str) -> str | None:
    """"shipped" or "fix" by the label the variant's name holds (the longer label first)."""
    for label, arm in sorted(((shipped, "shipped"), (fix, "fix")), key=lambda x: -len(x[0])):
        if label in variant:
            return arm
    return None


def read(path: Path, shipped: str, fix: str,
         declared: list[tuple[str, int, str]] = ()) -> dict[str, dict[str, dict[int, tuple]]]:
    """{game: {"shipped"|"fix": {seed: (status, return or None)}}} from a compare's rows csv.

    ``declared``: (game, seed, variant) of every trial the study declares; one with no row is
    ("not started", None).
    """
    out: dict = defaultdict(lambda: {"shipped": {}, "fix": {}})
    if path.is_file():
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if (arm := arm_of(row["variant"], shipped, fix)) is None:
                    continue
                value = row.get("final_return") or ""
                out[row["game"]][arm][int(row["seed"])] = (row["status"],
                                                           float(value) if value else None)
    for game, seed, variant in declared:
        if (arm := arm_of(variant, shipped, fix)) is not None:
            out[game][arm].setdefault(seed, ("not started", None))
    return dict(out)


def verdict(shipped: list[float], fix: list[float]) -> dict:
    """The rule's two parts for one game's finished returns (at least two shipped seeds)."""
    mean, sd, low = statistics.fmean(shipped), statistics.stdev(shipped), min(shipped)
    fix_mean = statistics.fmean(fix)
    return {"shipped_mean": mean, "shipped_sd": sd, "shipped_low": low, "fix_mean": fix_mean,
            "fix_low": min(fix), "mean_holds": fix_mean >= mean - sd,
            "low_holds": min(fix) >= low}


def _seeds(arm: dict[int, tuple]) -> str:
    """``3: 10.00 · 4: - (unfinished)``: an arm's seeds and returns, its status if not finished."""
    return " · ".join(f"{s}: {'-' if r is None else f'{r:.2f}'}"
                      + ("" if st == "finished" else f" ({st})")
                      for s, (st, r) in sorted(arm.items())) or "none"


def report(games: dict, shipped: str, fix: str) -> list[str]:
    """Markdown lines: per game the seeds of both arms, and the rule where every trial finished."""
    lines = [f"| game | {shipped} (seeds: return) | {fix} (seeds: return) | shipped mean - sd; "
             f"fix mean | shipped lowest; fix lowest | rule 2 (first two parts) |",
             "| --- | --- | --- | --- | --- | --- |"]
    holds_all, read_all = True, True
    for game in sorted(games):
        arms = games[game]
        cell = {arm: _seeds(arms[arm]) for arm in ("shipped", "fix")}

        done = {arm: [r for st, r in arms[arm].values() if st == "finished" and r is not None]
                for arm in ("shipped", "fix")}
        complete = (all(st == "finished" and r is not None for a in ("shipped", "fix")
                        for st, r in arms[a].values())
                    and len(done["shipped"]) >= 2 and done["fix"]
                    and set(arms["shipped"]) == set(arms["fix"]))
        if not complete:
            read_all = False
            lines.append(f"| {game} | {cell['shipped']} | {cell['fix']} | | | not read: "
                         "a trial has not finished, or the arms' seeds differ |")
            continue
        v = verdict(done["shipped"], done["fix"])
        holds = v["mean_holds"] and v["low_holds"]
        holds_all &= holds
        lines.append(
            f"| {game} | {cell['shipped']} | {cell['fix']} | "
            f"{v['shipped_mean']:.2f} - {v['shipped_sd']:.2f} = "
            f"{v['shipped_mean'] - v['shipped_sd']:.2f}; {v['fix_mean']:.2f} | "
            f"{v['shipped_low']:.2f}; {v['fix_low']:.2f} | "
            + ("holds" if holds else "does not hold: " + ", ".join(
                w for w, ok in (("mean", v["mean_holds"]), ("lowest seed", v["low_holds"]))
                if not ok)) + " |")
    lines.append("")
    if not read_all:
        lines.append("Rule 2 is not read yet: every declared trial of both arms must finish "
                     "first (the same command resumes unfinished trials and reruns failed ones).")
    else:
        lines.append(("The first two parts of rule 2 hold on every game" if holds_all else
                      "Rule 2 does not hold (see the games above)")
                     + "; its third part, no declared pair decided against the fix, is the "
                       "compare report's plan section.")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the table; 2 with a one-line error for a missing table or labels it lacks."""
    p = argparse.ArgumentParser(prog="python -m scripts.papers.fixed_budget",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="the study's compare file (its trials and its csv.path)")
    p.add_argument("--paired", nargs=2, metavar=("SHIPPED", "FIX"), required=True,
                   help="labels in the variants' names that tell the arms apart")
    p.add_argument("--rows", type=Path, help="the rows csv (default: the file's csv.path)")
    a = p.parse_args(argv)
    from learners.config.schema import ConfigError
    from scripts.compare.spec import load_spec

    try:
        spec, trials, _ = load_spec(a.study)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.rows = a.rows or (Path(spec.csv.path) if spec.csv.path else None)
    if a.rows is None:
        print(f"error: {a.study} names no csv.path; give --rows", file=sys.stderr)
        return 2
    declared = [(getattr(t.cfg.env, "game", t.cfg.env.suite), t.seed, t.variant) for t in trials]
    try:
        games = read(a.rows, *a.paired, declared)
    except (KeyError, ValueError) as e:
        print(f"error: {a.rows} is not a compare's rows csv with variant, game, seed, status "
              f"and final_return columns ({e})", file=sys.stderr)
        return 2
    missing = [label for label, arm in zip(a.paired, ("shipped", "fix"))
               if not any(g[arm] for g in games.values())]
    if missing:
        print(f"error: no variant of {a.study} holds {', '.join(missing)}; its variants: "
              f"{', '.join(sorted({t.variant for t in trials}))}", file=sys.stderr)
        return 2
    print("\n".join(report(games, *a.paired)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
