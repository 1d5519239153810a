"""A run that goes wrong loses nothing.

A non-finite update is skipped, a diverging run stops with its last good weights, and a resume
or an evaluation refuses a checkpoint that does not fit (non-finite weights, another agent,
another action set) with one line and the run as it was.
"""

import json
import pickle
from pathlib import Path

import pytest
import torch

from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from tests.conftest import small_overrides

ROOT = Path(__file__).resolve().parents[1]


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
