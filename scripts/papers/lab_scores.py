r"""Measure the lab30 score table: random and reference returns per level.

    python -m scripts.papers.lab_scores [--levels NAME ...] [--episodes 200] [--seed 0] \
        [--workers 2]

For every level, ``--episodes`` episodes of a uniformly random policy over the 7 actions
and as many of the level's reference solver (``envs.lab.experts``: BabyAIBot on the
BabyAI levels, a full-state BFS planner on the others). Episode ``i`` of both policies
starts from ``reset(seed=SEED + i)``; the random policy's actions come from
``numpy.random.default_rng([SEED, level index])``. Episodes run on the bare level
(``envs.lab.make_level``): mira's observation wrapper changes observations only, not
rewards or episode ends, and skipping its rendering makes the run faster.

Writes ``envs/data/lab30_scores.csv`` (level, dmlab_level, family, random, reference,
reference_solver, episodes, success_rate); with ``--levels``, only those rows change.
``success_rate`` is the fraction of reference episodes with a positive return.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

from envs.lab.experts import Expert
from envs.lab.levels import LAB30, LEVELS, make_level
from envs.lab.suite import SCORE_COLUMNS, SCORES_CSV

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "envs" / "data" / SCORES_CSV


def episode_returns(level: str, policy: str, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` episodes of ``policy`` ("random" or "reference") on ``level``."""
    env = make_level(level)
    rng = np.random.default_rng([seed, LAB30.index(level)])
    returns = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        expert = Expert(env, LEVELS[level].solver) if policy == "reference" else None
        total, done = 0.0, False
        while not done:
            action = expert.act() if expert is not None else int(rng.integers(env.action_space.n))
            _, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def measure(level: str, episodes: int, seed: int) -> dict[str, str]:
    """One row of the score table."""
    spec = LEVELS[level]
    random_returns = episode_returns(level, "random", episodes, seed)
    reference_returns = episode_returns(level, "reference", episodes, seed)
    return {
        "level": level,
        "dmlab_level": spec.dmlab,
        "family": spec.family,
        "random": f"{np.mean(random_returns):.4f}",
        "reference": f"{np.mean(reference_returns):.4f}",
        "reference_solver": spec.solver,
        "episodes": str(episodes),
        "success_rate": f"{np.mean(np.asarray(reference_returns) > 0):.3f}",
    }


def _measure(args: tuple[str, int, int]) -> tuple[dict[str, str], float]:
    start = time.perf_counter()
    row = measure(*args)
    return row, time.perf_counter() - start


def write_table(rows: dict[str, dict[str, str]], path: Path) -> None:
    """Write rows in level-table order."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=SCORE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for level in LAB30:
            if level in rows:
                writer.writerow(rows[level])


def read_table(path: Path) -> dict[str, dict[str, str]]:
    """The rows of the score CSV at ``path`` by level name; empty if there is no file yet."""
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {row["level"]: row for row in csv.DictReader(f)}


def main(argv: list[str] | None = None) -> int:
    """Measure the ``--levels`` and write the CSV after each one.

    Returns 1 (and names them on stderr) if the reference solver does not beat the random policy
    on some level of the table, else 0.
    """
    parser = argparse.ArgumentParser(prog="python -m scripts.papers.lab_scores",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", nargs="+", default=list(LAB30),
                        help="level names (default: all 30)")
    parser.add_argument("--episodes", type=int, default=200, help="episodes per policy and level")
    parser.add_argument("--seed", type=int, default=0,
                        help="episode i starts from reset(seed=SEED + i)")
    parser.add_argument("--workers", type=int, default=2,
                        help="processes measuring levels in parallel")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="CSV to write (rows of other levels are kept)")
    args = parser.parse_args(argv)

    unknown = [name for name in args.levels if name not in LEVELS]
    if unknown:
        parser.error(f"unknown levels {unknown}; valid levels: {', '.join(LAB30)}")
    rows = read_table(args.out)
    jobs = [(level, args.episodes, args.seed) for level in args.levels]
    start = time.perf_counter()
    print(f"measuring {len(jobs)} levels x {args.episodes} episodes x 2 policies "
          f"on {args.workers} workers", flush=True)
    if args.workers > 1:
        pool = multiprocessing.get_context("fork").Pool(args.workers)
        results = pool.imap_unordered(_measure, jobs)
    else:
        pool, results = None, map(_measure, jobs)
    for k, (row, seconds) in enumerate(results, 1):
        rows[row["level"]] = row
        write_table(rows, args.out)  # keep what is done if the run is cut short
        print(
            f"[{k:2d}/{len(jobs)}] {row['level']:28s} random {float(row['random']):8.3f}  "
            f"reference {float(row['reference']):8.3f} ({row['reference_solver']}, "
            f"success {float(row['success_rate']):.2f})  {seconds:6.1f}s",
            flush=True,
        )
    if pool is not None:
        pool.close()
        pool.join()
    bad = [r["level"] for r in rows.values() if float(r["reference"]) <= float(r["random"])]
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f}s", flush=True)
    if bad:
        print(f"reference <= random on: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
