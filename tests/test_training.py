"""In-process training (runtime.num_runners: 0): the run directory, resume, Ctrl-C."""

import dataclasses
import json
import os
import pickle
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
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    for line in proc.stderr:  # wait until training is under way
        if "frames" in line and "fps" in line or time.time() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
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


@pytest.mark.parametrize("learner", ["impala", "ppo"])
@pytest.mark.parametrize("core", CORES.names())
def test_every_core_trains_with_both_learners(small_cfg, core, learner):
    cfg = small_cfg(**{"agent.core": core, "agent.core_options": "{}", "learner.name": learner,
                       "learner.minibatches": 2, "run.total_frames": 200})
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["updates"] >= 1 and summary["final_metrics"]["grad_norm"] > 0


@pytest.mark.parametrize("learner", ["impala", "ppo"])
@pytest.mark.parametrize("head", HEADS.names())
def test_every_head_trains_with_both_learners(small_cfg, head, learner):
    cfg = small_cfg(**{"agent.head": head, "learner.name": learner, "learner.minibatches": 2,
                       "run.total_frames": 200,
                       "env.levels": "[MiniGrid-Empty-5x5-v0, BabyAI-GoToRedBall-v0]"})
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["updates"] >= 1 and summary["final_metrics"]["grad_norm"] > 0


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


def test_unroll_queue_parks_runners_while_two_batches_wait():
    from learners.runtime.unroll_queue import UnrollQueue

    q = UnrollQueue(per_update=2)  # runners wait once 2 batches (4 unrolls) wait for the learner
    assert [q.add(r, f"u{r}") for r in range(3)] == [True, True, True]
    assert q.ready()
    assert q.add(3, "u3") is False and q.add(4, "u4") is False  # 4, then 5 unrolls wait: parked
    assert q.add(5, None) is False  # a lost unroll adds nothing, but its runner waits as well
    batch, released = q.take()
    assert batch == ["u0", "u1"] and released == [3, 4, 5]  # 3 wait now: the parked go, in order
    assert q.add(3, "u5") is False  # 4 wait again
    batch, released = q.take()
    assert batch == ["u2", "u3"] and released == [3] and list(q.unrolls) == ["u4", "u5"]
    # Nothing is parked while the learner keeps up: per_update 1, one unroll at a time.
    q1 = UnrollQueue(per_update=1)
    for r in range(10):
        assert q1.add(r % 2, r) and q1.take() == ([r], [])


def _queue_timeline(queue, runners: int, rollout_s: float, update_s: float,
                    seconds: float = 200.0) -> tuple[float, float]:
    """Drive ``queue`` as the driver loop does, in simulated time: (learner busy, runners busy).

    Runner ``i`` takes ``rollout_s`` +-20% (a fixed pseudo-random draw) per unroll, the learner
    ``update_s`` per batch; events in time order, the learner takes a batch when idle.
    """
    import heapq
    import random

    rng, events, runner_busy, learner_busy, learner_free = random.Random(0), [], 0.0, 0.0, True

    def send(i: int, now: float) -> None:
        nonlocal runner_busy
        took = rollout_s * rng.uniform(0.8, 1.2)
        runner_busy += min(took, seconds - now)
        heapq.heappush(events, (now + took, i))

    for i in range(runners):
        send(i, 0.0)
    while events and events[0][0] < seconds:
        now, i = heapq.heappop(events)
        if i < 0:
            learner_free = True
        elif queue.add(i, f"u{i}"):
            send(i, now)
        if learner_free and queue.ready():
            _, released = queue.take()
            learner_free, learner_busy = False, learner_busy + min(update_s, seconds - now)
            heapq.heappush(events, (now + update_s, -1))
            for j in released:
                send(j, now)
    return learner_busy / seconds, runner_busy / (runners * seconds)


def test_unroll_queue_with_many_runners_keeps_the_learner_fed():
    """15 runners, one unroll a batch: the times measured on a 16-core GPU machine.

    The paper preset there: a rollout about 0.6 s under full load, an update 38 ms, so the
    runners (25 unrolls/s) can just feed the learner (26 updates/s). Parked until a queue of
    two batches (2 unrolls) drains, runners went out and came back in convoys and the learner
    idled between them (74% busy here; measured 11,627 steps/s). With room for one waiting
    unroll per runner both sides stay busy. The trainer gives its queue the run's runners.
    """
    from learners.config.schema import load_config
    from learners.runtime.trainer import make_queue
    from learners.runtime.unroll_queue import UnrollQueue

    learner, runners = _queue_timeline(UnrollQueue(per_update=1, runners=15), 15, 0.6, 0.038)
    assert learner > 0.9 and runners > 0.95
    two_batches = UnrollQueue(per_update=1, runners=0)  # the bound without the runners' share
    learner, runners = _queue_timeline(two_batches, 15, 0.6, 0.038)
    assert learner < 0.8 and runners < 0.85
    # Few runners, as on 2 cores: the bound is the two batches it always was.
    assert UnrollQueue(per_update=2, runners=4).limit == 4
    assert UnrollQueue(per_update=2, runners=5).limit == 5
    assert UnrollQueue(per_update=1, lock_step=True, runners=15).limit == 1
    paper = load_config("configs/impala_atari_paper.yaml")  # one unroll a batch
    assert make_queue(paper, 15).limit == 15 and make_queue(paper, 1).limit == 2


def _nonfinite_loss_after(monkeypatch, updates: int, how: str = "loss"):
    """Force a divergence from IMPALA update ``updates + 1`` on.

    The loss is NaN (``loss``) or finite with a non-finite gradient (``grad``: sqrt(|w - w|) has an
    infinite slope at 0).
    """
    import dataclasses

    from learners.algorithms import LEARNERS

    algorithm = LEARNERS.get("impala")
    real, calls = algorithm.loss, {"n": 0}

    def loss(out, *args, **kwargs):
        value, metrics = real(out, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] > updates:
            value = (value * float("nan") if how == "loss"
                     else value + (out.value - out.value.detach()).abs().sqrt().sum())
        return value, metrics

    # The learner looks its algorithm up at every update: swap the registry's entry.
    monkeypatch.setitem(LEARNERS._entries, "impala", dataclasses.replace(algorithm, loss=loss))


@pytest.mark.parametrize("how,compiled", [("loss", False), ("grad", False), ("grad", True)])
def test_nonfinite_update_is_skipped_and_leaves_weights_and_optimizer_alone(
        small_cfg, monkeypatch, how, compiled):
    """Also with ``learner.compile``, whose gradient clipping is a graph of its own."""
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    cfg = small_cfg(**{"learner.compile": compiled})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    learner = Learner(cfg, runner.spec())
    assert learner.update(runner.rollout())["skipped_updates"] == 0
    _nonfinite_loss_after(monkeypatch, 0, how)
    weights = {k: v.clone() for k, v in learner.agent.state_dict().items()}
    square_avg = [s["square_avg"].clone() for s in learner.optimizer.state.values()]
    report = learner.learn(runner.rollout())
    assert report.metrics["skipped_updates"] == 1 and report.diverged is None
    assert all(torch.equal(weights[k], v) for k, v in learner.agent.state_dict().items())
    assert all(torch.equal(a, s["square_avg"])
               for a, s in zip(square_avg, learner.optimizer.state.values()))
    for _ in range(cfg.learner.max_skipped_updates - 1):
        report = learner.learn(runner.rollout())
    # the weights are still update 1's
    assert report.metrics["skipped_updates"] == 5 and report.diverged == 1
    assert repr(pickle.loads(pickle.dumps(report))) == repr(report)  # crosses Ray as one value


def test_diverging_run_stops_with_exit_3_and_its_last_good_weights(tmp_path, monkeypatch, capsys):
    from scripts.cli import main

    _nonfinite_loss_after(monkeypatch, 3)
    overrides = small_overrides(tmp_path, **{"run.total_frames": 10**6,
                                             "learner.max_skipped_updates": 4})
    assert main(["train", str(ROOT / "configs/impala_minigrid.yaml"), *overrides]) == 3
    err = capsys.readouterr().err
    assert "[mira] diverged: updates 4-7 had a non-finite loss or gradient (4 in a row)" in err
    assert "with the weights of update 3, written to" in err
    run = RunDir(tmp_path / "run")
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["diverged"]["last_good_update"] == 3 and summary["updates"] == 7
    state = RunDir.load_checkpoint(run.latest_checkpoint())  # refuses non-finite weights
    # one more skipped update may have been in flight
    assert state["learner"]["counters"]["version"] >= 7


def test_resume_and_evaluate_refuse_a_checkpoint_with_nonfinite_weights(
        tmp_path, small_cfg, capsys):
    from scripts.cli import main

    cfg = small_cfg()
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    path = RunDir(cfg.run.dir).latest_checkpoint()
    state = torch.load(path, weights_only=True)
    name = next(k for k, v in state["learner"]["agent"].items() if v.is_floating_point())
    state["learner"]["agent"][name].view(-1)[0] = float("nan")
    torch.save(state, path)
    for argv in (["train", "--resume", cfg.run.dir], ["evaluate", cfg.run.dir, "--episodes", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"holds non-finite weights ({name}" in err, err


def test_resume_and_evaluate_refuse_another_agent_and_leave_the_run_as_it_was(
        small_cfg, capsys):
    """An agent override on --resume or evaluate is one line, before anything is written."""
    from scripts.cli import main

    cfg = small_cfg()
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    run = Path(cfg.run.dir)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    wider = f"agent.core_options.hidden_size={2 * cfg.agent.core_options.hidden_size}"
    for argv in (["train", "--resume", cfg.run.dir, f"run.total_frames={2 * cfg.run.total_frames}",
                  wider], ["evaluate", cfg.run.dir, wider, "--episodes", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert (f"another agent (agent.core_options.hidden_size: "
                f"{cfg.agent.core_options.hidden_size} -> {2 * cfg.agent.core_options.hidden_size})"
                in err), err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_load_error_reads_as_what_changed():
    """PyTorch's own errors, shapes and keys, become one line naming the first parameter."""
    from learners.runtime.run_dir import weights_misfit

    six = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 6))
    texts = []
    for into, held in ((torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)), six),
                       (six, torch.nn.Sequential(torch.nn.Linear(3, 4))),
                       (torch.nn.Sequential(torch.nn.Linear(3, 4)), six)):
        with pytest.raises(RuntimeError) as e:
            into.load_state_dict(held.state_dict())
        texts.append(weights_misfit(str(e.value)))
    assert "(1.weight: [6, 4] in the checkpoint, [2, 4] here; and 1 more)" in texts[0]
    assert "(the checkpoint lacks 1.weight; and 1 more)" in texts[1]
    assert "(the agent has no 1.weight; and 1 more)" in texts[2]
    assert all("\n" not in t and "env.game" in t for t in texts)
    assert weights_misfit("CUDA error: out of memory") is None


@pytest.mark.slow
def test_resume_and_evaluate_refuse_another_action_set_and_leave_the_run_as_it_was(
        tmp_path, capsys):
    """An env override that changes the agent's shapes is one line, and config.yaml stays."""
    from scripts.cli import main

    small = small_overrides(tmp_path, **{"run.total_frames": 40, "learner.batch_size": 2,
                                         "runtime.envs_per_runner": 2, "learner.recurrence": 0,
                                         "learner.minibatches": 1})
    assert main(["train", str(ROOT / "configs/impala_atari.yaml"), "env.game=Pong", *small]) == 0
    run = tmp_path / "run"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    for argv in (["train", "--resume", str(run), "env.game=Breakout", "run.total_frames=80"],
                 ["evaluate", str(run), "env.game=Breakout", "--episodes", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        verb = "resume" if argv[0] == "train" else "evaluate"
        assert err[-1].startswith(f"mira: error: cannot {verb} "), err
        assert "its weights do not fit the agent this config builds (" in err[-1], err
        assert not any(line.startswith("Traceback") for line in err), err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_an_error_while_building_the_run_is_one_config_line(
        tmp_path, small_cfg, monkeypatch, capsys):
    import learners.runtime.fleet as fleet
    from learners.config.schema import ConfigError
    from scripts.cli import main

    class Broken:
        def __init__(self, *a, **k):
            raise ValueError("agent.core_options.hidden_size: the env exploded")

    monkeypatch.setattr(fleet, "EnvRunner", Broken)
    cfg = small_cfg()
    with pytest.raises(ConfigError, match="building the runners and the learner failed: "
                                          "ValueError: agent.core_options"):
        Trainer(cfg, RunDir.create(cfg, None), quiet=True)
    assert main(["train", str(ROOT / "configs/impala_minigrid.yaml"),
                 *small_overrides(tmp_path / "cli")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "mira: error: building the runners")
    # Ray's wrapper texts end with the actor's own line, which is what the user sees.
    wrapped = RuntimeError("ray::EnvRunner.__init__() (pid=1)\n  File \"x.py\", line 3\n"
                           "ValueError: bad level")
    assert fleet.describe(wrapped) == "ValueError: bad level"


def test_lock_step_queue_releases_every_runner_only_after_the_update():
    from learners.runtime.unroll_queue import UnrollQueue

    q = UnrollQueue(per_update=3, lock_step=True)
    assert [q.add(i, f"u{i}") for i in range(3)] == [False, False, False]  # all parked
    assert q.ready()
    batch, released = q.take()
    # nobody goes out before the update is done
    assert batch == ["u0", "u1", "u2"] and released == []
    assert sorted(q.update_done()) == [0, 1, 2] and q.update_done() == []
    # a lost unroll: the replacement fills the round with the same weights
    assert q.add(1, None) is True
