"""mira evaluate on a tiny checkpoint, and periodic evaluation during training."""

import json

import pytest

from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from scripts.cli import main


@pytest.fixture
def tiny_run(small_cfg):
    cfg = small_cfg(**{"eval.every_frames": 200, "eval.episodes": 2})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    return cfg


def test_evaluate_writes_report(tiny_run, capsys):
    run = tiny_run.run.dir
    assert main(["evaluate", run, "--episodes", "3", "--num-runners", "0"]) == 0
    result = json.loads((RunDir(run).path / "eval.json").read_text())
    task = result["tasks"]["MiniGrid-Empty-5x5-v0"]
    assert task["episodes"] == 3 and 0 <= task["return_mean"] <= 1 and task["return_std"] >= 0
    for name in ("median", "mean", "iqm"):
        a = result["aggregates"][name]
        assert a["ci95"][0] <= a["value"] <= a["ci95"][1]
    assert (RunDir(run).path / "eval.md").read_text().startswith("# Evaluation")
    # A bare checkpoint file works too (it carries its config); the report goes beside it.
    ckpt = RunDir(run).latest_checkpoint()
    assert main(["evaluate", str(ckpt), "--episodes", "2", "--num-runners", "0"]) == 0


def test_evaluate_errors(tiny_run, tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nothing")]) == 2
    assert main(["evaluate", tiny_run.run.dir, "--tasks", "Pong", "--num-runners", "0"]) == 2
    assert "this run's tasks" in capsys.readouterr().err
    assert main(["evaluate", tiny_run.run.dir, "--protocol", "machado", "--num-runners", "0"]) == 2
    assert "applies to Atari" in capsys.readouterr().err


def test_periodic_evaluation_is_logged(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(tiny_run.run.dir)
    acc.Reload()
    # eval.every_frames=200 in a 400-frame run: one evaluation, at 200 frames, of a return
    # MiniGrid keeps in [0, 1]
    points = acc.Scalars("eval/return/MiniGrid-Empty-5x5-v0")
    assert [p.step for p in points] == [200] and all(0 <= p.value <= 1 for p in points)


def test_atari_scores_are_human_normalised():
    from envs.evaluation import score_table

    result = score_table({"Pong": [14.6, 14.6], "Breakout": [1.7, 1.7]}, "atari", reps=50)
    assert result["score"] == "human-normalised"
    assert result["tasks"]["Pong"]["normalized_score"] == pytest.approx(100.0)
    assert result["tasks"]["Breakout"]["normalized_score"] == pytest.approx(0.0)
    assert result["aggregates"]["mean"]["value"] == pytest.approx(50.0)
    assert result["aggregates"]["capped_mean"]["value"] == pytest.approx(50.0)


def test_capped_mean_caps_each_task_mean_not_each_episode():
    from envs.evaluation import score_table

    # Pong: episodes at 200.3 and 0.0 (mean 100.1 >= 100); Breakout at 0. DMLab-30's cap is
    # min(level mean, 100): (100 + 0) / 2 = 50. Capping episodes first would give 25.
    result = score_table({"Pong": [50.0, -20.7], "Breakout": [1.7, 1.7]}, "atari", reps=50)
    assert result["tasks"]["Pong"]["normalized_score"] == pytest.approx(100.14, abs=0.01)
    assert result["aggregates"]["capped_mean"]["value"] == pytest.approx(50.0)


def test_evaluator_plays_exactly_the_asked_episodes_spread_over_envs(small_cfg):
    from envs.evaluation import Evaluator

    cfg = small_cfg()
    ev = Evaluator(cfg.env, cfg.agent, tasks=[0], episodes=5, max_envs=4)
    assert ev.per_env == [2, 1, 1, 1]
    runner = ev.runners[0]
    episodes = runner.run_episodes(ev.per_env, runner.agent.state_dict())
    assert len(episodes) == 5
    assert len(ev.evaluate(runner.agent.state_dict())[0]) == 5


def test_evaluating_under_another_atari_protocol_keeps_the_trained_action_set(tmp_path):
    """A dqn-protocol Pong agent evaluated under another protocol keeps its 6 minimal actions.

    --protocol machado evaluates it with sticky actions but must not hand it the 18-action set (the
    head has 6 outputs).
    """
    from learners.config.schema import load_config
    from scripts.evaluate import evaluate_checkpoint
    from tests.conftest import small_overrides

    overrides = [o for o in small_overrides(tmp_path) if not o.startswith("env.level=")]
    cfg = load_config(None, overrides + ["env.suite=atari", "env.game=Pong",
                                         "env.max_episode_frames=400", "run.total_frames=160"])
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    result = evaluate_checkpoint(cfg.run.dir, episodes=1, protocol="machado", num_runners=0,
                                 quiet=True)
    assert result["protocol"] == "machado" and result["tasks"]["Pong"]["episodes"] == 1


def test_video_records_whole_episodes_one_frame_per_step(tmp_path, small_cfg):
    import re

    import cv2

    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer
    from scripts.cli import main

    cfg = small_cfg()
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert main(["evaluate", cfg.run.dir, "--episodes", "1", "--video", "2",
                 "--num-runners", "0"]) == 0
    videos = sorted((tmp_path / "run" / "videos").iterdir())
    assert [v.name.split("_return")[0] for v in videos] == ["MiniGrid-Empty-5x5-v0_ep01",
                                                            "MiniGrid-Empty-5x5-v0_ep02"]
    for v in videos:
        steps = int(re.search(r"_steps(\d+)\.", v.name).group(1))
        cap = cv2.VideoCapture(str(v))
        frames = 0
        while cap.read()[0]:
            frames += 1
        assert frames == steps > 0, v.name


def test_rims_strip_shows_k_active_units_under_each_frame(tmp_path, small_cfg, capsys):
    import cv2
    import numpy as np

    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer
    from scripts.cli import main

    cfg = small_cfg(**{"agent.core": "rims",
                       "agent.core_options": "{num_units: 6, k_active: 4, unit_size: 8}"})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert main(["evaluate", cfg.run.dir, "--episodes", "1", "--video", "1", "--rims-strip",
                 "--num-runners", "0"]) == 0
    (video,) = (tmp_path / "run" / "videos").iterdir()
    ok, frame = cv2.VideoCapture(str(video)).read()
    assert ok
    strip = frame[-6, :, :].mean(axis=-1)  # a row through the middle of the 12-pixel strip
    cells = np.array_split(strip, 6)
    assert sum(c[2:-2].mean() > 200 for c in cells) == 4  # white = active, k_active of num_units
    lstm = small_cfg(**{"run.dir": str(tmp_path / "lstm"), "agent.core": "lstm"})
    Trainer(lstm, RunDir.create(lstm, None), quiet=True).train()
    assert main(["evaluate", lstm.run.dir, "--episodes", "1", "--video", "1", "--rims-strip",
                 "--num-runners", "0"]) == 2  # a strip needs RIMs
    assert "--rims-strip shows which RIMs are active; this run's core is 'lstm'" in (
        capsys.readouterr().err)
