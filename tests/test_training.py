"""In-process training (runtime.num_runners: 0): the run directory, resume, Ctrl-C."""

import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agents.cores import CORES
from agents.heads import HEADS
from learners.config.schema import load_config
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from tests.conftest import small_overrides

ROOT = Path(__file__).resolve().parents[1]


def test_smoke_run_leaves_a_complete_run_directory(tmp_path, small_cfg):
    cfg = small_cfg()
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    run = Path(cfg.run.dir)
    assert (run / "config.yaml").is_file() and (run / "meta.json").is_file()
    assert list(run.glob("events.out.tfevents.*"))
    saved = json.loads((run / "summary.json").read_text())
    for key in ("frames", "fps", "episode_return_mean", "wall_time_s"):
        assert key in saved
    assert saved["frames"] >= 400 and saved["updates"] >= 1
    ckpt = RunDir(run).latest_checkpoint()
    state = torch.load(ckpt, weights_only=True)  # plain state dicts only
    assert set(state) == {"config", "config_format", "learner", "progress"}
    assert "agent" in state["learner"]
    assert summary["frames"] == saved["frames"]
    # The resolved config round-trips.
    again = load_config(run / "config.yaml")
    assert again.agent.core_options.hidden_size == 32


def test_tensorboard_has_the_promised_scalars(tmp_path, small_cfg):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = small_cfg(**{"run.total_frames": 800})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    acc = EventAccumulator(cfg.run.dir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("policy_loss", "value_loss", "entropy", "grad_norm", "fps", "policy_lag",
                "learner_queue_wait_s", "lr"):
        assert tag in tags, f"{tag} missing from {sorted(tags)}"
    assert ("episode_return/MiniGrid-Empty-5x5-v0" in tags
            and "episode_length/MiniGrid-Empty-5x5-v0" in tags)


def test_a_resume_drops_what_an_earlier_start_logged_after_its_checkpoint(small_cfg):
    # A start killed without its final checkpoint (a second Ctrl-C, a lost worker) has logged
    # past the checkpoint a resume starts from: a trajectory the resumed run does not
    # continue, so the run's curves (and a compare's frames to a threshold) leave it out.
    from torch.utils.tensorboard import SummaryWriter

    from scripts.compare.curves import learning_curve

    cfg = small_cfg(**{"run.total_frames": 400, "run.log_every_s": 0.01})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    run = RunDir(cfg.run.dir)
    frames0 = RunDir.load_checkpoint(run.latest_checkpoint())["progress"]["frames"]
    time.sleep(1.1)  # event files sort by the second they were opened in
    with SummaryWriter(str(run.path)) as w:  # the killed start's points past the checkpoint
        for step in (frames0 + 1, frames0 + 3, 10_000):
            w.add_scalar("lr", 99.0, step)
    assert list(learning_curve(run.path, "lr")[1]).count(99.0) == 3
    time.sleep(1.1)
    cfg2 = run.load_config(["run.total_frames=800"])
    Trainer(cfg2, run, resume_from=run.latest_checkpoint(), quiet=True).train()
    frames, values = learning_curve(run.path, "lr")
    assert 99.0 not in values, list(zip(frames, values))
    assert frames0 in frames and frames[-1] >= 800  # the checkpoint's own point stays


def test_resume_continues_frames_and_optimizer_state(tmp_path, small_cfg):
    cfg = small_cfg(**{"run.total_frames": 400})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    run = RunDir(cfg.run.dir)
    first = RunDir.load_checkpoint(run.latest_checkpoint())
    frames0 = first["progress"]["frames"]
    cfg2 = run.load_config(["run.total_frames=800"])
    trainer = Trainer(cfg2, run, resume_from=run.latest_checkpoint(), quiet=True)
    learner = trainer.learner.actor
    assert learner.frames == frames0 and learner.version == first["learner"]["counters"]["version"]
    opt_state = learner.optimizer.state_dict()["state"]
    ref = first["learner"]["optimizer"]["state"]
    assert opt_state and all(torch.equal(opt_state[k]["square_avg"].cpu(),
                                         ref[k]["square_avg"].cpu()) for k in ref)
    assert learner.lr() < cfg2.learner.optimizer.lr  # the schedule continues, not restarts
    # ... but it is not the schedule the first run decayed to 0 on: resuming says so.
    assert learner.lr() > 0 and "jumps from 0 to" in run.schedule_note(cfg2)
    assert run.schedule_note(run.load_config()) is None
    summary = trainer.train()
    assert summary["frames"] >= 800 and summary["updates"] > first["learner"]["counters"]["version"]
    assert summary["episodes"] >= first["progress"]["episodes"]["count"]


def test_lr_decay_frames_runs_the_start_of_a_longer_schedule(tmp_path, small_cfg):
    """``lr_decay_frames`` stretches the linear decay: 400 of 1,600 frames end at lr x 3/4."""
    cfg = small_cfg(**{"run.total_frames": 400, "learner.optimizer.lr_decay_frames": 1600})
    trainer = Trainer(cfg, RunDir.create(cfg, None), quiet=True)
    summary = trainer.train()
    learner = trainer.learner.actor
    lr = cfg.learner.optimizer.lr
    assert learner.lr() == pytest.approx(lr * (1 - summary["frames"] / 1600))
    assert 0.5 * lr < learner.lr() < lr
    # the default: decay over run.total_frames (configs are frozen: the learner gets a copy)
    c = learner.cfg
    learner.cfg = dataclasses.replace(c, learner=dataclasses.replace(c.learner, optimizer=(
        dataclasses.replace(c.learner.optimizer, lr_decay_frames=0))))
    assert learner.lr() == lr * max(0.0, 1 - summary["frames"] / 400) < 0.5 * lr


def test_lr_schedule_change_names_the_jump_and_only_a_jump():
    from learners.config.schema import load_config
    from learners.update.schedule import lr_at, lr_schedule_change

    def cfg(*overrides):
        return load_config("configs/impala_minigrid.yaml", list(overrides))

    short, long = cfg("run.total_frames=1000"), cfg("run.total_frames=4000")
    lr = short.learner.optimizer.lr
    assert lr_at(short, 500) == pytest.approx(lr / 2) and lr_at(short, 1500) == 0.0
    assert lr_at(long, 1000) == pytest.approx(lr * 3 / 4)
    note = lr_schedule_change(short, long, 1000)  # extending a finished run: 0 -> 3/4 lr
    assert note.startswith("the learning rate at 1,000 frames jumps from 0 to ")
    assert "learner.optimizer.lr_decay_frames" in note
    assert lr_schedule_change(short, short, 1000) is None
    fixed = ("learner.optimizer.lr_decay_frames=8000",)
    assert lr_schedule_change(cfg("run.total_frames=1000", *fixed),
                              cfg("run.total_frames=4000", *fixed), 1000) is None
    const = cfg("learner.optimizer.lr_schedule=constant")
    assert lr_at(const, 10**9) == lr and lr_schedule_change(short, const, 0) is None
    assert "constant" in lr_schedule_change(short, const, 500)


def test_lr_warmup_rises_linearly_then_joins_the_schedule():
    """The warmup scales the schedule by min(1, frames / warmup) and names itself on a jump."""
    from learners.config.schema import load_config
    from learners.update.schedule import lr_at, lr_schedule_change

    def cfg(*overrides):
        return load_config("configs/impala_minigrid.yaml", ["run.total_frames=1000", *overrides])

    plain, warm = cfg(), cfg("learner.optimizer.lr_warmup_frames=200")
    lr = plain.learner.optimizer.lr
    for frames in (0, 50, 100, 199, 200, 500, 999, 1200):  # naive reference, step by step
        ramp = frames / 200 if frames < 200 else 1.0
        assert lr_at(warm, frames) == pytest.approx(lr * ramp * max(0.0, 1 - frames / 1000))
    assert lr_at(warm, 0) == 0.0 and lr_at(warm, 500) == lr_at(plain, 500)
    const = cfg("learner.optimizer.lr_schedule=constant", "learner.optimizer.lr_warmup_frames=200")
    assert lr_at(const, 100) == pytest.approx(lr / 2) and lr_at(const, 10**9) == lr
    assert "warmed up from 0 over its first 200 frames" in lr_schedule_change(plain, warm, 100)
    assert lr_schedule_change(plain, warm, 300) is None
    # a run may end inside its warmup, as inside a longer decay (a PBT generation, a smoke run)
    short = cfg("learner.optimizer.lr_warmup_frames=4000", "learner.optimizer.lr_decay_frames=8000")
    assert lr_at(short, 500) == pytest.approx(lr * 500 / 4000 * (1 - 500 / 8000))


def test_progress_line_and_compare_reading_it_back(tmp_path, small_cfg, capsys):
    """The trainer's progress line gives frames, return and time left; compare shows it short."""
    from learners.runtime.logbook import duration

    cfg = small_cfg(**{"run.total_frames": 400, "run.log_every_s": 1e-3})
    Trainer(cfg, RunDir.create(cfg, None)).train()
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[mira] frames")]
    assert lines and all("return(last100)" in x for x in lines)
    assert " eta " in lines[-2] and lines[-1].endswith("eta 0 s")  # the final line: none left
    # mira compare reads a running trial's newest line back from its train.log
    from scripts.compare.trial_runner import _progress

    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "train.log").write_text("\n".join(lines[:-1]) + "\n")
    frames, fps, ret = re.search(r"frames\s+([\d,]+).*fps\s+(\d+).*return\(last100\)\s+(\S+)",
                                 lines[-2]).groups()
    share = 100 * int(frames.replace(",", "")) / 400
    assert _progress(trial) == (f"{frames} frames ({share:.1f}%), {fps} frames/s, "
                                   f"return(last100) {ret}, {lines[-2].split('eta ')[1]} left")
    assert _progress(tmp_path / "missing") == "starting"
    assert (duration(95), duration(750), duration(9000)) == ("95 s", "12.5 min", "2.5 h")


def test_run_dir_refuses_to_overwrite(tmp_path, small_cfg):
    from learners.config.schema import ConfigError

    cfg = small_cfg()
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    with pytest.raises(ConfigError, match="--resume"):
        RunDir.create(small_cfg(), None)


def test_a_resume_is_recorded_in_meta_json_and_a_broken_record_does_not_stop_it(tmp_path,
                                                                                capsys):
    run = RunDir(tmp_path)
    run.note_resume(1_000)  # no meta.json yet: one is written
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert [r["frames"] for r in meta["resumed_on"]] == [1_000]
    (tmp_path / "meta.json").write_text('{"seed": 0, "git_rev')  # cut short
    run.note_resume(2_000)
    assert "resume not recorded" in capsys.readouterr().err
    assert (tmp_path / "meta.json").read_text() == '{"seed": 0, "git_rev'  # left as it was
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("num_runners", [0, pytest.param(2, marks=pytest.mark.ray)])
def test_ctrl_c_writes_a_checkpoint_and_resume_continues(tmp_path, num_runners):
    """Ctrl-C writes a checkpoint and a resume continues.

    The CLI end to end: in-process, and with runner actors on a local Ray instance that `mira train`
    starts itself (runtime.address unset).
    """
    run = tmp_path / "run"
    overrides = small_overrides(tmp_path, **{"run.total_frames": 10_000_000,
                                             "run.checkpoint_every_s": 1e9,
                                             "runtime.num_runners": num_runners})
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "scripts.cli", "train",
                             str(ROOT / "configs/impala_minigrid.yaml"), *overrides],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its group holds the Ray it starts
    try:
        deadline = time.time() + 120
        for line in proc.stderr:  # wait until training is under way
            if "frames" in line and "fps" in line or time.time() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:  # a run left going would train beside the rest of the suite
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    ckpt = RunDir(run).latest_checkpoint()
    assert ckpt is not None
    state = RunDir.load_checkpoint(ckpt)
    frames = state["progress"]["frames"]
    assert frames > 0 and json.loads((run / "summary.json").read_text())["interrupted"]
    # The checkpoint counts the frames its weights were trained on, also with an update in
    # flight when it was written; its file is named by them.
    assert frames == state["learner"]["counters"]["frames"] and f"{frames:012d}" in ckpt.name
    assert json.loads((run / "summary.json").read_text())["frames"] == frames  # the same count
    out = subprocess.run([sys.executable, "-m", "scripts.cli", "train", "--resume", str(run),
                          f"run.total_frames={frames + 200}", "--quiet"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads((run / "summary.json").read_text())["frames"] >= frames + 200
    # The new budget is the run's config now: a later plain --resume keeps it.
    assert RunDir(run).load_config().run.total_frames == frames + 200
    meta = json.loads((run / "meta.json").read_text())
    assert meta["resumes"][0]["overrides"] == [f"run.total_frames={frames + 200}"]
    # The code each start trained on: the first in git_revision, the resume's beside its frames.
    (resumed,) = meta["resumed_on"]
    assert resumed["frames"] == frames and resumed["git_revision"] == meta["git_revision"]


def assert_trained(summary: dict) -> None:
    """At least one update with a gradient, and every final metric a finite number."""
    metrics = summary["final_metrics"]
    assert summary["updates"] >= 1 and metrics["grad_norm"] > 0
    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    assert {"policy_loss", "value_loss", "entropy"} <= set(numbers), metrics
    assert all(math.isfinite(v) for v in numbers.values()), metrics


@pytest.mark.parametrize("learner", ["impala", "ppo"])
@pytest.mark.parametrize("core", CORES.names())
def test_every_core_trains_with_both_learners(small_cfg, core, learner):
    cfg = small_cfg(**{"agent.core": core, "agent.core_options": "{}", "learner.name": learner,
                       "learner.minibatches": 2, "run.total_frames": 200})
    assert_trained(Trainer(cfg, RunDir.create(cfg, None), quiet=True).train())


@pytest.mark.parametrize("learner", ["impala", "ppo"])
@pytest.mark.parametrize("head", HEADS.names())
def test_every_head_trains_with_both_learners(small_cfg, head, learner):
    cfg = small_cfg(**{"agent.head": head, "learner.name": learner, "learner.minibatches": 2,
                       "run.total_frames": 200,
                       "env.levels": "[MiniGrid-Empty-5x5-v0, BabyAI-GoToRedBall-v0]"})
    assert_trained(Trainer(cfg, RunDir.create(cfg, None), quiet=True).train())


def test_rims_activation_frequency_reaches_tensorboard(small_cfg):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = small_cfg(**{"agent.core": "rims", "agent.core_options": "{}", "run.total_frames": 200})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    acc = EventAccumulator(cfg.run.dir)
    acc.Reload()
    tags = [t for t in acc.Tags()["scalars"] if t.startswith("activation_frequency/")]
    assert len(tags) == 6  # one per RIM (num_units default 6)


@pytest.mark.parametrize("learner", ["impala", "ppo"])
def test_bench_measures_every_stage(tmp_path, capsys, learner):
    from scripts.bench.command import run_bench

    overrides = [o for o in small_overrides(tmp_path) if not o.startswith("run.dir=")]
    # lock-step PPO with a learner on 2 threads, as the Atari preset: (c) on them as well
    threads = 2 if learner == "ppo" else 1
    figures = run_bench(str(ROOT / "configs/impala_minigrid.yaml"),
                        overrides + [f"learner.name={learner}", "learner.minibatches=2",
                                     f"runtime.learner_threads={threads}"],
                        seconds=0.3)
    assert all(figures[k] > 0 for k in ("env", "inference", "learner", "end_to_end", "limit"))
    out = capsys.readouterr().out
    assert ("on the run's 2 learner threads" in out) == (threads == 2)
    assert "(d) end to end" in out and "compute-bound limit" in out
    # the operators one update dispatches per collected step (scripts/bench/dispatch.py)
    assert re.search(r"[\d.]+ operators dispatched per collected step", out)
    assert figures["ops_per_step"] > 0
    cycle = figures["update_cycle"]
    assert cycle["updates"] >= 1 and cycle["update_s"] > 0 and cycle["wait_s"] >= 0
    # the parts of the cycle: making the batch within the update, the rollout within the wait
    assert 0 < cycle["batch_s"] < cycle["update_s"] and cycle["rollout_s"] > 0
    assert "learner busy" in out and ("lock-step" in out) == (learner == "ppo")
    assert "inside the runner" in out and "in this process" in out
    if os.path.isdir("/proc"):  # in-process runners: the run's core time is this process's
        assert cycle["core_s"]["this process"] > 0 and cycle["window_steps"] > 0
        assert re.search(r"core-ms per step by process: learner [\d.]+, runners [\d.]+, "
                         r"evaluators [\d.]+, this process [\d.]+, .* the \d+ cores \d+% busy", out)
        # the same core time beyond the limit, part by part, and the share it implies
        assert re.search(r"beyond the limit, core-ms per step: the learner's \d threads? \(alone\) "
                         r"[-+][\d.]+, the learner in the run [-+][\d.]+, .* so end to end = "
                         r"\d+% busy x [\d.]+ / [\d.]+ = \d+% of the limit", out)
        assert re.search(r"cap a run of these parts at \d+% of the limit", out)
        assert 0 < figures["parts_ceiling"] <= 1
        limit_ms = sum(1e3 / figures[k] for k in ("env", "inference", "learner"))
        used_ms = 1e3 * sum(cycle["core_s"].values()) / cycle["window_steps"]
        assert sum(figures["limit_gap"].values()) == pytest.approx(used_ms - limit_ms)


def test_bench_repeat_measures_each_round_against_its_own_limit(tmp_path, capsys):
    from scripts.bench.command import run_bench

    overrides = [o for o in small_overrides(tmp_path) if not o.startswith("run.dir=")]
    figures = run_bench(str(ROOT / "configs/impala_minigrid.yaml"), overrides, seconds=0.2,
                        repeat=2)
    out = capsys.readouterr().out
    assert out.count("(d) end to end") == 2 and out.count("configs/impala_minigrid.yaml:") == 1
    shares = figures["shares"]
    assert len(shares) == 2 and shares[-1] == figures["end_to_end"] / figures["limit"]
    low, high = sorted(shares)
    assert f"end to end reaches {100 * low:.0f}-{100 * high:.0f}% of it, median" in out
