r"""``python -m scripts.papers.atari_panel``: Atari presets on a few games, beside a reference.

Each learner preset (``configs/impala_atari.yaml``, ``configs/ppo_atari.yaml``) trains on
Pong, Breakout, Boxing and Freeway for a frame budget and one or more seeds, through ``mira
compare`` (``scripts/compare/command.py``): an interrupted panel continues where it stopped when the
same command is run again, and raising ``--frames`` extends finished trials. On 2 cores the
trials run one at a time (``--max-concurrent 1``); each trial is a whole ``mira train`` run
with its preset's runners. A trial runs the first ``--frames`` of a 40M-frame protocol: the
learning rate decays linearly over ``--schedule-frames`` (default 4e7, Table 7's protocol and
``ppo_atari.yaml``'s ``run.total_frames``; ``learner.optimizer.lr_decay_frames``), not over
``--frames``, so a 1e7 panel shows the start of the runs the references made, and extending it up to
``--schedule-frames`` continues the same schedule (beyond it, the decay ends at ``--frames``
and moves with it). A trial resumes with the settings of the command that resumes it, so
keep ``--schedule-frames`` the same across the runs of one panel. The output directory then
holds, besides the compare report:

- ``panel.png``: training return (mean of the last 100 episodes) against frames, one plot
  per game, one line per learner (the mean over seeds, with the seeds' range shaded), and
  the RIMs paper's LSTM-PPO score at 40M frames and the human score as dashed lines;
- ``curves.csv``: every trial's curve (game, learner, core, seed, frames, return);
- ``panel.md``: per game and learner, the frames, seeds, wall time, final training return
  (mean over seeds), its human-normalised score (``envs/data/atari57_random_human.csv``),
  and beside it the LSTM-PPO column of the RIMs paper's Table 7 (Goyal et al. 2019,
  ``envs/data/rims_paper_table7_lstm_vs_rims_ppo.csv``: PPO with an LSTM core, 40M frames,
  mean and error over 3 seeds as printed) with the human score.

The score is the training return of whole games over the last 100 episodes, the figure the
paper tables and IMPALA's and PPO's curves report; no separate evaluation runs.

``--cores lstm rims`` adds a core axis: the RIMs-vs-LSTM study of the RIMs paper's Table 7
(PPO with Kostrikov's settings, one agent per game). Each core's row then stands beside its
own column of Table 7 (LSTM-PPO or RIMs-PPO). RIMs run with k_A = 5 of 6 RIMs, as Table 7.
``--paper-widths`` uses the authors' widths: an LSTM of 512 units against 6 RIMs of 85 (510)
(appendix D.8, Figure 18; the PPO Atari agent then has 2.27M and 2.17M parameters); without
it each core keeps mira's widths, a parameter match at about half the cost: LSTM 256
against 6 RIMs of 42 (252), 1.21M and 1.23M parameters (cores 534k and 551k; before RIMs
gated their communication, 1.20M and 518k). Each core starts from its own options and
initialisation (PyTorch's for the LSTM), whatever the preset sets for its LSTM.

    python -m scripts.papers.atari_panel --frames 1e7   # both presets, 4 games, seed 0
    python -m scripts.papers.atari_panel --learners impala --seeds 0 1 --frames 2e7
    python -m scripts.papers.atari_panel --dry-run      # list the trials and their state
    python -m scripts.papers.atari_panel --report       # the table and plot so far, run nothing
    # overrides for every trial:
    python -m scripts.papers.atari_panel --frames 1e7 runtime.num_runners=15 learner.batch_size=60
    python -m scripts.papers.atari_panel --learners ppo --cores lstm rims --paper-widths \
        --frames 4e7 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {"impala": "configs/impala_atari.yaml", "ppo": "configs/ppo_atari.yaml"}
GAMES = ("Pong", "Breakout", "Boxing", "Freeway")
REFERENCE = "rims_paper_table7_lstm_vs_rims_ppo.csv"
CORES = ("lstm", "rims")  # the cores Table 7 has a column for
SCHEDULE_FRAMES = 4e7  # the 40M-frame protocol of Table 7 (ppo_atari.yaml's run.total_frames)
TABLE7_OPTIONS = {"lstm": {}, "rims": {"k_active": 5}}  # Table 7's RIMs-PPO: k_A = 5 of 6
PAPER_WIDTHS = {  # appendix D.8 / Figure 18: widths of the authors' code
    "lstm": {"hidden_size": 512},
    "rims": {"num_units": 6, "unit_size": 85},
}


def reference_scores(core: str = "lstm") -> dict[str, tuple[float, float]]:
    """Game -> (mean, error) of the RIMs paper's Table 7 column for ``core``.

    The column is LSTM-PPO or RIMs-PPO, from ``envs/data/rims_paper_table7_lstm_vs_rims_ppo.csv``.
    """
    with open(ROOT / "envs" / "data" / REFERENCE, newline="") as f:
        return {row["game"]: (float(row[f"{core}_ppo_mean"]), float(row[f"{core}_ppo_err"]))
                for row in csv.DictReader(f)}


def compare_file(out: Path, frames: float, games, learners, seeds, overrides: list[str],
                 cores=None, paper_widths: bool = False,
                 schedule_frames: float = SCHEDULE_FRAMES) -> Path:
    """Write the compare file that runs the panel; returns its path.

    The learning rate decays over ``max(frames, schedule_frames)``.
    """
    import yaml

    common: dict = {"run.total_frames": float(frames),
                    "learner.optimizer.lr_decay_frames": float(max(frames, schedule_frames))}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"atari_panel: error: override {item!r} is not dotted.key=value")
        common[key] = yaml.safe_load(value)
    spec = {
        "name": "atari_panel", "out": str(out.resolve()), "overrides": common,
        "matrix": {"base": [str(ROOT / PRESETS[name]) for name in learners],
                   "env.game": list(games)},
        "seeds": [int(s) for s in seeds], "aggregate": "mean", "evaluate": {"episodes": 0},
    }
    if cores:
        options = {c: {**TABLE7_OPTIONS[c], **(PAPER_WIDTHS[c] if paper_widths else {})}
                   for c in cores}
        # the whole mapping, even empty: every core starts from its own options, so the
        # IMPALA preset's orthogonal LSTM initialisation does not reach the LSTM arm alone
        spec["variants"] = [{"agent.core": c, "agent.core_options": options[c]} for c in cores]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "panel_compare.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def learner_of(base: str) -> str:
    """The learner (a key of ``PRESETS``) whose preset has ``base``'s file name, else its stem."""
    stem = Path(base).stem
    return next((name for name, preset in PRESETS.items() if Path(preset).stem == stem), stem)


def collect(trials) -> dict:
    """The panel's results, one cell per (game, learner, core), with a list entry per seed.

    (game, learner, core) -> {"seeds", "frames", "wall_time_s", "returns", "curves",
    "finished"} from each trial's summary.json and TensorBoard events. A trial that has not
    reached its target (stopped, or still running) is included with the frames and return of
    the last point of its curve, ``finished`` False and, while it runs, no wall time (None);
    a trial with no curve point yet is left out.
    """
    from scripts.compare.report import learning_curve
    from scripts.compare.trials import read_json

    cells: dict = {}
    for t in trials:
        summary = read_json(t.dir / "summary.json") or {}
        curve = learning_curve(t.dir) if t.dir.is_dir() else (np.zeros(0), np.zeros(0))
        finished = (bool(summary) and not summary.get("interrupted")
                    and summary.get("frames", 0) >= t.cfg.run.total_frames)
        if not summary and not len(curve[0]):
            continue
        frames, ret, wall = (summary.get("frames", 0), summary.get("episode_return_mean"),
                             summary.get("wall_time_s"))
        if not finished and len(curve[0]) and curve[0][-1] > frames:
            # still running (or resumed since its last stop): the curve is newer than the summary
            frames, ret, wall = int(curve[0][-1]), float(curve[1][-1]), None
        cell = cells.setdefault((t.cfg.env.game, learner_of(t.base), t.cfg.agent.core),
                                {"seeds": [], "frames": [], "wall_time_s": [], "returns": [],
                                 "curves": [], "finished": []})
        cell["seeds"].append(t.seed)
        cell["frames"].append(int(frames))
        cell["wall_time_s"].append(wall)
        cell["returns"].append(ret)
        cell["curves"].append(curve)
        cell["finished"].append(finished)
    return cells


def write_curves(cells: dict, path: Path) -> None:
    """Write every trial's curve to ``path`` as CSV: game, learner, core, seed, frames, return."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["game", "learner", "core", "seed", "frames", "episode_return_mean100"])
        for (game, learner, core), cell in sorted(cells.items()):
            for seed, (xs, ys) in zip(cell["seeds"], cell["curves"]):
                w.writerows([game, learner, core, seed, int(x), f"{y:.3f}"]
                            for x, y in zip(xs, ys))


def _num(x, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:,.{digits}f}"


def table(cells: dict, games, learners, cores=("lstm",)) -> str:
    """Markdown table of final scores beside the paper's column for each core and human scores."""
    from envs.scores import human_normalized
    from envs.scores import reference_scores as random_human

    refs = {core: reference_scores(core) if core in CORES else {} for core in cores}
    lines = ["| game | learner | core | frames | seeds | wall time | return (last 100) | "
             "human-normalised | "
             "RIMs paper, same core, PPO, 40M frames (Goyal et al. 2019, Table 7) | human |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for game in games:
        human = random_human("atari", game)[1]
        for learner in learners:
            for core in cores:
                cell = cells.get((game, learner, core))
                paper = refs[core].get(game)
                returns = [r for r in (cell or {}).get("returns", []) if r is not None]
                mean = float(np.mean(returns)) if returns else None
                frames = f"{np.mean(cell['frames']):,.0f}" if cell else "not run"
                if cell and not all(cell.get("finished", [True])):
                    frames += " (unfinished)"
                walls = [w for w in (cell or {}).get("wall_time_s", []) if w is not None]
                # a trial stopped or still running has no wall time (its summary is older)
                wall = (f"{np.mean(walls) / 60:.0f} min" if walls
                        else "not finished" if cell else "")
                seeds = str(len(cell["seeds"])) if cell else "0"
                hns = None if mean is None else human_normalized(game, mean)
                lines.append(f"| {game} | {learner} | {core} | {frames} | {seeds} | {wall} | "
                             f"{_num(mean)} | "
                             f"{_num(hns, 0) + ' %' if hns is not None else 'n/a'} | "
                             f"{f'{paper[0]:,.0f} ± {paper[1]:,.0f}' if paper else 'n/a'} | "
                             f"{_num(human)} |")
    return "\n".join(lines)


def plot(cells: dict, games, learners, path: Path, cores=("lstm",)) -> None:
    """Write ``panel.png`` to ``path``: training return against frames, one plot per game.

    One line per (learner, core): the mean over seeds up to the frames the shortest seed reached,
    with the seeds' range shaded; the RIMs paper's Table 7 scores and the human score are
    horizontal lines.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 2 if len(games) > 1 else 1
    rows = (len(games) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines = [(learner, core) for learner in learners for core in cores]
    for ax, game in zip(axes.flat, games):
        for i, (learner, core) in enumerate(lines):
            cell = cells.get((game, learner, core))
            curves = [c for c in (cell or {}).get("curves", []) if len(c[0])]
            if not curves:
                continue
            top = min(c[0][-1] for c in curves)
            grid = np.linspace(min(c[0][0] for c in curves), top, 200)
            ys = np.array([np.interp(grid, x, y) for x, y in curves])
            label = (f"mira {learner}" + (f" {core}" if len(cores) > 1 else "")
                     + f" ({len(curves)} seed(s))")
            ax.plot(grid / 1e6, ys.mean(0), color=colors[i % len(colors)], label=label)
            if len(curves) > 1:
                ax.fill_between(grid / 1e6, ys.min(0), ys.max(0), color=colors[i % len(colors)],
                                alpha=0.2)
        for j, core in enumerate(c for c in cores if c in CORES):
            ref = reference_scores(core)
            if game in ref:
                ax.axhline(ref[game][0], color="k", ls="--" if j == 0 else "-.", lw=1,
                           label=f"RIMs paper {core.upper()}-PPO @ 40M")
        finish_game_axes(ax, game, "training return (last 100 episodes)")
    save_grid(fig, axes, len(games), path, dpi=110)


def finish_game_axes(ax, game: str, ylabel: str) -> None:
    """One game's panel of a curve grid: its human score as a dotted line, titles, legend."""
    from envs.scores import reference_scores as random_human

    ax.axhline(random_human("atari", game)[1], color="grey", ls=":", lw=1, label="human")
    ax.set_title(game)
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def save_grid(fig, axes, used: int, path: Path, dpi: int) -> None:
    """Blank a grid's unused panels, write it to ``path`` and close it."""
    import matplotlib.pyplot as plt

    for ax in list(axes.flat)[used:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the panel through ``mira compare``, then write ``panel.png`` and ``panel.md``.

    Returns the exit status: 0, 1 if a trial failed, 2 on a config error, 130 if interrupted.
    """
    p = argparse.ArgumentParser(prog="python -m scripts.papers.atari_panel",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", metavar="dotted.key=value",
                   help="applied to every trial")
    p.add_argument("--frames", type=float, default=1e7, help="frames per trial (default 1e7)")
    p.add_argument("--schedule-frames", type=float, default=SCHEDULE_FRAMES,
                   help="frames over which the learning rate decays to 0 (default 4e7, Table "
                        "7's protocol; a trial runs the first --frames of it)")
    p.add_argument("--games", nargs="+", default=list(GAMES), metavar="GAME")
    p.add_argument("--learners", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--cores", nargs="+", choices=list(CORES),
                   help="add a core axis (default: each preset's core)")
    p.add_argument("--paper-widths", action="store_true",
                   help="with --cores: LSTM 512 vs 6 RIMs x 85 (appendix D.8); without it, "
                        "LSTM 256 vs 6 RIMs x 42, a parameter match (k_A = 5 either way)")
    p.add_argument("--out", default="runs/atari_panel",
                   help="output directory (default runs/atari_panel)")
    p.add_argument("--max-concurrent", type=int, default=1, metavar="N",
                   help="trials at once (default 1: 2 cores)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate every trial and list what would run")
    p.add_argument("--report", action="store_true",
                   help="run nothing: write panel.md, panel.png and curves.csv from the trials "
                        "as they stand (a running or stopped trial's row says unfinished)")
    args = p.parse_args(argv)
    from envs.scores import reference_scores as random_human
    from learners.config.schema import ConfigError
    from scripts.compare.command import load_spec, run_compare

    if args.frames <= 0 or args.schedule_frames <= 0:
        p.error(f"--frames and --schedule-frames must be positive, got {args.frames:g} and "
                f"{args.schedule_frames:g}")
    if args.paper_widths and not args.cores:
        p.error("--paper-widths sets the widths of --cores; "
                "give --cores lstm rims (or one of them)")
    ref = reference_scores()
    for game in args.games:
        try:
            random_human("atari", game)
        except KeyError as e:
            p.error(f"{e.args[0]} (the panel needs a game's random and human scores)")
        if game not in ref:
            print(f"[panel] {game} has no row in the RIMs paper's Table 7; "
                  "its reference column reads n/a", file=sys.stderr)
    out = Path(args.out)
    path = compare_file(out, args.frames, args.games, args.learners, args.seeds, args.overrides,
                        args.cores, args.paper_widths, args.schedule_frames)
    try:
        if args.report:
            result = {"failed": []}
        else:
            result = run_compare(str(path), dry_run=args.dry_run,
                                 max_concurrent=args.max_concurrent)
            if args.dry_run:
                return 0
        _, trials, _ = load_spec(path)
    except ConfigError as e:
        print(f"atari_panel: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    cells = collect(trials)
    cores = args.cores or sorted({t.cfg.agent.core for t in trials})
    plot(cells, args.games, args.learners, out / "panel.png", cores)
    text = "\n".join([
        f"# Atari panel: {', '.join(args.learners)} on {', '.join(args.games)}", "",
        f"Target {args.frames:,.0f} frames per trial (the first frames of a learning-rate "
        f"schedule over {max(args.frames, args.schedule_frames):,.0f}), seeds "
        f"{', '.join(map(str, args.seeds))}; "
        "return = training return of whole games, mean of the last 100 episodes, mean over seeds; "
        "human-normalised = 100 (score - random) / (human - random) with "
        "envs/data/atari57_random_human.csv. The reference column is the paper's, at 40M frames; "
        "ours at the frames shown.", "",
        table(cells, args.games, args.learners, cores), "", "![panel](panel.png)", ""])
    (out / "panel.md").write_text(text)
    write_curves(cells, out / "curves.csv")
    print(f"[panel] wrote {out / 'panel.md'}, {out / 'panel.png'} and {out / 'curves.csv'}",
          file=sys.stderr)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
