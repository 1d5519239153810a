"""Configs: every preset loads; bad input fails with a sentence naming the key."""

from pathlib import Path

import pytest

from learners.config.schema import ConfigError, load_config, to_dict
from scripts.cli import main

ROOT = Path(__file__).resolve().parents[1]

# presets and example compare files at the top of configs/, declared studies in configs/studies/
CONFIGS = sorted([*ROOT.joinpath("configs").glob("*.yaml"),
                  *ROOT.joinpath("configs", "studies").glob("*.yaml")])


@pytest.mark.parametrize("path", [p for p in CONFIGS
                                  if not p.name.startswith(("compare_", "study_"))],
                         ids=lambda p: p.name)
def test_every_preset_loads_and_saves_as_it_loads(path, tmp_path):
    """Each preset loads, and the config it saves (as a run directory keeps it) loads the same."""
    import yaml

    cfg = load_config(path)
    assert cfg.run.total_frames > 0
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(to_dict(cfg)))
    assert to_dict(load_config(saved)) == to_dict(cfg)


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith(("compare_", "study_"))],
                         ids=lambda p: p.name)
def test_every_compare_file_loads_with_every_trial_config(path, tmp_path):
    from scripts.compare.command import load_spec

    spec, trials, _ = load_spec(path, out=str(tmp_path))
    assert len(trials) == len({t.variant for t in trials}) * len(spec.seeds)
    assert all(t.cfg.run.total_frames > 0 for t in trials)


def test_presets_and_declared_studies_live_apart():
    top = {p.name for p in ROOT.joinpath("configs").glob("*.yaml")}
    studies = {p.name for p in ROOT.joinpath("configs", "studies").glob("*.yaml")}
    assert studies and all(name.startswith("study_") for name in studies)
    assert not [name for name in top if name.startswith("study_")], "studies go in configs/studies/"


def test_overrides_and_types():
    cfg = load_config(None, ["run.total_frames=2e6", "runtime.num_runners=4", "env.suite=atari",
                             "env.game=Breakout", "learner.clip_value=false"])
    assert cfg.run.total_frames == 2_000_000 and isinstance(cfg.run.total_frames, int)
    assert (cfg.runtime.num_runners == 4 and cfg.env.game == "Breakout"
            and cfg.learner.clip_value is False)


def test_core_options_are_filled_and_typed():
    from agents.cores.lstm import LSTMConfig

    cfg = load_config(None, ["agent.core_options.hidden_size=64"])
    assert cfg.agent.core_options == LSTMConfig(hidden_size=64)
    # what a run saves: every option, defaults included
    assert to_dict(cfg)["agent"]["core_options"] == {"hidden_size": 64, "fused": True,
                                                       "resets": "split", "init": "torch"}


@pytest.mark.parametrize(
    "override, words",
    [
        ("learner.lrr=1", ["learner.lrr", "valid keys under 'learner'", "unroll_length"]),
        ("bogus.x=1", ["bogus", "valid keys at the top level", "runtime"]),
        ("agent.core=gru9", ["agent.core: unknown core 'gru9'", "lstm"]),
        ("agent.head=nope", ["unknown head 'nope'", "linear"]),
        ("env.suite=dmlab", ["unknown env suite 'dmlab'", "minigrid", "atari"]),
        ("run.total_frames=abc", ["run.total_frames", "integer"]),
        ("agent.core_options.hidden=3", ["agent.core_options.hidden", "hidden_size"]),
        ("learner.name=a2c", ["learner.name: unknown learner 'a2c'", "impala, ppo"]),
        ("learner.batch_size=0", ["learner.batch_size must be >= 1, got 0"]),
        # Ranges, checked on load: each of these used to start a run or crash later.
        ("learner.optimizer.lr=-1", ["learner.optimizer.lr must be > 0, got -1.0"]),
        ("learner.optimizer.lr=.inf", ["learner.optimizer.lr must be > 0, got inf"]),
        ("learner.gamma=1.5", ["learner.gamma must be in (0, 1], got 1.5"]),
        ("learner.lambda_=-0.1", ["learner.lambda_ must be in [0, 1]"]),
        ("learner.optimizer.alpha=1", ["learner.optimizer.alpha must be in [0, 1), got 1.0"]),
        ("learner.optimizer.max_grad_norm=0", ["learner.optimizer.max_grad_norm must be > 0"]),
        ("learner.entropy_cost=.nan", ["learner.entropy_cost must be >= 0, got nan"]),
        ("runtime.envs_per_runner=0", ["runtime.envs_per_runner must be at least 1"]),
        ("run.total_frames=2e6;learner.optimizer.lr_decay_frames=1e6",
         ["learner.optimizer.lr_decay_frames (1,000,000) is below run.total_frames (2,000,000)"]),
        ("learner.optimizer.lr_decay_frames=-1",
         ["learner.optimizer.lr_decay_frames must be >= 0"]),
        ("agent.core_options.hidden_size=-3",
         ["agent.core_options.hidden_size must be >= 1, got -3"]),
        ("agent.core=rims;agent.core_options={input_dropout: 1.5}",
         ["agent.core_options", "input_dropout must be in [0, 1)"]),
        ("learner.gamma=[1", ["override 'learner.gamma=[1'", "not valid YAML", "line 1"]),
        ("learner.batch_size=30", ["multiple of", "envs_per_runner"]),
        ("env.level=MiniGrid-Emty-5x5-v0",
         ["env.level", "unknown minigrid id", "MiniGrid-Empty-5x5-v0"]),
        ("env.suite=atari;env.game=Pongg", ["env.game", "unknown atari id 'Pongg'", "Pong"]),
        ("env.suite=atari;env.games=[Pong,Breakot]", ["env.games", "'Breakot'", "Breakout"]),
        ("env.suite=lab6;runtime.num_runners=4;runtime.runners_per_task=1",
         ["runners_per_task=1", "num_runners=6"]),
        ("env.suite=lab6;runtime.num_runners=8", ["8 runners", "6 tasks", "multiple of 6"]),
        ("env.suite=lab6;runtime.num_runners=0;runtime.envs_per_runner=4;learner.batch_size=4",
         ["4 envs", "multiple of 6"]),
        ("env.suite=atari;env.games=[Pong,Breakout];env.full_action_space=false",
         ["one action set"]),
        ("learner.monitor=5", ["learner.monitor: expected a mapping of its keys (", "every, ",
                               "blind_share", "got 5"]),
        ("run=5;run.dir=x", ["override run.dir: run holds 5, not a section", "run=..."]),
    ],
)
def test_bad_input_names_the_key(override, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, override.split(";"))
    for w in words:
        assert w in str(e.value)


def test_weight_changes_names_the_settings_that_shape_the_agents_weights():
    from learners.config.typed_yaml import weight_changes

    base = load_config(None, [])
    kept = load_config(None, ["learner.gamma=0.9", "run.total_frames=9e6"])
    assert weight_changes(base, kept) == []
    assert weight_changes(base, load_config(None, ["agent.core_options.hidden_size=64"])) == [
        f"agent.core_options.hidden_size: {base.agent.core_options.hidden_size} -> 64"]
    assert weight_changes(base, load_config(None, ["learner.popart=true"])) == [
        "learner.popart: False -> True"]


def test_cli_reports_errors_cleanly(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["train", "--resume", str(tmp_path / "empty")]) == 2
    assert "config.yaml" in capsys.readouterr().err
    (tmp_path / "blank.yaml").write_text("# nothing yet\n")
    assert main(["train", str(tmp_path / "blank.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mira: error: {tmp_path / 'blank.yaml'} is empty (or only comments); a config "
                   "names its sections, e.g. configs/impala_minigrid.yaml"], err
    assert not (tmp_path / "runs").exists()


def test_evaluation_loads_configs_whose_runner_layout_training_would_reject():
    """``mira evaluate`` reads a run's config without its runner layout.

    A run made before the task-dealing check (lab6 on 8 runners) still evaluates.
    """
    layout = ["env.suite=lab6", "runtime.num_runners=8"]
    with pytest.raises(ConfigError, match="8 runners"):
        load_config(None, layout)
    assert load_config(None, layout, runtime=False).runtime.num_runners == 8


def test_unreadable_and_malformed_config_files_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  total_frames: [1\nlearner:\n  gamma: 0.99\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: YAML syntax error at line \d+, column \d+"):
        load_config(bad)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00run: {}")
    assert main(["train", str(binary)]) == 2
    err = capsys.readouterr().err
    assert ("binary.yaml: not UTF-8 text (byte 0 is 0xff)" in err
            and len(err.strip().splitlines()) == 1)


def test_switching_the_core_on_the_command_line_drops_the_old_cores_options(capsys):
    # configs/impala_minigrid.yaml sets agent.core_options.hidden_size, which RIMs does not take.
    cfg = load_config(ROOT / "configs/impala_minigrid.yaml", ["agent.core=rims"])
    assert cfg.agent.core == "rims" and cfg.agent.core_options.num_units == 6
    err = capsys.readouterr().err
    assert ("agent.core=rims replaces lstm: dropping the config's agent.core_options "
            "(hidden_size)") in err
    cfg = load_config(ROOT / "configs/impala_minigrid.yaml",
                      ["agent.core=rims", "agent.core_options.k_active=3"])
    # options given with the switch apply to the new core
    assert cfg.agent.core_options.k_active == 3
    capsys.readouterr()
    # no switch: options kept
    cfg = load_config(ROOT / "configs/impala_minigrid.yaml", ["agent.core=lstm"])
    assert "replaces" not in capsys.readouterr().err and cfg.agent.core_options.hidden_size == \
        load_config(ROOT / "configs/impala_minigrid.yaml").agent.core_options.hidden_size


def test_settings_of_one_algorithm_live_in_its_section_and_old_keys_still_load(tmp_path):
    """IMPALA-only and PPO-only settings are ``learner.impala.*`` / ``learner.ppo.*``.

    Saved configs (every run directory up to 2026-11-24) and commands that spell them at
    ``learner.*`` load with the same meaning; the section's own spelling wins over the old
    one, and a misspelt key lists the section's keys.
    """
    import yaml

    from learners.algorithms.impala import ImpalaConfig
    from learners.algorithms.ppo import PPOConfig

    cfg = load_config(ROOT / "configs/impala_atari.yaml")
    assert isinstance(cfg.learner.impala, ImpalaConfig) and isinstance(cfg.learner.ppo, PPOConfig)
    assert cfg.learner.impala.fixed_targets and cfg.learner.impala.surrogate_clip == 0.1
    assert not hasattr(cfg.learner, "surrogate_clip") and not hasattr(cfg.learner, "target_kl")
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump({"learner": {"name": "impala", "fixed_targets": True,
                                               "surrogate_clip": 0.2, "clip_rho_threshold": 2.0,
                                               "target_kl": 0.03}}))
    cfg = load_config(old)
    impala = cfg.learner.impala
    assert (impala.fixed_targets, impala.surrogate_clip, impala.clip_rho_threshold,
            cfg.learner.ppo.target_kl) == (True, 0.2, 2.0, 0.03)
    assert to_dict(cfg)["learner"]["impala"]["surrogate_clip"] == 0.2  # saved in the new place
    cfg = load_config(old, ["learner.surrogate_clip=0.3", "learner.ppo.target_kl=0.01"])
    assert cfg.learner.impala.surrogate_clip == 0.3 and cfg.learner.ppo.target_kl == 0.01
    with pytest.raises(ConfigError, match="valid keys under 'learner.impala': clip_rho_threshold"):
        load_config(old, ["learner.impala.surrogate=0.3"])
    with pytest.raises(ConfigError, match=r"learner.impala.surrogate_clip must be in \[0, 1\)"):
        load_config(old, ["learner.surrogate_clip=1.5"])


def test_evaluate_migrates_old_keys_in_overrides_as_train_does(tmp_path):
    """``mira evaluate`` loads through the same loader: an old key given as an override migrates.

    Both ways evaluate finds a run's config: the checkpoint's own copy, and the run
    directory's config.yaml.
    """
    import yaml

    from learners.runtime.run_dir import RunDir

    saved = to_dict(load_config(None, ["learner.impala.surrogate_clip=0.2"]))
    saved["learner"]["surrogate_clip"] = saved["learner"].pop("impala").pop("surrogate_clip")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    ckpt = run / "checkpoints" / "ckpt_000000000100.pt"
    for state in ({"config": saved}, {}):
        assert RunDir.checkpoint_config(ckpt, state, []).learner.impala.surrogate_clip == 0.2
        cfg = RunDir.checkpoint_config(ckpt, state, ["learner.surrogate_clip=0.3"])
        assert cfg.learner.impala.surrogate_clip == 0.3


def test_a_checkpoint_whose_saved_config_no_longer_validates_reads_its_run_directory(tmp_path):
    """``mira train --resume`` and ``mira evaluate`` read a checkpoint's config one way.

    A saved config a later mira refuses falls back to the run's config.yaml; with no
    config.yaml beside it, the refusal is the error.
    """
    import yaml

    from learners.runtime.run_dir import RunDir

    good = to_dict(load_config(None, ["learner.impala.surrogate_clip=0.2"]))
    bad = to_dict(load_config(None))
    bad["learner"]["no_such_key"] = 1
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    ckpt = run / "checkpoints" / "ckpt_000000000100.pt"
    with pytest.raises(ConfigError, match="no_such_key"):
        RunDir.checkpoint_config(ckpt, {"config": bad})
    with pytest.raises(ConfigError, match="carries no config and there is no"):
        RunDir.checkpoint_config(ckpt, {})
    (run / "config.yaml").write_text(yaml.safe_dump(good))
    assert RunDir.checkpoint_config(ckpt, {"config": bad}).learner.impala.surrogate_clip == 0.2
    assert RunDir.checkpoint_config(ckpt, {"config": good}, ["learner.impala.surrogate_clip=0.3"]
                                    ).learner.impala.surrogate_clip == 0.3


def test_a_validated_config_is_frozen_and_changed_by_copy():
    import dataclasses

    cfg = load_config(None)

    def sections(obj):
        yield obj
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value) and f.name not in (
                    "torso_options", "core_options", "head_options"):
                yield from sections(value)

    for section in sections(cfg):
        assert type(section).__dataclass_params__.frozen, type(section).__name__
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run.dir = "elsewhere"
    copy = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir="elsewhere"))
    assert copy.run.dir == "elsewhere" and cfg.run.dir == ""


def test_ranges_are_declared_on_the_fields_and_checked_from_there():
    """Every ranged field is checked on load from its declaration (no table elsewhere)."""
    import dataclasses

    from learners.config.schema import ExperimentConfig

    def ranged_keys(cls, prefix):
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                yield from ranged_keys(type(default), f"{prefix}{f.name}.")
            elif "range" in f.metadata:
                yield f"{prefix}{f.name}", f.metadata["range"]

    keys = dict(ranged_keys(ExperimentConfig, ""))
    assert {"learner.gamma", "run.keep_checkpoints", "learner.impala.surrogate_clip",
            "eval.episodes"} <= set(keys)
    for key, (low, _high, low_open, _) in keys.items():
        if low is None or key in ("run.total_frames", "runtime.num_runners",
                                  "runtime.envs_per_runner", "learner.unroll_length"):
            continue  # checked first by a combination rule, with its own sentence
        below = low - 1 if not low_open else low
        with pytest.raises(ConfigError, match=rf"^{key} must be"):
            load_config(None, [f"{key}={below}"], runtime=False)


def test_each_suite_reads_its_own_options():
    from envs.suites import AtariOptions, EnvConfig, MiniGridOptions

    cfg = load_config(None, ["env.suite=atari", "env.game=Breakout"], runtime=False)
    assert type(cfg.env) is AtariOptions and not hasattr(cfg.env, "level")
    assert type(load_config(None).env) is MiniGridOptions
    assert EnvConfig(suite="atari", game="Breakout") == cfg.env  # built by its suite's class
    with pytest.raises(ConfigError, match=r"unknown config key 'env.speed'; valid keys under "
                                          r"'env': suite, level, levels"):
        load_config(None, ["env.speed=2"])


def test_the_gpu_preset_differs_from_the_atari_preset_only_where_it_says_gpu():
    """The GPU preset is a full copy of the Atari preset (presets have no inheritance).

    A change to impala_atari.yaml that is not carried over, or a new difference, fails here
    until its "GPU:" comment and this list say why.
    """

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    shipped = flat(to_dict(load_config("configs/impala_atari.yaml")))
    gpu = flat(to_dict(load_config("configs/impala_atari_gpu.yaml")))
    differ = {k for k in set(shipped) | set(gpu) if shipped.get(k) != gpu.get(k)}
    assert differ == {"runtime.num_runners", "runtime.learner_threads", "learner.lock_step",
                      "learner.batch_size", "agent.core_options.resets"}, sorted(differ)
    text = (ROOT / "configs/impala_atari_gpu.yaml").read_text()
    assert text.count("# GPU:") >= 5
