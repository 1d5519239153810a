"""EnvRunner at episode ends forced inside its unrolls, on real MiniGrid worlds.

Two 5x5 MiniGrid Empty levels registered here follow a fixed script whatever the agent
samples, so every episode ends at a known step:

- ``goal``: forward, forward, turn right, forward, forward reaches the goal on step 5:
  ``terminated`` with MiniGrid's reward ``1 - 0.9 * 5 / 20 = 0.775`` (``max_steps`` 20);
- ``timeout``: three left turns with ``max_steps`` 3: ``truncated`` on step 3; it pays 0.25 a
  step (not MiniGrid's own: so that mid-episode rewards are echoed in ``last_reward``, and
  the truncating step's reward reaches the final observation's value).

One runner plays both (task 0 and task 1) for two unrolls of 11 steps, so episodes end
mid-unroll, on an unroll's first and last steps, and both levels' episodes run across the
boundary between unrolls, ending at other rows in the second unroll than in the first.
Checked at every row: reward, terminated, truncated, reset, the zeroing of
``last_action``/``last_reward`` on a new episode's first row, the reset observation, the
value of the final observation of a truncated episode (recomputed from the agent), the
episodes reported, and the learner's rewards and discounts read from the trajectory.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch
from minigrid.envs.empty import EmptyEnv

from agents.config import AgentConfig
from envs.runner import EnvRunner
from envs.suites import EnvConfig
from learners.algorithms.batch import Batch
from learners.algorithms.terms import step_targets

LEFT, RIGHT, FORWARD = 0, 1, 2
GOAL_ID, TIMEOUT_ID = "MiniGrid-ScriptedGoal-5x5-v0", "MiniGrid-ScriptedTimeout-5x5-v0"
GOAL_STEPS, TIMEOUT_STEPS, GOAL_MAX_STEPS = 5, 3, 20
GOAL_REWARD = np.float32(1 - 0.9 * GOAL_STEPS / GOAL_MAX_STEPS)
TIMEOUT_REWARD = 0.25  # per step
T = 11
AGENT = AgentConfig(core_options={"hidden_size": 16}, torso_options={"hidden_size": 16})


class ScriptedEmpty(EmptyEnv):
    """MiniGrid Empty 5x5 stepping through ``script`` whatever action it is given.

    Every step pays ``step_reward`` on top of MiniGrid's reward.
    """

    def __init__(self, script, max_steps, step_reward=0.0, **kwargs):
        super().__init__(size=5, max_steps=max_steps, **kwargs)
        self.script = script
        self.step_reward = step_reward

    def step(self, action):
        """One step of the script (the agent's ``action`` is ignored)."""
        obs, reward, terminated, truncated, info = super().step(
            self.script[self.step_count % len(self.script)])
        return obs, reward + self.step_reward, terminated, truncated, info


for _id, _kwargs in (
        (GOAL_ID, dict(script=[FORWARD, FORWARD, RIGHT, FORWARD, FORWARD],
                       max_steps=GOAL_MAX_STEPS)),
        (TIMEOUT_ID, dict(script=[LEFT, LEFT, LEFT], max_steps=TIMEOUT_STEPS,
                          step_reward=TIMEOUT_REWARD))):
    if _id not in gym.registry:
        gym.register(_id, entry_point=ScriptedEmpty, kwargs=_kwargs)


def expected_flags(ends: list[int], steps: int) -> np.ndarray:
    """[steps] bool: True at the buffer rows (step - 1) where an episode ends."""
    flags = np.zeros(steps, bool)
    flags[[e for e in ends if e < steps]] = True
    return flags


@pytest.fixture(scope="module")
def played():
    """The runner and its two consecutive unrolls."""
    torch.manual_seed(0)
    runner = EnvRunner(EnvConfig(levels=[GOAL_ID, TIMEOUT_ID]), AGENT, envs_per_runner=2,
                       unroll_length=T, seed=4)
    assert runner.tasks == [0, 1]
    return runner, [runner.rollout(), runner.rollout()]


# Rows (of the buffer, step t stored at t - 1) where episodes end, per unroll:
# goal: rows 4, 9 of unroll 1; the third episode takes rows 10 of unroll 1 and 0..3 of unroll 2.
GOAL_ENDS = ([4, 9], [3, 8])
# timeout: rows 2, 5, 8; the fourth episode takes rows 9, 10 and ends on unroll 2's row 0.
TIMEOUT_ENDS = ([2, 5, 8], [0, 3, 6, 9])


@pytest.mark.parametrize("unroll", [0, 1])
def test_rewards_and_end_flags(played, unroll):
    _, trajs = played
    tr = trajs[unroll]
    goal_end = expected_flags(GOAL_ENDS[unroll], T)
    timeout_end = expected_flags(TIMEOUT_ENDS[unroll], T)
    np.testing.assert_array_equal(tr.terminated[:T, 0], goal_end)
    np.testing.assert_array_equal(tr.truncated[:T, 0], np.zeros(T, bool))
    np.testing.assert_array_equal(tr.reward[:T, 0], np.where(goal_end, GOAL_REWARD, 0.0))
    np.testing.assert_array_equal(tr.terminated[:T, 1], np.zeros(T, bool))
    np.testing.assert_array_equal(tr.truncated[:T, 1], timeout_end)
    np.testing.assert_array_equal(tr.reward[:T, 1], np.full(T, TIMEOUT_REWARD, np.float32))


@pytest.mark.parametrize("unroll", [0, 1])
def test_resets_and_the_zeroed_last_action_and_reward(played, unroll):
    _, trajs = played
    tr = trajs[unroll]
    done = tr.terminated[:T] | tr.truncated[:T]
    np.testing.assert_array_equal(tr.reset[1:], done)
    # Row 0: the very first row starts both episodes; in unroll 2 it is unroll 1's row T,
    # inside an episode of each level.
    np.testing.assert_array_equal(tr.reset[0], [True, True] if unroll == 0 else [False, False])
    for t in range(1, T + 1):
        for b in range(2):
            if tr.reset[t, b]:
                assert tr.last_action[t, b] == 0 and tr.last_reward[t, b] == 0.0, (t, b)
            else:
                assert tr.last_action[t, b] == tr.action[t - 1, b], (t, b)
                assert tr.last_reward[t, b] == tr.reward[t - 1, b], (t, b)
    # The goal's reward is not carried into the next episode's first row; the timeout's
    # rewards are echoed inside an episode and dropped at its end.
    if unroll == 0:
        assert tr.reward[4, 0] == GOAL_REWARD and tr.last_reward[5, 0] == 0.0
    np.testing.assert_array_equal(tr.last_reward[1:, 1],
                                  np.where(tr.reset[1:, 1], 0.0, TIMEOUT_REWARD))


def test_evaluation_leaves_every_env_restarted_with_no_previous_action_or_reward():
    # When the goal level's counted episode ends (step 5), the timeout level is inside its
    # second episode, its row holding the step's reward; the restart after the evaluation
    # (the training stream's next row) and the next evaluation's start are reset rows.
    runner = EnvRunner(EnvConfig(levels=[GOAL_ID, TIMEOUT_ID]), AGENT, envs_per_runner=2,
                       unroll_length=T, seed=4)
    assert runner.run_episodes(1) == [(1, 3 * TIMEOUT_REWARD, 3), (0, GOAL_REWARD, 5)]
    rows = runner.step_inputs(0)
    assert rows["reset"].all(), rows["reset"]
    assert not rows["last_action"].any() and not rows["last_reward"].any(), rows


def test_a_new_episode_starts_from_the_reset_observation(played):
    runner, (first, second) = played
    start = {k: v[0] for k, v in first.obs.items()}
    for tr, rows in ((first, (5, 10)), (second, (4, 9))):
        for t in rows:
            for k in start:
                np.testing.assert_array_equal(tr.obs[k][t, 0], start[k][0], err_msg=f"{k} {t}")
    # Mid-episode the view differs (the agent has moved): the rows are not all the same.
    assert not np.array_equal(first.obs["pixels"][4, 0], start["pixels"][0])


def final_observation(runner) -> dict:
    """The timeout level's last observation before its reset (the same in every episode)."""
    env = runner.suite.make(1, 123)
    env.reset(seed=123)
    for _ in range(TIMEOUT_STEPS):
        obs, _, _, truncated, _ = env.step(LEFT)
    assert truncated
    return obs


def test_truncation_records_the_value_of_the_final_observation(played):
    runner, trajs = played
    final = final_observation(runner)
    for tr, ends in zip(trajs, TIMEOUT_ENDS):
        np.testing.assert_array_equal(tr.final_value[:T, 0], 0.0)  # the goal never truncates
        rows = np.flatnonzero(tr.final_value[:T, 1])
        np.testing.assert_array_equal(rows, ends)
        state = tuple(torch.from_numpy(s[1:2]) for s in tr.initial_state)
        for t in ends:
            # The core state after row t: the agent run over rows 0..t of env 1.
            inputs = {k: torch.from_numpy(v[: t + 1, 1:2]) for k, v in tr.obs.items()}
            for k in ("last_action", "last_reward", "reset", "task_id"):
                inputs[k] = torch.from_numpy(getattr(tr, k)[: t + 1, 1:2])
            with torch.no_grad():
                _, after = runner.agent(inputs, state)
                step = {k: torch.from_numpy(v[None, None]) for k, v in final.items()}
                step.update(last_action=torch.tensor([[tr.action[t, 1]]]),
                            last_reward=torch.tensor([[tr.reward[t, 1]]]),
                            reset=torch.tensor([[False]]), task_id=torch.tensor([[1]]))
                out, _ = runner.agent(step, after)
            np.testing.assert_allclose(tr.final_value[t, 1], out.value[0, 0].item(), atol=1e-5)
            # Not the value of the next episode's first observation, which follows in row t + 1.
            assert abs(tr.final_value[t, 1] - tr.behaviour_value[t + 1, 1]) > 1e-6


def test_the_episodes_reported(played):
    _, (first, second) = played
    goal = (0, pytest.approx(float(GOAL_REWARD)), GOAL_STEPS)
    timeout = (1, pytest.approx(TIMEOUT_STEPS * TIMEOUT_REWARD), TIMEOUT_STEPS)
    assert sorted(first.episodes) == [goal, goal] + [timeout] * 3
    # The episodes that began in the first unroll are reported once, whole, in the second.
    assert sorted(second.episodes) == [goal] * 2 + [timeout] * 4


def test_the_learner_reads_rewards_and_discounts_from_the_trajectory(played):
    _, (tr, _) = played
    batch = Batch(obs={k: torch.from_numpy(v) for k, v in tr.obs.items()},
                  **{f: torch.from_numpy(getattr(tr, f)) for f in tr.STEP_FIELDS})
    gamma = 0.9
    rewards, discounts = step_targets(batch, gamma, "none")
    want_discount = np.full((T, 2), gamma, np.float32)
    want_discount[GOAL_ENDS[0], 0] = 0.0
    want_discount[TIMEOUT_ENDS[0], 1] = 0.0
    np.testing.assert_allclose(discounts.numpy(), want_discount)
    want_reward = tr.reward[:T].copy()
    want_reward[TIMEOUT_ENDS[0], 1] += gamma * tr.final_value[TIMEOUT_ENDS[0], 1]
    np.testing.assert_allclose(rewards.numpy(), want_reward, rtol=1e-6)
