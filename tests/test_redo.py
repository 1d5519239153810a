"""ReDo (learners/update/redo.py): dormant torso units re-initialised as Sokar et al. do.

Against a naive reading of algorithm 1, on every torso and core that declare where a unit's
weights sit: exactly the units that are off are recycled; their incoming weights are a fresh
draw of the torso's init, their outgoing weights and optimizer statistics are zero (TF-RMSProp's
square average 1), nothing else moves, the agent's output is the same right after, and the
units are on again. A learner with it replays exactly; agents it cannot serve are one-line
config errors.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agents.agent import Agent
from agents.config import AgentConfig
from learners.config.schema import ConfigError, RedoConfig, load_config
from learners.update.optim import RMSpropTF
from learners.update.redo import Recycler
from tests.conftest import small_overrides

A = 6
SHAPE = (4, 84, 84)


def agent(torso: str, core: str, init: str = "orthogonal") -> Agent:
    torch.manual_seed(0)
    torso_options = {"hidden_size": 24, "init": init}
    if torso == "nature":
        torso_options["channels"] = [8, 16, 8]
    core_options = ({"num_units": 4, "k_active": 2, "unit_size": 8} if core == "rims"
                    else {"hidden_size": 16})
    cfg = AgentConfig(torso=torso, core=core, head="linear", torso_options=torso_options,
                      core_options=core_options)
    return Agent(cfg, {"pixels": SHAPE}, A).eval()  # as the learner runs it (no dropout)


def batch(T: int = 3, B: int = 4, seed: int = 1) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (T + 1, B, *SHAPE), generator=g, dtype=torch.uint8)
    return SimpleNamespace(obs={"pixels": pixels}, unroll_length=T)


def inputs(b) -> dict[str, torch.Tensor]:
    """The batch's first T rows, the frames ReDo scores, as the agent's inputs."""
    T, B = b.unroll_length, b.obs["pixels"].shape[1]
    g = torch.Generator().manual_seed(2)
    return {"pixels": b.obs["pixels"][:T], "last_action": torch.randint(0, A, (T, B), generator=g),
            "last_reward": torch.randn(T, B, generator=g),
            "reset": torch.zeros(T, B, dtype=torch.bool)}


def stepped(net: Agent, b, optimizer_cls=torch.optim.Adam) -> torch.optim.Optimizer:
    """An optimizer with statistics for every parameter (one step on a made-up loss)."""
    optimizer = optimizer_cls(net.parameters(), lr=1e-4)
    out, _ = net(inputs(b), net.initial_state(b.obs["pixels"].shape[1]))
    (out.logits.square().mean() + out.value.square().mean()).backward()
    optimizer.step()
    optimizer.zero_grad()
    return optimizer


def kill(net: Agent) -> None:
    """Two conv1 channels and three features off on every frame, for good."""
    with torch.no_grad():
        net.torso.conv[0].bias[:2] = -1e4
        net.torso.fc.bias[3:6] = -1e4


def naive_off(net: Agent, b) -> dict[str, list[int]]:
    """Units whose activation is 0 on every probed frame and position, unit by unit."""
    pixels = b.obs["pixels"][:b.unroll_length].flatten(0, 1)
    out = {}
    for layer, h in net.torso.probe({"pixels": pixels}).items():
        channels = net.torso.probe_channels[layer]
        per = h.reshape(h.shape[0], channels, -1)
        out[layer] = [c for c in range(channels) if all(float(v) == 0 for v in per[:, c].flatten())]
    return out


@pytest.mark.parametrize("torso,core,init", [
    ("shallow", "lstm", "orthogonal"), ("shallow", "lstm", "torch"), ("nature", "lstm", "torch"),
    ("shallow", "mi_lstm", "orthogonal"), ("shallow", "alstm", "orthogonal"),
    ("nature", "rims", "orthogonal"),
])
def test_off_units_are_recycled_and_nothing_else_moves(torso, core, init):
    net, b = agent(torso, core, init), batch()
    optimizer = stepped(net, b)
    kill(net)
    want_off = naive_off(net, b)
    assert {0, 1} <= set(want_off["conv1"]) and {3, 4, 5} <= set(want_off["fc"])
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    state_before = {n: {k: v.clone() for k, v in optimizer.state[p].items()}
                    for n, p in net.named_parameters()}
    x = inputs(b)
    out_before, _ = net(x, net.initial_state(4))

    recycler = Recycler(net, optimizer, RedoConfig(every=1, tau=0.0), seed=7)
    counts = recycler.recycle(b, version=5)
    assert counts == {f"redo/{layer}": float(len(units)) for layer, units in want_off.items()}

    # The output is the same: every recycled unit was off and passes nothing on.
    out_after, _ = net(x, net.initial_state(4))
    torch.testing.assert_close(out_after.logits, out_before.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_after.value, out_before.value, atol=1e-5, rtol=1e-5)

    # A naive ReDo on copies: the incoming rows from the torso's fresh draw at the same
    # generator, then every outgoing weight of a recycled unit 0; the optimizer's moments 0
    # wherever either touched; every other entry as before.
    g = recycler._generator(5)
    names = {id(p): n for n, p in net.named_parameters()}
    want = {n: p.clone() for n, p in before.items()}
    touched = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in before.items()}

    def units_of(layer):
        units = torch.zeros(net.torso.probe_channels[layer], dtype=torch.bool)
        units[want_off[layer]] = True
        return units

    for layer, link in recycler.links.items():
        if want_off[layer]:
            fresh = net.torso.fresh_parameters(link.module, g)
            for unit_slice, new in zip(link.incoming, fresh):
                name, idx = names[id(unit_slice.param)], unit_slice.index(units_of(layer))
                want[name][idx] = new[idx]
                touched[name][idx] = True
    for layer, link in recycler.links.items():
        for unit_slice in link.outgoing if want_off[layer] else ():
            name, idx = names[id(unit_slice.param)], unit_slice.index(units_of(layer))
            want[name][idx] = 0.0
            touched[name][idx] = True
    assert touched["torso.conv.0.weight"].any() and touched["torso.fc.weight"].any()
    if (torso, core) == ("shallow", "lstm"):
        # The same slices named by hand, not from the recycler's declarations: conv1's units
        # are conv.0's output channels and conv.2's input channels; conv2's are conv.2's output
        # channels and fc's columns of that channel (9 x 9 positions, channel-major); fc's
        # units are fc's rows and the LSTM's first input columns (fc's features, then extras).
        by_hand = {n: torch.zeros_like(v, dtype=torch.bool) for n, v in before.items()}
        for u in want_off["conv1"]:
            by_hand["torso.conv.0.weight"][u] = True
            by_hand["torso.conv.0.bias"][u] = True
            by_hand["torso.conv.2.weight"][:, u] = True
        for u in want_off["conv2"]:
            by_hand["torso.conv.2.weight"][u] = True
            by_hand["torso.conv.2.bias"][u] = True
            by_hand["torso.fc.weight"][:, u * 81:(u + 1) * 81] = True
        for u in want_off["fc"]:
            by_hand["torso.fc.weight"][u] = True
            by_hand["torso.fc.bias"][u] = True
            by_hand["core.cell.weight_ih"][:, u] = True
        for name in before:
            assert torch.equal(touched[name], by_hand[name]), name
    for name, p in net.named_parameters():
        assert torch.equal(p.detach(), want[name]), name
        for key, value in optimizer.state[p].items():
            if value.shape == p.shape:
                mask = touched[name]
                assert bool((value[mask] == 0).all()), (name, key)
                assert torch.equal(value[~mask], state_before[name][key][~mask]), (name, key)
            else:  # the step count stays
                assert torch.equal(value, state_before[name][key]), (name, key)

    # The recycled units are mostly on again (a fresh unit can be off on every frame too).
    still_off = naive_off(net, b)
    for layer in ("conv1", "fc"):
        again = set(want_off[layer]) & set(still_off[layer])
        assert len(again) <= len(want_off[layer]) / 2, (layer, again)


def test_tau_dormant_units_are_recycled_with_tf_rmsprop_statistics_reset_to_one():
    net, b = agent("shallow", "lstm"), batch()
    optimizer = stepped(net, b, lambda params, lr: RMSpropTF(params, lr=lr, momentum=0.9))
    with torch.no_grad():
        net.torso.fc.weight[7] *= 1e-4  # weak on every frame: dormant at tau 0.1, not off
        net.torso.fc.bias[7] = 0
    recycler = Recycler(net, optimizer, RedoConfig(every=1, tau=0.1), seed=0)
    assert bool(recycler.dormant(b)["fc"][7])
    assert not bool(Recycler(net, optimizer, RedoConfig(every=1, tau=0.0), 0).dormant(b)["fc"][7])
    recycler.recycle(b, version=1)
    state = optimizer.state[net.torso.fc.weight]
    assert bool((state["square_avg"][7] == 1).all())
    assert bool((state["momentum_buffer"][7] == 0).all())
    assert bool((net.core.cell.weight_ih[:, 7] == 0).all())
    assert bool((optimizer.state[net.core.cell.weight_ih]["square_avg"][:, 7] == 1).all())
    # the extras' columns beside the features in the core's input are nobody's units
    assert net.core.cell.weight_ih.shape[1] == 24 + A + 1
    assert bool((net.core.cell.weight_ih[:, 24:] != 0).all())


def test_due_every_f_updates_from_f():
    recycler = Recycler(agent("shallow", "lstm"), None, RedoConfig(every=3), seed=0)
    assert [v for v in range(10) if recycler.due(v)] == [3, 6, 9]


def test_a_learner_with_redo_replays_exactly(tmp_path):
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    cfg = load_config(None, small_overrides(tmp_path, **{"learner.redo.every": 2,
                                                         "learner.redo.tau": 0.1}))
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    trajectories = [runner.rollout() for _ in range(4)]
    weights, reports = [], []
    for _ in range(2):
        learner = Learner(cfg, runner.spec())
        reports.append([learner.update(t) for t in trajectories])
        weights.append(learner.get_weights())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert [sorted(k for k in r if k.startswith("redo/")) for r in reports[0]] == [
        [], [], ["redo/conv1", "redo/conv2", "redo/fc"], []]
    assert reports[0][2]["redo/fc"] == reports[1][2]["redo/fc"]
    assert Learner(load_config(None, small_overrides(tmp_path)), runner.spec()).recycler is None


@pytest.mark.parametrize("overrides,says", [
    (["agent.torso=resnet"], "agent.torso=resnet: ResNetTorso's trunk is not a plain stack"),
    (["agent.core=feedforward", "agent.core_options={}"],
     "agent.core=feedforward declares no input weights"),
    (["agent.torso_options={hidden_size: 32, norm: layer}"], "a LayerNorm ties each fc unit"),
    (["agent.core=rims", "agent.core_options={input_set: spatial}"], "read as a set"),
    (["learner.redo.frames=21"], "learner.redo.frames=21 is more than one update holds"),
    (["learner.redo.tau=1"], "learner.redo.tau must be in [0, 1)"),
])
def test_agents_redo_cannot_serve_are_one_line_errors(tmp_path, overrides, says):
    with pytest.raises(ConfigError) as err:
        load_config(None, small_overrides(tmp_path) + ["learner.redo.every=10", *overrides])
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
    if "tau" not in overrides[0]:  # off, the agent and the batch are not checked
        load_config(None, small_overrides(tmp_path) + ["learner.redo.every=0", *overrides])
    with pytest.raises(ConfigError, match="learner.redo.every must be >= 0"):
        load_config(None, small_overrides(tmp_path) + ["learner.redo.every=-1"])


@pytest.mark.parametrize("name", ["shallow", "nature", "resnet"])
def test_each_torso_declares_its_trunk_as_built(name):
    from agents.torsos import TORSOS
    from agents.torsos.conv_torso import ReluStack

    torso = TORSOS[name]({"pixels": SHAPE}, A)
    assert type(torso).stacked_trunk == isinstance(torso.conv, ReluStack)


def test_on_an_update_that_recycles_the_monitor_sees_the_units_before_the_recycle(tmp_path):
    """The probe reads what the last updates left (3 fc units killed), not the fresh draw."""
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    def probed(redo_every: int):
        cfg = load_config(None, small_overrides(tmp_path, **{
            "learner.redo.every": redo_every, "learner.monitor.every": 2}))
        learner = Learner(cfg, runner.spec())
        learner.update(trajectories[0])
        learner.update(trajectories[1])
        with torch.no_grad():
            learner.agent.torso.fc.bias[3:6] = -1e4  # off on every frame
        return learner, learner.learn(trajectories[2])  # version 2: probes (and recycles)

    cfg = load_config(None, small_overrides(tmp_path))
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    trajectories = [runner.rollout() for _ in range(3)]
    plain, seen = probed(0)
    recycling, seen_recycling = probed(2)
    assert seen_recycling.monitor == seen.monitor and seen.monitor["torso/fc/inactive"] > 0
    assert seen_recycling.metrics["redo/fc"] >= 3 and "redo/fc" not in seen.metrics
    assert bool((recycling.agent.torso.fc.bias[3:6] > -1e3).all())  # recycled after the probe
    assert bool((plain.agent.torso.fc.bias[3:6] < -1e3).all())
