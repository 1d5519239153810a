"""``train``: one run from its config to its summary (the loop of docs/design.md's data path).

See ``fleet.py`` for the actors and ``handles.py`` for how calls reach
runners and the learner with or without Ray. Frames are counted when the learner consumes
them (so the learning-rate schedule and a resumed run agree on them);
``frames = T x batch x frame skip`` per update.
"""

from __future__ import annotations

import collections
import logging
import sys
import time

import numpy as np

from learners.algorithms import LEARNERS
from learners.config.schema import ConfigError, RunStopped
from learners.runtime.bursts import keep_bursts
from learners.runtime.fleet import (
    Fleet,
    connect,
    crowding_note,
    data_lost,
    describe,
    learner_wants_gpu,
    runner_failed,
)
from learners.runtime.handles import get, wait_one
from learners.runtime.logbook import EpisodeStats, Logbook, duration, log_every_updates
from learners.runtime.run_dir import RunDir, nonfinite_tensors, weights_misfit
from learners.runtime.stop_flag import StopFlag
from learners.runtime.unroll_queue import UnrollQueue
from learners.update.monitor import BlindWatch
from learners.update.report import UpdateReport

log = logging.getLogger("mira")


def make_queue(cfg, runners: int) -> UnrollQueue:
    """The unroll queue of a run of ``cfg`` with ``runners`` runners (its policy: UnrollQueue)."""
    return UnrollQueue(LEARNERS.get(cfg.learner.name).unrolls_per_update(cfg),
                       lock_step=cfg.learner.lock_step, runners=runners)


class Trainer:
    """One run's driver over the fleet and the learner (resumed from a checkpoint if given)."""

    def __init__(self, cfg, run: RunDir, resume_from=None, quiet: bool = False):
        self.cfg, self.run, self.quiet = cfg, run, quiet
        gpus = 0
        if cfg.runtime.num_runners > 0:
            if not quiet and (note := crowding_note(cfg)):
                print(f"[mira] note: {note}", file=sys.stderr)
            connect(cfg)
            # Asked before any actor starts: a cuda learner on a cluster with no GPU fails here.
            gpus = 1 if learner_wants_gpu(cfg) else 0
        self.fleet = Fleet(cfg)
        try:  # an error while building the envs or the agent is the config's, in one line
            self.fleet.start()
            self.spec = get(self.fleet.runners[0].spec())
            self.learner = self.fleet.make_learner(self.spec, gpus)
            get(self.learner.get_version())
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - ValueError, RuntimeError, RayActorError, ...
            raise ConfigError("building the runners and the learner failed: "
                              f"{describe(e)}") from None
        self.stats = EpisodeStats(self.spec["tasks"])
        self.wall_before = 0.0
        self.lost_unrolls = 0
        # (update, last good update) once the learner's divergence guard gives up
        self.diverged = None
        self.stop_when = None  # train()'s stop condition
        self.known = [-1] * len(self.fleet.runners)  # the weights version each runner holds
        monitor = cfg.learner.monitor
        self.blind = BlindWatch(monitor.blind_share, monitor.blind_probes)
        self.probed: dict = {}  # the torso monitor's last measures and their frames
        if resume_from is not None:
            state = RunDir.load_checkpoint(resume_from)
            try:
                get(self.learner.load_state_dict(state["learner"]))
            except Exception as e:  # noqa: BLE001 - RuntimeError, or Ray's wrapper of it
                if (mismatch := weights_misfit(str(e))) is None:
                    raise
                self.fleet.stop()
                raise ConfigError(f"cannot resume {run.path}: {mismatch}; train it in a new "
                                  "run") from None
            progress = state["progress"]
            self.stats.load_state_dict(progress["episodes"])
            self.wall_before = float(progress["wall_time_s"])
            self.lost_unrolls = int(progress.get("lost_unrolls", 0))
            self.blind.load_state_dict(progress.get("monitor", {}))
        self.version = get(self.learner.get_version())
        self.frames = (int(get(self.learner.state_counters())["frames"])
                       if resume_from is not None else 0)
        if resume_from is not None:
            run.note_resume(self.frames)
        self.weights = self.learner.get_weights()
        self._start = self._log_time = self._last_ckpt = time.time()
        self._log_frames, self._queue_wait, self.last_metrics = self.frames, 0.0, {}
        self._log_version = self.version
        self._log_frames0 = self.frames  # frames at this start or resume: the ETA's mean speed
        self.log = Logbook(run.path, self.spec["tasks"], cfg.run.total_frames, quiet,
                           self.spec["score_suite"],
                           resumed_at=self.frames if resume_from is not None else None)
        self.metrics_acc: dict[str, list[float]] = collections.defaultdict(list)
        self.evaluator, self.eval_ref, self.eval_frames = None, None, 0
        every = cfg.eval.every_frames
        self.next_eval = (self.frames // every + 1) * every if every > 0 else None

    # ------------------------------------------------------------------ pieces

    def _collect(self, index: int, info_ref) -> dict | None:
        """The small info of a finished unroll, or None if the runner died."""
        try:
            info = get(info_ref)
        except Exception as e:  # noqa: BLE001
            if not runner_failed(e):
                raise
            self.lost_unrolls += 1
            self.fleet.replace(index)
            self.known[index] = -1
            return None
        self.metrics_acc["runner_rollout_s"].append(info["rollout_s"])
        return info

    def _send(self, index: int):
        """Send runner ``index`` out for one unroll with the newest weights it lacks."""
        runner = self.fleet.runners[index]
        if self.known[index] != self.version:
            refs = runner.rollout_with_info(self.weights, self.version)
            self.known[index] = self.version
        else:
            refs = runner.rollout_with_info(None, None)
        return refs

    def _absorb(self, report: UpdateReport) -> None:
        # The learner owns the update count and the frames consumed; the driver mirrors them.
        self.frames, self.version = report.frames, report.version
        # the first report counts; an update already in flight may add one
        if report.diverged is not None and self.diverged is None:
            self.diverged = (report.diverged + self.cfg.learner.max_skipped_updates,
                             report.diverged)
        if report.captures:
            keep_bursts(self.run.path / "bursts", get(self.learner.take_captures()), self.cfg)
        for k, v in report.metrics.items():
            self.metrics_acc[k].append(v)
        if report.monitor:
            for k, v in report.monitor.items():  # TensorBoard, with the metrics
                self.metrics_acc[k].append(v)
            self.probed = {"frames": report.frames, **report.monitor}
            line = self.blind.add(report.frames, report.monitor)
            if line is not None:
                log.warning(line)

    def _log(self, now: float) -> None:
        frames_delta = self.frames - self._log_frames
        fps = frames_delta / max(now - self._log_time, 1e-9)
        self._log_frames, self._log_time, self._log_version = self.frames, now, self.version
        means = {k: float(np.mean(v)) for k, v in self.metrics_acc.items()}
        self.metrics_acc.clear()
        # wall_time_s: training seconds so far, resumes included (a study's time to a score)
        means.update(fps=fps, lost_unrolls=self.lost_unrolls, learner_queue_wait_s=self._queue_wait,
                     wall_time_s=self.wall_time())
        self._queue_wait = 0.0
        self.log.scalars(means, self.frames)
        self.log.episodes(self.stats, self.frames)
        self.last_metrics = means
        extra = f"lag {means.get('policy_lag', 0):.1f}" if "policy_lag" in means else ""
        # time left at the mean speed since this process started (the instantaneous fps
        # swings with updates)
        mean_fps = (self.frames - self._log_frames0) / max(now - self._start, 1e-9)
        left = max(self.cfg.run.total_frames - self.frames, 0)
        eta = f"eta {duration(left / mean_fps)}" if mean_fps > 0 else ""
        self.log.progress(self.frames, fps, self.stats, "  ".join(x for x in (extra, eta) if x))

    def checkpoint(self):
        """Write a checkpoint; returns its path (None if the weights are not finite)."""
        from learners.config.migrations import CONFIG_FORMAT
        from learners.config.schema import to_dict

        learner = get(self.learner.state_dict())
        # The frames the weights were trained on: an update still in flight when the checkpoint
        # was asked for is in them, though the driver has not yet mirrored its count.
        frames = int(learner["counters"]["frames"])
        state = {
            "config": to_dict(self.cfg),  # a checkpoint is self-contained for mira evaluate
            "config_format": CONFIG_FORMAT,  # what its config means (learners/config/migrations.py)
            "learner": learner,
            "progress": {
                "frames": frames, "wall_time_s": self.wall_time(),
                "episodes": self.stats.state_dict(), "lost_unrolls": self.lost_unrolls,
                "monitor": self.blind.state_dict(),
            },
        }
        bad = nonfinite_tensors(state["learner"]["agent"])
        # The guard keeps weights finite; never write a checkpoint that could not be resumed.
        if bad:
            log.error("not writing a checkpoint: the weights hold non-finite values (%s); "
                      "the last good one is %s", ", ".join(bad[:3]), self.run.latest_checkpoint())
            return None
        return self.run.save_checkpoint(state, frames, self.cfg.run.keep_checkpoints)

    def wall_time(self) -> float:
        """Seconds of training in this run, the time before each resume included."""
        return self.wall_before + time.time() - self._start

    # ------------------------------------------------------------------ loops

    def train(self, stop_when=None) -> dict:
        """Train to ``run.total_frames`` or until stopped; returns the summary.

        It stops early at Ctrl-C, or when ``stop_when(trainer)`` is true when checked, every
        loop turn (``mira bench`` stops timed runs with it).
        """
        self.stop_when = stop_when
        self._start = self._log_time = self._last_ckpt = time.time()
        self._log_frames, self._queue_wait, self.last_metrics = self.frames, 0.0, {}
        self._log_version = self.version
        session_frames = self._log_frames0 = self.frames
        with StopFlag() as flag:
            try:
                interrupted = self._loop(flag)
            except Exception as e:  # noqa: BLE001
                if not self._learner_lost():
                    raise
                self._stop_without_learner(e)
        if self.cfg.learner.capture_grad_norm and not self._learner_lost():
            # an update still in flight at a stop may have kept a burst
            keep_bursts(self.run.path / "bursts", get(self.learner.take_captures()), self.cfg)
        final = self.checkpoint()
        now = time.time()
        self._log(now)
        summary = {
            "frames": self.frames,
            "fps": (self.frames - session_frames) / max(now - self._start, 1e-9),
            "episode_return_mean": self.stats.mean_return(),
            "episode_return_mean_per_task": self.stats.task_means(),
            "episodes": self.stats.count,
            "wall_time_s": self.wall_time(),
            "updates": self.version,
            "lost_unrolls": self.lost_unrolls,
            "interrupted": interrupted,
            "diverged": None if self.diverged is None else {
                "update": self.diverged[0], "last_good_update": self.diverged[1],
                "skipped_in_row": self.cfg.learner.max_skipped_updates,
                "checkpoint": final and str(final),
            },
            "final_metrics": self.last_metrics,
            # the torso monitor's last probe and the blind verdict (learners/update/monitor.py)
            "monitor": {"last": self.probed or None, "blind": self.blind.blind,
                        "spans": self.blind.spans},
        }
        self.run.write_summary(summary)
        self.log.close()
        return summary

    def _learner_lost(self) -> bool:
        """Whether the learner actor is gone (its node died, or it was killed)."""
        if self.learner.in_process:
            return False
        try:
            get(self.learner.get_version(), timeout=30)
            return False
        except Exception:  # noqa: BLE001 - RayActorError, GetTimeoutError, ...
            return True

    def _stop_without_learner(self, error: BaseException) -> None:
        """Stop a run whose learner died, leaving its directory resumable; raises RunStopped.

        The learner's state is gone with it: no new checkpoint can be written. Leave the
        run directory resumable (its last checkpoint and a summary) and say how to go on.
        """
        ckpt = self.run.latest_checkpoint()
        message = (f"the learner actor died ({type(error).__name__}: "
                   f"{str(error).splitlines()[0][:160]}); the run "
                   f"stopped at {self.frames:,} frames; "
                   + (f"continue it from its last checkpoint ({ckpt.name}) "
                      f"with `mira train --resume {self.run.path}`"
                      if ckpt else "it has no checkpoint yet: start it again"))
        self.run.write_summary({"frames": self.frames, "updates": self.version, "interrupted": True,
                                "episode_return_mean": self.stats.mean_return(),
                                "wall_time_s": self.wall_time(), "stopped": message})
        self.log.close()
        # the runners' CPUs go back to the cluster (a resume in this process needs them)
        self.fleet.stop()
        raise RunStopped(message) from None

    def _evaluation(self) -> None:
        """Launch an evaluation every ``eval.every_frames``; log each one when it is done.

        With Ray the evaluation runs on its own actor, so training goes on meanwhile.
        """
        if self.eval_ref is not None and wait_one([self.eval_ref], timeout=0):
            from envs.evaluation import score_table

            names = self.spec["tasks"]
            result = score_table({names[t]: r for t, r in get(self.eval_ref).items()},
                                 self.spec["score_suite"], reps=200)
            values = {f"eval/return/{t}": e["return_mean"] for t, e in result["tasks"].items()}
            values.update({f"eval/normalized_score/{t}": e["normalized_score"]
                           for t, e in result["tasks"].items()})
            values.update({f"eval/{k}": a["value"] for k, a in result["aggregates"].items()})
            self.log.scalars(values, self.eval_frames)
            self.eval_ref = None
        if self.next_eval is None or self.frames < self.next_eval or self.eval_ref is not None:
            return
        if self.evaluator is None:
            self.evaluator = self.fleet.make_evaluator(len(self.spec["tasks"]))
        self.eval_ref, self.eval_frames = self.evaluator.evaluate(self.weights), self.frames
        every = self.cfg.eval.every_frames
        self.next_eval = (self.frames // every + 1) * every

    def _periodic(self, flag) -> bool:
        """A loop turn's chores: ``stop_when``, evaluation, logging, checkpoints; True: stop."""
        if self.stop_when is not None and self.stop_when(self):
            flag.stop = True
        self._evaluation()
        now = time.time()
        if self._log_due(now):
            self._log(now)
        if now - self._last_ckpt >= self.cfg.run.checkpoint_every_s:
            self.checkpoint()
            self._last_ckpt = now
        return flag.stop

    def _log_due(self, now: float) -> bool:
        """Whether to log: ``run.log_every_s`` seconds since the last time, or updates.

        A replayable run (``run.deterministic``) logs every ``log_every_updates`` updates
        instead, at points of the loop that do not depend on timing, so two replays write the
        same scalars at the same steps (those measured on the clock, ``CLOCK_SCALARS``, aside).
        """
        if self.cfg.run.deterministic:
            return self.version - self._log_version >= log_every_updates(self.cfg.run)
        return now - self._log_time >= self.cfg.run.log_every_s

    def _update_done(self, update_ref, unrolls: int) -> bool:
        """Absorb a finished update; False if its data was lost with a node.

        Its ``unrolls`` are then counted as lost; the loss is logged and survived like a dead
        runner.
        """
        try:
            self._absorb(get(update_ref))
            return True
        except Exception as e:  # noqa: BLE001
            if not data_lost(e):
                raise
            self.lost_unrolls += unrolls
            log.warning("an update's %d unroll(s) were lost with their node (%s); skipping them",
                        unrolls, type(e).__name__)
            return False

    def _loop(self, flag) -> bool:
        """The one driver loop; True if stopped early (Ctrl-C or ``stop_when``).

        Runners return unrolls into the queue, the learner takes a batch whenever it is idle
        and one is ready, and the queue's policy (IMPALA's or lock-step) says when each runner
        goes out again.
        """
        queue = make_queue(self.cfg, len(self.fleet.runners))
        inflight = {}  # info ref -> (runner index, trajectory ref)

        def send(index: int) -> None:
            traj, info = self._send(index)
            inflight[info] = (index, traj)

        for i in range(len(self.fleet.runners)):
            send(i)
        if self.cfg.run.deterministic:
            return self._fixed_order_loop(flag, queue, inflight, send)
        update_ref, idle_since = None, time.time()
        while self.frames < self.cfg.run.total_frames and not self.diverged:
            if self._periodic(flag):
                if update_ref is not None:  # the stop's checkpoint and summary count it alike
                    self._update_done(update_ref, queue.per_update)
                return True
            waiting = list(inflight) + ([update_ref] if update_ref is not None else [])
            for ref in wait_one(waiting):
                if ref is update_ref:
                    if self._update_done(update_ref, queue.per_update):
                        self.weights = self.learner.get_weights()
                    update_ref, idle_since = None, time.time()
                    for index in queue.update_done():
                        send(index)
                    continue
                index, traj = inflight.pop(ref)
                info = self._collect(index, ref)
                if info is not None:
                    self.stats.add(info["episodes"])
                if queue.add(index, traj if info is not None else None):
                    send(index)
            if (update_ref is None and queue.ready() and not self.diverged
                    and self.frames < self.cfg.run.total_frames):
                self._queue_wait += time.time() - idle_since
                batch, released = queue.take()
                update_ref = self.learner.learn(*batch)
                for index in released:
                    send(index)
        return False

    def _fixed_order_loop(self, flag, queue: UnrollQueue, inflight: dict, send) -> bool:
        """``_loop`` with every event in a fixed order (``run.deterministic``); True if stopped.

        Unrolls are taken round-robin over the runners (the next runner in index order that is
        out, waited for even when another is ready first), and an update is waited for before
        the next unroll is taken, so which weights each unroll is acted with, and which unrolls
        form each batch, no longer depend on timing. Runners still act while the learner
        updates; the learner no longer overlaps the driver's waits.
        """
        turn, n = 0, len(self.fleet.runners)
        while self.frames < self.cfg.run.total_frames and not self.diverged:
            if self._periodic(flag):
                return True
            out = {i: r for r, (i, _) in inflight.items()}
            index = next(i % n for i in range(turn, turn + n) if i % n in out)
            turn = index + 1
            ref = out[index]
            _, traj = inflight.pop(ref)
            info = self._collect(index, ref)  # waits for this runner's unroll
            if info is not None:
                self.stats.add(info["episodes"])
            if queue.add(index, traj if info is not None else None):
                send(index)
            if queue.ready():
                batch, released = queue.take()
                update_ref = self.learner.learn(*batch)
                for i in released:
                    send(i)
                if self._update_done(update_ref, queue.per_update):
                    self.weights = self.learner.get_weights()
                for i in queue.update_done():
                    send(i)
        return False
