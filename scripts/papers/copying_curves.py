"""The copying study's curves, joined and read (``python -m scripts.papers.copying --join``).

Each run of ``scripts/papers/copying.py --out DIR`` keeps a curve ``DIR/<core>-seed<S>.csv``:
every ``--eval-every`` steps, the CE and accuracy of the last 10 steps on fresh sequences at
the training and the test dormant length. ``write_joined`` puts every curve in one csv and
prints the declared result (``learnt_at``): the first evaluated step at which every LSTM seed
is under 0.1 at the training length, each core's CE at both lengths there, and the same at
the last step every run reached.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

CURVE_COLUMNS = ("step", "seconds", "ce_train_length", "acc_train_length", "ce_test_length",
                 "acc_test_length")
CURVE_NAME = re.compile(r"(.+)-seed(\d+)")


def join_curves(out: str | Path) -> list[dict]:
    """Every ``<core>-seed<S>.csv`` curve under ``out`` as rows with ``core`` and ``seed`` first.

    Other files are left out with a note; so is a row with an empty field (a line cut short by
    a killed run).
    """
    rows = []
    for path in sorted(Path(out).glob("*.csv")):
        name = CURVE_NAME.fullmatch(path.stem)
        if name is None:
            print(f"[copying] --join: {path.name} is not a <core>-seed<S>.csv curve; left out")
            continue
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                if any(r.get(k) in (None, "") for k in CURVE_COLUMNS):
                    print(f"[copying] --join: {path.name}: an incomplete row left out: {r}")
                    continue
                rows.append({"core": name[1], "seed": int(name[2]),
                             **{k: float(r[k]) for k in CURVE_COLUMNS}})
    for r in rows:
        r["step"] = int(r["step"])
    return sorted(rows, key=lambda r: (r["core"], r["seed"], r["step"]))


def learnt_at(rows: list[dict], reference: str = "lstm", below: float = 0.1) -> str:
    """The copying study's result from joined curves, as markdown.

    First each run's last evaluated step, so a missing or unfinished run shows. Then the first
    evaluated step at which every seed of ``reference`` has a train-length CE under
    ``below``, and each core's CE at both lengths there (mean and range over the seeds
    evaluated at that step); then the same at the last step every run reached.
    """
    at = {(r["core"], r["seed"], r["step"]): r for r in rows}
    cores = sorted({r["core"] for r in rows})
    seeds = {c: sorted({r["seed"] for r in rows if r["core"] == c}) for c in cores}
    steps = sorted({r["step"] for r in rows})
    if reference not in cores:
        return f"no {reference} curve under this directory"
    reached = {(c, seed): max(r["step"] for r in rows if (r["core"], r["seed"]) == (c, seed))
               for c in cores for seed in seeds[c]}
    lines = ["| core | seed | last evaluated step |", "| --- | ---: | ---: |"]
    lines += [f"| {c} | {seed} | {step:,} |" for (c, seed), step in reached.items()]
    lines.append("")
    last = max((s for s in steps if all((c, seed, s) in at for c in cores for seed in seeds[c])),
               default=None)
    learnt = next((s for s in steps if all(
        (reference, seed, s) in at and at[reference, seed, s]["ce_train_length"] < below
        for seed in seeds[reference])), None)

    def table(step: int, what: str) -> list[str]:
        out = [f"**{what}: step {step:,}**", "",
               "| core | seeds | CE train length, mean [min, max] "
               "| CE test length, mean [min, max] |",
               "| --- | --- | ---: | ---: |"]
        for c in cores:
            got = [at[c, seed, step] for seed in seeds[c] if (c, seed, step) in at]
            if not got:
                out.append(f"| {c} | none evaluated at this step | | |")
                continue
            cells = []
            for key in ("ce_train_length", "ce_test_length"):
                v = [g[key] for g in got]
                cells.append(f"{sum(v) / len(v):.3f} [{min(v):.3f}, {max(v):.3f}]")
            out.append(f"| {c} | {', '.join(str(g['seed']) for g in got)} | {' | '.join(cells)} |")
        return out + [""]

    if learnt is None:
        lines += [f"The {reference} never had a train-length CE under {below} on every seed "
                  f"({', '.join(map(str, seeds[reference]))}) at one evaluated step, so the "
                  "test-length column is not a generalisation result.", ""]
    else:
        lines += table(learnt, f"first step where every {reference} seed is under {below} at "
                               "the train length")
    if last is None:
        lines.append("No step was evaluated in every run: compare the runs at their own "
                     "last steps above.")
    else:
        lines += table(last, "last step every run reached")
    return "\n".join(lines)


def write_joined(out: str | Path, path: str | Path) -> list[dict]:
    """Join ``out``'s curves into the csv ``path`` and print the study's result; the rows."""
    rows = join_curves(out)
    if not rows:
        raise SystemExit(f"copying: --join: no <core>-seed<S>.csv curve in {out} "
                         "(a run writes one at its first evaluation)")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["core", "seed", *CURVE_COLUMNS])
        w.writeheader()
        w.writerows(rows)
    print(f"[copying] {len(rows)} points of {len({(r['core'], r['seed']) for r in rows})} "
          f"run(s) -> {path}\n")
    print(learnt_at(rows))
    return rows
