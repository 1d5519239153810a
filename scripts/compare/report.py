"""What ``mira compare`` leaves: ``results.json``, ``report.md``, three PNG plots, a table.

The table is the compare file's ``csv:`` section, when it has one (``results_csv.py``), and
with its ``probes:`` a table of the torso monitor's series.

Scores follow Agarwal et al. 2021 (``envs/statistics.py``): per trial, the final
evaluation's score per task, normalised when the suite has reference scores (every task
of every trial has ``normalized_score``), raw mean episode return otherwise. Per variant, a
score matrix ``[seeds, tasks]`` gives median / mean / IQM (and the capped mean when
normalised) with stratified bootstrap 95% CIs (seeds resampled per task), and every pair
of variants the probability of improvement P(row > column) with its CI.

Learning curves are the training return (TensorBoard tag ``episode_return_mean100``, the
mean of the last 100 episodes) of each trial or, when scores are normalised, the mean over
tasks of the normalised training scores (``normalized_score_mean``; capped per task,
``normalized_score_capped_mean``, when the headline aggregate is the capped mean), interpolated
onto a common frame grid; the band is a 95% percentile bootstrap over seeds of the mean at
each grid point. The plots are drawn by ``scripts/compare/report_plots.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from envs import statistics as st
from learners.runtime.logbook import duration
from scripts.compare import health, plan_sections, publish, records, results_csv
from scripts.compare import plan as plan_mod
from scripts.compare import trials as trials_mod
from scripts.compare.curves import learning_curve, probes
from scripts.compare.report_plots import plot

# What a compare file's ``threshold:`` is read on: the last-100 mean training return (raw, in
# the game's own points), whether or not the report's curves show normalised scores.
THRESHOLD_TAG = "episode_return_mean100"
REPS = 2000


def param_count(run_dir: Path) -> int | None:
    """Number of values in the last checkpoint's agent state dict (parameters and buffers)."""
    from learners.runtime.run_dir import RunDir

    ckpt = RunDir(run_dir).latest_checkpoint()
    if ckpt is None:
        return (records.record(run_dir) or {}).get("params")  # restored from its kept record
    agent = RunDir.load_checkpoint(ckpt)["learner"]["agent"]
    return int(sum(v.numel() for v in agent.values() if hasattr(v, "numel")))


def time_to_threshold(run_dir: Path, tag: str, value: float) -> dict:
    """Where the run's curve ``tag`` first reaches ``value``: frames and training seconds.

    The first logged point at or above ``value`` (points come every ``run.log_every_s``), with
    the run's ``wall_time_s`` logged at that point (training time, resumes included). Both are
    None when the curve never reaches it; the run is never stopped there.
    """
    if ((kept := records.record(run_dir)) or {}).get("threshold"):  # rebuilt from a table
        return kept["threshold"]
    frames, y = learning_curve(run_dir, tag)
    hit = np.flatnonzero(y >= value)
    if not len(hit):
        return {"frames": None, "wall_time_s": None}
    at = frames[hit[0]]
    wall_frames, wall = learning_curve(run_dir, "wall_time_s")
    same = np.flatnonzero(wall_frames == at)
    return {"frames": int(at), "wall_time_s": float(wall[same[0]]) if len(same) else None}


def curve_tag(res: dict) -> tuple[str, str]:
    """The learning curves' TensorBoard tag and axis label for ``collect``'s results.

    Multitask returns are on per-level scales (Watermaze up to 33, most levels about 1), so
    with a score table the curves show the mean of the normalised scores over tasks instead,
    capped at 100 per task only when the headline aggregate is the capped mean (DMLab-30's
    convention; an Atari game past human level would otherwise flatten the curve).
    """
    if res["score_key"] != "normalized_score":
        return "episode_return_mean100", "training episode return (mean of last 100 episodes)"
    if res["aggregate"] == "capped_mean":
        return ("normalized_score_capped_mean",
                f"training {res['score']}: capped mean over tasks")
    return "normalized_score_mean", f"training {res['score']}: mean over tasks"


def _interval(ci) -> dict:
    return {"value": ci.estimate, "ci95": [ci.low, ci.high]}


def collect(out: Path, spec, trials, failed: dict, target_frames: int,
            unfinished: list[str] = ()) -> dict:
    """Everything the report shows, as plain JSON (``unfinished``: trials left out, by slug)."""
    rows, scores = [], {}
    for t in trials:
        summary = json.loads((t.dir / "summary.json").read_text())
        ev = (json.loads((t.dir / "eval.json").read_text()) if (t.dir / "eval.json").is_file()
              else None)
        if (value := plan_mod.trial_score(spec.plan, summary, ev)) is not None:
            scores.setdefault(t.variant, {})[t.seed] = value
        rows.append({
            "trial": t.slug, "variant": t.variant, "settings": t.settings, "seed": t.seed,
            "dir": str(t.dir), "frames": summary["frames"], "wall_time_s": summary["wall_time_s"],
            "restored": (None if (kept := records.record(t.dir)) is None
                         else "table" if kept.get("table") else "record"),
            "params": param_count(t.dir), "train_return_mean100": summary["episode_return_mean"],
            "code": records.code_revisions(t.dir),
            "health": health.summary(t.dir),
            "train_tasks": summary.get("episode_return_mean_per_task") or {},
            "eval": None if ev is None else {"score": ev["score"], "tasks": ev["tasks"],
                                             "aggregates": ev["aggregates"]},
        })
    evaluated = [r for r in rows if r["eval"]]
    normalised = bool(evaluated) and all(e["normalized_score"] is not None for r in evaluated
                                         for e in r["eval"]["tasks"].values())
    key = "normalized_score" if normalised else "return_mean"
    # A compare that evaluates nothing (evaluate.episodes: 0) scores its trials by the last-100
    # training return per task (summary.json), so its variants still get their aggregates and
    # intervals; an eval.json a user wrote into a trial there does not change the mode.
    final = "evaluation" if spec.evaluate.episodes else "training"
    for r in rows:
        r["final_tasks"] = (r["train_tasks"] if final == "training" else
                            {task: e[key] for task, e in r["eval"]["tasks"].items()}
                            if r["eval"] else {})
    keys = list(dict.fromkeys(k for t in trials for k in t.settings))
    varying = [k for k in keys
               if len({json.dumps(t.settings.get(k), sort_keys=True) for t in trials}) > 1] or keys
    variants = {}
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name]
        tasks = list(next((r["final_tasks"] for r in mine if r["final_tasks"]), {}))
        scored = [r for r in mine if r["final_tasks"] and list(r["final_tasks"]) == tasks]
        matrix = [[r["final_tasks"][task] for task in tasks] for r in scored]
        settings = mine[0]["settings"]
        label = ", ".join(
            f"{k.split('.')[-1]}={Path(settings[k]).stem if k == 'base' else settings[k]}"
            for k in varying if k in settings)
        v = {"label": label or name, "settings": settings, "seeds": [r["seed"] for r in scored],
             "tasks": tasks, "scores_per_seed": matrix,
             "frames_mean": float(np.mean([r["frames"] for r in mine])),
             "wall_time_s_mean": _mean([r["wall_time_s"] for r in mine]),
             "timed": sum(r["wall_time_s"] is not None for r in mine), "trials": len(mine),
             "params": mine[0]["params"], "aggregates": {},
             "matched": next((t.matched for t in trials if t.variant == name), None),
             "per_task": [_interval(st.stratified_bootstrap_ci(np.array(matrix)[:, [i]], st.mean,
                                                               reps=REPS))
                          for i in range(len(tasks))] if matrix else []}
        if matrix:
            for agg, fn in st.AGGREGATES.items():
                if agg != "capped_mean" or normalised:
                    v["aggregates"][agg] = _interval(
                        st.stratified_bootstrap_ci(np.array(matrix), fn, reps=REPS))
        variants[name] = v
    names = [n for n in variants if variants[n]["scores_per_seed"]]
    poi = [[None] * len(names) for _ in names]
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j and variants[a]["tasks"] == variants[b]["tasks"]:
                x, y = (np.array(variants[a]["scores_per_seed"]),
                        np.array(variants[b]["scores_per_seed"]))
                poi[i][j] = _interval(st.probability_of_improvement_ci(x, y, reps=REPS))
    headline = spec.aggregate if spec.aggregate != "capped_mean" or normalised else "mean"
    pbt = (json.loads((out / "pbt.json").read_text())
           if spec.pbt.enabled and (out / "pbt.json").is_file() else None)
    plan_state = (json.loads((out / "plan.json").read_text()) if (out / "plan.json").is_file()
                  else None)
    return {
        "name": spec.name, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "target_frames": target_frames,
        "score": ("raw training episode return (last 100 episodes)" if final == "training"
                  else f"{evaluated[0]['eval']['score']} score" if normalised
                  else "raw episode return"),
        "final": final, "score_key": key, "aggregate": headline,
        "evaluation_episodes": spec.evaluate.episodes,
        "ci": f"95% percentile stratified bootstrap over seeds (per task), {REPS} replicates",
        "trials": rows, "variants": variants, "failed": failed, "unfinished": list(unfinished),
        "probability_of_improvement": {"variants": names, "matrix": poi}, "pbt": pbt,
        "plan": plan_state, "primary": plan_mod.primary_intervals(spec.plan, scores, spec.seeds),
        "untested_claims": spec.plan.untested_claims(),
        "compare": dataclasses.asdict(spec),
    }


def _mean(values: list) -> float | None:
    """The mean of the values that are known (a record rebuilt from a table has no times)."""
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _duration(seconds: float | None) -> str:
    return "n/a" if seconds is None else duration(seconds)


def _timed(v: dict) -> str:
    """" (2 of 3 timed)" where some of a variant's trials have no training time (rebuilt)."""
    return "" if v["timed"] in (0, v["trials"]) else f" ({v['timed']} of {v['trials']} timed)"


def _fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def threshold_markdown(res: dict) -> list[str]:
    """The report's time-to-threshold table (the compare file's ``threshold:``), or nothing."""
    th = res.get("threshold")
    if not th:
        return []
    lines = ["", f"## Time to {th['value']:g}", "",
             f"Each trial's first logged point with `{th['tag']}` >= {th['value']:g}: its "
             "frames and its training time (resumes included). Trials run to their full budget "
             "whatever the curve does; the last column is where they end.", "",
             "| trial | frames to it | training time to it | frames run | final |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in res["trials"]:
        t = th["trials"].get(r["trial"], {})
        frames = "not reached" if t.get("frames") is None else f"{t['frames']:,}"
        wall = ("" if t.get("frames") is None else "n/a (not logged)"
                if t.get("wall_time_s") is None else duration(t["wall_time_s"]))
        lines.append(f"| {r['trial']} | {frames} | {wall} | {r['frames']:,} | "
                     f"{_fmt(r['train_return_mean100'], 1)} |")
    return lines


def per_task_markdown(variants: list[dict]) -> list[str]:
    """The per-task table: one row per variant, one column per task any variant has.

    Variants may play different tasks (a game per variant): a cell a variant has no score
    for is a dash. No table for more than 30 tasks.
    """
    tasks = list(dict.fromkeys(t for v in variants if v["per_task"] for t in v["tasks"]))
    if not 1 <= len(tasks) <= 30:
        return []
    lines = ["", "## Per task (mean over seeds, 95% bootstrap CI over seeds)", "",
             "| variant | " + " | ".join(tasks) + " |", "| --- |" + " ---: |" * len(tasks)]
    for v in variants:
        if not v["per_task"]:
            continue
        cells = dict(zip(v["tasks"], v["per_task"]))
        lines.append(f"| {v['label']} | " + " | ".join(
            f"{_fmt(c['value'], 2)} [{_fmt(c['ci95'][0], 2)}, {_fmt(c['ci95'][1], 2)}]"
            if (c := cells.get(t)) else "—" for t in tasks) + " |")
    return lines


def markdown(res: dict) -> str:
    """The text of ``report.md`` for ``collect``'s results.

    Sections: variants (headline aggregate with its CI), per-task means (2 to 30 tasks),
    probability of improvement (2 or more scored variants), trials, then the three plots.
    """
    agg, variants = res["aggregate"], res["variants"]
    lines = [f"# Compare: {res['name']}", "",
             f"{len(variants)} variant(s), {len(res['trials'])} trial(s), "
             f"target {res['target_frames']:,} frames each; "
             + (f"final evaluation: {res['evaluation_episodes']} episodes per task "
                "of each trial's last checkpoint." if res["final"] == "evaluation"
                else "no final evaluation: a trial's score is its last-100 training return per "
                     "task."), "",
             f"**Score: {res['score']}**; headline aggregate **{agg}** over seeds x tasks; "
             f"CIs: {res['ci']} (Agarwal et al. 2021).", ""]
    if res.get("unfinished"):
        lines += [f"**Partial report** (`mira compare --report`): {len(res['unfinished'])} "
                  "trial(s) not finished and evaluated yet are left out: "
                  + trials_mod.left_out(res["unfinished"], [r["trial"] for r in res["trials"]])
                  + ".", ""]
    if restored := [r["trial"] for r in res["trials"] if r.get("restored") == "record"]:
        lines += [f"{len(restored)} trial(s) restored from their kept records (scores, curves and "
                  "times as they were; no checkpoint to resume or re-evaluate): "
                  + ", ".join(restored) + ".", ""]
    if rebuilt := [r["trial"] for r in res["trials"] if r.get("restored") == "table"]:
        lines += [f"{len(rebuilt)} trial(s) rebuilt from the compare's table: their frames and "
                  "final scores only (no curves, training times or checkpoints; their run "
                  "directories were lost): " + ", ".join(rebuilt) + ".", ""]
    if res["pbt"]:
        lines += ["PBT was on: seeds of one variant exchanged weights, so they are not independent "
                  "runs and the CIs understate the uncertainty.", ""]
    lines += plan_sections.markdown(res)
    lines += ["## Variants", "",
              f"| variant | {agg} | 95% CI | seeds | frames (mean) | "
              "wall time (mean) | parameters |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for v in variants.values():
        a = v["aggregates"].get(agg)
        # One seed: the bootstrap over seeds has nothing to resample, its "interval" is a point.
        ci = ("n/a (one seed)" if len(v["seeds"]) == 1
              else f"[{_fmt(a['ci95'][0])}, {_fmt(a['ci95'][1])}]" if a else "n/a")
        lines.append(f"| {v['label']} | {_fmt(a and a['value'])} | {ci} | {len(v['seeds'])} | "
                     f"{v['frames_mean']:,.0f} | {_duration(v['wall_time_s_mean'])}{_timed(v)} | "
                     f"{v['params'] or 0:,} |")
    lines += [f"- {v['label']}: match_params set {m['width']} = {m['value']} "
              f"({m['params']:,} parameters; reference {m['reference']}: "
              f"{m['reference_params']:,}, {m['params'] / m['reference_params'] - 1:+.1%})"
              for v in variants.values() if (m := v.get("matched"))]
    lines += per_task_markdown(list(variants.values()))
    poi = res["probability_of_improvement"]
    if len(poi["variants"]) > 1:
        labels = [variants[n]["label"] for n in poi["variants"]]
        lines += ["", "## Exploratory: probability of improvement", "",
                  "Exploratory (every pair the plan does not declare; the declared pairs' cells "
                  "too, read as description): these bootstrap intervals are not adjusted for "
                  "repeated looks or for the number of pairs.", "",
                  "P(row > column): the probability that a run of the row variant scores above a "
                  "run of the column variant on a task drawn at random (ties count one half), "
                  "with its 95% CI.", "",
                  "| row \\ column | " + " | ".join(labels) + " |",
                  "| --- |" + " --- |" * len(labels)]
        one_seed = [len(variants[n]["seeds"]) == 1 for n in poi["variants"]]
        for i, (label, row) in enumerate(zip(labels, poi["matrix"])):
            cells = ["—" if p is None
                     else f"{p['value']:.2f} (one seed)" if one_seed[i] or one_seed[j]
                     else f"{p['value']:.2f} [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]"
                     for j, p in enumerate(row)]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += threshold_markdown(res)
    lines += health.markdown(res["trials"], {n: v["label"] for n, v in variants.items()})
    lines += ["", "## Trials", ""]
    revisions = {c["revision"] for r in res["trials"] for c in r.get("code", [])}
    if len(revisions) > 1:
        lines += [f"The trials ran on {len(revisions)} code revisions (the code column: the "
                  "revision each started on, then any it resumed on, from its `meta.json`); "
                  "whether the changes between them touch what is compared is for the study to "
                  "say.", ""]
    lines += ["| trial | frames | wall time | train return (last 100) | "
              "eval score (mean over tasks) | code |",
              "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in res["trials"]:
        score = (np.mean([e[res["score_key"]] for e in r["eval"]["tasks"].values()])
                 if r["eval"] and r["eval"].get("tasks") else None)
        lines.append(f"| {r['trial']} | {r['frames']:,} | {_duration(r['wall_time_s'])} | "
                     f"{_fmt(r['train_return_mean100'])} | {_fmt(score)} | "
                     f"{records.code_cell(r.get('code', []))} |")
    for slug, error in res["failed"].items():
        lines.append(f"| {slug} | failed: {error} | | | | |")
    lines += ["", "![learning curves](learning_curves.png)", "",
              "![final scores](final_scores.png)", ""]
    if len(poi["variants"]) > 1:
        lines += ["![probability of improvement](probability_of_improvement.png)", ""]
    return "\n".join(lines)


def keep_records(spec, out: Path, trials) -> int:
    """Keep the records of ``trials`` (finished, evaluated) in the compare's ``keep:`` directory.

    What a report keeps, without writing a report (which the plan logs as a look at the data):
    ``mira compare`` calls it as each trial finishes, so a machine lost mid-study loses no
    finished trial's record. Returns how many records were written (0 without ``keep:``).
    """
    if not spec.keep:
        return 0
    return records.keep(trials, spec.keep, out, learning_curve, param_count, health.summary,
                        probes)


def write_report(out: Path, spec, trials, failed: dict, target_frames: int,
                 unfinished: list[str] = (), started=()) -> dict:
    """Write ``results.json``, ``report.md`` and the plots into ``out``; returns the results.

    ``trials`` are the compare trials that did not fail; ``failed`` maps the others' slugs to
    their errors; ``unfinished`` names the trials a partial report leaves out; ``started``
    holds the failed and unfinished trials that started, for the table (``results_csv``).
    """
    if (out / "plan.json").is_file():
        plan_mod.note_report(out)  # a report is a look at the data
    res = collect(out, spec, trials, failed, target_frames, unfinished)
    tag, ylabel = curve_tag(res)
    if spec.threshold is not None:  # on the raw return, whatever the curves show
        res["threshold"] = {"value": spec.threshold, "tag": THRESHOLD_TAG,
                            "trials": {t.slug: time_to_threshold(t.dir, THRESHOLD_TAG,
                                                                 spec.threshold)
                                       for t in trials}}
    (out / "results.json").write_text(json.dumps(res, indent=2))
    (out / "report.md").write_text(markdown(res))
    results_csv.write(out, spec.csv, res, trials, started)
    results_csv.write_probes(spec.csv, res, trials, probes)
    curves: dict = {}
    for t in trials:  # a trial rebuilt from a table has no curve
        if len((curve := learning_curve(t.dir, tag))[0]):
            curves.setdefault(t.variant, []).append(curve)
    plot(out, res, curves, ylabel)
    publish.write(out, spec.publish)
    keep_records(spec, out, trials)
    return res
