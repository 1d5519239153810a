r"""``python -m scripts.papers.atari5``: the tables, curves and csv of the Atari-5 panel.

Reads the trials of ``configs/studies/study_atari5_panel.yaml`` (``configs/impala_atari.yaml``
on Atari-5, Aitchison, Sweetser & Hutter, ICML 2023: BattleZone, DoubleDunk, NameThisGame,
Phoenix, Qbert; seeds 0-2, 1e7 frames each) and runs nothing. Each trial is read from its run
directory under the compare's output (``--runs``) where that holds a ``summary.json``, else
from its kept record (the compare file's ``keep:``, or ``--records DIR``), else from a run
directory with checkpoints and no summary (a run killed or lost: "stopped, no summary", at its
last checkpoint's frames): ``summary.json`` (frames, the last-100 training return),
``eval.json`` (the final evaluation) and the learning curve (TensorBoard events, or the
record's ``record.json``). Only finished trials enter the per-game and panel figures, and an
evaluation only where it is of the trial's last weights with the declared episodes; the
others are listed with their status, frames and source (run directory, kept record, or a
record rebuilt from the compare's table), with the code each ran (``meta.json``), its training
time and its torso monitor's verdict. It writes into ``--out``:

- ``atari5_panel.md``: per game, the last-100 training return and the final evaluation's
  mean return, each the mean over seeds with a 95% percentile bootstrap interval over seeds,
  and human-normalised with its interval (``envs/data/atari57_random_human.csv``), beside the
  PPO paper's Table 6 (PPO, 40M frames; ``envs/data/ppo_paper_table6_atari.csv``) and the RIMs
  paper's Table 7 (LSTM-PPO, metric and budget not stated;
  ``envs/data/rims_paper_table7_lstm_vs_rims_ppo.csv``); over games, the IQM, the median over
  games and the mean of the human-normalised scores with 95% stratified-bootstrap intervals
  (Agarwal et al. 2021: seeds resampled with replacement within each game,
  ``envs/statistics.py``); and one row per trial. A trial with no record is listed as missing,
  never left out silently.
- ``atari5_panel.png``: last-100 training return against frames, one panel per game, one line
  per seed, the references and the human score as horizontal lines.
- ``atari5_panel.csv``: every trial's curve, one row per logged point (``game, seed, status,
  frames, score, hns``: score is the last-100 training return, not the study csv's evaluation
  score), one row at its end for a trial whose record kept no curve, and a row with empty
  frames and score for each missing trial.

Where a game has fewer seeds than the others, the aggregates resample each game's own seeds
(``envs.statistics.stratified_bootstrap_groups``), which with equal counts is the same
distribution as its matrix bootstrap; the IQM pools every game x seed score, so a game with
fewer seeds weighs less, and the report says which trials are missing. No estimate of the
57-game median is made: the Atari-5 paper's printed regression coefficients were not
verified, and its regression was fitted on agents trained far longer than this panel's 1e7
frames.

    python -m scripts.papers.atari5          # the declared study, into runs/atari5_panel
    python -m scripts.papers.atari5 configs/studies/study_atari5_panel.yaml --out docs/results/data
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from envs import statistics as st

ROOT = Path(__file__).resolve().parents[2]
STUDY = "configs/studies/study_atari5_panel.yaml"
PPO_TABLE = ROOT / "envs" / "data" / "ppo_paper_table6_atari.csv"
NAME = "atari5_panel"  # the stem of the files written
REPS = 2000


@dataclass
class TrialRecord:
    """What one trial left: its frames, final scores and learning curve."""

    game: str
    seed: int
    frames: int  # frames reached
    target: int  # run.total_frames
    train_return: float | None  # last-100 training return of whole games at the end
    eval_return: float | None = None  # mean return of the final evaluation's episodes
    eval_std: float | None = None
    eval_episodes: int = 0
    curve: tuple = field(default_factory=lambda: (np.zeros(0), np.zeros(0)))  # (frames, return)
    interrupted: bool = False
    stopped: bool = False  # a run directory with checkpoints and no summary: killed or lost
    source: str = "run directory"  # or "kept record", "rebuilt from the compare's table"
    eval_current: bool = True  # eval.json is of the last checkpoint, with the declared episodes
    code: str = "n/a"  # meta.json's revisions, as the compare report's code column prints them
    wall_time_s: float | None = None  # training time, from summary.json
    torso: str = ""  # the torso monitor's verdict and the last layer's inactive share

    @property
    def status(self) -> str:
        """``finished`` at its full frames, ``stopped, no summary``, else ``unfinished``."""
        if self.stopped:
            return "stopped, no summary"
        return ("finished" if self.frames >= self.target and not self.interrupted
                else "unfinished")

    @property
    def finished(self) -> bool:
        """Whether this trial's scores enter the per-game and panel figures."""
        return self.status == "finished"

    @property
    def evaluation(self) -> float | None:
        """The final evaluation's mean return where it counts: finished, of its last weights."""
        return self.eval_return if self.finished and self.eval_current else None


def read_trial(directory: Path, game: str, seed: int, target: int,
               episodes: int = 30) -> TrialRecord | None:
    """The record of the trial whose run directory or kept record is ``directory`` (None: none).

    A run directory with checkpoints but no ``summary.json`` (its process killed, or its
    machine lost) is read as stopped, at its last checkpoint's frames. ``episodes``: the
    declared evaluation's episodes; an ``eval.json`` of other weights or episodes is stale.
    """
    from learners.runtime.run_dir import RunDir
    from scripts.compare.curves import learning_curve
    from scripts.compare.records import TABLE, code_cell, code_revisions
    from scripts.compare.trials import RECORD, eval_is_current, read_json

    summary = read_json(directory / "summary.json")
    kept = read_json(directory / RECORD)
    source = ("run directory" if kept is None else "kept record"
              if kept.get("checkpoint") != TABLE else "rebuilt from the compare's table")
    if summary is None:
        ckpt = RunDir(directory).latest_checkpoint() if directory.is_dir() else None
        if ckpt is None:
            return None
        return TrialRecord(game, seed, RunDir.frames_of(ckpt), int(target), None,
                           curve=learning_curve(directory), stopped=True,
                           code=code_cell(code_revisions(directory)))
    evaluation = read_json(directory / "eval.json")
    task = ((evaluation or {}).get("tasks") or {}).get(game) or {}
    return TrialRecord(game, seed, int(summary.get("frames", 0)), int(target),
                       summary.get("episode_return_mean"), task.get("return_mean"),
                       task.get("return_std"), int(task.get("episodes", 0)),
                       learning_curve(directory), bool(summary.get("interrupted")),
                       source=source,
                       eval_current=evaluation is None or eval_is_current(directory, episodes),
                       code=code_cell(code_revisions(directory)),
                       wall_time_s=summary.get("wall_time_s"),
                       torso=_torso(directory, summary.get("monitor") or {}))


def _torso(directory: Path, monitor: dict) -> str:
    """The monitor's verdict and its last torso layer's share of units off on every frame.

    The share is the highest over the run's probes, and that at the last probe.
    """
    from scripts.compare.curves import learning_curve

    last = monitor.get("last") or {}
    layers = [k for k in last if k.startswith("torso/") and k.endswith("/inactive")]
    if not layers:
        return "not monitored"
    tag = layers[-1]  # the layers in the torso's order: the last feeds the core
    blind = monitor.get("blind")
    verdict = ("never blind" if not blind else f"blind from {blind['frames'] / 1e6:.2f}M frames"
               + (f", saw again at {blind['sees_again'] / 1e6:.2f}M" if blind.get("sees_again")
                  else ""))
    values = learning_curve(directory, tag)[1]
    peak = f" at most {max(values):.0%}," if len(values) else ""
    return f"{verdict}; {tag.split('/')[1]}{peak} {last[tag]:.0%} at the last probe"


def collect(study: str | Path, records: str | Path | None = None, out: str | None = None):
    """(games, seeds, {(game, seed): TrialRecord}) of the study's trials that left a record.

    ``records``: kept records to read where a run directory has no ``summary.json`` (default:
    the compare file's ``keep:``); ``out``: the compare's output directory, as ``--out``.
    """
    from learners.config.schema import ConfigError
    from scripts.compare.spec import load_spec

    spec, trials, _ = load_spec(study, out)
    if suites := sorted({t.cfg.env.suite for t in trials} - {"atari"}):
        raise ConfigError(f"{study} trains on {', '.join(suites)}; atari5 reads an Atari panel "
                          "(env.suite: atari)")
    if records and not Path(records).is_dir():
        raise ConfigError(f"--records {records}: no such directory")
    keep = Path(records or spec.keep or "")
    games = list(dict.fromkeys(t.cfg.env.game for t in trials))
    found = {}
    for t in trials:
        # a run directory that finished, else the kept record, else a run that stopped
        where = next((d for d in (t.dir, keep / t.slug) if (d / "summary.json").is_file()),
                     t.dir)
        r = read_trial(where, t.cfg.env.game, t.seed, t.cfg.run.total_frames,
                       spec.evaluate.episodes)
        if r is not None:
            found[(r.game, r.seed)] = r
    return games, list(spec.seeds), found


def aggregates(scores: dict[str, list[float]], reps: int = REPS) -> dict[str, st.Interval]:
    """IQM, median and mean over games of ``scores`` (game -> its seeds' scores), 95% intervals.

    Games with no score are left out (the caller names them). Equal seed counts go through
    ``envs.statistics.stratified_bootstrap_ci`` on the [seeds, games] matrix.
    """
    groups = [np.asarray(v, dtype=float) for v in scores.values() if len(v)]
    if not groups:
        return {}
    if len({len(g) for g in groups}) == 1:
        matrix = np.stack(groups, axis=1)
        return {"iqm": st.stratified_bootstrap_ci(matrix, st.iqm, reps=reps),
                "median": st.stratified_bootstrap_ci(matrix, st.median, reps=reps),
                "mean": st.stratified_bootstrap_ci(matrix, st.mean, reps=reps)}
    return {"iqm": st.stratified_bootstrap_groups(groups, st.pooled_iqm, reps),
            "median": st.stratified_bootstrap_groups(groups, st.median_of_means, reps),
            "mean": st.stratified_bootstrap_groups(groups, st.mean_of_means, reps)}


def over_seeds(values: list[float], reps: int = REPS) -> st.Interval | None:
    """Mean over seeds with its 95% percentile bootstrap interval (None: no value)."""
    if not values:
        return None
    return st.stratified_bootstrap_ci(np.asarray(values, dtype=float)[:, None], st.mean,
                                      reps=reps)


def references() -> dict[str, dict]:
    """Game -> the published figures beside it; None where a table lacks the game.

    ``ppo``: the PPO paper's Table 6, PPO column; ``table7``: (mean, error) of the RIMs
    paper's Table 7, LSTM-PPO.
    """
    from scripts.papers.atari_panel import reference_scores

    with open(PPO_TABLE, newline="") as f:
        ppo = {row["game"]: float(row["ppo"]) for row in csv.DictReader(f)}
    table7 = reference_scores("lstm")
    return {g: {"ppo": ppo.get(g), "table7": table7.get(g)} for g in set(ppo) | set(table7)}


def _reference_cells(ref: dict) -> tuple[str, str]:
    ppo, t7 = ref.get("ppo"), ref.get("table7")
    return ("not in the table" if ppo is None else f"{ppo:,g}",  # as printed: 17,366.7
            "not in the table" if t7 is None else f"{t7[0]:,g} ± {t7[1]:,g}")


def _cell(ci: st.Interval | None, n: int, of: int, digits: int = 1) -> str:
    """``estimate [low, high]`` over ``n`` scores, ``(n=...)`` where fewer than ``of``."""
    if ci is None:
        return "no score"
    if n == 1:
        return f"{ci.estimate:,.{digits}f} (one seed)"
    return (f"{ci.estimate:,.{digits}f} [{ci.low:,.{digits}f}, {ci.high:,.{digits}f}]"
            + (f" (n={n})" if n < of else ""))


def _hns(game: str, ci: st.Interval | None, n: int) -> str:
    """The cell's human-normalised score and interval (HNS is an increasing linear map)."""
    from envs.scores import human_normalized

    if ci is None:
        return "n/a"
    if n == 1:
        return f"{human_normalized(game, ci.estimate):,.0f} %"
    low, mid, high = (human_normalized(game, x) for x in (ci.low, ci.estimate, ci.high))
    return f"{mid:,.0f} % [{low:,.0f}, {high:,.0f}]"


def _left_out(g: str, seeds: list[int], found: dict) -> list[str]:
    """Why each seed of ``g`` that gives no figure gives none."""
    out = []
    for s in seeds:
        r = found.get((g, s))
        if r is None:
            out.append(f"seed {s} missing")
        elif not r.finished:
            out.append(f"seed {s} {r.status} at {r.frames / 1e6:.2f}M frames, left out")
    return out


def markdown(games: list[str], seeds: list[int], found: dict, reps: int = REPS) -> str:
    """The panel's tables: per game, over games, per trial; missing trials named."""
    from envs.scores import human_normalized

    refs = references()
    missing = [(g, s) for g in games for s in seeds if (g, s) not in found]
    lines = ["Per game: the mean over seeds with a 95% percentile bootstrap interval over seeds "
             "(with 3 seeds it lies within the seeds' range and understates the uncertainty); "
             "HNS: human-normalised, 100 (score - random) / (human - random), "
             "envs/data/atari57_random_human.csv. The references are at their own budgets: the "
             "PPO paper's Table 6 at 40M frames (last 100 training episodes, 3 seeds), the RIMs "
             "paper's Table 7 (mean ± error over 3 runs; its metric and budget not stated). Only "
             "finished trials enter the figures (n where fewer than the seeds), and an "
             "evaluation only where it is of the trial's last weights with the declared "
             "episodes. Over games: the IQM of the HNS over games x seeds, the median over games "
             "of each game's mean, and the mean, with 95% stratified-bootstrap intervals (seeds "
             "resampled within each game). DoubleDunk's human and random scores are 2.2 points "
             "apart, so one point of its return is 45 HNS points: the mean over games moves "
             "mostly with DoubleDunk, and the IQM and the median trim such extremes.", "",
             "| game | seeds | training return, last 100 [95% CI] | HNS | "
             "evaluation, mean return [95% CI] | HNS | PPO, 40M frames (PPO paper, Table 6) | "
             "LSTM-PPO (RIMs paper, Table 7) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    hns = {"training": {}, "evaluation": {}}
    for g in games:
        done = [found[(g, s)] for s in seeds if (g, s) in found and found[(g, s)].finished]
        train = [r.train_return for r in done if r.train_return is not None]
        ev = [r.evaluation for r in done if r.evaluation is not None]
        hns["training"][g] = [human_normalized(g, x) for x in train]
        hns["evaluation"][g] = [human_normalized(g, x) for x in ev]
        gone = _left_out(g, seeds, found)
        count = f"{len(done)} of {len(seeds)}" + (f" ({'; '.join(gone)})" if gone else "")
        tci, eci = over_seeds(train, reps), over_seeds(ev, reps)
        ppo, t7 = _reference_cells(refs.get(g, {}))
        lines.append(f"| {g} | {count} | {_cell(tci, len(train), len(seeds))} | "
                     f"{_hns(g, tci, len(train))} | {_cell(eci, len(ev), len(seeds))} | "
                     f"{_hns(g, eci, len(ev))} | {ppo} | {t7} |")
    lines += ["", "| human-normalised score | IQM [95% CI] | median of games [95% CI] | "
              "mean [95% CI] | games x seeds |", "| --- | ---: | ---: | ---: | --- |"]
    for name, scores in hns.items():
        agg = aggregates(scores, reps)
        n = sum(len(v) for v in scores.values())
        absent = [g for g, v in scores.items() if not v]
        extent = f"{n} of {len(games) * len(seeds)}" + (
            f" (no score: {', '.join(absent)})" if absent else "")
        if n and max(len(v) for v in scores.values()) == 1:  # resampling one seed moves nothing
            cells = [f"{agg[k].estimate:,.1f} (one seed per game: no interval)"
                     for k in ("iqm", "median", "mean")]
        else:
            cells = [_cell(agg.get(k), n, n) for k in ("iqm", "median", "mean")]
        lines.append(f"| {name} | {' | '.join(cells)} | {extent} |")
    lines += ["", "| game | seed | status | frames | training return | "
              "evaluation: mean ± sd (episodes) | code | training time | torso: units "
              "inactive on every frame | source |",
              "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | --- | --- |"]
    for g in games:
        for s in seeds:
            r = found.get((g, s))
            if r is None:
                lines.append(f"| {g} | {s} | missing | | | | | | | |")
                continue
            ev = ("n/a" if r.eval_return is None else
                  f"{r.eval_return:,.1f} ± {r.eval_std or 0:,.1f} ({r.eval_episodes})"
                  + ("" if r.eval_current else ", stale: not of its last weights or "
                     "not the declared episodes"))
            train = "n/a" if r.train_return is None else f"{r.train_return:,.1f}"
            took = "" if r.wall_time_s is None else f"{r.wall_time_s:,.0f} s"
            lines.append(f"| {g} | {s} | {r.status} | {r.frames:,} | {train} | {ev} | "
                         f"{r.code} | {took} | {r.torso} | {r.source} |")
    if missing:
        lines += ["", "Missing (no record: not run, still running, or lost): "
                  + ", ".join(f"{g} seed {s}" for g, s in missing) + "."]
    return "\n".join(lines) + "\n"


def write_csv(games: list[str], seeds: list[int], found: dict, path: Path) -> None:
    """Every trial's curve (game, seed, status, frames, score, hns); a row per missing trial."""
    from envs.scores import human_normalized

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["game", "seed", "status", "frames", "score", "hns"])
        for g in games:
            for s in seeds:
                r = found.get((g, s))
                if r is None:
                    w.writerow([g, s, "missing", "", "", ""])
                    continue
                if not len(r.curve[0]):  # no curve kept: the trial's end, where it has one
                    y = r.train_return
                    w.writerow([g, s, r.status, r.frames, "" if y is None else f"{y:.3f}",
                                "" if y is None else f"{human_normalized(g, y):.2f}"])
                    continue
                w.writerows([g, s, r.status, int(x), f"{y:.3f}", f"{human_normalized(g, y):.2f}"]
                            for x, y in zip(*r.curve))


def plot(games: list[str], seeds: list[int], found: dict, path: Path) -> None:
    """The curve grid: one panel per game, one line per seed, references as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scripts.papers.atari_panel import finish_game_axes, save_grid

    refs = references()
    cols = 3
    rows = (len(games) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, g in zip(axes.flat, games):
        for s in seeds:
            r = found.get((g, s))
            if r is None or not len(r.curve[0]):
                ax.plot([], [], ls="none",
                        label=f"seed {s}: {'missing' if r is None else 'no curve'}")
                continue
            ax.plot(r.curve[0] / 1e6, r.curve[1], lw=1.2,
                    label=f"seed {s}" + ("" if r.finished else f" ({r.status})"))
        ref = refs.get(g, {})
        if ref.get("ppo") is not None:
            ax.axhline(ref["ppo"], color="k", ls="--", lw=1, label="PPO paper, 40M frames")
        if ref.get("table7") is not None:
            ax.axhline(ref["table7"][0], color="k", ls="-.", lw=1,
                       label="LSTM-PPO, RIMs paper (budget not stated)")
        finish_game_axes(ax, g, "training return (last 100 games)")
    save_grid(fig, axes, len(games), path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """Write the panel's markdown, png and csv; 0, or 2 on a config error."""
    p = argparse.ArgumentParser(prog="python -m scripts.papers.atari5",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("study", nargs="?", default=STUDY, help=f"the compare file (default {STUDY})")
    p.add_argument("--records", metavar="DIR",
                   help="kept records to read where a run directory has none (default: the "
                        "compare file's keep:)")
    p.add_argument("--runs", metavar="DIR",
                   help="the compare's output directory, where it ran with --out (default: the "
                        "compare file's out:, else runs/compare/<name>)")
    p.add_argument("--out", default="runs/atari5_panel",
                   help="output directory (default runs/atari5_panel)")
    args = p.parse_args(argv)
    from learners.config.schema import ConfigError

    try:
        games, seeds, found = collect(args.study, args.records, args.runs)
    except ConfigError as e:
        print(f"atari5: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.md").write_text(markdown(games, seeds, found))
    write_csv(games, seeds, found, out / f"{NAME}.csv")
    plot(games, seeds, found, out / f"{NAME}.png")
    print(f"[atari5] {len(found)} of {len(games) * len(seeds)} trials have a record; wrote "
          f"{out / NAME}.md, .csv and .png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
