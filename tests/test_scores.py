"""envs/scores.py: reference tables, tolerant names, normalisation, suite registry."""

from __future__ import annotations

import itertools

import pytest

from envs import scores

_fresh = (f"test-suite-{i}" for i in itertools.count())


def test_all_57_atari_games_present():
    assert len(scores.ATARI57) == 57
    for game in ("Alien", "Breakout", "MontezumaRevenge", "Pong", "PrivateEye", "Zaxxon"):
        assert game in scores.ATARI57
    assert all(random < human for random, human in scores.ATARI57.values())


def test_table_values_match_csv_rows():
    assert scores.ATARI57["Pong"] == (-20.7, 14.6)
    assert scores.ATARI57["Breakout"] == (1.7, 30.5)
    assert scores.ATARI57["Skiing"] == (-17098.1, -4336.9)
    # The documented discrepancy: Nature-DQN random score, not Agent57's 0.0.
    assert scores.ATARI57["VideoPinball"] == (16256.9, 17667.9)


def test_dmlab30_table():
    assert len(scores.DMLAB30) == 30
    assert scores.DMLAB30["rooms_watermaze"] == (4.065, 54.0)


@pytest.mark.parametrize(
    "game, score, expected",
    [
        ("Pong", 14.6, 100.0),
        ("Pong", -20.7, 0.0),
        ("Pong", -3.05, 50.0),  # midway between -20.7 and 14.6
        ("Breakout", 30.5, 100.0),
        ("Breakout", 1.7, 0.0),
        ("Breakout", 59.3, 200.0),  # 1.7 + 2 * 28.8
        ("MontezumaRevenge", 475.33, 10.0),
        ("Skiing", -4336.9, 100.0),  # negative scores: higher is still better
        ("VideoPinball", 16256.9 - 1411.0, -100.0),
    ],
)
def test_human_normalized_hand_values(game, score, expected):
    assert scores.human_normalized(game, score) == pytest.approx(expected)


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("Pong", "Pong"),
        ("ALE/Pong-v5", "Pong"),
        ("pong", "Pong"),
        ("PONG", "Pong"),
        ("PongNoFrameskip-v4", "Pong"),
        ("private_eye", "PrivateEye"),
        ("ALE/PrivateEye-v5", "PrivateEye"),
        ("montezuma_revenge", "MontezumaRevenge"),
        ("up_n_down", "UpNDown"),
        ("BreakoutDeterministic-v4", "Breakout"),
    ],
)
def test_tolerant_names(name, canonical):
    assert scores.canonical_task("atari", name) == canonical
    low, _ = scores.ATARI57[canonical]
    assert scores.human_normalized(name, low) == 0.0


def test_unknown_game_lists_valid_names():
    with pytest.raises(KeyError) as err:
        scores.human_normalized("Pongg", 1.0)
    message = str(err.value)
    assert "Pongg" in message
    assert all(game in message for game in scores.ATARI57)


def test_unknown_suite_lists_registered_suites():
    with pytest.raises(KeyError, match="atari.*dmlab30"):
        scores.normalized_score("nosuch", "Pong", 1.0)


def test_dmlab_train_level_scored_against_test_row():
    low, high = scores.DMLAB30["rooms_collect_good_objects_test"]
    assert scores.normalized_score("dmlab30", "rooms_collect_good_objects_train", high) == 100.0
    assert scores.normalized_score("dmlab30", "rooms_collect_good_objects_test", low) == 0.0


def test_normalized_and_capped():
    assert scores.normalized(5.0, 0.0, 10.0) == 50.0
    assert scores.normalized(-10.0, -10.0, 10.0) == 0.0
    assert scores.normalized(30.0, 10.0, 20.0) == 200.0
    with pytest.raises(ValueError):
        scores.normalized(1.0, 2.0, 2.0)
    from envs.statistics import capped_mean

    # the cap applies per task score
    assert capped_mean([[150.0, 42.0, -5.0]]) == (100.0 + 42.0 - 5.0) / 3
    assert capped_mean([[7.0]], cap=5.0) == 5.0


def test_score_names():
    assert scores.has_reference_scores("atari") and not scores.has_reference_scores("none")
    assert scores.score_name("atari") == "human-normalised"
    assert scores.score_name("dmlab30") == "human-normalised"


def test_register_a_new_suite():
    suite = next(_fresh)
    scores.register_reference_scores(suite, {"MiniGrid-DoorKey-5x5-v0": (0.0, 0.96)})
    assert scores.score_name(suite) == "reference-normalised"
    assert scores.normalized_score(suite, "MiniGrid-DoorKey-5x5-v0", 0.48) == pytest.approx(50.0)
    assert scores.normalized_score(suite, "minigrid_doorkey_5x5", 0.96) == pytest.approx(100.0)
    with pytest.raises(KeyError, match="MiniGrid-DoorKey-5x5-v0"):
        scores.normalized_score(suite, "MiniGrid-Empty-5x5-v0", 0.5)
    with pytest.raises(ValueError, match="twice"):
        scores.register_reference_scores(suite, {"a": (0.0, 1.0)})


def test_register_refuses_bad_tables():
    with pytest.raises(ValueError, match="same name"):
        scores.register_reference_scores(next(_fresh), {"Door-v0": (0, 1), "door-v1": (0, 2)})
    with pytest.raises(ValueError, match="random == reference"):
        scores.register_reference_scores(next(_fresh), {"flat": (1.0, 1.0)})
    with pytest.raises(ValueError, match="unknown task"):
        scores.register_reference_scores(next(_fresh), {"a": (0, 1)}, aliases={"b": "c"})
