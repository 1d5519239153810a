"""The command line's answers to common mistakes: one line each, and nothing changed."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from learners.config.schema import ConfigError, load_config, save_config
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from scripts.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("config, override, reads", [
    ("impala_minigrid", "env.game=Pong", "env.level, env.levels"),
    ("impala_minigrid", "env.frame_stack=2", "env.level, env.levels"),
    ("impala_lab6", "env.level=MiniGrid-Empty-8x8-v0", "no env key but env.suite"),
    ("impala_atari", "env.levels=[MiniGrid-Empty-5x5-v0]", "env.game, env.games, env.protocol"),
])
def test_a_setting_the_suite_never_reads_is_refused(config, override, reads):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key}: the \w+ suite does not read it \(it reads "
                                          rf"{reads}"):
        load_config(ROOT / f"configs/{config}.yaml", [override], runtime=False)


# The env section every config.yaml held before each suite had its own options: every key
# of every suite, at its default where the suite did not read it.
OLD_ENV = {"suite": "minigrid", "level": "MiniGrid-Empty-5x5-v0", "levels": [], "game": "Pong",
           "games": [], "protocol": "dqn", "episodic_life": False, "max_episode_frames": 108_000,
           "frame_stack": 4, "full_action_space": None, "backend": "ale_vector",
           "ale_threads": 1}


@pytest.mark.parametrize("config, suite", [("impala_lab6", "lab6"), ("impala_minigrid", "minigrid"),
                                           ("impala_atari", "atari")])
def test_a_saved_config_with_every_env_key_still_loads(tmp_path, config, suite):
    """An old config.yaml's keys of other suites, at their defaults, are dropped on load.

    A non-default value of a key the suite does not read is refused, in the file or given as
    an override; a config saved now holds the suite's own keys alone.
    """
    import yaml

    cfg = load_config(ROOT / f"configs/{config}.yaml", runtime=False)
    save_config(cfg, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert set(saved["env"]) == {f.name for f in dataclasses.fields(cfg.env)}
    assert ("frame_stack" in saved["env"]) == (suite == "atari")
    old = dict(OLD_ENV, **saved["env"])  # the old file: this suite's values, the rest defaults
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(dict(saved, env=old)))
    again = load_config(tmp_path / "config.yaml", runtime=False)
    assert again == cfg and type(again.env) is type(cfg.env)
    if suite != "atari":
        with pytest.raises(ConfigError, match=rf"^env.frame_stack: the {suite} suite does not "
                                              "read it"):
            load_config(tmp_path / "config.yaml", ["env.frame_stack=4"], runtime=False)
        old["frame_stack"] = 2
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(dict(saved, env=old)))
        with pytest.raises(ConfigError, match=rf"^env.frame_stack: the {suite} suite does not "
                                              "read it"):
            load_config(tmp_path / "config.yaml", runtime=False)


def test_an_unknown_core_is_one_line_without_a_notice_first(capsys):
    assert main(["train", str(ROOT / "configs/impala_minigrid.yaml"), "agent.core=gru"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mira: error: agent.core: unknown core 'gru'"), err


def test_resume_of_a_finished_run_changes_nothing(small_cfg, capsys):
    cfg = small_cfg()
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    run = Path(cfg.run.dir)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for extra in ([], [f"run.total_frames={cfg.run.total_frames}"]):
        assert main(["train", "--resume", str(run), *extra]) == 0
        err = capsys.readouterr().err
        assert "is finished" in err and "run.total_frames" in err, err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_start_lost_before_its_first_checkpoint_leaves_no_points_in_the_next(small_cfg):
    from torch.utils.tensorboard import SummaryWriter

    from scripts.compare.curves import learning_curve

    cfg = small_cfg()
    for steps in ([16, 48], [32, 64]):  # the lost start, then the start that trains
        run = RunDir.create(cfg, None)
        with SummaryWriter(str(run.path)) as w:
            for s in steps:
                w.add_scalar("episode_return_mean100", float(s), s)
        if steps[0] == 16:  # the lost start also kept a burst
            (run.path / "bursts").mkdir()
            (run.path / "bursts" / "update00000000-step0.pt").write_bytes(b"")
    assert list(learning_curve(run.path)[0]) == [32, 64]
    assert len(list((run.path / "superseded").glob("*tfevents*"))) == 1
    assert not (run.path / "bursts").exists()
    assert (run.path / "superseded" / "bursts" / "update00000000-step0.pt").is_file()


@pytest.mark.parametrize("argv, needs", [
    (["bench"], "mira bench needs a CONFIG file"),
    (["evaluate"], "mira evaluate needs a RUN_DIR or a checkpoint file"),
])
def test_bench_and_evaluate_without_arguments_say_what_they_need(argv, needs, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needs in err[0], err


def test_bench_repeat_must_be_at_least_one(capsys):
    assert main(["bench", str(ROOT / "configs/impala_minigrid.yaml"), "--repeat", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mira: error: --repeat must be at least 1, got 0"], err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_bench_seconds_must_be_a_positive_finite_duration(value, capsys):
    assert main(["bench", str(ROOT / "configs/impala_minigrid.yaml"), "--seconds", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mira: error: --seconds must be a positive number of seconds, got "
                   f"{float(value):g}"], err


@pytest.mark.parametrize("command, defaults", [
    ("evaluate", ["--episodes EPISODES   episodes per task (default: 10)", "(default: 0)"]),
    ("bench", ["(default: 20.0)"]),
])
def test_help_shows_the_defaults_and_describes_every_argument(command, defaults, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    for text in defaults:
        assert text in " ".join(out.split()) or text in out, out
    from scripts.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    assert all(a.help for a in sub._actions), [a.dest for a in sub._actions if not a.help]


def test_compare_given_a_training_config_says_what_a_compare_file_is(capsys):
    assert main(["compare", str(ROOT / "configs/impala_minigrid.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a training config" in err[0] and "base:" in err[0], err


def test_rays_local_token_notice_is_filtered_and_other_warnings_kept():
    from learners.runtime.fleet import RAY_AUTH_LOGGER, quiet_local_auth_notice

    def record(message):
        return logging.LogRecord(RAY_AUTH_LOGGER, logging.WARNING, __file__, 1, message, (), None)

    assert not quiet_local_auth_notice(record(
        "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled"))
    assert quiet_local_auth_notice(record("Token authentication is disabled for this cluster"))


BASE = ROOT / "configs/impala_minigrid.yaml"


@pytest.mark.parametrize("name, text, argv, needs", [
    ("list.yaml", f"- name: x\n- base: {BASE}\n", ["compare", "{f}", "--dry-run"],
     "expected a mapping of compare keys"),
    ("seed.yaml", f"base: {BASE}\nvariants: [{{agent.core: lstm}}]\nmatrix: {{run.seed: 5}}\n",
     ["compare", "{f}", "--dry-run"], "matrix.run.seed: expected a non-empty list"),
    ("frames.yaml", f"base: {BASE}\nvariants: [{{agent.core: lstm}}]\nseeds: [0]\n"
     "plan: {frames: .inf}\n", ["compare", "{f}", "--dry-run"], "plan.frames must be a finite"),
    ("csv.yaml", f"base: {BASE}\nvariants: [{{agent.core: lstm}}]\nseeds: [0]\n"
     "csv: {columns: {s: seedz}}\n", ["compare", "{f}", "--dry-run"], "'seedz' is not one of"),
    ("cmp.yaml", f"base: {BASE}\nvariants: [{{agent.core: lstm}}]\nseeds: [0]\n",
     ["train", "{f}"], "is a compare file"),
    ("x.yaml", "", ["train", str(BASE), "run.total_frames=nan"],
     "run.total_frames: expected an integer, got 'nan'"),
    ("x.yaml", "", ["compare", "{d}"], "is a directory; give the compare file"),
    ("x.yaml", "", ["evaluate", str(BASE)], "is not a mira checkpoint"),
    ("run/checkpoints/ckpt_best.pt", "", ["evaluate", "{d}/run"], "holds no checkpoint"),
    ("base.yaml", "variants: [{agent.core: lstm}]\nmatrix: {base: [3]}\n",
     ["compare", "{f}", "--dry-run"], "base: expected the path of a training config"),
    ("ev.yaml", f"base: {BASE}\nvariants: [{{agent.core: lstm}}]\nevaluate: {{episodes: -1}}\n",
     ["compare", "{f}", "--dry-run"], "evaluate.episodes must be 0 or more"),
    ("cpu.yaml",
     f"base: {BASE}\nvariants: [{{agent.core: lstm}}]\nresources: {{cpus_per_trial: 0}}\n",
     ["compare", "{f}", "--dry-run"], "resources.cpus_per_trial must be above 0"),
    ("x.yaml", "", ["evaluate", "{d}", "--num-runners", "-1"], "--num-runners must be at least 0"),
    ("burst.pt", "", ["evaluate", "{f}"], "not a mira checkpoint (no learner weights"),
    ("x.yaml", "", ["train", str(ROOT / "configs/impala_atari.yaml"), "agent.torso=[a]"],
     "agent.torso"),
])
def test_user_mistakes_get_one_line_errors(name, text, argv, needs, tmp_path, capsys):
    """Each mistake gives one line on stderr and exit 2, never a traceback.

    Malformed compare files, non-finite integers, files that are not checkpoints, and a
    compare file given to train.
    """
    f = tmp_path / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    if name == "burst.pt":  # a dict torch reads, but not a checkpoint (a burst file, say)
        import torch

        torch.save({"learner": {"step": 1}}, f)
    if name.startswith("run/"):
        (tmp_path / "run" / "config.yaml").write_text(BASE.read_text())
    argv = [a.format(f=f, d=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needs in err[0] and "csv: csv." not in err[0], err
