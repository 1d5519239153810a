"""Agent contract over every core x head in the registries."""

import itertools

import pytest
import torch

from agents.agent import Agent
from agents.config import AgentConfig
from agents.cores import CORES
from agents.heads import HEADS
from learners.config.schema import from_dict, to_dict

OBS = {"pixels": (3, 56, 56), "instruction": (32,)}
A, TASKS = 5, 3


def make_agent(core, head, seed=0, **core_options):
    torch.manual_seed(seed)
    core_opts = {**to_dict(CORES.get(core).Config()), **core_options}
    for key in ("hidden_size",):
        if key in core_opts:
            core_opts[key] = 32
    if "unit_size" in core_opts:
        core_opts["unit_size"] = 8
    cfg = AgentConfig(core=core, head=head, torso_options={"hidden_size": 32},
                      core_options=core_opts)
    agent = Agent(cfg, OBS, A, TASKS, {"instruction": 1024})
    agent.eval()  # dropout off: stepping must equal unrolling
    return agent


def inputs(T, B, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {
        "pixels": torch.randint(0, 256, (T, B, *OBS["pixels"]), generator=g, dtype=torch.uint8),
        "instruction": torch.randint(0, 1024, (T, B, 32), generator=g),
        "last_action": torch.randint(0, A, (T, B), generator=g),
        "last_reward": torch.randn(T, B, generator=g),
        "reset": torch.zeros(T, B, dtype=torch.bool),
        "task_id": torch.randint(0, TASKS, (T, B), generator=g),
    }


COMBOS = list(itertools.product(CORES.names(), HEADS.names()))


def check_stepping_equals_unrolling(agent, x):
    """One T-step forward equals T forwards of one step each (logits and final state)."""
    T, B = x["reset"].shape
    with torch.no_grad():
        out, state = agent(x, agent.initial_state(B))
        s, steps = agent.initial_state(B), []
        for t in range(T):
            o, s = agent({k: v[t : t + 1] for k, v in x.items()}, s)
            steps.append(o.logits)
    assert out.logits.shape == (T, B, A) and out.value.shape == (T, B)
    torch.testing.assert_close(torch.cat(steps), out.logits, atol=1e-5, rtol=1e-5)
    for a, b in zip(s, state):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", HEADS.names())
def test_rims_reads_the_torso_as_a_spatial_set(head):
    """input_set: spatial presents the conv torso's positions to input attention (section 2.2)."""
    agent = make_agent("rims", head, input_set="spatial")
    T, B = 4, 2
    x = inputs(T, B)
    x["reset"][2, 0] = True
    seen = []
    hook = agent.core.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
    with torch.no_grad():
        agent(x, agent.initial_state(B))
    hook.remove()
    assert len(seen[0]) == 4 and seen[0][:2] == (T, B) and seen[0][2] > 1  # [T, B, positions, D]
    check_stepping_equals_unrolling(agent, x)


@pytest.mark.parametrize("core, head", COMBOS)
def test_shapes_and_stepping_equals_unrolling(core, head):
    x = inputs(6, 3)
    x["reset"][3, 1] = True
    check_stepping_equals_unrolling(make_agent(core, head), x)


@pytest.mark.parametrize("core, head", COMBOS)
def test_reset_starts_a_fresh_episode(core, head):
    agent = make_agent(core, head)
    T, B = 6, 2
    x = inputs(T, B)
    x["reset"][3] = True
    with torch.no_grad():
        out, _ = agent(x, agent.initial_state(B))
        fresh, _ = agent({k: v[3:] for k, v in x.items()}, agent.initial_state(B))
    torch.testing.assert_close(out.logits[3:], fresh.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("core, head", [(c, h) for c, h in COMBOS
                                        if not getattr(CORES[c], "stateless", False)])
def test_policy_depends_on_core_state(core, head):
    """The policy depends on the core's state.

    Catches a head wired around the core (a public RIMs release fed conv features straight to the
    policy): a different core state must change the policy.
    """
    agent = make_agent(core, head)
    x = inputs(1, 2)
    with torch.no_grad():
        s0 = agent.initial_state(2)
        s1 = tuple(torch.randn_like(s) for s in s0)
        a, _ = agent(x, s0)
        b, _ = agent(x, s1)
    assert not torch.allclose(a.logits, b.logits, atol=1e-4)
    assert not torch.allclose(a.value, b.value, atol=1e-4)


@pytest.mark.parametrize("core, head", COMBOS)
def test_gradients_reach_every_parameter(core, head):
    agent = make_agent(core, head)
    agent.train()
    T, B = 8, 16
    x = inputs(T, B)
    x["task_id"] = torch.arange(B).remainder(TASKS).expand(T, B)  # every task's parameters in use
    out, _ = agent(x, agent.initial_state(B))
    (out.logits.sum() + out.value.sum()).backward()
    missing = [n for n, p in agent.named_parameters()
               if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient reaches {missing}"


def test_task_id_only_reaches_heads_that_read_it():
    for head in HEADS.names():
        agent = make_agent("lstm", head)
        x = inputs(2, 2)
        if agent.reads_task_id:
            with pytest.raises(ValueError):
                agent({k: v for k, v in x.items() if k != "task_id"}, agent.initial_state(2))
        else:
            with torch.no_grad():
                a, _ = agent(x, agent.initial_state(2))
                b, _ = agent({k: v for k, v in x.items() if k != "task_id"}, agent.initial_state(2))
            torch.testing.assert_close(a.logits, b.logits)


@pytest.mark.parametrize("changed", ["instruction", "last_reward", "last_action"])
def test_instruction_reward_and_action_inputs_matter(changed):
    """Each extra input beside the pixels reaches the policy: changing it alone changes it."""
    agent = make_agent("lstm", "linear")
    x = inputs(1, 2)
    other_value = {"instruction": torch.roll(x["instruction"], 1, dims=-1) + 1,
                   "last_reward": -x["last_reward"] + 0.5,
                   "last_action": (x["last_action"] + 1) % A}[changed]
    with torch.no_grad():
        base, _ = agent(x, agent.initial_state(2))
        other, _ = agent(dict(x, **{changed: other_value}), agent.initial_state(2))
    assert not torch.allclose(base.logits, other.logits)


def test_atari_shaped_observation():
    cfg = from_dict(AgentConfig, {"core_options": {"hidden_size": 32}})
    agent = Agent(cfg, {"pixels": (4, 84, 84)}, 6, 1)
    x = {"pixels": torch.zeros(2, 3, 4, 84, 84, dtype=torch.uint8),
         "last_action": torch.zeros(2, 3, dtype=torch.long),
         "last_reward": torch.zeros(2, 3), "reset": torch.zeros(2, 3, dtype=torch.bool)}
    out, _ = agent(x, agent.initial_state(3))
    assert out.logits.shape == (2, 3, 6)


def test_training_layout_changes_memory_not_values():
    """Pixels laid out once per update for training give the training pass bit for bit."""
    cfg = from_dict(AgentConfig, {"core_options": {"hidden_size": 32}})
    agent = Agent(cfg, {"pixels": (4, 84, 84)}, 6, 1)
    g = torch.Generator().manual_seed(0)
    x = {"pixels": torch.randint(0, 256, (3, 2, 4, 84, 84), generator=g, dtype=torch.uint8),
         "last_action": torch.zeros(3, 2, dtype=torch.long),
         "last_reward": torch.zeros(3, 2), "reset": torch.zeros(3, 2, dtype=torch.bool)}
    laid = agent.training_layout({"pixels": x["pixels"]})["pixels"]
    assert torch.equal(laid, x["pixels"]) and laid.stride()[2] == 1  # channels innermost
    plain, _ = agent(x, agent.initial_state(2))
    out, _ = agent({**x, "pixels": laid}, agent.initial_state(2))
    assert torch.equal(out.logits, plain.logits) and torch.equal(out.value, plain.value)


def test_orthogonal_torso_init_keeps_the_feature_scale():
    """``init: orthogonal`` keeps the scale of the features through the ReLUs.

    It uses gain sqrt 2 and zero biases; PyTorch's default init shrinks that scale layer by layer
    (docs/results/impala-atari.md).
    """
    from agents.torsos import ShallowTorso

    torch.manual_seed(0)
    pixels = torch.randint(0, 256, (1, 64, 4, 84, 84), dtype=torch.uint8)
    extras = (torch.zeros(1, 64, dtype=torch.long), torch.zeros(1, 64))
    rms = {}
    for init in ("torch", "orthogonal"):
        torso = ShallowTorso({"pixels": (4, 84, 84)}, 6, init=init)
        with torch.no_grad():
            rms[init] = float(torso({"pixels": pixels}, *extras)[..., :256].pow(2).mean().sqrt())
        if init == "orthogonal":
            assert all(float(m.bias.detach().abs().max()) == 0.0
                       for m in (torso.conv[0], torso.conv[2], torso.fc))
            w = torso.fc.weight  # [256, 2592]: orthonormal rows times the gain
            torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(256), atol=1e-4, rtol=0)
    assert rms["orthogonal"] > 5 * rms["torch"], rms
    with pytest.raises(ValueError, match="init must be one of torch, orthogonal"):
        ShallowTorso({"pixels": (4, 84, 84)}, 6, init="xavier")


def test_layer_norm_keeps_torso_units_on_whatever_the_linear_layers_scale_and_offset():
    """``norm: layer`` normalises the fc pre-activations per frame before the ReLU.

    An update that pushes every unit's pre-activation down (a bias shifted by the same amount)
    turns the plain torso's units off on every frame; with the norm the features do not move,
    since each frame's pre-activations are centred and scaled over its units. The norm's
    512 parameters are the only ones added, and an agent whose core reads the torso as a set
    (RIMs' spatial input) refuses it, as a config error where configs load.
    """
    from agents.torsos import ShallowTorso

    pixels = torch.randint(0, 256, (1, 16, 4, 84, 84), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    extras = (torch.zeros(1, 16, dtype=torch.long), torch.zeros(1, 16))
    feats = {}
    for norm in ("none", "layer"):
        torch.manual_seed(0)
        torso = ShallowTorso({"pixels": (4, 84, 84)}, 6, init="orthogonal", norm=norm)
        with torch.no_grad():
            before = torso({"pixels": pixels}, *extras)[..., :256]
            torso.fc.bias.sub_(10.0)
            torso.fc.weight.mul_(3.0)
            feats[norm] = (before, torso({"pixels": pixels}, *extras)[..., :256],
                           sum(p.numel() for p in torso.parameters()))
    plain_before, plain_after, plain_params = feats["none"]
    normed_before, normed_after, normed_params = feats["layer"]
    assert float((plain_before > 0).float().mean()) > 0.3 and int((plain_after > 0).sum()) == 0
    torch.testing.assert_close(normed_after, normed_before, atol=1e-4, rtol=1e-4)
    assert float((normed_after > 0).float().mean()) > 0.3
    assert normed_params - plain_params == 512
    spatial = AgentConfig(core="rims", torso_options={"norm": "layer"},
                          core_options={"input_set": "spatial"})
    with pytest.raises(ValueError, match="norm=layer normalises"):
        Agent(spatial, OBS, A, TASKS, {"instruction": 1024})
    from learners.config.schema import ConfigError, load_config

    with pytest.raises(ConfigError, match="norm=layer normalises the torso's linear layer"):
        load_config(None, ["agent.core=rims", "agent.core_options.input_set=spatial",
                           "agent.torso_options.norm=layer"])
    with pytest.raises(ValueError, match="norm must be one of none, layer"):
        ShallowTorso({"pixels": (4, 84, 84)}, 6, norm="batch")


def test_component_options_arrive_typed_as_the_loader_resolved_them():
    """``agent.*_options`` become each component's Config on load, once.

    The agent hands those very objects to the torso, core and head (no trip back through a
    dict), a Config and keyword options are not mixed, and an AgentConfig built by hand
    with mappings still builds (its options typed by the component).
    """
    from agents.cores.rims import RIMsConfig
    from agents.registry import typed_options
    from learners.config.schema import load_config

    cfg = load_config(None, ["agent.core=rims", "agent.core_options.unit_size=8",
                             "agent.head=multiplicative", "agent.torso_options.hidden_size=16"])
    assert isinstance(cfg.agent.core_options, RIMsConfig)
    agent = Agent(cfg.agent, OBS, A, TASKS, {"instruction": 1024})
    assert agent.core.config is cfg.agent.core_options
    assert agent.head.config is cfg.agent.head_options
    assert agent.torso.config is cfg.agent.torso_options
    with pytest.raises(TypeError, match="not both"):
        CORES.get("rims")(16, cfg.agent.core_options, unit_size=4)
    with pytest.raises(TypeError, match="expected RIMsConfig"):
        typed_options(RIMsConfig, cfg.agent.head_options)
    by_hand = Agent(AgentConfig(core="lstm", core_options={"hidden_size": 8}), OBS, A, TASKS,
                    {"instruction": 1024})
    assert by_hand.core.config.hidden_size == 8 and by_hand.core.output_size == 8
