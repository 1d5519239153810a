r"""``python -m scripts.papers.fixed_budget``: rule 2 of the torso fixes, from a compare's rows.

Rule 2 of docs/results/torso-health.md's candidate fixes ("no loss at a fixed budget"), as
``configs/studies/study_torso_blind_input_norm_budget.yaml`` declares it: per game, the fix's
mean last-100 training return at the budget is at least the shipped arm's mean minus one
standard deviation of the shipped arm's seeds (the sample standard deviation, n - 1), and no
seed of the fix is below the shipped arm's lowest (``--parts mean``: the mean part alone, as
``study_torso_blind_redo_budget.yaml`` declares it). The rule's third part, no declared pair
decided against the fix, is the compare report's plan section (``mira compare FILE
--report``); this reads the first two, and says whether the declared seeds can decide a pair
at all. Runs nothing.

Reads the study's compare file for its trials (every game x seed x arm it declares, and each
trial's budget, ``run.total_frames``) and the rows csv its compare writes (its ``csv.path``, or
``--rows``), each column found by what the file's ``csv.columns`` fills it with: the variant,
``env.game``, the seed, the status, the frames and ``train_return``. The arms are told apart by
two labels in the variants' names; the shipped arm's variant must keep the base config's
values. Rows of trials the file does not declare are left out; two rows of one trial are an
error. The comparisons are exact (the returns as the csv writes them, as fractions), so a tie
is read as a tie. The rule is read only when every declared trial of both arms has finished
at its budget; before that it prints the rows as they stand, a trial with no row as not
started, a failed one (diverged or crashed) as failed.

    python -m scripts.papers.fixed_budget \
        configs/studies/study_torso_blind_input_norm_budget.yaml \
        --paired input-norm-none input-norm-running
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

# what each column the tool reads is filled with, in a compare file's csv.columns
SOURCES = {"variant": "variant", "game": "env.game", "seed": "seed", "status": "status",
           "frames": "frames", "return": "train_return"}


def arm_of(variant: str, shipped: str, fix: str) -> str | None:
    """"shipped" or "fix" by the label the variant's name holds (the longer label first)."""
    for label, arm in sorted(((shipped, "shipped"), (fix, "fix")), key=lambda x: -len(x[0])):
        if label in variant:
            return arm
    return None


def column_names(columns: dict) -> dict[str, str]:
    """{what: csv column} for each of ``SOURCES`` from a compare file's ``csv.columns``."""
    by_source = {source: name for name, source in columns.items()}
    missing = [s for s in SOURCES.values() if s not in by_source]
    if missing:
        raise ValueError(f"csv.columns fills no column with {', '.join(missing)}")
    return {what: by_source[source] for what, source in SOURCES.items()}


def read(path: Path, shipped: str, fix: str, declared: list[tuple[str, int, str, float]],
         names: dict[str, str] | None = None) -> dict[str, dict[str, dict[int, tuple]]]:
    """{game: {"shipped"|"fix": {seed: (status, return or None)}}} from a compare's rows csv.

    ``declared``: (game, seed, variant, budget in frames) of every trial the study declares;
    only their rows are read, one with no row is ("not started", None), and a "finished" row
    short of its budget is "finished short". Returns are exact fractions of the csv's text.
    ``names``: the csv's column names (``column_names``; default: the study files' own).
    """
    names = names or {"variant": "variant", "game": "game", "seed": "seed", "status": "status",
                      "frames": "frames", "return": "final_return"}
    budget = {(g, s, v): f for g, s, v, f in declared}
    out: dict = defaultdict(lambda: {"shipped": {}, "fix": {}})
    seen = set()
    if path.is_file():
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                key = (row[names["game"]], int(row[names["seed"]]), row[names["variant"]])
                if key not in budget or (arm := arm_of(key[2], shipped, fix)) is None:
                    continue  # a trial the file does not declare
                if key in seen:
                    raise ValueError(f"two rows of {key[2]} seed {key[1]}")
                seen.add(key)
                status, value = row[names["status"]], row.get(names["return"]) or ""
                frames = row.get(names["frames"]) or ""
                if status == "finished" and (not frames or float(frames) < budget[key]):
                    status = "finished short"
                out[key[0]][arm][key[1]] = (status, Fraction(value) if value else None)
    for game, seed, variant, _ in declared:
        if (arm := arm_of(variant, shipped, fix)) is not None:
            out[game][arm].setdefault(seed, ("not started", None))
    return dict(out)


def _mean(xs: list[Fraction]) -> Fraction:
    return sum(xs, Fraction(0)) / len(xs)


def verdict(shipped: list, fix: list) -> dict:
    """The rule's two parts for one game's finished returns (at least two shipped seeds).

    Exact: ``fix mean >= mean - sd`` is read as ``mean - fix mean <= 0`` or
    ``(mean - fix mean)^2 <= variance``, so only the printed figures are rounded.
    """
    shipped, fix = [Fraction(x) for x in shipped], [Fraction(x) for x in fix]
    mean, fix_mean = _mean(shipped), _mean(fix)
    var = sum(((x - mean) ** 2 for x in shipped), Fraction(0)) / (len(shipped) - 1)
    gap = mean - fix_mean
    return {"shipped_mean": float(mean), "shipped_sd": float(var) ** 0.5,
            "shipped_low": float(min(shipped)), "fix_mean": float(fix_mean),
            "fix_low": float(min(fix)), "mean_holds": gap <= 0 or gap * gap <= var,
            "low_holds": min(fix) >= min(shipped)}


def _seeds(arm: dict[int, tuple]) -> str:
    """``3: 10.00 · 4: - (unfinished)``: an arm's seeds and returns, its status if not finished."""
    return " · ".join(f"{s}: {'-' if r is None else f'{float(r):.2f}'}"
                      + ("" if st == "finished" else f" ({st})")
                      for s, (st, r) in sorted(arm.items())) or "none"


PARTS = {"mean-lowest": ("mean", "lowest seed"), "mean": ("mean",)}


def report(games: dict, shipped: str, fix: str, pairs_note: str = "",
           parts: str = "mean-lowest") -> list[str]:
    """Markdown lines: per game the seeds of both arms, and the rule where every trial finished.

    ``pairs_note``: a sentence on what the declared pairs can decide, for the closing line;
    ``parts``: the parts the study file declares (``PARTS``): the mean and the lowest seed
    (the first fix's file), or the mean alone (both are printed either way).
    """
    read_parts = PARTS[parts]
    label = "first two parts" if parts == "mean-lowest" else "its mean part"
    lines = [f"| game | {shipped} (seeds: return) | {fix} (seeds: return) | shipped mean - sd; "
             f"fix mean | shipped lowest; fix lowest | rule 2 ({label}) |",
             "| --- | --- | --- | --- | --- | --- |"]
    holds_all, read_all, failed = True, True, []
    for game in sorted(games):
        arms = games[game]
        cell = {arm: _seeds(arms[arm]) for arm in ("shipped", "fix")}
        failed += [f"{game} {arm} seed {s}" for arm in ("shipped", "fix")
                   for s, (st, _) in sorted(arms[arm].items()) if st == "failed"]
        done = {arm: [r for st, r in arms[arm].values() if st == "finished" and r is not None]
                for arm in ("shipped", "fix")}
        complete = (all(st == "finished" and r is not None for a in ("shipped", "fix")
                        for st, r in arms[a].values())
                    and len(done["shipped"]) >= 2 and done["fix"]
                    and set(arms["shipped"]) == set(arms["fix"]))
        if not complete:
            read_all = False
            lines.append(f"| {game} | {cell['shipped']} | {cell['fix']} | | | not read: "
                         "a trial has not finished at its budget, or the arms' seeds differ |")
            continue
        v = verdict(done["shipped"], done["fix"])
        ok = {"mean": v["mean_holds"], "lowest seed": v["low_holds"]}
        holds = all(ok[part] for part in read_parts)
        holds_all &= holds
        lines.append(
            f"| {game} | {cell['shipped']} | {cell['fix']} | "
            f"{v['shipped_mean']:.2f} - {v['shipped_sd']:.2f} = "
            f"{v['shipped_mean'] - v['shipped_sd']:.2f}; {v['fix_mean']:.2f} | "
            f"{v['shipped_low']:.2f}; {v['fix_low']:.2f} | "
            + ("holds" if holds else "does not hold: " + ", ".join(
                part for part in read_parts if not ok[part])) + " |")
    lines.append("")
    if failed:
        lines.append(f"Failed (diverged or crashed): {', '.join(failed)}. The same command "
                     "reruns a failed trial from its last good weights.")
    if not read_all:
        lines.append("Rule 2 is not read yet: every declared trial of both arms must finish at "
                     "its budget first (the same command resumes unfinished trials and reruns "
                     "failed ones).")
    else:
        lines.append(((f"The {label} of rule 2 hold on every game" if parts == "mean-lowest"
                       else "Rule 2 (its mean part, as declared) holds on every game")
                      if holds_all else "Rule 2 does not hold (see the games above)")
                     + ("; its third part, no declared pair decided against the fix, is the "
                        "compare report's plan section." if parts == "mean-lowest" else "."))
    if pairs_note:
        lines.append(pairs_note)
    return lines


def pairs_note(plan, seeds: int) -> str:
    """What the declared pairs can decide with ``seeds`` paired seeds each."""
    if not plan.pairs:
        return "The file declares no pair."
    from scripts.compare import sequential as sq

    level = plan.alpha / len(plan.pairs)
    need = sq.seeds_needed(level)
    if seeds >= need:
        return ""
    return (f"With {seeds} paired seeds a pair (alpha {level:g} each) cannot be decided either "
            f"way ({need} needed), so the rule's third part cannot fail here.")


def _at(data: dict, key: str):
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def shipped_keeps_base(spec, trials, shipped: str, fix: str) -> str | None:
    """An error line if the shipped label's variant sets a key away from its base config."""
    from learners.config.schema import load_config, to_dict

    bases: dict = {}
    for t in trials:
        if arm_of(t.variant, shipped, fix) != "shipped":
            continue
        if t.base not in bases:
            bases[t.base] = to_dict(load_config(t.base))
        mine = to_dict(t.cfg)
        for key in t.settings:
            if key in spec.matrix or key == "base":
                continue
            if _at(mine, key) != _at(bases[t.base], key):
                return (f"{shipped} names the variant {t.variant}, which sets {key}="
                        f"{_at(mine, key)} where {Path(t.base).name} has "
                        f"{_at(bases[t.base], key)}: --paired takes the shipped arm's label first")
    return None


def main(argv: list[str] | None = None) -> int:
    """Print the table; 2 with a one-line error for a missing table or labels it lacks."""
    p = argparse.ArgumentParser(prog="python -m scripts.papers.fixed_budget",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="the study's compare file (its trials and its csv.path)")
    p.add_argument("--paired", nargs=2, metavar=("SHIPPED", "FIX"), required=True,
                   help="labels in the variants' names that tell the arms apart")
    p.add_argument("--rows", type=Path, help="the rows csv (default: the file's csv.path)")
    p.add_argument("--parts", choices=sorted(PARTS), default="mean-lowest",
                   help="the parts the file declares: the mean and the lowest seed (default), "
                        "or the mean alone")
    a = p.parse_args(argv)
    from learners.config.schema import ConfigError
    from scripts.compare.spec import load_spec

    try:
        spec, trials, _ = load_spec(a.study)
        names = column_names(spec.csv.columns)
    except (ConfigError, ValueError) as e:
        print(f"error: {a.study}: {e}", file=sys.stderr)
        return 2
    a.rows = a.rows or (Path(spec.csv.path) if spec.csv.path else None)
    if a.rows is None:
        print(f"error: {a.study} names no csv.path; give --rows", file=sys.stderr)
        return 2
    declared = [(getattr(t.cfg.env, "game", t.cfg.env.suite), t.seed, t.variant,
                 t.cfg.run.total_frames) for t in trials]
    try:
        games = read(a.rows, *a.paired, declared, names)
    except (KeyError, ValueError, ZeroDivisionError) as e:
        print(f"error: {a.rows} is not the rows csv {a.study} writes ({e})", file=sys.stderr)
        return 2
    missing = [label for label, arm in zip(a.paired, ("shipped", "fix"))
               if not any(g[arm] for g in games.values())]
    if missing:
        print(f"error: no variant of {a.study} holds {', '.join(missing)}; its variants: "
              f"{', '.join(sorted({t.variant for t in trials}))}", file=sys.stderr)
        return 2
    if problem := shipped_keeps_base(spec, trials, *a.paired):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    print("\n".join(report(games, *a.paired, pairs_note(spec.plan, len(spec.seeds)), a.parts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
