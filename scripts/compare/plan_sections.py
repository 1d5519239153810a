"""A compare report's plan sections: the declared plan, the primary intervals, paired scores.

``scripts/compare/report.py`` writes a compare's report; these are its sections that read the plan
``scripts/compare/plan.py`` keeps (``plan.json``) and the primary pairs' confidence sequences
(``plan.primary_intervals``), as lines of Markdown.
"""

from __future__ import annotations

import math

import numpy as np

from scripts.compare.plan import decided, settled


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _score(x) -> str:
    """A score with the digits its size needs: 1,737 / 74.1 / 0.955 (halves round up)."""
    if x is None:
        return ""
    return (f"{math.floor(x + 0.5):,}" if abs(x) >= 1000 else f"{x:.1f}" if abs(x) >= 10
            else f"{x:.3g}")


def markdown(res: dict) -> list[str]:
    """The report's plan and primary-comparison sections, as lines of Markdown."""
    state, primary = res.get("plan"), res.get("primary") or []
    if not state:
        return ["No plan on record: every comparison below is exploratory.", ""]
    p = state["plan"]
    frames = sorted(set(p["frames"].values()))
    lines = ["## Plan", "",
             f"Declared {state['first_seen']} (first run of this compare): "
             f"{len(p['pairs'])} primary pair(s), {len(p['seeds'])} seeds {p['seeds']}, "
             f"{', '.join(f'{f:,}' for f in frames)} frames per trial, score "
             f"{p['score']} ({p['aggregate']} over a trial's tasks), statistic {p['statistic']}"
             + (f" of scores clipped to {p['bounds']}" if p["statistic"] == "difference" else "")
             + f", stop: {p['stop']}, alpha {p['alpha']} over the pairs; "
             f"{p['evaluation_episodes']} evaluation episodes per task.", ""]
    if untested := res.get("untested_claims"):
        lines += ["The plan names a claim no declared pair tests: " + "; ".join(untested)
                  + ".", ""]
    looks = [c for c in state["changes"] if c["after_report"]]
    before = [c for c in state["changes"] if not c["after_report"]]
    lines += [f"Reports written: {len(state['reports'])} (this one included)."]
    if looks:
        lines += ["", "**Unplanned looks** (changes made after a report had been written; the "
                  "intervals stay valid for adding seeds, not for changing what is scored):"]
        lines += [f"- {c['date']}: " + "; ".join(c["what"]) for c in looks]
    else:
        lines += ["No change to the plan after a report was written."]
    lines += [f"- changed before any report, {c['date']}: " + "; ".join(c["what"])
              for c in before]
    since = (state.get("settings") or {}).get("since")
    if since and since > state["first_seen"]:  # kept by a newer mira than the plan's
        lines += [f"The variants' training settings and the threshold are on record from "
                  f"{since}: a change to them before then is not dated here."]
    lines.append("")
    if not primary:
        return lines
    # The level and score the intervals were computed with: the plan as it is now, which a
    # dated change (above) may have moved from the plan as first seen.
    k, alpha = len(primary), primary[0]["alpha"] * len(primary)
    what = ("mean paired difference (a - b)" if primary[0]["statistic"] == "difference"
            else "P(a beats b at a seed), ties one half")
    lines += ["## Primary comparisons (anytime-valid)", "",
              f"Each declared pair's {what} over the seeds both variants have, paired by seed "
              "(variants at one seed share environment seeds and, where their torsos match, the "
              "torso's initial weights). Intervals are confidence sequences (hedged betting, "
              "Waudby-Smith & Ramdas 2023): valid however often the report is read and whenever "
              f"the compare stops. Level 1 - {alpha:g}/{k} each (Bonferroni over {k} declared "
              f"pair(s)), so all {k} hold together with probability {1 - alpha:.2f}. "
              f"No difference is {primary[0]['null']:g}.", "",
              f"| a | b | seeds | estimate | interval | excludes {primary[0]['null']:g} |"
              + (" claim |" if (claims := any(r.get("claim") for r in primary)) else ""),
              "| --- | --- | ---: | ---: | --- | --- |" + (" --- |" if claims else "")]
    for r in primary:
        side = ("" if not r["excludes_null"] else
                ": a above b" if r["low"] > r["null"] else ": a below b")
        lines.append(f"| {r['pair'][0]} | {r['pair'][1]} | {len(r['seeds'])} | "
                     f"{_num(r['estimate'])} | [{_num(r['low'])}, {_num(r['high'])}] | "
                     f"{'yes' + side if r['excludes_null'] else 'no'} |"
                     + (f" {r.get('claim') or ''} |" if claims else ""))
    null = f"{primary[0]['null']:g} (no difference)"
    against = [f"{r['pair'][0]} below {r['pair'][1]}" for r in primary
               if r["excludes_null"] and r["high"] < r["null"]]
    if decided(primary):
        verdict = f"Decided: every primary interval excludes {null}."
    else:
        done = sum(r["excludes_null"] for r in primary)
        verdict = (f"Not decided: {done} of {k} primary intervals exclude {null}; the study is "
                   "decided when all do. An interval that excludes it stays so at later looks.")
        stuck = [r for r in primary if r.get("undecidable") and r["seeds_left"]]
        latest = state["changes"][-1]["record"] if state["changes"] else p  # the plan now
        if stuck:
            verdict += (" " + "; ".join(f"{r['pair'][0]} vs {r['pair'][1]}" for r in stuck)
                        + f" cannot exclude {primary[0]['null']:g} within the declared seeds: "
                        "even if every seed left went to one side, the interval would still "
                        "hold it" + (", which ends the compare under its rule (stop: settled)."
                                     if settled(primary) and latest["stop"] == "settled"
                                     else "."))
    verdict += (" Decided with a below b: " + "; ".join(against) + "." if against
                else " No pair is decided with a below b.")
    lines += ["", verdict, ""]
    lines += [f"- {r['pair'][0]} vs {r['pair'][1]}: {r['clipped']} of {2 * len(r['seeds'])} "
              f"scores lay outside plan.bounds {r['bounds']} and were clipped to them; clipping "
              "pulls each seed's difference toward 0, so the interval can understate it."
              for r in primary if r.get("clipped")] + (
        [""] if any(r.get("clipped") for r in primary) else [])
    return lines + paired_markdown(primary, primary[0].get("score", p["score"]),
                                   primary[0].get("aggregate", p["aggregate"]))


def paired_markdown(primary: list[dict], score: str, aggregate: str) -> list[str]:
    """The trial scores the primary intervals read, one row per seed, and each pair's tally."""
    table: dict[str, dict[int, float]] = {}
    for r in primary:
        for i, name in enumerate(r["pair"]):
            table.setdefault(name, {}).update((s, x[i]) for s, x in zip(r["seeds"], r["scores"]))
    seeds = sorted({s for column in table.values() for s in column})
    if not seeds:
        return []
    what = ("the final evaluation's" if score == "eval" else "the last-100 training return's")
    lines = ["### Scores paired by seed", "",
             f"Each trial's score as the plan reads it ({what} {aggregate} over the trial's "
             "tasks).", "",
             "| seed | " + " | ".join(table) + " |", "| ---: |" + " ---: |" * len(table)]
    lines += [f"| {s} | " + " | ".join(_score(column.get(s)) for column in table.values()) + " |"
              for s in seeds]
    lines.append("| mean | " + " | ".join(_score(float(np.mean(list(c.values()))) if c else None)
                                          for c in table.values()) + " |")
    lines.append("")
    for r in primary:
        if not r["seeds"]:
            continue
        above = [s for s, (x, y) in zip(r["seeds"], r["scores"]) if x > y]
        below = [s for s, (x, y) in zip(r["seeds"], r["scores"]) if x < y]
        lines.append(f"- {r['pair'][0]} above {r['pair'][1]} at {len(above)} of "
                     f"{len(r['seeds'])} seed(s)"
                     + (f"; below at seed(s) {', '.join(map(str, below))}" if below else "")
                     + (f"; tied at {len(r['seeds']) - len(above) - len(below)}"
                        if len(above) + len(below) < len(r["seeds"]) else "") + ".")
    return lines + [""]
