"""The torso monitor (learners/update/monitor.py): its measures, the blind rule, a run's use.

The shares against naive loops in Sokar et al.'s (2023) notation; every registered torso
measured through ``probe_layers`` alone; a run whose features are forced dead is reported
100% inactive, says the blind line once and carries the verdict to its summary, the compare's
health section and ``mira evaluate``; a run with the monitor off is the same run; a bad
setting is a one-line error. The features' signal into the core against a frame-by-frame
loop over the core's own input weights, blind to units whose outgoing weights are 0.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from agents.torsos import TORSOS
from learners.config.schema import ConfigError, load_config
from learners.runtime import fleet
from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer
from learners.update.learner import Learner
from learners.update.monitor import (
    BlindWatch,
    blind_layer,
    features_outgoing,
    features_signal,
    layer_shares,
    measure,
    policy_spread,
    values,
)
from tests.conftest import small_overrides


def naive_shares(h: torch.Tensor, channels: int, tau: float) -> tuple[float, float]:
    """Sokar et al.'s definition 3.1, unit by unit, a conv channel averaged over positions."""
    N = h.shape[0]
    positions = h.shape[1] // channels
    scores, dead = [], 0
    for i in range(channels):
        cells = [abs(float(h[n, i * positions + p])) for n in range(N) for p in range(positions)]
        scores.append(sum(cells) / len(cells))  # E_x |h_i(x)|, positions averaged
        dead += all(c == 0 for c in cells)
    layer_mean = sum(scores) / channels
    dormant = sum((s / layer_mean if layer_mean > 0 else 0.0) <= tau for s in scores)
    return dead / channels, dormant / channels


@pytest.mark.parametrize("channels,positions", [(16, 1), (6, 9)])
def test_shares_equal_a_naive_loop(channels, positions):
    g = torch.Generator().manual_seed(0)
    h = torch.relu(torch.randn(12, channels, positions, generator=g))
    h[:, 0] = 0  # off on every frame
    h[:, 1] = 0
    h[3, 1, 0] = 0.5  # on at one position of one frame: not inactive, but dormant
    h[:, 2] *= 1e-3  # weak everywhere: dormant, not inactive
    h = h.flatten(1)
    for tau in (0.0, 0.025, 0.1, 0.5):
        inactive, dormant = layer_shares(h, channels, tau)
        want = naive_shares(h, channels, tau)
        assert (float(inactive), float(dormant)) == pytest.approx(want, abs=1e-6), tau
    assert float(layer_shares(h, channels, 0.0)[0]) == pytest.approx(1 / channels)
    # At tau = 0 the dormant share is the inactive one; an all-zero layer is wholly both.
    assert torch.equal(*layer_shares(h, channels, 0.0))
    assert [float(x) for x in layer_shares(torch.zeros(4, channels * positions), channels,
                                           0.025)] == [1.0, 1.0]


def test_policy_spread_is_the_mean_total_variation_to_the_mean_policy():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 5, generator=g)
    p = torch.softmax(logits, -1).tolist()
    mean = [sum(row[a] for row in p) / 7 for a in range(5)]
    want = sum(0.5 * sum(abs(row[a] - mean[a]) for a in range(5)) for row in p) / 7
    assert float(policy_spread(logits)) == pytest.approx(want, abs=1e-6)
    assert float(policy_spread(logits[:1].expand(9, 5))) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("as_set", [False, True])
@pytest.mark.parametrize("name", TORSOS.names())
def test_every_torso_is_measured_by_its_declared_layers(name, as_set):
    torch.manual_seed(0)
    torso = TORSOS[name]({"pixels": (4, 84, 84)}, 6, as_set=as_set)
    pixels = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    logits = torch.randn(6, 6)
    rng = torch.get_rng_state()
    got = values(measure(torso, pixels, logits, 0.025))
    assert torch.equal(rng, torch.get_rng_state()), "the monitor drew random numbers"
    layers = [f"torso/{layer}/{kind}" for layer in torso.probe_layers
              for kind in ("inactive", "dormant")]
    assert list(got) == [*layers, "policy/spread"]
    assert all(0.0 <= v <= 1.0 for v in got.values())


def test_blind_watch_says_once_from_the_first_probe_of_the_span():
    watch = BlindWatch(share=0.99, probes=3)
    seen = lambda fc: {"torso/conv1/inactive": 0.0, "torso/fc/inactive": fc}  # noqa: E731
    said = [watch.add(f, seen(x)) for f, x in
            [(10, 1.0), (20, 1.0), (30, 0.5), (40, 0.995), (50, 1.0), (60, 1.0), (70, 1.0)]]
    assert [s is not None for s in said] == [False] * 5 + [True, False]
    assert "gone blind from 40 frames" in said[5] and "\n" not in said[5]
    assert watch.blind == {"frames": 40, "layer": "fc", "inactive": 1.0, "probes": 3,
                           "sees_again": None}
    again = BlindWatch(0.99, 3)
    again.load_state_dict(watch.state_dict())  # a resumed run does not say it again
    assert again.add(80, seen(1.0)) is None and again.blind["frames"] == 40


def test_blind_watch_reads_every_layer_and_says_when_the_torso_sees_again():
    watch = BlindWatch(share=0.8, probes=2)
    probe = lambda conv1, fc: {"torso/conv1/inactive": conv1,  # noqa: E731
                               "torso/fc/inactive": fc, "policy/spread": 0.0}
    # a wholly inactive conv layer is blind whatever the features show; 0.8 of them is too
    said = [watch.add(f, probe(*x)) for f, x in
            [(10, (1.0, 0.1)), (20, (0.5, 0.85)), (30, (0.5, 0.79)), (40, (0.5, 0.1)),
             (50, (0.0, 0.9)), (60, (0.0, 0.9))]]
    assert [s is not None for s in said] == [False, True, False, True, False, True]
    # the line names the probe that completes the span
    assert "gone blind from 10 frames: 85% of its fc units" in said[1]
    assert "sees again from 30 frames (blind from 10)" in said[3]
    assert "gone blind from 50 frames: 90% of its fc units" in said[5]
    assert watch.blind == {"frames": 10, "layer": "fc", "inactive": 0.85, "probes": 2,
                           "sees_again": 30}
    assert watch.spans == [[10, 30], [50, None]] and watch.is_blind
    # the same probes read by the study's rule (scripts/papers/torso_blind.py) agree
    assert [blind_layer(probe(*x), 0.8) is not None for x in
            [(1.0, 0.1), (0.5, 0.85), (0.5, 0.79), (0.0, 0.8)]] == [True, True, False, True]
    # a checkpoint written before spans were kept: blind, its probe count carried on
    old = BlindWatch(0.8, 2)
    old.load_state_dict({"run": [10, 20, 30], "blind": {"frames": 10, "layer": "fc",
                                                        "inactive": 1.0, "probes": 2}})
    assert old.spans == [[10, None]] and old.run == [] and old.blind["sees_again"] is None
    assert old.add(40, probe(0.0, 0.1)) is None
    assert "sees again from 40" in old.add(50, probe(0.0, 0.1))


def _cfg(tmp_path, name: str, **extra):
    # MiniGrid, in-process, replayable: 20 updates of 5 x 4 steps
    return load_config(None, small_overrides(tmp_path, **{
        "run.dir": str(tmp_path / name), "run.deterministic": "true", **extra}))


def test_a_dead_torso_is_reported_blind_once(tmp_path, monkeypatch, caplog):
    class DeadFeatures(Learner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with torch.no_grad():  # every fc unit off on every frame, for good (no gradient)
                self.agent.torso.fc.bias.fill_(-1e4)

    monkeypatch.setattr(fleet, "Learner", DeadFeatures)
    cfg = _cfg(tmp_path, "dead", **{"learner.monitor.every": 2, "learner.monitor.frames": 12})
    try:
        with caplog.at_level(logging.WARNING, logger="mira"):
            summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    finally:
        torch.use_deterministic_algorithms(False)
    lines = [r.getMessage() for r in caplog.records if "gone blind" in r.getMessage()]
    frames_per_update = 5 * 4  # T x B x frame skip 1
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"the torso has gone blind from {frames_per_update:,} frames")
    blind = summary["monitor"]["blind"]
    assert blind == {"frames": frames_per_update, "layer": "fc", "inactive": 1.0, "probes": 3,
                     "sees_again": None}
    assert summary["monitor"]["spans"] == [[frames_per_update, None]]
    last = summary["monitor"]["last"]
    assert last["torso/fc/inactive"] == 1.0 and last["torso/fc/dormant"] == 1.0
    assert last["frames"] == 19 * frames_per_update  # 20 updates; probes at 0, 2, ..., 18
    from scripts.compare.curves import learning_curve

    frames, inactive = learning_curve(tmp_path / "dead", "torso/fc/inactive")  # TensorBoard
    assert frames.tolist() == [f * frames_per_update for f in range(1, 20, 2)]
    assert inactive.tolist() == [1.0] * 10

    # The compare's training health names the trial; mira evaluate reports the shares.
    from scripts.compare import health
    from scripts.evaluate import evaluate_checkpoint

    kept = health.summary(tmp_path / "dead")
    assert kept["blind"]["frames"] == frames_per_update
    text = "\n".join(health.markdown([{"trial": "dead-seed0", "variant": "v",
                                       "health": kept}], {}))
    assert f"- dead-seed0: the torso went blind from {frames_per_update:,} frames" in text
    assert f"blind in frames {frames_per_update:,} to the end." in text
    result = evaluate_checkpoint(str(tmp_path / "dead"), episodes=1, num_runners=0, quiet=True)
    assert result["torso"]["torso/fc/inactive"] == 1.0
    assert result["torso"]["torso/fc/signal"] == 0.0  # dead features move nothing
    assert json.loads((tmp_path / "dead" / "eval.json").read_text())["torso"] == result["torso"]


def test_the_monitor_off_or_on_is_the_same_run(tmp_path):
    runs = {}
    for name, every in (("off", 0), ("on", 1)):
        cfg = _cfg(tmp_path, name, **{"learner.monitor.every": every})
        run = RunDir.create(cfg, None)
        try:
            summary = Trainer(cfg, run, quiet=True).train()
        finally:
            torch.use_deterministic_algorithms(False)
        weights = RunDir.load_checkpoint(run.latest_checkpoint())["learner"]["agent"]
        runs[name] = summary, weights
    (off, w_off), (on, w_on) = runs["off"], runs["on"]
    assert all(torch.equal(w_off[k], w_on[k]) for k in w_off)
    same = ("frames", "updates", "episodes", "episode_return_mean")
    assert {k: off[k] for k in same} == {k: on[k] for k in same}
    assert off["monitor"] == {"last": None, "blind": None, "spans": []}
    assert not any(k.startswith(("torso/", "policy/")) for k in off["final_metrics"])
    assert 0.0 <= on["monitor"]["last"]["policy/spread"] < 1.0
    assert on["monitor"]["last"]["torso/fc/signal"] > 0  # the LSTM declares its input weights


@pytest.mark.parametrize("override,says", [
    ("learner.monitor.frames=21", "learner.monitor.frames=21 is more than one update holds"),
    ("learner.monitor.tau=1.5", "learner.monitor.tau must be in [0, 1)"),
    ("learner.monitor.blind_share=0", "learner.monitor.blind_share must be in (0, 1]"),
    ("learner.monitor.every=-1", "learner.monitor.every must be >= 0"),
    ("learner.monitor.blind_probes=0", "learner.monitor.blind_probes must be >= 1"),
])
def test_bad_monitor_settings_are_one_line_errors(tmp_path, override, says):
    with pytest.raises(ConfigError) as err:
        load_config(None, small_overrides(tmp_path) + [override])
    assert says in str(err.value) and "\n" not in str(err.value)
    # 20 observations per update (T 5 x 4 envs): all of them is fine; off, any size is
    load_config(None, small_overrides(tmp_path) + ["learner.monitor.frames=20"])
    load_config(None, small_overrides(tmp_path) + ["learner.monitor.every=0",
                                                   "learner.monitor.frames=400"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_probe_waits_for_nothing_and_agrees_with_the_cpu_one(small_cfg):
    from dataclasses import replace

    from envs.runner import EnvRunner

    cfg = small_cfg(**{"learner.device": "cuda", "learner.monitor.every": 1})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    traj = runner.rollout()
    learner = Learner(cfg, runner.spec())
    batch, _ = learner.to_batch([traj])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call raises
    try:
        pending = learner.monitor.start(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    got = pending.values()
    on_cpu = Learner(replace(cfg, learner=replace(cfg.learner, device="cpu")), runner.spec())
    want = on_cpu.monitor.start(on_cpu.to_batch([traj])[0]).values()
    assert list(got) == list(want)
    assert got == pytest.approx(want, abs=0.05)  # a unit at the edge of 0 may flip


def _agent(core: str):
    from agents.agent import Agent
    from agents.config import AgentConfig

    torch.manual_seed(0)
    core_options = ({"num_units": 4, "k_active": 2, "unit_size": 8} if core == "rims"
                    else {} if core == "feedforward" else {"hidden_size": 16})
    cfg = AgentConfig(torso="shallow", core=core, head="linear",
                      torso_options={"hidden_size": 24}, core_options=core_options)
    return Agent(cfg, {"pixels": (4, 84, 84)}, 6).eval()


def naive_signal(features: torch.Tensor, weights: list[torch.Tensor]) -> float:
    """Frame by frame: each weight ``[rows, H]`` on the centred features, rms over all."""
    N, H = features.shape
    mean = [sum(float(features[n, j]) for n in range(N)) / N for j in range(H)]
    total, rows = 0.0, 0
    for w in weights:
        for n in range(N):
            for r in range(w.shape[0]):
                pre = sum(float(w[r, j]) * (float(features[n, j]) - mean[j]) for j in range(H))
                total += pre * pre
        rows += w.shape[0]
    return (total / (N * rows)) ** 0.5


@pytest.mark.parametrize("core", ["lstm", "mi_lstm", "alstm", "rims"])
def test_the_features_signal_is_the_cores_input_moved_by_the_screen(core):
    net = _agent(core)
    H = 24
    g = torch.Generator().manual_seed(3)
    features = torch.relu(torch.randn(7, H, generator=g))
    # the core's weights on the features as [rows, H], read from the core itself
    by_core = {"lstm": lambda c: [c.cell.weight_ih[:, :H]],
               "mi_lstm": lambda c: [c.weight_ih[:H].T],
               "alstm": lambda c: [c.weight_ih[:, :H], c.adapt_ix[:H].T],
               "rims": lambda c: [c.key.weight[:, :H], c.value.weight[:, :H]]}
    weights = [w.detach() for w in by_core[core](net.core)]
    outgoing = features_outgoing(net)
    got = float(features_signal(features, outgoing))
    assert got == pytest.approx(naive_signal(features, weights), rel=1e-5)
    assert float(features_signal(features[:1].repeat(5, 1), outgoing)) == pytest.approx(0, abs=1e-6)

    # units whose outgoing weights are 0 (just recycled) add nothing, however active
    with torch.no_grad():
        for s in outgoing:
            s.param[s.index(torch.arange(H) < 5)] = 0.0
    loud = features.clone()
    loud[:, :5] = 100 * torch.rand(7, 5, generator=g)
    quiet = features.clone()
    quiet[:, :5] = 0.0
    assert float(features_signal(loud, outgoing)) == pytest.approx(
        float(features_signal(quiet, outgoing)), rel=1e-5)


def test_the_signal_is_measured_where_the_core_declares_its_input_weights():
    pixels = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    lstm, feedforward = _agent("lstm"), _agent("feedforward")
    with_signal = values(measure(lstm.torso, pixels, None, 0.025, features_outgoing(lstm)))
    assert with_signal["torso/fc/signal"] > 0
    assert features_outgoing(feedforward) is None
    assert "torso/fc/signal" not in values(measure(feedforward.torso, pixels, None, 0.025,
                                                   features_outgoing(feedforward)))
