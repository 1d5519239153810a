"""PPO loss and recurrent minibatching."""

import pytest
import torch

from agents.agent import AgentOutput
from learners.algorithms import fill_defaults
from learners.algorithms.batch import Batch, minibatches, take_columns
from learners.algorithms.ppo import add_advantages, ppo_loss
from learners.config.schema import LearnerConfig, load_config
from learners.update.learner import Learner
from tests.conftest import random_batch


def ppo_cfg(**settings) -> LearnerConfig:
    """A PPO learner config: ``settings``, and PPO's defaults for the rest, as loaded."""
    return fill_defaults(LearnerConfig(name="ppo", **settings))


def batch_and_output(T=4, B=6, A=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = Batch.from_dict(random_batch(T, B, A, g))
    logits = batch.behaviour_logits  # the learner's policy equals the behaviour policy: ratio 1
    batch = add_advantages(batch, ppo_cfg(reward_clip="none", lambda_=0.95))
    value = batch.behaviour_value.clone()
    return batch, AgentOutput(logits.clone().requires_grad_(), value.requires_grad_())


def test_ratio_one_gives_no_clipping_and_no_kl():
    batch, out = batch_and_output()
    _, m = ppo_loss(out, batch, ppo_cfg())
    assert float(m["clip_frac"]) == 0.0 and abs(float(m["approx_kl"])) < 1e-7


def test_clipping_engages_outside_the_trust_region():
    batch, out = batch_and_output()
    cfg = ppo_cfg(clip_eps=0.1, normalize_advantages=False, entropy_cost=0.0,
                        baseline_cost=0.0)
    # Push the taken actions' probability up a lot: ratio >> 1 + eps.
    bumped = out.logits.detach().clone()
    bumped.scatter_add_(-1, batch.action.unsqueeze(-1), torch.full_like(bumped[..., :1], 3.0))
    logits = bumped.requires_grad_()
    loss, m = ppo_loss(AgentOutput(logits, out.value), batch, cfg)
    assert float(m["clip_frac"]) == 1.0
    loss.backward()
    T = batch.advantages.shape[0]
    pos = batch.advantages > 0
    # Positive advantages with r > 1 + eps are clipped: no gradient from them.
    assert logits.grad[:T][pos].abs().sum() == 0
    assert logits.grad[:T][~pos].abs().sum() > 0


def test_value_clipping():
    batch, out = batch_and_output()
    cfg = ppo_cfg(clip_eps=0.1, entropy_cost=0.0)
    T = batch.returns.shape[0]
    far = out.value.detach().clone()
    far[:T] = batch.old_values + 5.0  # moved far beyond the clip range
    v = far.requires_grad_()
    _, m_clip = ppo_loss(AgentOutput(out.logits, v), batch, cfg)
    clipped = batch.old_values + 0.1
    expected = 0.5 * torch.max((far[:T] - batch.returns) ** 2,
                               (clipped - batch.returns) ** 2).mean()
    torch.testing.assert_close(m_clip["value_loss"], expected)
    _, m_plain = ppo_loss(AgentOutput(out.logits, v), batch, ppo_cfg(clip_value=False))
    torch.testing.assert_close(m_plain["value_loss"], 0.5 * ((far[:T] - batch.returns) ** 2).mean())


def test_one_minibatch_one_epoch_equals_the_full_batch(small_cfg):
    """Recurrent minibatching re-runs whole sequences from their stored initial state."""
    from envs.runner import EnvRunner

    cfg = small_cfg(**{"learner.name": "ppo", "learner.minibatches": 1, "learner.epochs": 1,
                       "learner.unroll_length": 12})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=12)
    runner.rollout()
    traj = runner.rollout()  # starts mid-episode: a non-zero initial state
    assert any(abs(s).sum() > 0 for s in traj.initial_state)
    learner = Learner(cfg, runner.spec())
    learner.agent.load_state_dict(runner.agent.state_dict())
    batch, state = learner.to_batch([traj])
    batch = add_advantages(batch, cfg.learner)
    learner.agent.eval()
    full, _ = ppo_loss(learner.forward(batch, state), batch, cfg.learner)
    (mb, mb_state), = list(minibatches(batch, state, 1))
    split, _ = ppo_loss(learner.forward(mb, mb_state), mb, cfg.learner)
    torch.testing.assert_close(full, split)
    # With the runner's own weights the ratio is 1 everywhere: the state was restored exactly.
    _, m = ppo_loss(learner.forward(mb, mb_state), mb, cfg.learner)
    assert float(m["approx_kl"]) < 1e-6


@pytest.mark.parametrize("core", ["lstm", "rims", "mi_lstm", "alstm"])
def test_minibatch_losses_add_up_to_the_full_batch_loss(small_cfg, core):
    """Several minibatches of whole sequences have the full batch's mean loss.

    Each is re-run from its stored initial state; their mean loss equals the full batch's
    (advantages not renormalised per minibatch).
    """
    from envs.runner import EnvRunner

    cfg = small_cfg(**{"learner.name": "ppo", "learner.minibatches": 4,
                       "learner.normalize_advantages": "false",
                       "agent.core": core, "agent.core_options": "{}", "learner.unroll_length": 6})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=8, unroll_length=6)
    runner.rollout()
    learner = Learner(cfg, runner.spec())
    batch, state = learner.to_batch([runner.rollout(learner.get_weights(), 0)])
    batch = add_advantages(batch, cfg.learner)
    full, _ = ppo_loss(learner.forward(batch, state), batch, cfg.learner)
    parts = [ppo_loss(learner.forward(mb, mb_state), mb, cfg.learner)[0]
             for mb, mb_state in minibatches(batch, state, 4)]
    torch.testing.assert_close(torch.stack(parts).mean(), full, atol=1e-5, rtol=1e-5)


def test_minibatches_partition_the_envs():
    batch, _ = batch_and_output(B=8)
    seen = []
    for mb, _ in minibatches(batch, (torch.arange(8.0).unsqueeze(1),), 4):
        assert mb.reward.shape[1] == 2
        seen += mb.reward[0].tolist()
    assert sorted(seen) == sorted(batch.reward[0].tolist())


def test_minibatch_columns_keep_the_memory_order_they_are_given():
    """``take_columns`` is ``v[:, idx]``, and a tensor laid out channels-last per frame stays so.

    The learner lays pixels out once per update (``Agent.training_layout``); a pick that fell
    back to the default order would reorder them again at every minibatch.
    """
    g = torch.Generator().manual_seed(0)
    v = torch.randint(0, 256, (5, 6, 4, 7, 7), generator=g, dtype=torch.uint8)
    permuted = v.movedim(2, -1).contiguous().movedim(-1, 2)
    idx = torch.tensor([4, 1, 2])
    for tensor in (v, permuted, v.float().transpose(0, 1)):
        picked = take_columns(tensor, idx)
        assert torch.equal(picked, tensor[:, idx])
    picked = take_columns(permuted, idx).reshape(15, 4, 7, 7)
    assert picked.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("preset", ["ppo_atari", "ppo_minigrid"])
def test_ppo_presets(preset):
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / f"{preset}.yaml")
    assert cfg.learner.name == "ppo"


@pytest.mark.parametrize("core", ["lstm", "rims"])
def test_lock_step_batches_are_on_policy_after_an_update(small_cfg, core):
    """After an update, lock-step batches are on-policy: ratio 1, KL 0.

    The runner acts with the new weights on every row (row 0 included) and the learner evaluates the
    policy in the runner's mode (no dropout).
    """
    from envs.runner import EnvRunner

    cfg = small_cfg(**{"learner.name": "ppo", "learner.minibatches": 2, "learner.unroll_length": 8,
                       "agent.core": core, "agent.core_options": "{}"})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=8)
    learner = Learner(cfg, runner.spec())
    learner.update(runner.rollout(learner.get_weights(), learner.version))
    # weights changed since row 0 was acted on
    traj = runner.rollout(learner.get_weights(), learner.version)
    batch, state = learner.to_batch([traj])
    with torch.no_grad():
        out = learner.forward(batch, state)
    torch.testing.assert_close(out.logits, batch.behaviour_logits, atol=1e-5, rtol=1e-5)
    _, m = ppo_loss(out, add_advantages(batch, cfg.learner), cfg.learner)
    assert float(m["approx_kl"]) < 1e-7 and float(m["clip_frac"]) == 0.0


def test_clipping_below_the_trust_region_with_negative_advantages():
    batch, out = batch_and_output()
    cfg = ppo_cfg(clip_eps=0.1, normalize_advantages=False, entropy_cost=0.0,
                        baseline_cost=0.0)
    # Push the taken actions' probability down a lot: ratio << 1 - eps.
    lowered = out.logits.detach().clone()
    lowered.scatter_add_(-1, batch.action.unsqueeze(-1), torch.full_like(lowered[..., :1], -3.0))
    logits = lowered.requires_grad_()
    loss, m = ppo_loss(AgentOutput(logits, out.value), batch, cfg)
    assert float(m["clip_frac"]) == 1.0
    loss.backward()
    T = batch.advantages.shape[0]
    neg = batch.advantages < 0
    # Negative advantages with r < 1 - eps are clipped: no gradient from them; positive ones
    # still push.
    assert logits.grad[:T][neg].abs().sum() == 0
    assert logits.grad[:T][~neg].abs().sum() > 0


@pytest.mark.parametrize("core", ["lstm", "rims"])
def test_chunked_sequences_give_the_whole_sequence_loss(small_cfg, core):
    """learner.recurrence: chunked sequences reproduce the whole-unroll outputs and loss.

    (env, chunk) sequences re-run from the chunk-start states of one no-grad pass reproduce the
    whole-unroll outputs, so minibatches of chunks add up to the full batch's loss; and the chunks
    are laid out chunk-major with the right rows.
    """
    from envs.runner import EnvRunner
    from learners.algorithms.batch import chunk_sequences

    cfg = small_cfg(**{"learner.name": "ppo", "learner.minibatches": 3,
                       "learner.normalize_advantages": "false",
                       "agent.core": core, "agent.core_options": "{}", "learner.unroll_length": 12,
                       "learner.recurrence": 4})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=12)
    runner.rollout()
    learner = Learner(cfg, runner.spec())
    batch, state = learner.to_batch([runner.rollout(learner.get_weights(), 0)])
    batch.reset[5, 0] = batch.reset[8, 1] = True  # boundaries inside a chunk and at a chunk start
    batch = add_advantages(batch, cfg.learner)
    full, _ = ppo_loss(learner.forward(batch, state), batch, cfg.learner)
    chunks, chunk_state = chunk_sequences(batch, state, 4, learner.agent)
    assert chunks.action.shape == (4, 12) and chunks.advantages.shape == (4, 12)
    # chunk 2 of env 1
    torch.testing.assert_close(chunks.action[:, 2 * 4 + 1], batch.action[8:12, 1])
    whole, _ = ppo_loss(learner.forward(chunks, chunk_state), chunks, cfg.learner)
    torch.testing.assert_close(whole, full, atol=1e-5, rtol=1e-5)
    parts = [ppo_loss(learner.forward(mb, s), mb, cfg.learner)[0]
             for mb, s in minibatches(chunks, chunk_state, 3)]
    torch.testing.assert_close(torch.stack(parts).mean(), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("core", ["lstm", "rims"])
def test_runner_chunk_states_equal_the_learners_pass(small_cfg, core):
    """The runner's recorded chunk-start states are the states the learner's no-grad pass finds.

    The runner records them every state_every = k steps; chunked minibatches from either give the
    whole-unroll loss.
    """
    from envs.runner import EnvRunner
    from learners.algorithms.batch import chunk_sequences

    cfg = small_cfg(**{"learner.name": "ppo", "learner.minibatches": 2, "agent.core": core,
                       "agent.core_options": "{}", "learner.unroll_length": 12,
                       "learner.recurrence": 4})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=12, state_every=4)
    runner.rollout()
    learner = Learner(cfg, runner.spec())
    batch, state = learner.to_batch([runner.rollout(learner.get_weights(), 0)])
    assert batch.chunk_states[0].shape[:2] == (3, 4)  # 3 chunk starts x 4 envs
    batch = add_advantages(batch, cfg.learner)
    stored_chunks, stored = chunk_sequences(batch, state, 4, learner.agent)
    _, passed = chunk_sequences(batch.replace(chunk_states=None), state, 4, learner.agent)
    for a, b in zip(stored, passed):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    full, _ = ppo_loss(learner.forward(batch, state), batch, cfg.learner)
    whole, _ = ppo_loss(learner.forward(stored_chunks, stored), stored_chunks, cfg.learner)
    torch.testing.assert_close(whole, full, atol=1e-5, rtol=1e-5)


def test_recurrence_must_divide_the_unroll_and_fill_the_minibatches():
    from learners.config.schema import ConfigError

    base = ["learner.name=ppo", "runtime.num_runners=2", "runtime.envs_per_runner=4",
            "learner.unroll_length=128"]
    assert load_config(None, base + ["learner.recurrence=32",
                                     "learner.minibatches=4"]).learner.recurrence == 32
    with pytest.raises(ConfigError, match="learner.recurrence=48 must be 0"):
        load_config(None, base + ["learner.recurrence=48"])
    with pytest.raises(ConfigError, match="32 sequences"):
        load_config(None, base + ["learner.recurrence=32", "learner.minibatches=5"])
    with pytest.raises(ConfigError, match="learner.recurrence=256 must be 0"):
        load_config(None, base + ["learner.recurrence=256"])


def test_update_with_recurrence_trains_on_chunks(small_cfg, monkeypatch):
    """``learner.recurrence=4``: every minibatch's forward pass runs over 4-step chunks.

    The 8-step unrolls of 4 envs are cut once per update into 8 chunks of 4 steps.
    """
    from envs.runner import EnvRunner
    from learners.update import learner as learner_module

    cfg = small_cfg(**{"learner.name": "ppo", "learner.minibatches": 4, "learner.epochs": 2,
                       "learner.unroll_length": 8, "learner.recurrence": 4})
    runner = EnvRunner(cfg.env, cfg.agent, envs_per_runner=4, unroll_length=8)
    learner = Learner(cfg, runner.spec())
    chunked, forwards = [], []
    chunk = learner_module.chunk_sequences

    def recording_chunk(batch, state, k, agent):
        out = chunk(batch, state, k, agent)
        chunked.append((k, tuple(out[0].reset.shape)))
        return out

    forward = learner.forward

    def recording_forward(batch, state):
        forwards.append(tuple(batch.reset.shape))
        return forward(batch, state)

    monkeypatch.setattr(learner_module, "chunk_sequences", recording_chunk)
    monkeypatch.setattr(learner, "forward", recording_forward)
    before = {k: v.clone() for k, v in learner.get_weights().items()}
    metrics = learner.update(runner.rollout(learner.get_weights(), 0))
    assert chunked == [(4, (4, 8))], chunked  # 4 steps each, 2 chunks x 4 envs
    # GAE reads the runners' recorded output (lag 0), so every forward pass is a minibatch's:
    # 2 epochs x 4 minibatches of 2 chunks of 4 steps
    assert forwards == [(4, 2)] * 8, forwards
    assert (metrics["epochs_done"] == 2
            and metrics["frames"] == 8 * 4 * runner.spec()["frames_per_step"])
    assert any(not torch.equal(before[k], v) for k, v in learner.get_weights().items())
