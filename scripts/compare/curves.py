"""A run's learning curves from its TensorBoard event files, each run read once per state.

A compare looks after every seed: its report, the published copy and the kept records read
every finished trial's curves, for several tags. TensorBoard's reader parses a whole
directory per load (about 2.4 s for a 2e6-frame lab6 trial, whose files hold some 50 tags),
so the curves a report uses (``records.CURVE_TAGS``, ``records.HEALTH_TAGS`` for its
training health and ``records.PROBE_TAGS`` for the torso monitor's series) are read once per
run directory and kept until its event files change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scripts.compare import records

_READ: dict[Path, tuple[tuple, dict]] = {}  # run dir -> (its event files' state, curves)
# read together, in one pass of the files
CACHED = records.CURVE_TAGS + records.HEALTH_TAGS + records.PROBE_TAGS


def _state(run_dir: Path) -> tuple:
    """Name, size and modification time of each of the run's event files."""
    return tuple((f.name, s.st_size, s.st_mtime_ns)
                 for f in sorted(run_dir.glob("*tfevents*")) for s in (f.stat(),))


def _wanted(tag: str, tags) -> bool:
    """Whether ``tag`` is one of ``tags``, or in a family of them (an entry ending in "/")."""
    return any(tag == t or (t.endswith("/") and tag.startswith(t)) for t in tags)


def _read(run_dir: Path, tags) -> dict:
    """{tag: (frames, values)} for the ``tags`` (and families) the run's event files hold.

    Frames sorted, the last value logged at each frame count (a resumed run may repeat steps).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    curves = {}
    for tag in (t for t in acc.Tags().get("scalars", []) if _wanted(t, tags)):
        points = {e.step: e.value for e in acc.Scalars(tag)}
        steps = sorted(points)
        curves[tag] = (np.array(steps, dtype=float),
                       np.array([points[s] for s in steps], dtype=float))
    return curves


def learning_curve(run_dir: Path,
                   tag: str = "episode_return_mean100") -> tuple[np.ndarray, np.ndarray]:
    """(frames, value) of ``tag`` from the run's event files, sorted, last value per frame count.

    A trial restored from its kept record has its curves there. The report's tags are read
    once per state of the run's event files; any other tag is read each time.
    """
    if (kept := records.curve(run_dir, tag)) is not None:  # restored from its kept record
        return np.array(kept[0], dtype=float), np.array(kept[1], dtype=float)
    empty = (np.zeros(0), np.zeros(0))
    if not _wanted(tag, CACHED):
        return _read(run_dir, [tag]).get(tag, empty)
    frames, values = _cached(run_dir).get(tag, empty)
    return frames.copy(), values.copy()  # the kept arrays stay as read


def family(run_dir: Path, prefix: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{tag: (frames, values)} for each tag of a cached family (``prefix`` ends in "/").

    A trial restored from its kept record has the families the record keeps (``torso/``;
    ``activation_frequency/`` is kept as a summary, so empty); a run whose core logs none
    (``activation_frequency/`` outside RIMs) has none.
    """
    if (kept := records.record(run_dir)) is not None:
        return {t: (np.array(c["frames"], dtype=float), np.array(c["values"], dtype=float))
                for t, c in sorted(kept.get("curves", {}).items()) if t.startswith(prefix)}
    return {t: (f.copy(), v.copy()) for t, (f, v) in sorted(_cached(run_dir).items())
            if t.startswith(prefix)}


def probes(run_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{tag: (frames, values)} of the torso monitor's series (``records.PROBE_TAGS``).

    Every ``torso/<layer>/...`` tag and ``policy/spread`` the run logged (none with the
    monitor off) and ReDo's ``redo/<layer>`` counts (none with it off), from its event files
    or its kept record.
    """
    out = {}
    for tag in records.PROBE_TAGS:
        if tag.endswith("/"):
            out.update(family(run_dir, tag))
        elif len((curve := learning_curve(run_dir, tag))[0]):
            out[tag] = curve
    return out


def _cached(run_dir: Path) -> dict:
    """The run's ``CACHED`` curves, read again only when its event files have changed."""
    key, state = Path(run_dir).resolve(), _state(Path(run_dir))
    if (hit := _READ.get(key)) is None or hit[0] != state:
        _READ[key] = hit = (state, _read(run_dir, CACHED))
    return hit[1]
