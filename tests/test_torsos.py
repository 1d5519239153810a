"""Contract tests over every registered torso, plus each torso against its paper's layers.

The contract (agents/torsos/__init__.py): shapes, the extras reach the output, a torso has no
state (T=1 stepping equals one unroll), gradients reach every parameter, both inits, the
channels-last training pass equals the default layout, the probe's layers, one-line errors
for bad options, the positions as a set. Then ``nature`` (Mnih et al. 2015) and ``resnet``
(Espeholt et al. 2018, fig. 3 right) are checked against naive functional passes written
from the papers' descriptions with the torso's weights.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from agents.torsos import TORSOS

NAMES = TORSOS.names()
A, VOCAB, WORDS = 6, 11, 5
ATARI = {"pixels": (4, 84, 84)}
WITH_WORDS = {"pixels": (3, 56, 56), "instruction": (WORDS,)}


def make(name: str, shapes=ATARI, as_set: bool = False, seed: int = 0, **options):
    torch.manual_seed(seed)
    return TORSOS[name](shapes, A, as_set=as_set, obs_vocab={"instruction": VOCAB}, **options)


def inputs(shapes, T: int, B: int, seed: int = 1):
    """(obs, last_action, last_reward), time-major ``[T, B, ...]``."""
    g = torch.Generator().manual_seed(seed)
    obs = {"pixels": torch.randint(0, 256, (T, B, *shapes["pixels"]), generator=g,
                                   dtype=torch.uint8)}
    if "instruction" in shapes:
        obs["instruction"] = torch.randint(1, VOCAB, (T, B, *shapes["instruction"]), generator=g)
        obs["instruction"][..., -2:] = 0  # padding at the end, as the envs give it
    return obs, torch.randint(0, A, (T, B), generator=g), 3 * torch.randn(T, B, generator=g)


def unrolled_and_stepped(torso, obs, action, reward) -> tuple[torch.Tensor, torch.Tensor]:
    """The torso's output on T steps at once, and on each step alone concatenated."""
    T = action.shape[0]
    with torch.no_grad():
        y = torso(obs, action, reward)
        steps = [torso({"pixels": obs["pixels"][t:t + 1]}, action[t:t + 1], reward[t:t + 1])
                 for t in range(T)]
    return y, torch.cat(steps)


def features(torso, y: torch.Tensor) -> torch.Tensor:
    """The part of ``forward``'s output before the extras."""
    return y[..., : y.shape[-1] - torso.extras_size]


def test_every_torso_is_tested():
    assert {"shallow", "nature", "resnet"} <= set(NAMES)


@pytest.mark.parametrize("as_set", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_output_shapes(name, as_set):
    torso = make(name, WITH_WORDS, as_set=as_set)
    T, B = 2, 3
    with torch.no_grad():
        y = torso(*inputs(WITH_WORDS, T, B))
    assert torso.extras_size == A + 1 + torso.config.instruction_size
    if as_set:
        assert y.shape == (T, B, torso.positions, torso.output_size) and torso.positions > 1
    else:
        assert y.shape == (T, B, torso.output_size)
        assert torso.output_size == torso.config.hidden_size + torso.extras_size


@pytest.mark.parametrize("instruction", ["bow", "lstm"])
@pytest.mark.parametrize("name", NAMES)
def test_extras_reach_the_output(name, instruction):
    """The last action (one-hot), the last reward (clipped to [-1, 1]) and the instruction."""
    torso = make(name, WITH_WORDS, instruction=instruction).eval()
    obs, action, reward = inputs(WITH_WORDS, 2, 3)
    with torch.no_grad():
        y = torso(obs, action, reward)
        extras = y[..., -torso.extras_size:]
        torch.testing.assert_close(extras[..., :A], F.one_hot(action, A).float())
        torch.testing.assert_close(extras[..., A], reward.clamp(-1, 1))
        other_action = torso(obs, (action + 1) % A, reward)
        other_reward = torso(obs, action, -reward)
        words = {**obs, "instruction": (obs["instruction"] % (VOCAB - 1)) + 1}
        other_words = torso(words, action, reward)
    for other in (other_action, other_reward, other_words):
        assert (other - y).abs().max() > 1e-4
        torch.testing.assert_close(features(torso, other), features(torso, y))


@pytest.mark.parametrize("as_set", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_stepping_equals_unrolling(name, as_set):
    """A torso has no state: T steps at once equal each step alone."""
    torso = make(name, as_set=as_set).eval()
    T, B = 3, 2
    y, stepped = unrolled_and_stepped(torso, *inputs(ATARI, T, B))
    torch.testing.assert_close(stepped, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("init", ["torch", "orthogonal"])
@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name, init):
    for instruction in ("bow", "lstm"):
        torso = make(name, WITH_WORDS, init=init, instruction=instruction).train()
        y = torso(*inputs(WITH_WORDS, 2, 3))
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3))
        (y * weights).sum().backward()
        for pname, p in torso.named_parameters():
            assert p.grad is not None, f"{name}.{pname} got no gradient"
            assert p.grad.abs().sum() > 0, f"{name}.{pname} got an all-zero gradient"


@pytest.mark.parametrize("name", NAMES)
def test_orthogonal_init_has_the_relu_gain_and_zero_biases(name):
    layers = lambda t: [m for m in (*t.conv.modules(), t.fc)  # noqa: E731
                        if isinstance(m, (nn.Conv2d, nn.Linear))]
    for layer in layers(make(name, init="orthogonal")):
        w = layer.weight.flatten(1)
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        torch.testing.assert_close(gram, 2.0 * torch.eye(len(gram)), atol=1e-4, rtol=0)
        assert not layer.bias.any()
    assert all(layer.bias.any() for layer in layers(make(name, init="torch")))


@pytest.mark.parametrize("as_set", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_channels_last_training_pass_equals_the_default_layout(name, as_set):
    """On CPU a pass with gradients runs channels-last; the features are the same."""
    torso = make(name, as_set=as_set, init="orthogonal")
    obs, action, reward = inputs(ATARI, 2, 2)
    with torch.no_grad():
        default = torso(obs, action, reward)
    trained = torso(obs, action, reward)
    laid_out = torso(torso.training_layout(obs), action, reward)
    frames = torso.training_layout(obs)["pixels"].flatten(0, 1)  # [T B, C, H, W]
    assert frames.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(trained.detach(), default, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(laid_out.detach(), default, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("as_set", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_probe_returns_the_declared_layers_the_last_being_the_features(name, as_set):
    torso = make(name, as_set=as_set, init="orthogonal").train()
    obs, action, reward = inputs(ATARI, 1, 3)
    frames = {"pixels": obs["pixels"][0]}  # [N, C, H, W], as stored
    rng = torch.get_rng_state()
    probed = torso.probe(frames)
    assert torch.equal(rng, torch.get_rng_state()), "the probe drew random numbers"
    assert tuple(probed) == tuple(torso.probe_layers) and len(probed) >= 2
    assert (probed.keys() - {"fc"}) and (("fc" in probed) != as_set)
    for layer, units in probed.items():
        assert units.dim() == 2 and units.shape[0] == 3, layer
        assert not units.requires_grad and units.min() >= 0, f"{layer}: not post-ReLU"
        channels = torso.probe_channels[layer]  # units are channels x positions
        assert units.shape[1] % channels == 0 and (channels == units.shape[1]) == (layer == "fc")
    with torch.no_grad():
        y = features(torso, torso(obs, action, reward))[0]  # [N, hidden] or [N, positions, C]
    last = list(probed.values())[-1]
    expected = y.transpose(1, 2).flatten(1) if as_set else y
    torch.testing.assert_close(last, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_bad_options_are_one_line_errors(name):
    from learners.config.schema import ConfigError, load_config

    for option, value, says in (("init", "xavier", "init must be one of"),
                                ("hidden_size", 0, "hidden_size must be at least 1"),
                                ("instruction", "gru", "instruction must be one of"),
                                ("norm", "batch", "norm must be one of")):
        with pytest.raises(ValueError, match=says) as err:
            make(name, **{option: value})
        assert "\n" not in str(err.value)
    with pytest.raises(TypeError, match="width"):
        make(name, width=3)
    with pytest.raises(ConfigError, match="valid keys under 'agent.torso_options'") as err:
        load_config(None, [f"agent.torso={name}", "agent.torso_options.width=3"], runtime=False)
    assert "\n" not in str(err.value) and "hidden_size" in str(err.value)
    with pytest.raises(ConfigError, match=r"valid torsos: .*nature.*resnet.*shallow") as err:
        load_config(None, ["agent.torso=alexnet"], runtime=False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", [n for n in NAMES if hasattr(TORSOS[n].Config(), "channels")])
def test_channels_are_three_widths(name):
    from learners.config.schema import ConfigError, load_config

    cfg = load_config(None, [f"agent.torso={name}", "agent.torso_options.channels=[8, 16, 8]"],
                      runtime=False)
    assert cfg.agent.torso_options.channels == [8, 16, 8]
    torso = TORSOS[name](ATARI, A, config=cfg.agent.torso_options)
    assert [m.out_channels for m in torso.conv.modules() if isinstance(m, nn.Conv2d)][-1] == 8
    assert make(name, channels=(8, 16, 8)).config.channels == [8, 16, 8]  # a list: saves as YAML
    for bad in ("[32, 64]", "[32, 0, 32]"):
        with pytest.raises(ConfigError, match="channels must be three widths") as err:
            load_config(None, [f"agent.torso={name}", f"agent.torso_options.channels={bad}"],
                        runtime=False)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_agents_build_on_every_torso(name):
    """The agent reads output_size (flat cores) or the positions as a set (RIMs, spatial)."""
    from agents.agent import Agent
    from agents.config import AgentConfig

    obs, action, reward = inputs(ATARI, 2, 2)
    batch = {**obs, "last_action": action, "last_reward": reward,
             "reset": torch.zeros(2, 2, dtype=torch.bool)}
    for core, core_options in (("lstm", {"hidden_size": 16}), ("feedforward", {}),
                               ("rims", {"input_set": "spatial", "unit_size": 8})):
        torch.manual_seed(0)
        agent = Agent(AgentConfig(torso=name, core=core, core_options=core_options), ATARI, A)
        assert agent.torso.as_set == (core == "rims")
        with torch.no_grad():
            out, _ = agent(batch, agent.initial_state(2))
        assert out.logits.shape == (2, 2, A) and out.value.shape == (2, 2)


def test_a_torso_without_a_trunk_fails_where_it_is_defined():
    from agents.torsos.conv_torso import ConvTorso

    with pytest.raises(TypeError, match="Trunkless must define trunk"):
        class Trunkless(ConvTorso):
            """No convs."""


def test_too_small_pixels_are_a_one_line_error():
    with pytest.raises(ValueError, match="pixels of 20x20 are too small"):
        make("nature", {"pixels": (4, 20, 20)})


# ------------------------------------------------------------------ the papers' layers


def test_nature_is_dqns_network():
    """Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1, fc 512, ReLUs; 1,684,128 parameters.

    Their count with the 18-action output layer (512 x 18 + 18) is the 1,693,362 usually
    quoted for the Nature CNN on 4 stacked 84x84 frames.
    """
    torso = make("nature", init="orthogonal")
    assert sum(p.numel() for p in torso.parameters()) == 1_684_128
    assert torso.positions == 7 * 7 and torso.output_size == 512 + A + 1
    convs = [m for m in torso.conv if isinstance(m, nn.Conv2d)]
    obs, action, reward = inputs(ATARI, 1, 2)
    x = obs["pixels"][0].float() / 255
    layers = []
    for conv, stride in zip(convs, (4, 2, 1)):
        x = F.relu(F.conv2d(x, conv.weight, conv.bias, stride=stride))
        layers.append(x.flatten(1))
    layers.append(F.relu(x.flatten(1) @ torso.fc.weight.T + torso.fc.bias))
    probed = torso.probe({"pixels": obs["pixels"][0]})
    assert list(probed) == ["conv1", "conv2", "conv3", "fc"]
    for got, want in zip(probed.values(), layers):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    kostrikov = make("nature", channels=[32, 64, 32], hidden_size=512)
    assert kostrikov.fc.in_features == 32 * 7 * 7


def test_resnet_is_impalas_deep_network():
    """Espeholt et al. 2018, fig. 3 right, as a naive pass with the torso's weights.

    Each stack conv 3x3/1, max-pool 3x3/2 (padding 1), two blocks x + conv(relu(conv(relu(x))));
    then relu, fc 256, relu.
    """
    torso = make("resnet", init="orthogonal")
    assert torso.positions == 11 * 11 and torso.fc.in_features == 32 * 11 * 11
    obs, action, reward = inputs(ATARI, 1, 2)
    x = obs["pixels"][0].float() / 255
    conv = lambda x, m: F.conv2d(x, m.weight, m.bias, stride=1, padding=1)  # noqa: E731
    hidden = []
    for stack, width in zip(torso.conv.stacks, (16, 32, 32)):
        x = F.max_pool2d(conv(x, stack.conv), 3, stride=2, padding=1)
        assert x.shape[1] == width
        units = []
        for block in stack.blocks:
            h = F.relu(conv(F.relu(x), block.conv0))
            units.append(h.flatten(1))
            x = x + conv(h, block.conv1)
        hidden.append(torch.cat(units, 1))
    out = F.relu(x)
    fc = F.relu(out.flatten(1) @ torso.fc.weight.T + torso.fc.bias)
    probed = torso.probe({"pixels": obs["pixels"][0]})
    assert list(probed) == ["stack1", "stack2", "stack3", "conv_out", "fc"]
    for got, want in zip(probed.values(), [*hidden, out.flatten(1), fc]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        y = torso(obs, action, reward)[0]
    torch.testing.assert_close(y[:, :256], fc, atol=1e-4, rtol=1e-4)


def test_bench_counts_each_torsos_parameters_and_multiply_adds(capsys):
    """``python -m scripts.bench.torsos``: the counts docs/components.md's table gives.

    Shallow's multiply-adds by hand: conv1 16 x 20 x 20 outputs of 4 x 8 x 8, conv2 32 x 9 x 9
    of 16 x 4 x 4, fc 2,592 -> 256.
    """
    from scripts.bench.torsos import main

    assert main(["--torsos", "shallow", "nature-32-64-32", "--steps", "2", "--envs", "2",
                 "--warmup", "0", "--repeats", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    by_hand = 16 * 20 * 20 * 4 * 8 * 8 + 32 * 9 * 9 * 16 * 4 * 4 + 2592 * 256
    assert f"| shallow | 676,144; 1,211,447 | {by_hand / 1e6:.1f}M | " in out
    assert "| nature-32-64-32 | 862,848; 1,660,295 | 7.6M | " in out
    assert main(["--torsos", "deep"]) == 2
    assert "unknown torso 'deep'; choose from shallow" in capsys.readouterr().err


def test_bench_writes_its_rows_with_the_settings_and_code(tmp_path, capsys):
    """``--csv``: one row per torso, the counts exact, the settings and the revision beside them."""
    import csv

    from scripts.bench.torsos import main

    path = tmp_path / "out" / "torsos.csv"
    assert main(["--torsos", "shallow", "--steps", "2", "--envs", "2", "--warmup", "0",
                 "--repeats", "1", "--threads", "1", "--csv", str(path)]) == 0
    rows = list(csv.DictReader(path.open()))
    assert [r["torso"] for r in rows] == ["shallow"]
    assert (rows[0]["torso_params"], rows[0]["agent_params"]) == ("676144", "1211447")
    assert int(rows[0]["madds"]) == 16 * 20 * 20 * 4 * 8 * 8 + 32 * 9 * 9 * 16 * 4 * 4 + 2592 * 256
    assert float(rows[0]["torso_ms"]) > 0 and rows[0]["repeats"] == "1" and rows[0]["code"]
    (tmp_path / "file").write_text("")
    assert main(["--torsos", "shallow", "--steps", "2", "--envs", "2", "--warmup", "0",
                 "--repeats", "1", "--csv", str(tmp_path / "file" / "x.csv")]) == 1
    assert capsys.readouterr().err.startswith("error: cannot write ")
    assert main(["--torsos", "shallow", "--threads", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --threads must be at least 1, got 0"
