"""The step fields of agents/steps.py: the runner, Trajectory, Batch and Agent follow them."""

import dataclasses

import numpy as np
import pytest
import torch

from agents.agent import Agent
from agents.config import AgentConfig
from agents.steps import (
    AGENT_INPUTS,
    STATE_FIELDS,
    STEP_FIELDS,
    STEP_NAMES,
    fields_by,
    with_step_fields,
)
from envs.batch import BatchStep
from envs.runner import EnvRunner
from envs.suites import EnvConfig
from envs.trajectory import Trajectory
from learners.algorithms.batch import Batch

AGENT = AgentConfig(core_options={"hidden_size": 16}, torso_options={"hidden_size": 16})
T, B = 8, 2


@pytest.fixture(scope="module")
def runner():
    return EnvRunner(EnvConfig(levels=["MiniGrid-Empty-5x5-v0", "BabyAI-GoToRedBall-v0"]),
                     AGENT, envs_per_runner=B, unroll_length=T, state_every=4)


class Recording(dict):
    """The inputs, remembering which keys the agent reads."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)


@pytest.mark.parametrize("head", ["linear", "multi_head"])
def test_the_agent_reads_the_declared_inputs(runner, head):
    cfg = dataclasses.replace(AGENT, head=head)
    agent = Agent(cfg, runner.obs_shapes, runner.suite.num_actions, 2, runner.obs_vocab,
                  popart=head == "multi_head")
    inputs = Recording(runner.step_inputs(0))
    agent(inputs, agent.initial_state(B))
    read = inputs.read - set(runner.obs)
    if agent.reads_task_id or agent.value_output is not None:
        assert read == set(AGENT_INPUTS)
    else:
        assert read == set(AGENT_INPUTS) - {"task_id"}
    assert inputs.read >= set(runner.obs)


def test_buffers_and_trajectory_have_the_declared_shapes_and_dtypes(runner):
    tr = runner.rollout()
    A = runner.suite.num_actions
    for f in STEP_FIELDS:
        for arr in (runner.buf[f.name], getattr(tr, f.name)):
            assert arr.shape == f.sized(T1=T + 1, B=B, A=A), f.name
            assert arr.dtype == np.dtype(f.dtype), f.name
    for k, space in runner.batch.observation_space.items():
        assert tr.obs[k].shape == (T + 1, B, *space.shape) and tr.obs[k].dtype == space.dtype
    assert tr.chunk_states[0].shape[:2] == (T // 4, B) and tr.initial_state[0].shape[0] == B


def test_the_containers_take_their_fields_from_the_declaration():
    names = [f.name for f in dataclasses.fields(Trajectory)]
    assert names[: len(STEP_NAMES) + 3] == ["obs", *STEP_NAMES, *(s.name for s in STATE_FIELDS)]
    assert Trajectory.STEP_FIELDS == STEP_NAMES
    batch_names = [f.name for f in dataclasses.fields(Batch)]
    assert batch_names[: len(STEP_NAMES) + 2] == ["obs", *STEP_NAMES, "chunk_states"]
    # What the env writes, its step returns under the same name.
    step_fields = {f.name for f in dataclasses.fields(BatchStep)}
    assert {f.name for f in fields_by("env")} <= step_fields


def test_batch_inputs_are_the_observations_and_the_agent_inputs(runner):
    tr = runner.rollout()
    batch = Batch(obs={k: torch.from_numpy(v) for k, v in tr.obs.items()},
                  **{f: torch.from_numpy(getattr(tr, f)) for f in STEP_NAMES})
    assert list(batch.inputs()) == [*tr.obs, *AGENT_INPUTS]
    assert batch.chunk_states is None


def test_a_container_may_not_redeclare_a_step_field():
    with pytest.raises(TypeError, match="reward"):
        @with_step_fields("np.ndarray")
        class Twice:
            obs: dict
            reward: int


def test_concat_joins_every_field_on_its_batch_axis(runner):
    a, b = runner.rollout(), runner.rollout()
    joined = Trajectory.concat([a, b])
    for f in STEP_NAMES:
        np.testing.assert_array_equal(getattr(joined, f),
                                      np.concatenate([getattr(a, f), getattr(b, f)], 1))
    for k in a.obs:
        np.testing.assert_array_equal(joined.obs[k], np.concatenate([a.obs[k], b.obs[k]], 1))
    for x, y, z in zip(joined.initial_state, a.initial_state, b.initial_state):
        np.testing.assert_array_equal(x, np.concatenate([y, z], 0))
    for x, y, z in zip(joined.chunk_states, a.chunk_states, b.chunk_states):
        np.testing.assert_array_equal(x, np.concatenate([y, z], 1))
    assert joined.batch_size == 2 * B and joined.unroll_length == T
