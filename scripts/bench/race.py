"""Time to a score beside CleanRL: minutes and frames to a last-100 mean of +18 on Pong.

    python -m scripts.bench.race --cleanrl CLEANRL_RUN_DIR --mira MIRA_RUN_DIR [--target 18]

Reads both runs' TensorBoard files and prints one Markdown row per run: the training
minutes from its start to the first point where the mean of its last 100 whole-game returns
reaches ``--target``, the frames there, its last-100 mean at the end, its frames and its
frames/s; "not reached" where it does not. Both means are taken the same way: over the last
min(n, 100) games after each game (mira's ``episode_return_mean100``).

- CleanRL (``ppo_atari_envpool.py``): one ``charts/episodic_return`` point per game over all
  lives, at its global step (agent steps: x4 frames), with the wall time TensorBoard stamps;
  its start is the event file's first event, written when its ``SummaryWriter`` opens,
  before its envs are made. Its writer flushes every 2 minutes, so a run stopped by a
  signal may lack its last points; its end is then the last point written.
- mira: its ``episode_return_mean100`` curve, and its own ``wall_time_s`` at that point
  (training time, resumes included), as ``mira compare``'s threshold crossing.

``scripts/bench/race.sh`` runs the two back to back as ``docs/throughput.md`` declares.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FRAMES_PER_STEP = 4  # Atari frame skip: CleanRL counts agent steps, mira frames
CLEANRL_TAG = "charts/episodic_return"


def last100(returns: np.ndarray) -> np.ndarray:
    """The mean of the last min(n, 100) returns after each return."""
    csum = np.concatenate([[0.0], np.cumsum(returns, dtype=float)])
    n = np.arange(1, len(returns) + 1)
    lo = np.maximum(n - 100, 0)
    return (csum[n] - csum[lo]) / (n - lo)


def _accumulator(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not any(Path(run_dir).glob("*tfevents*")):
        raise SystemExit(f"race: no TensorBoard event file in {run_dir}")
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def cleanrl_row(run_dir: Path, target: float) -> dict:
    """The CleanRL run's figures (``row``'s keys) from its event files."""
    acc = _accumulator(run_dir)
    if CLEANRL_TAG not in acc.Tags().get("scalars", []):
        raise SystemExit(f"race: {run_dir} holds no {CLEANRL_TAG} (no game has ended)")
    events = acc.Scalars(CLEANRL_TAG)
    start = acc.FirstEventTimestamp()
    steps = np.array([e.step for e in events], dtype=float)
    walls = np.array([e.wall_time for e in events], dtype=float) - start
    means = last100(np.array([e.value for e in events], dtype=float))
    last_step = max(max(e.step for e in acc.Scalars(t)) for t in acc.Tags()["scalars"])
    last_wall = max(max(e.wall_time for e in acc.Scalars(t)) for t in acc.Tags()["scalars"])
    return _row("CleanRL ppo_atari_envpool", steps * FRAMES_PER_STEP, walls, means, target,
                last_step * FRAMES_PER_STEP, last_wall - start)


def mira_row(run_dir: Path, target: float) -> dict:
    """The mira run's figures from its event files and ``summary.json``."""
    acc = _accumulator(run_dir)
    tags = acc.Tags().get("scalars", [])
    if "episode_return_mean100" not in tags or "wall_time_s" not in tags:
        raise SystemExit(f"race: {run_dir} holds no episode_return_mean100 and wall_time_s "
                         "curves (is it a mira run directory?)")
    walls = {e.step: e.value for e in acc.Scalars("wall_time_s")}
    points = {e.step: e.value for e in acc.Scalars("episode_return_mean100")}
    frames = np.array(sorted(points), dtype=float)
    means = np.array([points[f] for f in sorted(points)], dtype=float)
    wall = np.array([walls.get(f, np.nan) for f in sorted(points)], dtype=float)
    summary_path = Path(run_dir) / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        end_frames, end_wall = summary["frames"], summary["wall_time_s"]
    else:  # still running: its last logged point
        end_frames = max(walls) if walls else 0
        end_wall = walls[max(walls)] if walls else float("nan")
    return _row("mira", frames, wall, means, target, end_frames, end_wall)


def _row(name, frames, walls, means, target, end_frames, end_wall) -> dict:
    hit = np.flatnonzero(means >= target)
    first = int(hit[0]) if len(hit) else None
    return {
        "run": name,
        "frames_to_target": None if first is None else int(frames[first]),
        "minutes_to_target": (None if first is None or not np.isfinite(walls[first])
                              else float(walls[first]) / 60),
        "final_mean100": float(means[-1]) if len(means) else None,
        "frames": int(end_frames),
        "fps": float(end_frames / end_wall) if end_wall and end_wall > 0 else None,
    }


def markdown(rows: list[dict], target: float) -> str:
    """The rows as a Markdown table."""
    lines = [f"| run | minutes to +{target:g} | frames there | last-100 at the end | frames | "
             "frames/s |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        reached = r["frames_to_target"] is not None
        minutes = (f"{r['minutes_to_target']:.1f}" if r["minutes_to_target"] is not None
                   else "n/a" if reached else "not reached")
        lines.append(
            f"| {r['run']} | {minutes} | "
            f"{'{:,}'.format(r['frames_to_target']) if reached else ''} | "
            f"{'' if r['final_mean100'] is None else format(r['final_mean100'], '+.2f')} | "
            f"{r['frames']:,} | {'' if r['fps'] is None else format(r['fps'], ',.0f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table for ``--cleanrl`` and/or ``--mira``; a wrong path is one line."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.race",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanrl", type=Path, help="CleanRL's runs/<run_name> directory")
    parser.add_argument("--mira", type=Path, help="a mira run directory")
    parser.add_argument("--target", type=float, default=18.0,
                        help="the last-100 mean to reach (default 18)")
    args = parser.parse_args(argv)
    if args.cleanrl is None and args.mira is None:
        parser.error("give --cleanrl, --mira or both")
    rows = []
    for path, reader in ((args.cleanrl, cleanrl_row), (args.mira, mira_row)):
        if path is None:
            continue
        if not path.is_dir():
            raise SystemExit(f"race: {path} is not a directory")
        rows.append(reader(path, args.target))
    print(markdown(rows, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
