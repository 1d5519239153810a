"""lab30: shared spaces, seeded episodes, solvable levels, suites and the score table."""

from __future__ import annotations

import csv
import importlib.resources
import io
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics
from minigrid.core.world_object import Ball
from minigrid.minigrid_env import MiniGridEnv

import envs.lab  # noqa: F401  (registers the mira/Lab30-* ids, the suites and the scores)
from envs import scores
from envs.lab import FAMILIES, LAB6, LAB30, LEVELS, make_level
from envs.lab.experts import Expert
from envs.lab.levels import GYM_ID, make_lab_env
from envs.minigrid import TILE_SIZE
from envs.suites import ENVS, EnvConfig


def _csv(name: str) -> list[dict[str, str]]:
    text = (importlib.resources.files("envs") / "data" / name).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def _rollout(env, seed: int, actions: list[int]):
    obs, _ = env.reset(seed=seed)
    frames, events = [obs], []
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        frames.append(obs)
        events.append((float(reward), terminated, truncated))
        if terminated or truncated:
            break
    return frames, events


def test_table_covers_dmlab30_once_in_six_families():
    dmlab = [row["level"] for row in _csv("dmlab30_random_human.csv")]
    assert len(LAB30) == 30
    assert sorted(level.dmlab for level in LEVELS.values()) == sorted(dmlab)
    assert {level.family for level in LEVELS.values()} == set(FAMILIES)
    assert len(LAB6) == 6 and {LEVELS[name].family for name in LAB6} == set(FAMILIES)


def test_every_level_shares_the_observation_and_action_spaces():
    first = gym.make(GYM_ID.format(LAB30[0]))
    rng = np.random.default_rng(0)
    for name in LAB30:
        env = gym.make(GYM_ID.format(name))
        assert env.observation_space == first.observation_space, name
        assert env.action_space == gym.spaces.Discrete(7), name
        obs, _ = env.reset(seed=0)
        assert obs["pixels"].shape == (3, 56, 56) and obs["pixels"].dtype == np.uint8
        for _ in range(10):
            assert env.observation_space.contains(obs), name
            obs, reward, terminated, truncated, _ = env.step(int(rng.integers(7)))
            if terminated or truncated:
                obs, _ = env.reset()
        has_instruction = bool(obs["instruction"].any())
        assert has_instruction == LEVELS[name].instruction, name  # only language levels speak


@pytest.mark.parametrize("name", LAB30)
def test_seed_reproduces_the_episode(name):
    actions = [int(a) for a in np.random.default_rng(7).integers(7, size=40)]
    env = gym.make(GYM_ID.format(name))
    a_frames, a_events = _rollout(env, 11, actions)
    b_frames, b_events = _rollout(env, 11, actions)
    assert a_events == b_events
    assert len(a_frames) == len(b_frames)
    for a, b in zip(a_frames, b_frames):
        assert (np.array_equal(a["pixels"], b["pixels"])
                and np.array_equal(a["instruction"], b["instruction"]))
    other = [env.reset(seed=s)[0]["pixels"] for s in (1, 2, 3)]
    assert not all(np.array_equal(other[0], o) for o in other[1:]), "the seed changes nothing"


@pytest.mark.parametrize("name", LAB30)
def test_pixels_are_minigrid_own_partial_view(name):
    # mira draws the view itself (envs.minigrid.pov_pixels); it must be minigrid's
    # RGBImgPartialObsWrapper image pixel for pixel, walls behind occluders included: up to
    # 40 expert steps (pickups, doors), then random actions, every observation compared,
    # the episode's last one too; then with an object in the agent's hands.
    env = make_lab_env(name)
    u = env.unwrapped

    def minigrid_view():  # get_pov_render on minigrid's own gen_obs_grid (lab levels replace it)
        grid, visible = MiniGridEnv.gen_obs_grid(u)
        size = u.agent_view_size
        return grid.render(TILE_SIZE, agent_pos=(size // 2, size - 1), agent_dir=3,
                           highlight_mask=visible).transpose(2, 0, 1)

    rng = np.random.default_rng(3)
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        expert = Expert(u, LEVELS[name].solver)
        for t in range(60):
            assert np.array_equal(obs["pixels"], minigrid_view()), (name, seed, t)
            action = expert.act() if t < 40 else int(rng.integers(7))
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                assert np.array_equal(obs["pixels"], minigrid_view()), (name, seed, "end")
                break
    u.carrying = Ball("purple")
    carried = env.pixels()
    assert np.array_equal(carried, minigrid_view()), name
    u.carrying = None
    assert not np.array_equal(env.pixels(), carried), "the carried ball is not drawn"


REFERENCE = {row["level"]: (float(row["reference"]), float(row["random"]))
             for row in _csv("lab30_scores.csv")}


@pytest.mark.parametrize("name", LAB30)
def test_reference_solver_reaches_the_goal(name):
    env = make_level(name)
    for seed in (0, 1):
        env.reset(seed=seed)
        expert = Expert(env, LEVELS[name].solver)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(expert.act())
            total += float(reward)
            done = terminated or truncated
        # Scoring at all is not enough (random play scores on several levels): the solver
        # must make at least half its measured mean and beat random play's mean.
        ref, rnd = REFERENCE[name]
        assert total >= max(0.5 * ref, rnd), (f"{name} seed {seed}: return {total}, "
                                              f"reference mean {ref}")


@pytest.mark.parametrize("suite, levels", [("lab30", LAB30), ("lab6", LAB6)])
def test_suites_build_through_envs(suite, levels):
    spec = ENVS.get(suite)(EnvConfig(suite=suite))
    assert spec.tasks == list(levels) and spec.num_actions == 7 and spec.score_suite == "lab"
    make = pickle.loads(pickle.dumps(spec.make))  # runners receive it through Ray
    env = make(len(levels) - 1, 5)
    assert isinstance(env, RecordEpisodeStatistics)
    done, info = False, {}
    while not done:
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        done = terminated or truncated
    assert "episode" in info


def test_score_table_has_every_level_above_random():
    rows = {row["level"]: row for row in _csv("lab30_scores.csv")}
    assert sorted(rows) == sorted(LAB30)
    for name, row in rows.items():
        assert row["dmlab_level"] == LEVELS[name].dmlab and row["family"] == LEVELS[name].family
        assert float(row["reference"]) > float(row["random"]), name
        assert row["reference_solver"] == LEVELS[name].solver
    name, row = LAB30[0], rows[LAB30[0]]
    assert scores.score_name("lab") == "reference-normalised"
    assert scores.normalized_score("lab", name, float(row["reference"])) == pytest.approx(100.0)
    assert scores.normalized_score("lab", GYM_ID.format(name),
                                   float(row["random"])) == pytest.approx(0.0)


def test_multitask_training_logs_normalised_scores_per_level(small_cfg):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer

    cfg = small_cfg(**{"env.suite": "lab6", "runtime.envs_per_runner": 6, "learner.batch_size": 6,
                       "agent.head": "multiplicative", "run.total_frames": 1500})
    Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    acc = EventAccumulator(cfg.run.dir)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    levels = [t.split("/", 1)[1] for t in tags if t.startswith("episode_normalized_score/")]
    assert levels, tags
    assert "normalized_score_capped_mean" in tags and "normalized_score_mean" in tags
    for level in levels:  # each level's score is its own return against its own table row
        returns = sorted((e.step, scores.normalized_score("lab", level, e.value))
                         for e in acc.Scalars(f"episode_return/{level}"))
        normalised = sorted((e.step, e.value)
                            for e in acc.Scalars(f"episode_normalized_score/{level}"))
        assert [s for s, _ in normalised] == [s for s, _ in returns] != [], level
        assert [v for _, v in normalised] == pytest.approx([v for _, v in returns], abs=1e-4)


@pytest.mark.parametrize("name", LEVELS)
def test_gymnasium_env_checker_passes(name):
    # gymnasium's own checks on the unwrapped level, as its docs recommend (the
    # mission of SelectNonmatchingObject was outside its MissionSpace).
    from gymnasium.utils.env_checker import check_env

    check_env(gym.make(GYM_ID.format(name)).unwrapped, skip_render_check=True)
