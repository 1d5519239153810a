"""A compare's declared plan: its primary pairs, score and stopping rule, kept as first seen.

The ``plan:`` section of a compare file says, before any trial runs, which pairs of variants
the compare is for and how they are judged::

    plan:
      pairs: [[head-multiplicative_context-task-id, head-linear]]   # variant names (--dry-run)
      score: eval        # eval: the final evaluation's score (normalised when the suite has
                         # reference scores, else the raw return); train: last-100 return
      aggregate: mean    # one number per trial over its tasks: mean, median or iqm
      statistic: difference   # difference: mean paired difference; win: P(a beats b at a seed)
      bounds: [-10, 110] # a trial's score is clipped to this range (difference only)
      stop: all seeds    # or "decided": stop adding seeds once every pair's interval excludes 0;
                         # or "settled": also once a pair cannot exclude it within the seeds left
      alpha: 0.05        # over all pairs together (each pair gets alpha / number of pairs)

A pair may say what it tests, in one line the report prints beside its verdict; the plan may
name the paper's claims it is about, and the report says in one line which of them no declared
pair tests (a pair's ``claim`` names one of them, or repeats it word for word)::

    plan:
      claims:            # name -> one line: the paper's claims this compare is about
        fig4b: "multiplicative task-ID head above multi-head: Fig. 4b"
        fig4c: "a learnt-context multiplicative head above linear: Fig. 4c"
      pairs:
        - pair: [head-multiplicative_context-task-id, head-linear]
          claim: "a multiplicative task-ID head above a linear head (task information vs none)"
        - {pair: [head-multiplicative_context-learnt, head-linear], claim: fig4c}

Claims are labels: no score, interval or stopping rule reads them, but the plan's record keeps
them, so relabelling after a report is listed with the unplanned looks.

The compare's ``seeds`` and its trials' ``run.total_frames`` belong to the plan too (``plan.seeds``
and ``plan.frames``, if given, must agree with them). ``register`` stores the plan in
``<out>/plan.json`` the first time a compare runs, and records every later change (seeds added,
frames raised, variants or pairs changed, a variant's training settings or the ``threshold``
moved, including by an edit to the preset it builds on) with its date; a change made after a
report had been written is an unplanned look, and the report lists it.

Primary pairs get anytime-valid confidence sequences (``sequential.py``) over the paired
per-seed scores, in the order of the ``seeds`` list; every other pair is exploratory.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from learners.config.schema import ConfigError
from scripts.compare import sequential as sq

STOPS = ("all seeds", "decided", "settled")
SEQUENTIAL = ("decided", "settled")  # rules read after each seed, one seed at a time
SCORES = ("eval", "train")
TRIAL_AGGREGATES = ("mean", "median", "iqm")
STATISTICS = ("difference", "win")


@dataclass
class PlanSpec:
    """The ``plan:`` section of a compare file (see the module docstring)."""

    # the primary pairs: [variant, variant], or {pair: [variant, variant], claim: ONE LINE}
    pairs: list = field(default_factory=list)
    score: str = "eval"  # eval (final evaluation) or train (last-100 training return)
    aggregate: str = "mean"  # a trial's score over its tasks: mean, median or iqm
    statistic: str = "difference"  # difference (needs bounds) or win
    bounds: list = field(default_factory=list)  # [low, high] that a trial's score is clipped to
    stop: str = "all seeds"  # all seeds, decided (every primary interval excludes 0) or settled
    alpha: float = 0.05  # family-wise error over the primary pairs
    seeds: int = 0  # if given: the number of seeds the compare lists
    frames: float = 0  # if given: every trial's run.total_frames
    claims: dict = field(default_factory=dict)  # name -> one line: the paper's claims it is about
    # each pair's claim (a name in claims, a line, or None), taken from pairs; not a file key
    pair_claims: list = field(default_factory=list)

    def __post_init__(self):
        """``pairs`` as [a, b] lists, their claims in ``pair_claims`` (module docstring)."""
        if not isinstance(self.claims, dict) or not all(
                isinstance(k, str) and _one_line(v) for k, v in self.claims.items()):
            raise ValueError(f"plan.claims: expected names mapped to one line of text each, got "
                             f"{self.claims!r}")
        pairs, claims = [], []
        for i, pair in enumerate(self.pairs):
            claim = self.pair_claims[i] if i < len(self.pair_claims) else None
            if isinstance(pair, dict):
                if "pair" not in pair or set(pair) - {"pair", "claim"}:
                    raise ValueError(f"plan.pairs[{i}]: expected [a, b] or {{pair: [a, b], "
                                     f"claim: ONE LINE}}, got {pair!r}")
                pair, claim = pair["pair"], pair.get("claim")
            if claim is not None and not _one_line(claim):
                raise ValueError(f"plan.pairs[{i}].claim: expected one line of text or a name "
                                 f"in plan.claims, got {claim!r}")
            if claim is not None and " " not in claim.strip() and claim not in self.claims:
                raise ValueError(f"plan.pairs[{i}].claim {claim!r} names no claim in plan.claims"
                                 f" ({', '.join(self.claims) or 'none declared'}); a claim of "
                                 "the pair's own is a line of words")
            pairs.append(pair)
            claims.append(claim)
        self.pairs, self.pair_claims = pairs, claims

    def claim(self, i: int) -> str | None:
        """The line pair ``i`` tests (its claim, or the plan claim it names), or None."""
        c = self.pair_claims[i] if i < len(self.pair_claims) else None
        return self.claims.get(c, c) if c else None

    def untested_claims(self) -> list[str]:
        """The lines of ``claims`` that no declared pair tests (by name or word for word)."""
        named = {c for c in self.pair_claims if c}
        return [line for name, line in self.claims.items()
                if name not in named and line not in named]


def _one_line(text) -> bool:
    return isinstance(text, str) and bool(text.strip()) and "\n" not in text.strip()


def check(plan: PlanSpec, variants: list[str], seeds: list[int], frames: dict,
          episodes: int) -> None:
    """Refuse, in one line, a plan that cannot be carried out (nothing has run yet).

    ``variants``: the variant names; ``frames``: variant -> run.total_frames; ``episodes``: the
    final evaluation's episodes per task.
    """
    for i, pair in enumerate(plan.pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and pair[0] != pair[1]):
            raise ConfigError(f"plan.pairs[{i}]: expected two different variant names, "
                              f"got {pair!r}")
        for name in pair:
            if name not in variants:
                raise ConfigError(f"plan.pairs[{i}]: unknown variant {name!r}; variants: "
                                  f"{', '.join(variants)}")
    for key, value, valid in (("stop", plan.stop, STOPS), ("score", plan.score, SCORES),
                              ("aggregate", plan.aggregate, TRIAL_AGGREGATES),
                              ("statistic", plan.statistic, STATISTICS)):
        if value not in valid:
            raise ConfigError(f"plan.{key} must be one of {', '.join(map(repr, valid))}, "
                              f"got {value!r}")
    if not 0.0 < plan.alpha < 1.0:
        raise ConfigError(f"plan.alpha must be in (0, 1), got {plan.alpha}")
    if plan.stop in SEQUENTIAL and not plan.pairs:
        raise ConfigError(f"plan.stop {plan.stop!r} cannot be evaluated: the plan declares no "
                          "pairs")
    if plan.stop == "settled" and plan.pairs:
        need = sq.seeds_needed(plan.alpha / len(plan.pairs))
        if need > len(seeds):
            raise ConfigError(f"plan.stop 'settled' with {len(seeds)} seed(s): no pair can "
                              f"exclude no difference at alpha {plan.alpha:g}/{len(plan.pairs)} "
                              f"before {need} seeds even if every seed goes one way, so the rule "
                              "would stop after the first; list more seeds")
    if plan.pairs and plan.score == "eval" and episodes <= 0:
        raise ConfigError("plan.score 'eval' needs the final evaluation: set evaluate.episodes "
                          "above 0, or use plan.score 'train'")
    if plan.pairs and plan.statistic == "difference" and not (
            len(plan.bounds) == 2 and all(isinstance(b, (int, float)) and math.isfinite(b)
                                          for b in plan.bounds)
            and plan.bounds[0] < plan.bounds[1]):
        raise ConfigError(f"plan.bounds must be finite [low, high] with low < high for "
                          f"statistic 'difference' (a trial's score is clipped to it), got "
                          f"{plan.bounds}")
    if plan.seeds and plan.seeds != len(seeds):
        raise ConfigError(f"plan.seeds is {plan.seeds} but the compare lists {len(seeds)} seeds")
    if plan.frames and not math.isfinite(plan.frames):
        raise ConfigError(f"plan.frames must be a finite number of frames, got {plan.frames}")
    if plan.frames and any(f != int(plan.frames) for f in frames.values()):
        raise ConfigError(f"plan.frames is {int(plan.frames):,} but trials run "
                          f"{sorted(set(frames.values()))} frames")


# not a variant's settings: a trial's own (they differ between seeds or name the run), and
# what only changes how a run is kept, logged or laid out on the machine's threads
NOT_SETTINGS = ("run.dir", "run.seed", "run.name", "run.total_frames", "run.checkpoint_every_s",
                "run.keep_checkpoints", "run.log_every_s", "runtime.address",
                "runtime.torch_threads", "runtime.learner_threads", "runtime.learner_cpus",
                "learner.capture_grad_norm")


def settings_of(trials) -> dict:
    """Variant -> its trials' resolved training config, flat (``NOT_SETTINGS`` aside).

    The config as loaded, base file and overrides together: an edit to a preset a variant
    builds on moves it as much as an edit to the compare file.
    """
    from scripts.compare.trials import flatten

    out = {}
    for t in trials:
        if t.variant not in out:
            flat = flatten(json.loads(json.dumps(asdict(t.cfg), default=str)))
            out[t.variant] = {k: v for k, v in flat.items() if k not in NOT_SETTINGS}
    return out


def record(plan: PlanSpec, seeds: list[int], frames: dict, episodes: int) -> dict:
    """What a compare commits to: the plan, its seeds, frames per variant, evaluation episodes."""
    data = asdict(plan)
    data.update(seeds=list(seeds), frames=dict(frames), variants=sorted(frames),
                evaluation_episodes=episodes)
    for key in ("claims", "pair_claims"):  # kept only where given: a plan without them keeps
        if not any(data[key]):  # the record it always had
            del data[key]
    return data


def _settings_diff(old: dict, new: dict) -> list[str]:
    """Changed settings of the variants both have, in words (a few keys per variant, then a count).

    Only keys both have: a setting a newer mira adds (or renames) is not a change of the study's.
    """
    out = []
    for variant in sorted(set(old["variants"]) & set(new["variants"])):
        a, b = old["variants"][variant], new["variants"][variant]
        keys = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        if keys:
            more = f"; and {len(keys) - 3} more" if len(keys) > 3 else ""
            out.append(f"settings of {variant}: "
                       + "; ".join(f"{k} {a[k]!r} -> {b[k]!r}" for k in keys[:3]) + more)
    if old["threshold"] != new["threshold"]:
        out.insert(0, f"threshold: {old['threshold']!r} -> {new['threshold']!r}")
    return out


def _diff(old: dict, new: dict) -> list[str]:
    """The changes from ``old`` to ``new`` (``record``s), in words."""
    out = []
    added = [s for s in new["seeds"] if s not in old["seeds"]]
    removed = [s for s in old["seeds"] if s not in new["seeds"]]
    if added:
        out.append(f"seeds added: {added} ({len(old['seeds'])} -> {len(new['seeds'])})")
    if removed:
        out.append(f"seeds removed: {removed}")
    plus = sorted(set(new["variants"]) - set(old["variants"]))
    minus = sorted(set(old["variants"]) - set(new["variants"]))
    if plus:
        out.append(f"variants added: {plus}")
    if minus:
        out.append(f"variants removed: {minus}")
    moved = {v: (old["frames"][v], f) for v, f in new["frames"].items()
             if v in old["frames"] and old["frames"][v] != f}
    if moved:
        pairs = sorted({(a, b) for a, b in moved.values()})
        out.append("frames " + "; ".join(f"{'raised' if b > a else 'lowered'} {a:,} -> {b:,}"
                                         for a, b in pairs))
    for key in ("pairs", "score", "aggregate", "statistic", "bounds", "stop", "alpha",
                "evaluation_episodes"):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    if any(old.get(k) != new.get(k) for k in ("claims", "pair_claims")):
        out.append("claims relabelled (labels: no score or stopping rule reads them)")
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def register(out_dir: Path, current: dict, settings: dict | None = None,
             threshold: float | None = None) -> dict:
    """Store the plan as first seen in ``plan.json``, or log how ``current`` departs from it.

    ``current`` is a ``record``; ``settings`` (``settings_of``) and ``threshold``, the
    compare's, go under ``settings`` (``since``: the date they were first kept) and are
    compared with the last ones kept. Returns plan.json's content: ``first_seen``, ``plan``
    (as first seen), ``changes`` (each with its ``date``, ``what`` changed, whether it came
    ``after_report``, and the ``record``), ``reports`` (the dates reports were written) and
    ``settings``. A plan.json from before settings were kept takes them in without a change.
    """
    path = out_dir / "plan.json"
    kept = None if settings is None else {"since": _now(), "variants": settings,
                                          "threshold": threshold}
    if not path.is_file():
        state = {"first_seen": _now(), "plan": current, "changes": [], "reports": []}
    else:
        state = json.loads(path.read_text())
        latest = state["changes"][-1]["record"] if state["changes"] else state["plan"]
        what = _diff(latest, current)
        if kept and state.get("settings"):
            what += _settings_diff(state["settings"], kept)
            kept["since"] = state["settings"]["since"]
        if what:
            state["changes"].append({"date": _now(), "what": what,
                                     "after_report": bool(state["reports"]), "record": current})
    if kept:  # the settings now, new keys included
        state["settings"] = kept
    path.write_text(json.dumps(state, indent=2))
    return state


def note_report(out_dir: Path) -> dict:
    """Log that a report was written now (a look at the data); returns plan.json's content."""
    path = out_dir / "plan.json"
    state = json.loads(path.read_text())
    state["reports"].append(_now())
    path.write_text(json.dumps(state, indent=2))
    return state


def trial_score(plan: PlanSpec, summary: dict | None, evaluation: dict | None) -> float | None:
    """One trial's score under ``plan`` from its summary.json and eval.json (None: not there).

    ``eval``: the ``plan.aggregate`` over tasks of the normalised score (raw mean return when a
    task has no normalised score); ``train``: the last-100 training return.
    """
    if plan.score == "train":
        value = (summary or {}).get("episode_return_mean")
        return None if value is None else float(value)
    if not evaluation:
        return None
    tasks = list(evaluation["tasks"].values())
    key = ("normalized_score" if all(t.get("normalized_score") is not None for t in tasks)
           else "return_mean")
    values = np.array([t[key] for t in tasks], dtype=float)
    if plan.aggregate == "median":
        return float(np.median(values))
    if plan.aggregate == "iqm":
        from envs.statistics import iqm

        return iqm(values[None])
    return float(values.mean())


def primary_intervals(plan: PlanSpec, scores: dict, seeds: list[int]) -> list[dict]:
    """The anytime-valid interval of every declared pair, paired over the seeds both have.

    ``scores``: variant -> {seed: trial score}; ``seeds``: the compare's seed order, which is
    the order the sequence takes its observations in. Each pair's level is ``1 - alpha / k``
    (Bonferroni over the k pairs). "No difference" is 0 for ``difference`` and 1/2 for ``win``.
    ``seeds_left``: the compare's seeds the pair does not have yet; ``undecidable``: the
    interval includes no difference and would still include it whatever those seeds brought
    (``sq.can_still_exclude``), so only more seeds than declared could decide the pair.
    """
    out, k = [], max(len(plan.pairs), 1)
    null = 0.0 if plan.statistic == "difference" else 0.5
    for i, (a, b) in enumerate(plan.pairs):
        both = [s for s in seeds if s in scores.get(a, {}) and s in scores.get(b, {})]
        row = {"pair": [a, b], "claim": plan.claim(i), "seeds": both, "alpha": plan.alpha / k,
               "statistic": plan.statistic, "score": plan.score, "aggregate": plan.aggregate,
               "null": null, "estimate": None, "low": None,
               "high": None, "excludes_null": False, "clipped": 0,
               # a seed the pair lacks (not run, or a failed trial) counts as still to come, so
               # the rule errs towards going on; can_still_exclude appends such seeds where a
               # rerun puts them back in seed order, so for them the check is approximate (a
               # stop at any look keeps every interval valid)
               "seeds_left": len(seeds) - len(both),
               "scores": [[scores[a][s], scores[b][s]] for s in both]}
        x_obs = np.zeros(0)
        if both:
            x = np.array([scores[a][s] for s in both])
            y = np.array([scores[b][s] for s in both])
            if plan.statistic == "difference":
                lo, hi = plan.bounds  # the interval reads scores clipped to them: say how many
                row["clipped"] = int(np.sum((x < lo) | (x > hi)) + np.sum((y < lo) | (y > hi)))
                row["bounds"] = [lo, hi]  # the plan's now, which a dated change may have moved
                cs = sq.paired_difference_cs(x, y, (lo, hi), plan.alpha / k)
                x_obs = sq.difference_observations(x, y, (lo, hi))
            else:
                cs = sq.win_rate_cs(x, y, plan.alpha / k)
                x_obs = sq.win_observations(x, y)
            row.update(estimate=float(cs.estimate[-1]), low=float(cs.low[-1]),
                       high=float(cs.high[-1]),
                       excludes_null=bool(cs.low[-1] > null or cs.high[-1] < null))
        row["undecidable"] = not row["excludes_null"] and not sq.can_still_exclude(
            x_obs, row["seeds_left"], plan.alpha / k)
        out.append(row)
    return out


def decided(intervals: list[dict]) -> bool:
    """The ``decided`` stopping rule: every primary interval excludes no difference (its null)."""
    return bool(intervals) and all(r["excludes_null"] for r in intervals)


def settled(intervals: list[dict]) -> bool:
    """The ``settled`` rule: every primary pair is decided, or undecidable within its seeds."""
    return bool(intervals) and all(r["excludes_null"] or r.get("undecidable")
                                   for r in intervals)


def stops(rule: str, intervals: list[dict]) -> bool:
    """Whether the plan's sequential ``rule`` (``SEQUENTIAL``) ends the compare at this look."""
    return settled(intervals) if rule == "settled" else decided(intervals)


def reach_line(plan: PlanSpec, seeds: int) -> str:
    """What the declared seeds can decide at best: the line a compare prints before it runs."""
    k = len(plan.pairs)
    need = sq.seeds_needed(plan.alpha / k)
    return (f"plan: {k} primary pair(s) at alpha {plan.alpha:g}/{k} each; a pair can exclude "
            f"no difference after {need} seeds at the earliest (every seed one way); {seeds} "
            "declared" + ("" if seeds >= need else ", too few to decide any pair"))


def _undecidable(r: dict) -> str:
    """The words for a pair that no outcome of its seeds left could decide, if it is one."""
    return (f"; cannot exclude {r['null']:g} within the declared seeds, whatever the "
            f"{r['seeds_left']} left bring" if r.get("undecidable") and r["seeds_left"] else "")


def interval_lines(intervals: list[dict]) -> list[str]:
    """One console line per primary pair: its estimate and interval, decided or not."""
    return [f"  {r['pair'][0]} vs {r['pair'][1]}"
            + (f" ({r['claim']})" if r.get("claim") else "") + f": {r['statistic']} "
            + (f"{r['estimate']:.3g} [{r['low']:.3g}, {r['high']:.3g}] over {len(r['seeds'])} "
               f"seed(s), {'excludes' if r['excludes_null'] else 'includes'} {r['null']:g}"
               + _undecidable(r) + _clipped(r) if r["estimate"] is not None
               else "no paired seed yet")
            for r in intervals]


def _clipped(r: dict) -> str:
    """How many of a pair's scores lay outside the plan's bounds (clipped to them), if any."""
    n = r.get("clipped", 0)
    return (f"; {n} of {2 * len(r['seeds'])} scores outside plan.bounds, clipped to them"
            if n else "")
