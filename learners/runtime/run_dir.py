"""A run directory and what every run leaves in it (docs/design.md, "Every run leaves").

``runs/<name>/``: ``config.yaml`` (resolved), ``meta.json`` (seed, git revision, command),
TensorBoard event files, ``checkpoints/ckpt_<frames>.pt`` (plain state dicts, loadable
with ``torch.load(..., weights_only=True)``) and ``summary.json``.

A run directory is committed with a study (``keep:``, scripts/compare/records.py), so what it
says about where it ran is portable: ``config.yaml``'s ``run.dir`` is relative to the working
directory of the command that started the run, and ``meta.json``'s ``command`` is that
``mira`` command (``mira compare configs/studies/study_x.yaml``), not the process that
trained it (a Ray worker, for a compare's trial); no host name, address or absolute path.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from learners.config.schema import (
    CONFIG_FORMAT,
    ConfigError,
    ExperimentConfig,
    load_config,
    load_saved_config,
    save_config,
)
from learners.update.schedule import lr_schedule_change


def git_revision(where: str | Path | None = None) -> str:
    """This checkout's HEAD commit, with ``-dirty`` if it has changes; ``unknown`` without git.

    Changes under ``docs/`` do not count: nothing there runs, and a study writes its rows and
    kept records there while its trials start (``mira compare``'s ``keep:`` and ``csv:``).
    ``where``: a folder in the checkout (default: mira's own).
    """
    try:
        here = Path(where) if where is not None else Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5)
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here,
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":(exclude)docs"],
                               cwd=top or here, capture_output=True, text=True, timeout=5)
        rev = out.stdout.strip() or "unknown"
        return rev + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def relative_path(path: str | Path, start: str | Path | None = None) -> str:
    """``path`` relative to ``start`` (default: the working directory), as a record keeps it."""
    return os.path.relpath(os.path.abspath(path), os.path.abspath(start or os.getcwd()))


def mira_command(argv: list[str], start: str | Path | None = None) -> str:
    """``mira`` and ``argv`` (a subcommand and its arguments) as one shell line.

    An absolute path, alone or as the value of ``key=value``, becomes relative to ``start``
    (default: the working directory): ``["compare", "/home/u/mira/configs/x.yaml"]`` run in
    ``/home/u/mira`` is ``mira compare configs/x.yaml``.
    """
    words = []
    for word in argv:
        key, eq, value = word.partition("=") if "=" in word else ("", "", word)
        if os.path.isabs(value):
            value = relative_path(value, start)
        words.append(key + eq + value)
    return shlex.join(["mira", *words])


def weights_misfit(error: str) -> str | None:
    """What PyTorch's error on loading a checkpoint's weights into the agent means, in a line.

    None when ``error`` is not such an error. The agent is built from the config, and an
    ``agent.*`` override is refused before anything loads, so what gets here is a setting that
    changed the observation or the action set: an ``env.*`` override.
    """
    if "Error(s) in loading state_dict" not in error:
        return None
    shape = r"torch\.Size\((\[[^\]]*\])\)"
    found = re.findall(rf"size mismatch for ([\w.]+): copying a param with shape {shape} from "
                       rf"checkpoint, the shape in current model is {shape}", error)
    if found:
        name, held, here = found[0]
        what = f"{name}: {held} in the checkpoint, {here} here"
        more = len(found) - 1
    else:
        keys = re.search(r"(Missing|Unexpected) key\(s\) in state_dict: ([^\n]*)", error)
        names = re.findall(r'"([^"]+)"', keys[2]) if keys else []
        if not names:
            return None
        what = (f"the checkpoint lacks {names[0]}" if keys[1] == "Missing"
                else f"the agent has no {names[0]}")
        more = len(names) - 1
    return (f"its weights do not fit the agent this config builds ({what}"
            + (f"; and {more} more" if more > 0 else "")
            + "): an env setting changed the observation or the action set (env.game, "
            "env.full_action_space, ...)")


def nonfinite_tensors(tensors: dict) -> list[str]:
    """Names of the floating-point tensors in ``tensors`` holding a NaN or an infinity."""
    return [k for k, v in tensors.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            and not bool(torch.isfinite(v).all())]


LEFT_BY_A_START = ("*tfevents*", "bursts", "summary.json")  # RunDir.create moves them aside


class RunDir:
    """A run directory (``runs/<name>/``, module docstring) and its checkpoints."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.cfg: ExperimentConfig | None = None  # the config a new run saved (create)

    @staticmethod
    def create(cfg: ExperimentConfig, config_path: str | None, command: str | None = None,
               cwd: str | Path | None = None) -> RunDir:
        """A new run's directory, with its ``config.yaml`` and ``meta.json`` written.

        ``command`` is the ``mira`` command that started the run (``mira_command``; None where
        none did, as in a test), ``cwd`` that command's working directory (default: this
        process's), against which the saved ``run.dir`` is relative.

        An unset ``run.name`` becomes ``<config file stem>-<timestamp>`` and an unset
        ``run.dir`` ``runs/<name>``: the config with them, as saved, is the run's ``cfg``
        (``cfg`` itself is frozen). A directory that already holds a checkpoint is a
        ConfigError. What a start that ended before its first checkpoint left
        (``LEFT_BY_A_START``: event files, kept bursts, its summary) goes to ``superseded/``, so
        the new run's curves and bursts are its own (a curve keeps the last value per frame
        count, and the two starts log at different ones; an old burst file's name would block
        the new run's at that step).
        """
        stem = Path(config_path).stem if config_path else "run"
        name = cfg.run.name or f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        cfg = replace(cfg, run=replace(cfg.run, name=name,
                                       dir=cfg.run.dir or str(Path("runs") / name)))
        run = RunDir(cfg.run.dir)
        run.cfg = cfg
        if run.latest_checkpoint() is not None:
            raise ConfigError(f"run.dir {cfg.run.dir} already holds a run; "
                              f"continue it with `mira train --resume {cfg.run.dir}` "
                              "or pick another run.dir")
        run.checkpoints.mkdir(parents=True, exist_ok=True)
        if stale := sorted(p for pattern in LEFT_BY_A_START for p in run.path.glob(pattern)):
            (run.path / "superseded").mkdir(exist_ok=True)
            for f in stale:
                f.replace(run.path / "superseded" / f.name)
            print(f"[mira] {run.path}: what a start that ended before its first checkpoint left "
                  f"({', '.join(f.name for f in stale)}) moved to superseded/", file=sys.stderr)
        run.save_config(cfg, cwd)
        meta = {"config_format": CONFIG_FORMAT, "seed": cfg.run.seed,
                "git_revision": git_revision(), "command": command, "started": time.time()}
        run._write_meta(meta)
        return run

    def save_config(self, cfg: ExperimentConfig, cwd: str | Path | None = None) -> None:
        """Write ``cfg`` to ``config.yaml`` with ``run.dir`` this directory, relative to ``cwd``.

        ``cwd`` is the working directory of the command that runs (default: this process's);
        the path is this directory's, not ``cfg.run.dir``, which a resumed run read from a file
        written elsewhere may hold relative to another directory.
        """
        portable = replace(cfg, run=replace(cfg.run, dir=relative_path(self.path, cwd)))
        save_config(portable, self.path / "config.yaml")

    @staticmethod
    def open(path: str | Path) -> RunDir:
        """An existing run directory, to resume; one without config.yaml is a ConfigError."""
        run = RunDir(path)
        if not run.path.is_dir():
            raise ConfigError(f"cannot resume: run directory {str(path)!r} does not exist")
        if not (run.path / "config.yaml").is_file():
            raise ConfigError(f"cannot resume: {str(path)!r} has no config.yaml; "
                              "is it a mira run directory?")
        return run

    def load_config(self, overrides: list[str] | None = None) -> ExperimentConfig:
        """The saved config.yaml with ``overrides`` (``load_config`` of the directory)."""
        return load_config(self.path, overrides)

    @staticmethod
    def checkpoint_config(ckpt: Path, state: dict,
                          overrides: list[str] | None = None) -> ExperimentConfig:
        """The config ``ckpt`` was trained under, with ``overrides`` applied.

        Its own (``state["config"]``) where it carries one, read by the loader every command
        uses (old keys migrate, in the saved config and in ``overrides`` alike); else, or where
        a mira whose settings no longer validate saved it, the config.yaml of the run directory
        the checkpoint is in (which may have changed since the checkpoint was written).
        Validated without the runtime section: only the agent, env and learner are read.
        """
        run_dir = Path(ckpt).parent.parent
        has_yaml = (run_dir / "config.yaml").is_file()
        if "config" in state:
            try:
                return load_saved_config(state, overrides)
            except ConfigError:
                if not has_yaml:
                    raise
        if not has_yaml:
            raise ConfigError(f"{ckpt} carries no config and there is no "
                              f"{run_dir / 'config.yaml'}")
        return load_config(run_dir, overrides, runtime=False)

    def resume_config(self, overrides: list[str] | None = None) -> ExperimentConfig:
        """The run's config with ``overrides``, saved so that a later plain ``--resume`` keeps them.

        The config is written back to ``config.yaml`` and the overrides recorded in
        ``meta.json``. Call it once the resumed run has started (its weights loaded), so an
        override that cannot be resumed leaves the run as it was.
        """
        cfg = self.load_config(overrides)
        if overrides:
            self.save_config(cfg)
            meta = self._read_meta()
            meta.setdefault("resumes", []).append({"overrides": list(overrides),
                                                   "time": time.time()})
            meta["config_format"] = CONFIG_FORMAT  # config.yaml is now written in this format
            self._write_meta(meta)
        return cfg

    def note_resume(self, frames: int) -> None:
        """Record in ``meta.json`` that training resumes at ``frames`` on this checkout.

        ``meta.json``'s ``git_revision`` is the revision the run started on; each resume
        appends ``{"frames", "git_revision", "time"}`` to its ``resumed_on`` list, so a run
        that spans checkouts says which code trained which frames. A record that cannot be
        read or written is a warning, not a reason to stop the run.
        """
        try:
            meta = self._read_meta()
            meta.setdefault("resumed_on", []).append(
                {"frames": int(frames), "git_revision": git_revision(), "time": time.time()})
            self._write_meta(meta)
        except (OSError, ValueError) as e:
            print(f"[mira] warning: {self.path / 'meta.json'}: resume not recorded ({e})",
                  file=sys.stderr)

    def _read_meta(self) -> dict:
        """``meta.json`` as a dict ({} if absent); a file that is not JSON is a ValueError."""
        path = self.path / "meta.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def _write_meta(self, meta: dict) -> None:
        """Write ``meta.json`` whole or not at all (a crash mid-write keeps the old one)."""
        path = self.path / "meta.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, path)

    # ------------------------------------------------------------------ checkpoints

    @staticmethod
    def frames_of(path: Path) -> int:
        """The frames a ``ckpt_<frames>.pt`` checkpoint was written at, from its name."""
        return int(path.stem.split("_")[1])

    def checkpoint_paths(self) -> list[Path]:
        """The run's checkpoint files, fewest frames first.

        Only ``ckpt_<frames>.pt`` names count: a file renamed by hand (``ckpt_best.pt``) is
        not one of the run's checkpoints.
        """
        paths = [p for p in self.checkpoints.glob("ckpt_*.pt")
                 if p.stem[5:].isascii() and p.stem[5:].isdecimal()]
        return sorted(paths, key=self.frames_of)

    def schedule_note(self, cfg: ExperimentConfig) -> str | None:
        """A line when resuming under ``cfg`` moves the learning rate off the saved schedule.

        ``update.schedule.lr_schedule_change`` at the latest checkpoint's frames, between the
        saved config.yaml and ``cfg``; None without a checkpoint or when nothing changes.
        """
        ckpt = self.latest_checkpoint()
        if ckpt is None or not (self.path / "config.yaml").is_file():
            return None
        return lr_schedule_change(self.load_config(), cfg, self.frames_of(ckpt))

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint with the most frames, or None."""
        paths = self.checkpoint_paths()
        return paths[-1] if paths else None

    def save_checkpoint(self, state: dict, frames: int, keep: int) -> Path:
        """Write ``state`` as ``ckpt_<frames>.pt``; keep the newest ``keep`` (0: all) of them."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        path = self.checkpoints / f"ckpt_{frames:012d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)  # a crash mid-write never leaves a torn checkpoint
        for old in self.checkpoint_paths()[:-keep] if keep > 0 else []:
            old.unlink(missing_ok=True)
        return path

    @staticmethod
    def load_checkpoint(path: str | Path) -> dict:
        """A checkpoint's state, on the CPU; one whose agent weights are not all finite is refused.

        The refusal is a ConfigError naming the checkpoints that are left (never resume or
        evaluate NaN weights).
        """
        path = Path(path)
        in_run = path.parent.name == "checkpoints"
        others = ", ".join(p.name for p in RunDir(path.parent.parent).checkpoint_paths()
                           if p != path) if in_run else ""
        aside = (f"; move it aside to use an earlier one "
                 f"({others or 'none left in its checkpoints/'})" if in_run
                 else "; give a run directory or a checkpoints/ckpt_<frames>.pt file")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # not a checkpoint, or a torn or foreign file
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"{path} is not a mira checkpoint that torch can read "
                              f"({first:.120}){aside}") from None
        if not (isinstance(state, dict) and isinstance(state.get("learner"), dict)
                and "agent" in state["learner"] and "progress" in state):
            raise ConfigError(f"{path} is not a mira checkpoint (no learner weights and progress "
                              f"in it){aside}")
        bad = nonfinite_tensors(state["learner"]["agent"])
        if bad:
            raise ConfigError(
                f"checkpoint {path} holds non-finite weights "
                f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); "
                "use an earlier one "
                f"({others or 'none left in its checkpoints/'})"
            )
        return state

    def write_summary(self, summary: dict) -> None:
        """Write ``summary`` to the run's ``summary.json``."""
        (self.path / "summary.json").write_text(json.dumps(summary, indent=2))
