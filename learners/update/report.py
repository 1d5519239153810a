"""``UpdateReport``: what the learner says after one update, besides the update's metrics.

The driver (``learners/runtime/trainer.py``) mirrors the learner's counters from it, stops a
run whose updates diverged and fetches the kept gradient bursts when there are some. It
crosses Ray as one pickled value (``LearnerHandle.learn``), so it holds plain numbers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UpdateReport:
    """One update's metrics and the learner's state after it."""

    metrics: dict[str, float]  # the update's metrics (losses, norms, timings), logged as they are
    frames: int  # env frames the learner has consumed, this update's included
    version: int  # the policy version: updates so far, this one included
    # the last good version once ``learner.max_skipped_updates`` updates in a row were
    # skipped (non-finite): the weights are still that update's; None while the run is healthy
    diverged: int | None = None
    captures: int = 0  # gradient-burst steps kept and not yet taken (``Learner.take_captures``)
    # the torso monitor's measures when this update probed (tag -> value, the torso's layers
    # input to output: learners/update/monitor.py); empty otherwise
    monitor: dict[str, float] = field(default_factory=dict)

    def flat(self) -> dict[str, float]:
        """The metrics with the counters beside them as floats, one dict (``Learner.update``).

        ``frames`` and ``version``; ``captures``, ``diverged`` and the monitor's tags only
        when set.
        """
        out = {**self.metrics, **self.monitor, "frames": float(self.frames),
               "version": float(self.version)}
        if self.captures:
            out["captures"] = float(self.captures)
        if self.diverged is not None:
            out["diverged"] = float(self.diverged)
        return out
