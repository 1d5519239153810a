"""Atari's two backends, ale-py's vector env (default) and gymnasium's wrappers.

They are compared step for step; the runner, evaluation and video run on the vector env.
"""

import numpy as np
import pytest

from agents.config import AgentConfig
from envs.atari import AleVectorBatch, make_atari
from envs.batch import GymBatch
from envs.runner import EnvRunner
from envs.suites import EnvConfig, build_suite

AGENT = AgentConfig(core_options={"hidden_size": 16}, torso_options={"hidden_size": 16})


def both_backends(game, B=2, **kw):
    """The same ``B`` envs on each backend, without no-op starts (the one random part of dqn)."""
    gym_batch = GymBatch([make_atari(game, "dqn", noop_max=0, **kw) for _ in range(B)])
    vector = AleVectorBatch([game], [0] * B, list(range(B)), "dqn", noop_max=0, **kw)
    return gym_batch, vector


def test_backends_match_step_for_step():
    # No no-ops and no sticky actions: both emulate the same game and preprocess it the same
    # way (max-pool, gray, INTER_AREA resize, stack padded with the first frame), so every
    # observation, reward, episode end, final observation and whole-game return is equal.
    g, v = both_backends("Breakout", max_episode_frames=640)  # a cap at 160 agent steps
    np.testing.assert_array_equal(g.reset()["pixels"], v.reset()["pixels"])
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(700):
        a = rng.integers(0, 4, size=2)
        sg, sv = g.step(a), v.step(a)
        assert sv.obs["pixels"].shape == (2, 4, 84, 84) and sv.obs["pixels"].dtype == np.uint8
        np.testing.assert_array_equal(sg.obs["pixels"], sv.obs["pixels"])
        np.testing.assert_array_equal(sg.reward, sv.reward)
        np.testing.assert_array_equal(sg.terminated, sv.terminated)
        np.testing.assert_array_equal(sg.truncated, sv.truncated)
        assert sg.episodes == sv.episodes and sg.final_obs.keys() == sv.final_obs.keys()
        for i in sg.final_obs:
            np.testing.assert_array_equal(sg.final_obs[i]["pixels"], sv.final_obs[i]["pixels"])
        ends["terminated"] += int(sv.terminated.sum())
        ends["truncated"] += int(sv.truncated.sum())
    assert ends["terminated"] and ends["truncated"], ends  # both kinds of end were compared


def test_episodic_life_ends_the_learning_episode_not_the_game():
    # The same seeds and actions with and without episodic life play the same games: the
    # same rewards and whole-game returns; only `terminated` also marks each life lost.
    game = dict(games=["Breakout"], tasks=[0, 0], seeds=[3, 4], protocol="dqn")
    plain, life = AleVectorBatch(**game), AleVectorBatch(**game, episodic_life=True)
    np.testing.assert_array_equal(plain.reset()["pixels"], life.reset()["pixels"])
    rng = np.random.default_rng(1)
    sums, lost, games = np.zeros(2), 0, []
    for _ in range(600):
        a = rng.integers(0, 4, size=2)
        sp, sl = plain.step(a), life.step(a)
        np.testing.assert_array_equal(sp.reward, sl.reward)
        assert sp.episodes == sl.episodes
        assert (sl.terminated >= sp.terminated).all() and not sl.truncated.any()
        lost += int((sl.terminated & ~sp.terminated).sum())
        sums += sl.reward
        for i, ret, _ in sl.episodes:
            assert ret == sums[i]  # the whole game's raw rewards, across its lives
            sums[i] = 0.0
            games.append(ret)
    assert games and lost >= 4 * len(games)  # Breakout: 5 lives a game


def test_first_life_loss_is_signalled_by_both_backends_on_the_same_step():
    # After it they differ: gymnasium's EpisodicLife plays a hidden no-op step, the vector
    # backend goes on from the agent's next action.
    g, v = both_backends("Breakout", episodic_life=True)
    g.reset(), v.reset()
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = rng.integers(0, 4, size=2)
        sg, sv = g.step(a), v.step(a)
        np.testing.assert_array_equal(sg.terminated, sv.terminated)
        if sv.terminated.any():
            break
    assert sv.terminated.any()


@pytest.mark.parametrize("protocol,actions", [("dqn", 6), ("machado", 18)])
def test_protocols_set_the_action_set_and_both_backends_agree(protocol, actions):
    cfg = EnvConfig(suite="atari", game="Pong", protocol=protocol)
    suite = build_suite(cfg)
    assert suite.num_actions == actions and suite.make_batch is not None
    batch = suite.make_batch([0, 0], [0, 1])
    (_, vec), = batch.groups
    assert vec.single_action_space.n == actions
    assert batch.reset()["pixels"].shape == (2, 4, 84, 84)
    gym_suite = build_suite(EnvConfig(suite="atari", game="Pong", protocol=protocol,
                                      backend="gymnasium"))
    assert gym_suite.make_batch is None and gym_suite.num_actions == actions


def test_unknown_backend_is_a_one_line_error():
    from learners.config.schema import ConfigError, load_config

    with pytest.raises(ConfigError, match="env.backend must be one of ale_vector, gymnasium"):
        load_config("configs/impala_atari.yaml", ["env.backend=envpool"])
    with pytest.raises(ValueError, match="env.backend must be one of"):
        build_suite(EnvConfig(suite="atari", backend="envpool"))


def atari_runner(T=30, B=2, **env):
    return EnvRunner(EnvConfig(suite="atari", **env), AGENT, envs_per_runner=B, unroll_length=T)


def test_runner_on_the_vector_env_truncates_and_bootstraps():
    # 80 frames: every game is cut after 20 agent steps.
    r = atari_runner(T=30, B=3, game="Pong", max_episode_frames=80)
    assert r.batch.__class__ is AleVectorBatch
    tr = r.rollout()
    assert tr.obs["pixels"].shape == (31, 3, 4, 84, 84) and tr.action.shape == (31, 3)
    assert tr.behaviour_logits.shape == (31, 3, 6)
    np.testing.assert_array_equal(tr.truncated[19], [True] * 3)
    assert not tr.terminated.any() and tr.truncated.sum() == 3
    np.testing.assert_array_equal(tr.reset[1:], tr.truncated[:30] | tr.terminated[:30])
    assert (tr.final_value[tr.truncated] != 0).all() and (tr.final_value[~tr.truncated] == 0).all()
    assert [length for _, _, length in tr.episodes] == [20, 20, 20]
    # The row after a cut is the next game's first observation, its stack one frame repeated.
    first = tr.obs["pixels"][20]
    assert (first == first[:, -1:]).all()


def test_runner_episodic_life_resets_the_core_but_reports_whole_games():
    r = atari_runner(T=400, B=2, game="Breakout", episodic_life=True)
    tr = r.rollout()
    assert tr.terminated.sum() > len(tr.episodes) >= 1
    np.testing.assert_array_equal(tr.reset[1:], tr.terminated[:400])
    for _, ret, length in tr.episodes:
        assert length > 100 and ret >= 0  # five lives of random play, not one


def test_same_seed_same_experience_on_the_vector_env():
    # dqn's no-op starts and machado's sticky actions both draw from seeded generators.
    for protocol in ("dqn", "machado"):
        a, b, c = (EnvRunner(EnvConfig(suite="atari", game="Pong", protocol=protocol), AGENT,
                             envs_per_runner=2, unroll_length=40, seed=seed)
                   for seed in (7, 7, 8))
        weights = {k: v.clone() for k, v in a.agent.state_dict().items()}
        ta, tb, tc = (r.rollout(weights, 0) for r in (a, b, c))
        np.testing.assert_array_equal(ta.action, tb.action)
        np.testing.assert_array_equal(ta.obs["pixels"], tb.obs["pixels"])
        # another seed, other experience: the runner does use its seed
        assert not np.array_equal(ta.action, tc.action)
        if protocol == "dqn":  # its no-op starts differ by seed, so the screens do
            assert not np.array_equal(ta.obs["pixels"], tc.obs["pixels"])


def test_multitask_runner_steps_one_vector_env_per_game():
    r = atari_runner(T=4, B=4, games=["Pong", "Breakout"])
    assert [idx.tolist() for idx, _ in r.batch.groups] == [[0, 2], [1, 3]]
    tr = r.rollout()
    np.testing.assert_array_equal(tr.task_id[0], [0, 1, 0, 1])
    assert tr.behaviour_logits.shape[-1] == 18
    # Each env shows its own game: Pong's and Breakout's first frames differ.
    assert not np.array_equal(tr.obs["pixels"][0, 0], tr.obs["pixels"][0, 1])


def test_evaluation_and_video_on_the_vector_backend(tmp_path):
    from envs.video import record

    r = atari_runner(T=1, B=2, game="Pong", max_episode_frames=40)
    episodes = r.run_episodes([2, 1], r.agent.state_dict())
    assert sorted(length for _, _, length in episodes) == [10, 10, 10]
    # Video needs full-colour screens: recorded on the gymnasium backend, same agent.
    paths = record(r, r.agent.state_dict(), 1, tmp_path, "Pong", 15)
    assert len(paths) == 1 and "steps10" in paths[0].name and paths[0].stat().st_size > 0


def test_bench_runner_core_estimate():
    from scripts.bench.command import gpu_estimate

    # 1 ms env + 1 ms inference: 500 steps/s a core; 64 cores would collect 32,000 > 10,000.
    per_core, rates = gpu_estimate(1000.0, 1000.0, 10_000.0)
    assert per_core == pytest.approx(500.0) and rates == {16: 8000.0, 64: 10_000.0}
