"""Gradient bursts: the learner's captures of optimizer steps whose gradient spiked, on disk.

With ``learner.capture_grad_norm`` set, the learner keeps each step whose pre-clip gradient
norm is above it or not finite, or whose loss is not finite (its minibatch, core state,
weights, optimizer state and per-parameter gradient norms); the driver writes each capture to
``<run>/bursts/`` with the run's config, where ``python -m scripts.bench.burst`` replays it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("mira")


def keep_bursts(folder: Path, captures: list[dict], cfg) -> None:
    """Write the learner's gradient-burst captures to ``folder``, one line of log each.

    At most ``CAPTURE_LIMIT`` files per run directory, resumes included; a step a resumed
    run repeats keeps its first file. A failed write is logged and training goes on.
    """
    import torch

    from learners.config.migrations import CONFIG_FORMAT
    from learners.config.schema import to_dict
    from learners.update.learner import CAPTURE_LIMIT

    for c in captures:
        path = folder / f"update{c['update']:08d}-step{c['step']}.pt"
        if path.exists() or len(list(folder.glob("*.pt"))) >= CAPTURE_LIMIT:
            continue
        try:
            folder.mkdir(exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save({**c, "config": to_dict(cfg), "config_format": CONFIG_FORMAT}, tmp)
            os.replace(tmp, path)  # never a torn file
        except OSError as e:
            log.warning("could not keep update %d's gradient burst in %s: %s",
                        c["update"], path, e)
            continue
        if not c["grad_norms"]:  # the loss was not finite: no gradient to name
            log.warning("update %d: the loss is not finite (learner.capture_grad_norm %g "
                        "keeps it); kept in %s", c["update"], c["threshold"], path)
            continue
        largest = ", ".join(f"{k} {v:.3g}" for k, v in list(c["grad_norms"].items())[:3])
        log.warning("update %d: pre-clip gradient norm %.4g (above learner.capture_grad_norm "
                    "%g); largest %s; kept in %s", c["update"], c["grad_norm"],
                    c["threshold"], largest, path)
