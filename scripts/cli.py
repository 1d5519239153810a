"""The ``mira`` command line: train, evaluate, compare, bench.

Usage (``mira COMMAND --help`` lists a command's options):

    mira train CONFIG [dotted.key=value ...]
    mira train --resume RUN_DIR [dotted.key=value ...]
    mira evaluate RUN_DIR_OR_CHECKPOINT [--episodes N] [--tasks ...] [--protocol dqn|machado]
                  [--video N]
    mira compare COMPARE_CONFIG [--dry-run] [--max-concurrent N]
    mira bench CONFIG [dotted.key=value ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from learners.config.schema import ConfigError, RunStopped


def local_device_check(cfg) -> None:
    """A ConfigError, before a run directory or Ray exists, for a CUDA learner with no GPU here.

    Only on a local instance (no ``runtime.address``): a cluster's learner may have one.
    """
    if not cfg.runtime.address and cfg.learner.device.startswith("cuda"):
        from learners.update.device import resolve_device

        resolve_device(cfg.learner.device)


def _train(args) -> int:
    from learners.config.schema import load_config
    from learners.config.typed_yaml import said_briefly, weight_changes
    from learners.runtime.run_dir import RunDir, mira_command
    from learners.runtime.trainer import Trainer

    if args.resume:
        run = RunDir.open(args.resume)
        if args.config:
            args.overrides.insert(0, args.config)  # `mira train --resume DIR key=value`
        ckpt = run.latest_checkpoint()
        if ckpt is None:
            raise ConfigError(f"cannot resume: {args.resume} has no checkpoint in checkpoints/")
        # Refused here, before anything starts, if its weights are not finite.
        state = RunDir.load_checkpoint(ckpt)
        wanted = run.load_config(args.overrides)
        held = RunDir.checkpoint_config(ckpt, state)
        if changed := weight_changes(held, wanted):
            raise ConfigError(f"cannot resume with another agent ({said_briefly(changed)}): the "
                              "checkpoint holds the weights of the agent it was trained as; "
                              "train another agent in a new run (mira train CONFIG)")
        if RunDir.frames_of(ckpt) >= wanted.run.total_frames:
            print(f"[mira] {run.path} is finished: {ckpt.name} is at run.total_frames="
                  f"{wanted.run.total_frames:,}; nothing changed (give a larger "
                  "run.total_frames=N to train it further)", file=sys.stderr)
            return 0
        local_device_check(wanted)
        note = run.schedule_note(wanted)
        cfg = wanted
        print(f"[mira] resuming {run.path} from {ckpt.name}", file=sys.stderr)
        if note:
            print(f"[mira] note: {note}", file=sys.stderr)
    else:
        if not args.config:
            raise ConfigError("mira train needs a CONFIG file (or --resume RUN_DIR)")
        cfg = load_config(args.config, args.overrides)
        local_device_check(cfg)
        run = RunDir.create(cfg, args.config, command=mira_command(args.argv))
        cfg, ckpt = run.cfg, None  # with run.name and run.dir filled in
    print(f"[mira] run directory: {run.path}", file=sys.stderr)
    trainer = Trainer(cfg, run, resume_from=ckpt, quiet=args.quiet)
    if args.resume:  # the weights fit the config: keep its overrides for a later plain resume
        run.resume_config(args.overrides)
    summary = trainer.train()
    if summary.get("diverged"):
        d = summary["diverged"]
        print(f"[mira] diverged: updates {d['last_good_update'] + 1}-{d['update']} had a "
              f"non-finite loss or gradient ({d['skipped_in_row']} in a row) and were skipped; "
              f"stopped at {summary['frames']:,} frames with the weights of update "
              f"{d['last_good_update']}, written to "
              f"{d['checkpoint'] or 'no checkpoint (see the log)'}",
              file=sys.stderr)
        return 3
    ret = summary["episode_return_mean"]
    print(
        f"[mira] done: {summary['frames']:,} frames in {summary['wall_time_s']:.0f}s, "
        f"{summary['fps']:.0f} fps, mean return (last 100 episodes) "
        f"{'n/a' if ret is None else f'{ret:.3f}'}; summary in {run.path / 'summary.json'}",
        file=sys.stderr,
    )
    return 130 if summary["interrupted"] else 0


def _evaluate(args) -> int:
    from scripts.evaluate import evaluate_checkpoint

    if not args.target:
        raise ConfigError("mira evaluate needs a RUN_DIR or a checkpoint file, "
                          "e.g. mira evaluate runs/NAME --episodes 20")
    for flag, value, least in (("--episodes", args.episodes, 1), ("--video", args.video, 0),
                               ("--num-runners", args.num_runners or 0, 0)):
        if value < least:
            raise ConfigError(f"{flag} must be at least {least}, got {value}")

    result = evaluate_checkpoint(args.target, episodes=args.episodes, tasks=args.tasks,
                                 protocol=args.protocol, num_runners=args.num_runners,
                                 overrides=args.overrides, video=args.video,
                                 rims_strip=args.rims_strip)
    for name, a in result["aggregates"].items():
        print(f"{name:12s} {a['value']:10.3f}  95% CI [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]")
    return 0


def _bench(args) -> int:
    from scripts.bench.command import run_bench

    if not args.config:
        raise ConfigError("mira bench needs a CONFIG file, "
                          "e.g. mira bench configs/impala_minigrid.yaml")
    run_bench(args.config, args.overrides, seconds=args.seconds,
              gpu_learner_rate=args.gpu_learner_rate, repeat=args.repeat)
    return 0


class _Defaults(argparse.HelpFormatter):
    """Help that shows every option's default, where it has one (not None or off)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default not in (None, argparse.SUPPRESS) \
                and action.default is not False:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    """The ``mira`` parser; each subcommand sets ``fn``, the handler that ``main`` calls."""
    parser = argparse.ArgumentParser(
        prog="mira", description="Distributed RL for studying recurrent cores and heads.")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train an agent (IMPALA or PPO) from a config",
                       description="Train an agent from a YAML config, or continue a run.")
    t.add_argument("config", nargs="?", help="YAML config, e.g. configs/impala_minigrid.yaml")
    t.add_argument("overrides", nargs="*",
                   help="dotted.key=value overrides, e.g. run.total_frames=2e6")
    t.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its last checkpoint")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    t.set_defaults(fn=_train)
    e = sub.add_parser("evaluate", formatter_class=_Defaults,
                       help="evaluate a run or checkpoint: returns, normalised scores, CIs",
                       description="Play whole episodes of every task with a checkpoint's agent "
                                   "and write eval.json and eval.md beside it.")
    e.add_argument("target", metavar="RUN_DIR_OR_CHECKPOINT", nargs="?",
                   help="a run directory (its last checkpoint) or a checkpoint file")
    e.add_argument("overrides", nargs="*", help="dotted.key=value overrides of the run's config")
    e.add_argument("--episodes", type=int, default=10, help="episodes per task")
    e.add_argument("--tasks", nargs="+",
                   help="evaluate only these tasks (names as in the run's suite); default: all")
    e.add_argument("--protocol", choices=["dqn", "machado"],
                   help="Atari protocol to evaluate under; default: the run's")
    e.add_argument("--num-runners", type=int,
                   help="0 = in-process; default: the run's runtime.num_runners")
    e.add_argument("--video", type=int, default=0, metavar="N",
                   help="also record N episodes per task as MP4 (GIF without an encoder) "
                        "in RUN_DIR/videos")
    e.add_argument("--rims-strip", action="store_true",
                   help="with --video and a RIMs core: a strip under the frames showing "
                        "which RIMs are active")
    e.set_defaults(fn=_evaluate)
    b = sub.add_parser("bench", formatter_class=_Defaults,
                       help="throughput benchmark of a config: env, inference, learner, end to end",
                       description="Measure a config's env steps/s, inference steps/s, learner "
                                   "steps/s and end-to-end training steps/s.")
    b.add_argument("config", nargs="?", help="YAML config, e.g. configs/impala_minigrid.yaml")
    b.add_argument("overrides", nargs="*",
                   help="dotted.key=value overrides, e.g. env.game=Breakout")
    b.add_argument("--seconds", type=float, default=20.0, help="duration of each measurement")
    b.add_argument("--gpu-learner-rate", type=float, default=None, metavar="STEPS_PER_S",
                   help="learner steps/s on a GPU for the runner-core estimate (default: 33569, "
                        "one H100 on configs/impala_atari_paper.yaml)")
    b.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure (a)-(d) N times in a row and print the spread of the share "
                        "of the limit (a busy or shared machine moves it by several points)")
    b.set_defaults(fn=_bench)
    from scripts.compare.command import add_parser as add_compare_parser

    add_compare_parser(sub)
    return parser


TRAINING_SECTIONS = ("run", "runtime", "env", "agent", "learner", "eval")


def file_kind(path: str | None) -> str | None:
    """What a YAML file given to a command is, from its top-level keys.

    ``compare``: a ``base`` and no training section; ``training``: a training section and no
    ``base``; None: missing, or neither (the command's loader names what is wrong).
    """
    from learners.config.schema import read_yaml

    if not path or not Path(path).is_file():
        return None
    data = read_yaml(Path(path))
    if not isinstance(data, dict):
        return None
    base, sections = "base" in data, bool(set(data) & set(TRAINING_SECTIONS))
    return "compare" if base and not sections else "training" if sections and not base else None


def check_file_kind(command: str, path: str | None) -> None:
    """Refuse, in one line, a training config given to ``mira compare`` and the reverse."""
    kind = file_kind(path)
    if command == "compare" and kind == "training":
        raise ConfigError(
            f"{path} is a training config (mira train {path}), not a compare file; a compare "
            "file names a base config and what varies, e.g. `name: heads`, `base: "
            "configs/impala_lab6.yaml`, `variants: [{agent.head: linear}, {agent.head: "
            "multi_head}]`, `seeds: [0, 1, 2]` (see configs/compare_heads_lab6.yaml)")
    if command == "train" and kind == "compare":
        raise ConfigError(f"{path} is a compare file (it names a base config); run it with "
                          f"mira compare {path}")


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand in ``argv`` (default: ``sys.argv``); return its exit status.

    A ``ConfigError`` (a bad config or argument) exits 2 and a ``RunStopped`` (a run that
    cannot go on) exits 1, each printed as one ``mira: error:`` line rather than a traceback.
    """
    logging.basicConfig(level=logging.WARNING, format="[mira] %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command a run records
    try:
        if args.command in ("compare", "train"):
            check_file_kind(args.command, args.config)
        return args.fn(args)
    except ConfigError as e:
        print(f"mira: error: {e}", file=sys.stderr)
        return 2
    except RunStopped as e:
        print(f"mira: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
