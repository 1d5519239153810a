"""What older mira wrote, and what it means now: the migrations the config loader applies.

Every saved run directory, preset and command line keeps loading with the meaning it
had: keys that moved are renamed (``MOVED``, ``migrate``), a run directory written in an
older format gets the overrides that keep its settings (``format_overrides``), and env
keys of other suites that older config.yaml files hold at their defaults are dropped
(``learners.config.schema``'s env loading).
"""

from __future__ import annotations

import json
from pathlib import Path

from learners.config.typed_yaml import ConfigError, read_yaml

# meta.json's (and a checkpoint's) "config_format": 2 since IMPALA reads learner.epochs and
# learner.minibatches, 3 since it reads learner.clip_value and learner.recurrence, 4 since
# the RIMs core gates its communication (agent.core_options.comm_gate), 5 since the learner
# flushes denormal floats (learner.flush_denormal).
CONFIG_FORMAT = 5


def format_overrides(run_dir: Path) -> list[str]:
    """Overrides that keep a run directory written by an older mira meaning what it meant.

    The format is meta.json's ``config_format`` (1 where it has none); ``saved_overrides``
    says what each format needs.
    """
    meta_path = run_dir / "meta.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except ValueError as e:
        raise ConfigError(f"cannot read {meta_path} ({e}); it says which mira wrote the run, "
                          "so its settings keep their meaning: restore it from the study's kept "
                          "record or version control") from None
    return saved_overrides(meta.get("config_format", 1), read_yaml(run_dir / "config.yaml"))


def saved_overrides(fmt: int, saved: dict | None) -> list[str]:
    """Overrides that keep a config saved in format ``fmt`` (a run's or a checkpoint's) as it was.

    Format 1 (no ``config_format`` in meta.json) saved PPO's ``epochs: 4`` and
    ``minibatches: 4`` in every config, and IMPALA ignored them; from format 2 IMPALA
    reads them (one step per batch is ``1`` and ``1``). Formats 1 and 2 saved PPO's
    ``clip_value: true`` in every config (and any ``recurrence``), which IMPALA ignored;
    from format 3 IMPALA reads both (with ``learner.impala.fixed_targets``). Before format 4
    the RIMs core's communication was ungated (``comm_gate: false``; its weights have no gate).
    Before format 5 the learner kept denormal floats (``learner.flush_denormal: false``), so a
    resumed older run computes as it did.
    """
    saved = saved if isinstance(saved, dict) else {}
    learner, agent = saved.get("learner"), saved.get("agent")
    out = []
    if fmt < 3 and isinstance(learner, dict) and learner.get("name", "impala") == "impala":
        out += ((["learner.epochs=1", "learner.minibatches=1"] if fmt < 2 else [])
                + ["learner.clip_value=false", "learner.recurrence=0"])
    if fmt < 4 and isinstance(agent, dict) and agent.get("core") == "rims":
        out.append("agent.core_options.comm_gate=false")
    if fmt < 5 and isinstance(learner, dict):
        out.append("learner.flush_denormal=false")
    return out


# Keys that moved, old -> new: the settings one algorithm alone reads left the learner
# section for its own (2026-11-24); saved runs, presets and commands that use the old names
# keep working.
MOVED = {f"learner.{name}": f"learner.{section}.{name}" for section, names in (
    ("impala", ("clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold",
                "surrogate_clip", "fixed_targets")),
    ("ppo", ("target_kl",))) for name in names}


def migrate(data: dict) -> dict:
    """Replace, in place, keys older mira wrote with what they mean now; returns ``data``.

    ``agent.popart`` is a copy of ``learner.popart`` that every saved config.yaml and
    checkpoint up to 2026-11 carries; the keys of ``MOVED`` are the learner settings one
    algorithm alone reads, which every saved config up to 2026-11-24 holds in ``learner``.
    """
    learner = data.get("learner")
    if isinstance(learner, dict):
        for old, new in MOVED.items():
            name, section = old.split(".")[1], new.split(".")[1]
            if name in learner:
                value = learner.pop(name)
                part = learner.setdefault(section, {})
                if isinstance(part, dict):
                    part.setdefault(name, value)
    agent = data.get("agent")
    if isinstance(agent, dict) and "popart" in agent:
        if agent.pop("popart") is True:  # the agent had PopArt's output layer: its weights need it
            learner = data.setdefault("learner", {})
            if isinstance(learner, dict):
                learner["popart"] = True
    return data
