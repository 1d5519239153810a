"""EnvRunner: the Trajectory layout the learner relies on."""

import numpy as np
import torch

from agents.config import AgentConfig
from agents.steps import AGENT_INPUTS, STEP_FIELDS
from envs.runner import EnvRunner, assign_tasks
from envs.suites import EnvConfig

AGENT = AgentConfig(core_options={"hidden_size": 16}, torso_options={"hidden_size": 16})


def runner(level="MiniGrid-Empty-5x5-v0", T=6, B=3, **kw):
    return EnvRunner(EnvConfig(level=level), AGENT, envs_per_runner=B, unroll_length=T, **kw)


def test_unrolls_tile_the_stream():
    r = runner()
    a, b = r.rollout(), r.rollout()
    assert a.reset.shape == (7, 3) and a.obs["pixels"].shape == (7, 3, 3, 56, 56)
    for k in a.obs:
        np.testing.assert_array_equal(a.obs[k][-1], b.obs[k][0])
    # Row T's inputs and actions are b's row 0; what follows row T's action (the env-written
    # fields and the final value) is written in b.
    carried = [f.name for f in STEP_FIELDS if f.agent_input or f.writer == "act"]
    assert {"action", "last_action", "last_reward", "reset", "behaviour_logits"} <= set(carried)
    for f in carried:
        np.testing.assert_array_equal(getattr(a, f)[-1], getattr(b, f)[0])
    # b's initial state is the state before its row 0 = before a's row T.
    out = r.agent(
        {**{k: torch.from_numpy(v) for k, v in a.obs.items()},
         **{k: torch.from_numpy(getattr(a, k)) for k in AGENT_INPUTS}},
        tuple(torch.from_numpy(s) for s in a.initial_state),
    )[0]
    np.testing.assert_allclose(out.logits[-1].detach().numpy(), b.behaviour_logits[0], atol=1e-5)


def test_step_fields_are_consistent():
    r = runner(T=40)
    tr = r.rollout()
    T = tr.unroll_length
    done = tr.terminated[:T] | tr.truncated[:T]
    np.testing.assert_array_equal(tr.reset[1:], done)
    # last_action/last_reward echo the previous step unless a new episode starts.
    keep = ~tr.reset[1:]
    np.testing.assert_array_equal(tr.last_action[1:][keep], tr.action[:T][keep])
    np.testing.assert_array_equal(tr.last_reward[1:][keep], tr.reward[:T][keep])
    assert (tr.last_action[1:][~keep] == 0).all() and (tr.last_reward[1:][~keep] == 0).all()


def test_truncation_records_the_final_value():
    # Empty-5x5 truncates after 100 steps; a random policy rarely finishes first.
    r = runner(T=110, B=4, seed=3)
    tr = r.rollout()
    assert tr.truncated.any(), "expected a time-limit truncation"
    assert (tr.final_value[tr.truncated] != 0).all()
    assert (tr.final_value[~tr.truncated] == 0).all()
    assert not (tr.terminated & tr.truncated).any()
    assert tr.episodes and all(length <= 100 for _, _, length in tr.episodes)


def test_weights_and_version():
    r = runner()
    w = {k: torch.zeros_like(v) for k, v in r.agent.state_dict().items()}
    tr = r.rollout(w, 7)
    assert tr.policy_version == 7
    # Every row, row 0 included, is acted on with the new weights: zero weights give
    # uniform logits.
    np.testing.assert_allclose(tr.behaviour_logits, 0.0)


def test_same_seed_same_experience():
    a, b = runner(seed=5), runner(seed=5)
    # Through rollout(weights): row 0 was acted on in the constructor with each runner's own
    # random init, and only new weights make a runner act on it again (loading the state dict
    # alone left row 0's action to chance: it failed whenever the global RNG gave b other weights).
    weights = {k: v.clone() for k, v in a.agent.state_dict().items()}
    ta, tb = a.rollout(weights, 0), b.rollout(weights, 0)
    np.testing.assert_array_equal(ta.behaviour_logits, tb.behaviour_logits)
    np.testing.assert_array_equal(ta.action, tb.action)
    np.testing.assert_array_equal(ta.obs["pixels"], tb.obs["pixels"])


def test_task_assignment():
    assert assign_tasks(3, 6, 2, 3) == [0, 0]
    assert assign_tasks(0, 1, 4, 3) == [0, 1, 2, 0]
    assert assign_tasks(5, 10, 2, 2, runners_per_task=5) == [1, 1]
    r = EnvRunner(EnvConfig(levels=["MiniGrid-Empty-5x5-v0", "BabyAI-GoToRedBall-v0"]), AGENT,
                  envs_per_runner=2, unroll_length=2)
    tr = r.rollout()
    np.testing.assert_array_equal(tr.task_id[0], [0, 1])


def test_multitask_atari_shares_the_full_action_set():
    from envs.suites import build_suite

    suite = build_suite(EnvConfig(suite="atari", games=["Pong", "Breakout"]))
    assert (suite.tasks == ["Pong", "Breakout"] and suite.num_actions == 18
            and suite.frames_per_step == 4)
    env = suite.make(1, 0)
    assert env.action_space.n == 18 and env.observation_space["pixels"].shape == (4, 84, 84)
    r = EnvRunner(EnvConfig(suite="atari", games=["Pong", "Breakout"]), AGENT, envs_per_runner=2,
                  unroll_length=3)
    tr = r.rollout()
    np.testing.assert_array_equal(tr.task_id[0], [0, 1])
    assert tr.behaviour_logits.shape[-1] == 18
