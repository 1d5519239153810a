"""What a run reports: episode statistics, TensorBoard scalars and the progress line."""

from __future__ import annotations

import collections
import math
import sys

import numpy as np

from envs.statistics import capped_mean

# Scalars measured on the wall clock: the only ones whose values a replay (run.deterministic)
# does not repeat; it logs them at the same steps as the rest.
CLOCK_SCALARS = ("fps", "wall_time_s", "learner_queue_wait_s", "runner_rollout_s", "update_s",
                 "batch_s")


def log_every_updates(run_cfg) -> int:
    """Updates between two logs of a replayable run: ``run.log_every_s``, rounded up.

    ``run_cfg``: the ``run`` section. A replay (``run.deterministic``) cannot log on the
    clock and repeat its event files, so it reads the interval as a count of updates.
    """
    return max(1, math.ceil(run_cfg.log_every_s))


def duration(seconds: float) -> str:
    """``seconds`` for a person: "95 s", "12.5 min" or "2.1 h"."""
    return (f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200
            else f"{seconds / 3600:.1f} h")


class EpisodeStats:
    """Returns and lengths of finished episodes: the last ``window`` overall and per task."""

    def __init__(self, tasks: list[str], window: int = 100):
        self.tasks = tasks
        self.returns = collections.deque(maxlen=window)
        self.per_task = {t: collections.deque(maxlen=window) for t in range(len(tasks))}
        self.count = 0
        self.fresh: list[tuple[int, float, int]] = []  # since the last TensorBoard flush

    def add(self, episodes: list[tuple[int, float, int]]) -> None:
        """Record finished episodes, each ``(task index, return, length)``."""
        for task, ret, length in episodes:
            self.returns.append(ret)
            self.per_task[task].append((ret, length))
            self.count += 1
            self.fresh.append((task, ret, length))

    def mean_return(self) -> float | None:
        """The mean return of the last ``window`` episodes of all tasks; None before the first."""
        return float(np.mean(self.returns)) if self.returns else None

    def task_means(self) -> dict[str, float]:
        """Task name -> mean return of its last ``window`` episodes (tasks with none left out)."""
        return {self.tasks[t]: float(np.mean([r for r, _ in d]))
                for t, d in self.per_task.items() if d}

    def state_dict(self) -> dict:
        """The windows and the episode count as plain lists and numbers, for a checkpoint."""
        return {"returns": list(self.returns), "count": self.count,
                "per_task": {str(t): [list(x) for x in d] for t, d in self.per_task.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()``'s windows and count (tasks this run lacks are skipped)."""
        self.returns.extend(state["returns"])
        self.count = int(state["count"])
        for t, items in state["per_task"].items():
            if int(t) in self.per_task:
                self.per_task[int(t)].extend(tuple(x) for x in items)


class Logbook:
    """TensorBoard writer plus a one-line progress display."""

    def __init__(self, log_dir, tasks: list[str], total_frames: int, quiet: bool = False,
                 score_suite: str = "none", resumed_at: int | None = None):
        """``resumed_at``: the frames of the checkpoint a resumed run starts from.

        An earlier start may have logged past that checkpoint before it was killed (a second
        Ctrl-C, a lost worker, a killed process). Those points belong to a trajectory the
        resumed run does not continue, so this start's file begins with TensorBoard's purge
        marker: readers (TensorBoard, ``scripts/compare/curves.py``) drop every earlier point after
        the checkpoint's frames.
        """
        from torch.utils.tensorboard import SummaryWriter

        from envs import scores

        # Normalised scores (human- or reference-normalised) where the suite has a table.
        self.normalize = None
        if score_suite != "none" and scores.has_reference_scores(score_suite):
            self.normalize = lambda task, ret: scores.normalized_score(score_suite, task, ret)

        self.writer = SummaryWriter(str(log_dir),
                                    purge_step=None if resumed_at is None else resumed_at + 1)
        self.tasks = tasks
        self.total_frames = total_frames
        self.quiet = quiet

    def scalars(self, values: dict[str, float], frames: int, prefix: str = "") -> None:
        """Write every finite value as TensorBoard scalar ``prefix + key`` at step ``frames``."""
        for k, v in values.items():
            if v is not None and np.isfinite(v):
                self.writer.add_scalar(f"{prefix}{k}", v, frames)

    def episodes(self, stats: EpisodeStats, frames: int) -> None:
        """Write the episodes finished since the last call and the running means to TensorBoard."""
        for task, ret, length in stats.fresh:
            name = self.tasks[task]  # the level or game, also for a single-task run
            self.writer.add_scalar(f"episode_return/{name}", ret, frames)
            self.writer.add_scalar(f"episode_length/{name}", length, frames)
            if self.normalize is not None:
                self.writer.add_scalar(f"episode_normalized_score/{name}",
                                       self.normalize(self.tasks[task], ret), frames)
        stats.fresh.clear()
        if stats.returns:
            self.writer.add_scalar("episode_return_mean100", stats.mean_return(), frames)
        if self.normalize is not None:
            means = stats.task_means()
            if means:
                # The suite mean over tasks of each task's last-100 mean, plain and capped at
                # 100 per task as DMLab-30 reports it; tasks with no finished episode yet count
                # as absent.
                normalized = [self.normalize(t, r) for t, r in means.items()]
                self.writer.add_scalar("normalized_score_mean", float(np.mean(normalized)), frames)
                self.writer.add_scalar("normalized_score_capped_mean",
                                       capped_mean(np.array([normalized])), frames)

    def progress(self, frames: int, fps: float, stats: EpisodeStats, extra: str = "") -> None:
        """Unless ``quiet``, print the progress line to stderr, with ``extra`` at its end."""
        if self.quiet:
            return
        ret = stats.mean_return()
        pct = 100.0 * frames / self.total_frames
        line = (f"[mira] frames {frames:>10,d} ({pct:5.1f}%)  fps {fps:7.0f}  "
                f"return(last100) {'   n/a' if ret is None else f'{ret:7.3f}'}  "
                f"episodes {stats.count}")
        print(line + (f"  {extra}" if extra else ""), file=sys.stderr, flush=True)

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        self.writer.flush()
        self.writer.close()
