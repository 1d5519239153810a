"""The torsos' input normalisation: ``agent.torso_options.input_norm`` (``input_norm.py``).

``none`` (the default) leaves every torso as it was, bit for bit; ``frame`` centres each
frame's channels; ``running`` keeps the mean and variance of every frame the learner
observed, moved once per batch and carried by the weights to the runners and checkpoints.
The contract of agents/torsos/__init__.py holds in each mode, for every torso.
"""

from __future__ import annotations

import pytest
import torch

from agents.torsos import TORSOS, TorsoConfig
from agents.torsos.input_norm import CLIP, EPS
from tests.test_torsos import A, features, inputs, make, unrolled_and_stepped

NAMES = TORSOS.names()
MODES = ("none", "running", "frame")
SMALL = {"pixels": (4, 40, 40)}  # the smallest the nature torso takes, rounded up: cheap
SCALE = 1.0 / 255.0


def frames(n: int, shape=(4, 40, 40), seed: int = 5, low: int = 0, high: int = 256):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (n, *shape), generator=g, dtype=torch.uint8)


def naive(batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population variance per pixel over every frame of ``batches``, scaled."""
    x = torch.cat([b.reshape(-1, *b.shape[-3:]) for b in batches]).double() * SCALE
    return x.mean(0), x.var(0, unbiased=False)


def stats(torso) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in torso.input_norm.state_dict().items()}


# ------------------------------------------------------------------ none: as before


@pytest.mark.parametrize("name", NAMES)
def test_none_is_the_default_and_leaves_the_torso_as_it_was(name):
    """No buffers, the same weights at one seed in every mode, the pixels exactly / 255."""
    assert TorsoConfig().input_norm == "none" and TORSOS[name].Config().input_norm == "none"
    torso = make(name, SMALL)
    assert torso.input_norm is None and not list(torso.buffers())
    assert list(torso.state_dict()) == [n for n, _ in torso.named_parameters()]
    for mode in ("running", "frame"):
        other = make(name, SMALL, input_norm=mode).state_dict()
        assert all(torch.equal(other[k], v) for k, v in torso.state_dict().items())
    pixels = frames(3)
    for fmt in (torch.contiguous_format, torch.channels_last):
        assert torch.equal(torso._pixels(pixels, fmt), pixels.float().mul_(SCALE))
    rng = torch.get_rng_state()
    torso.observe({"pixels": pixels})  # a no-op
    assert torch.equal(rng, torch.get_rng_state()) and not list(torso.buffers())


def test_every_preset_keeps_none():
    from pathlib import Path

    from learners.config.schema import load_config

    configs = Path(__file__).resolve().parents[1].joinpath("configs")
    presets = sorted(p for p in configs.glob("*.yaml") if not p.name.startswith("compare_"))
    assert len(presets) >= 5
    for path in presets:
        cfg = load_config(str(path), [], runtime=False)
        assert cfg.agent.torso_options.input_norm == "none", path.name


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_value_is_a_one_line_error(name):
    from learners.config.schema import ConfigError, load_config

    with pytest.raises(ValueError, match="agent.torso_options.input_norm must be one of none, "
                                         "running, frame, got 'batch'") as err:
        make(name, SMALL, input_norm="batch")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="input_norm must be one of") as err:
        load_config(None, [f"agent.torso={name}", "agent.torso_options.input_norm=batch"],
                    runtime=False)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ frame


@pytest.mark.parametrize("name", NAMES)
def test_frame_centres_each_frame_channel_and_ignores_its_brightness(name):
    torso = make(name, SMALL, input_norm="frame").eval()
    pixels = frames(6, high=200)
    for fmt in (torch.contiguous_format, torch.channels_last):
        x = torso._pixels(pixels, fmt)
        assert x.is_contiguous(memory_format=fmt)
        torch.testing.assert_close(x.mean(dim=(-2, -1)), torch.zeros(6, 4), atol=1e-6, rtol=0)
        want = pixels.double() * SCALE
        want = want - want.mean(dim=(-2, -1), keepdim=True)
        torch.testing.assert_close(x.double(), want, atol=1e-6, rtol=0)
    # A brighter background, each channel by its own amount: the same features.
    brighter = pixels + torch.tensor([10, 55, 0, 30], dtype=torch.uint8).view(1, 4, 1, 1)
    with torch.no_grad():
        for probe, other in zip(torso.probe({"pixels": pixels}).values(),
                                torso.probe({"pixels": brighter}).values()):
            torch.testing.assert_close(probe, other, atol=1e-5, rtol=1e-5)
    assert not list(torso.buffers())  # no state


# ------------------------------------------------------------------ running


def test_running_statistics_are_the_mean_and_variance_of_every_frame_observed():
    torso = make("shallow", SMALL, input_norm="running")
    norm = torso.input_norm
    assert {k: v.dtype for k, v in norm.state_dict().items()} == dict.fromkeys(
        ("mean", "var", "count"), torch.float64)
    pixels = frames(3)
    before = torso._pixels(pixels, torch.contiguous_format)  # count 0: x / sqrt(1 + eps)
    torch.testing.assert_close(before, pixels.float() * SCALE / (1 + EPS) ** 0.5)
    # batches of different sizes and time-major shapes; one larger than observe's chunk
    batches = [frames(1, seed=1), frames(7, seed=2, low=40, high=90).view(7, 1, 4, 40, 40),
               frames(300, seed=3, high=30).view(3, 100, 4, 40, 40), frames(5, seed=4)]
    for i, batch in enumerate(batches):
        rng = torch.get_rng_state()
        torso.observe({"pixels": batch})
        assert torch.equal(rng, torch.get_rng_state()), "observe drew random numbers"
        mean, var = naive(batches[: i + 1])
        torch.testing.assert_close(norm.mean, mean, atol=1e-13, rtol=1e-12)
        torch.testing.assert_close(norm.var, var, atol=1e-13, rtol=1e-12)
        assert norm.count.item() == sum(b.reshape(-1, 4, 40, 40).shape[0] for b in batches[:i + 1])
    assert not any(p.requires_grad for p in torso.buffers())
    assert not any(n.startswith("input_norm.") for n, _ in torso.named_parameters())
    observed = stats(torso)
    mean, var = naive(batches)
    want = ((pixels.double() * SCALE - mean) / (var + EPS).sqrt()).clamp(-CLIP, CLIP)
    layouts = {}
    for fmt in (torch.contiguous_format, torch.channels_last):
        got = layouts[fmt] = torso._pixels(pixels, fmt)
        assert got.is_contiguous(memory_format=fmt)
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    # the statistics follow the pixels' layout; the values are the same bit for bit
    assert torch.equal(layouts[torch.contiguous_format], layouts[torch.channels_last])
    assert want.abs().max() == CLIP  # the low-valued third batch leaves some pixels beyond it
    with torch.no_grad():  # forward and probe read the statistics, never move them
        torso(*inputs(SMALL, 2, 3))
        torso.probe({"pixels": pixels})
    torso.train()
    torso(*inputs(SMALL, 2, 3)).sum().backward()
    assert all(torch.equal(v, observed[k]) for k, v in stats(torso).items())
    # float pixels would be neither scaled by 1/255 nor summed exactly: refused, nothing moved
    with pytest.raises(TypeError, match="uint8 pixels, got torch.float32"):
        torso.observe({"pixels": pixels.float()})
    assert all(torch.equal(v, observed[k]) for k, v in stats(torso).items())


# ------------------------------------------------------------------ the contract in every mode


@pytest.mark.parametrize("mode", ["running", "frame"])
@pytest.mark.parametrize("name", NAMES)
def test_the_torso_contract_holds_in_each_mode(name, mode):
    """The contract's checks (``none``: test_torsos.py), on small pixels and batches.

    Stepping equals unrolling, the channels-last pass equals the default layout, the probe's
    last layer is the features (and sees the normalised input), gradients reach every
    parameter, no random draws.
    """
    for as_set in (False, True):
        torso = make(name, SMALL, as_set=as_set, init="orthogonal", input_norm=mode)
        plain = make(name, SMALL, as_set=as_set, init="orthogonal")
        torso.observe({"pixels": frames(20, seed=9, high=120)})  # statistics that matter
        T, B = 3, 2
        obs, action, reward = inputs(SMALL, T, B)
        y, stepped = unrolled_and_stepped(torso, obs, action, reward)
        # Inputs up to the clip (5) give features several times larger than pixels / 255 do:
        # the float rounding of another layout scales with them.
        tol = 1e-4 * max(1.0, float(y.abs().max()))
        torch.testing.assert_close(stepped, y, atol=tol / 10, rtol=1e-5)
        trained = torso(obs, action, reward)
        laid_out = torso(torso.training_layout(obs), action, reward)
        torch.testing.assert_close(trained.detach(), y, atol=tol, rtol=1e-4)
        torch.testing.assert_close(laid_out.detach(), y, atol=tol, rtol=1e-4)
        rng = torch.get_rng_state()
        probed = torso.probe({"pixels": obs["pixels"][0]})
        assert torch.equal(rng, torch.get_rng_state()), "the probe drew random numbers"
        assert tuple(probed) == tuple(torso.probe_layers)
        last = features(torso, y)[0]
        expected = last.transpose(1, 2).flatten(1) if as_set else last
        torch.testing.assert_close(list(probed.values())[-1], expected, atol=tol, rtol=1e-4)
        first = next(iter(probed))
        other = plain.probe({"pixels": obs["pixels"][0]})[first]
        assert (probed[first] - other).abs().max() > 1e-3, "the probe skipped the normalisation"
        trained.mul(torch.randn(trained.shape, generator=torch.Generator().manual_seed(3))
                    ).sum().backward()
        for pname, p in torso.named_parameters():
            if pname.startswith(("embed", "instruction")):
                continue  # no instruction in these observations
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}.{pname}"
        assert y.shape[-1] == torso.output_size and torso.extras_size == A + 1


# ------------------------------------------------------------------ the learner and runners


def _running(small_cfg, **extra):
    from envs.runner import EnvRunner
    from learners.update.learner import Learner

    cfg = small_cfg(**{"agent.torso_options": "{hidden_size: 32, input_norm: running}", **extra})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=5)
    return cfg, runner, Learner(cfg, runner.spec())


def test_the_learner_moves_the_statistics_once_per_batch_whatever_its_passes(small_cfg):
    """PPO, 3 epochs x 2 minibatches: each update adds rows 0..T-1 of its batch, once."""
    cfg, runner, learner = _running(small_cfg, **{"learner.name": "ppo", "learner.epochs": 3,
                                                  "learner.minibatches": 2})
    torso = learner.agent.torso
    calls = []
    observe = torso.input_norm.observe
    torso.input_norm.observe = lambda pixels: (calls.append(pixels.shape), observe(pixels))[1]
    seen = []
    for update in range(3):
        traj = runner.rollout(learner.get_weights(), learner.get_version())
        seen.append(torch.from_numpy(traj.obs["pixels"][:-1]))
        metrics = learner.update(traj)
        assert len(calls) == update + 1 and calls[-1][:2] == (5, 4)
        assert metrics["epochs_done"] == 3  # every pass ran, none moved them
        mean, var = naive(seen)
        torch.testing.assert_close(torso.input_norm.mean, mean, atol=1e-13, rtol=1e-12)
        torch.testing.assert_close(torso.input_norm.var, var, atol=1e-13, rtol=1e-12)
        assert torso.input_norm.count.item() == 20 * (update + 1)
    names = {n for g in learner.optimizer.param_groups for p in g["params"]
             for n, q in learner.agent.named_parameters() if q is p}
    assert not any("input_norm" in n for n in names) and "torso.input_norm.mean" not in names


def test_runners_act_with_the_statistics_of_the_weights_they_were_sent(small_cfg):
    cfg, runner, learner = _running(small_cfg)
    learner.learn(runner.rollout())
    assert runner.agent.torso.input_norm.count.item() == 0  # nothing sent yet
    sent = learner.get_weights()
    assert sent["torso.input_norm.count"].item() == 20
    traj = runner.rollout(sent, learner.get_version())
    theirs, ours = stats(runner.agent.torso), stats(learner.agent.torso)
    assert all(torch.equal(theirs[k], ours[k]) for k in ours)  # acting never moves them
    traj2 = runner.rollout()
    assert all(torch.equal(v, stats(runner.agent.torso)[k]) for k, v in theirs.items())
    # The runner's recorded policy is the learner's on the same rows (lag 0) ...
    batch, state = learner.to_batch([traj])
    with torch.no_grad():
        out = learner.forward(batch, state)
    torch.testing.assert_close(out.logits, batch.behaviour_logits, atol=1e-5, rtol=1e-5)
    # ... and not the policy with the statistics before the update.
    norm = learner.agent.torso.input_norm
    norm.mean.zero_(), norm.var.fill_(1.0), norm.count.zero_()
    with torch.no_grad():
        stale = learner.forward(batch, state)
    assert (stale.logits - batch.behaviour_logits).abs().max() > 1e-4
    assert traj2.policy_version == traj.policy_version


def test_checkpoints_carry_the_statistics_and_a_resume_restores_them(tmp_path, small_cfg):
    import io

    cfg, runner, learner = _running(small_cfg)
    for _ in range(2):
        learner.learn(runner.rollout(learner.get_weights(), learner.get_version()))
    buffer = io.BytesIO()
    torch.save(learner.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    assert saved["agent"]["torso.input_norm.count"].item() == 40
    _, _, resumed = _running(small_cfg)
    assert resumed.agent.torso.input_norm.count.item() == 0
    resumed.load_state_dict(saved)
    ours, theirs = stats(learner.agent.torso), stats(resumed.agent.torso)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    traj = runner.rollout(learner.get_weights(), learner.get_version())
    a, b = learner.update(traj), resumed.update(traj)
    assert a["policy_loss"] == b["policy_loss"]
    assert all(torch.equal(v, resumed.agent.state_dict()[k])
               for k, v in learner.agent.state_dict().items())


def test_a_trained_run_with_running_statistics_replays_bit_for_bit(tmp_path):
    """In-process, run.deterministic: two runs leave the same checkpoint, statistics too."""
    from learners.config.schema import load_config
    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer
    from tests.conftest import small_overrides

    states = []
    for name in ("a", "b"):
        cfg = load_config(None, small_overrides(tmp_path, **{
            "run.dir": str(tmp_path / name), "run.deterministic": "true",
            "agent.torso_options": "{hidden_size: 32, input_norm: running}"}))
        run = RunDir.create(cfg, None)
        try:
            Trainer(cfg, run, quiet=True).train()
        finally:
            torch.use_deterministic_algorithms(False)
        states.append(RunDir.load_checkpoint(run.latest_checkpoint())["learner"]["agent"])
    a, b = states
    assert a["torso.input_norm.count"].item() > 0
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
