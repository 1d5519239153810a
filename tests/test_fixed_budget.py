"""scripts/papers/fixed_budget.py: rule 2 of the torso fixes, read from a compare's rows."""

import statistics
from pathlib import Path

import pytest

from scripts.papers import fixed_budget as fb

ROOT = Path(__file__).resolve().parents[1]
HEADER = "variant,game,seed,status,frames,final_return,wall_time_s\n"


def study(tmp_path, games=("Pong", "Breakout"), seeds=(3, 4, 5)) -> Path:
    """A compare file shaped as the budget study: games x {none, running} x seeds."""
    path = tmp_path / "study.yaml"
    path.write_text(
        f"name: budget\nbase: {ROOT / 'configs/impala_atari.yaml'}\n"
        "overrides:\n  run.total_frames: 5.0e+6\n"
        f"matrix:\n  env.game: [{', '.join(games)}]\n"
        "variants:\n  - {agent.torso_options.input_norm: none}\n"
        "  - {agent.torso_options.input_norm: running}\n"
        f"seeds: [{', '.join(map(str, seeds))}]\n"
        f"csv:\n  path: {tmp_path / 'rows.csv'}\n"
        "  columns: {variant: variant, game: env.game, seed: seed, status: status,\n"
        "            frames: frames, final_return: train_return}\n")
    return path


def rows(tmp_path, table, frames=5001216, extra=""):
    """``table``: {(arm label, game, seed): return or None (unfinished)} -> the study's rows."""
    lines = [f"input-norm-{arm}_game-{game},{game},{seed},"
             f"{'finished' if r is not None else 'unfinished'},{frames},"
             f"{'' if r is None else r},100.0\n" for (arm, game, seed), r in table.items()]
    (tmp_path / "rows.csv").write_text(HEADER + "".join(lines) + extra)


def arms(game, none, running, seeds=(3, 4, 5)):
    return {**{("none", game, s): r for s, r in zip(seeds, none)},
            **{("running", game, s): r for s, r in zip(seeds, running)}}


PAIRED = ["--paired", "input-norm-none", "input-norm-running"]


def test_the_rule_against_its_words_by_hand(tmp_path, capsys):
    shipped, fix = [10.0, 14.0, 18.0], [12.0, 11.0, 16.0]
    # Breakout: the fix's mean is fine but one seed is below the shipped lowest
    rows(tmp_path, {**arms("Pong", shipped, fix),
                    **arms("Breakout", (20.0, 21.0, 22.0), (19.5, 22.0, 23.0))})
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    out = capsys.readouterr().out
    assert statistics.stdev(shipped) == pytest.approx(4.0)  # the sample sd, n - 1
    assert f"| 14.00 - 4.00 = 10.00; {sum(fix) / 3:.2f} | 10.00; 11.00 | holds |" in out
    assert "| 21.00 - 1.00 = 20.00; 21.50 | 20.00; 19.50 | does not hold: lowest seed |" in out
    assert "Rule 2 does not hold" in out


def test_mean_below_one_sd_fails_and_all_pass_says_so(tmp_path, capsys):
    v = fb.verdict([0.0, 20.0, 20.0], [0.5, 1.0, 1.0])  # 0.83 below 13.33 - 11.55 = 1.78
    assert not v["mean_holds"] and v["low_holds"]
    same = (10.0, 14.0, 18.0)
    rows(tmp_path, {**arms("Pong", same, same), **arms("Breakout", same, same)})
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    assert "The first two parts of rule 2 hold on every game" in capsys.readouterr().out


def test_not_read_until_every_declared_trial_finished(tmp_path, capsys):
    # Pong: seeds 3-4 finished in both arms, seed 5 not started; Breakout: no row at all
    rows(tmp_path, arms("Pong", (10.0, 12.0), (11.0, 13.0), seeds=(3, 4)))
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    out = capsys.readouterr().out
    assert "5: - (not started)" in out and "Rule 2 is not read yet" in out
    assert "| Breakout | 3: - (not started)" in out and "holds" not in out
    rows(tmp_path, {**arms("Pong", (10.0, 12.0, 9.0), (11.0, 13.0, None)),
                    **arms("Breakout", (1.0, 2.0, 3.0), (1.0, 2.0, 3.0))})
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    out = capsys.readouterr().out
    assert "5: - (unfinished)" in out and "Rule 2 is not read yet" in out


def test_bad_input_is_one_line(tmp_path, capsys):
    assert fb.main([str(tmp_path / "missing.yaml"), *PAIRED]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert fb.main([str(study(tmp_path)), "--paired", "input-norm-none", "input-norm-frame"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "holds input-norm-frame; its variants: input-norm-none_game-Breakout" in err[-1], err
    # a shipped label inside the fix's: each row still goes to its own arm
    assert fb.arm_of("input-norm-running_game-Pong", "input-norm", "input-norm-running") == "fix"


def test_a_tie_is_read_exactly_and_the_rows_checked(tmp_path, capsys):
    # 2.3 - 2.3 is no loss: in floats mean(2.3, 4.6, 6.9) - stdev lands a rounding below 2.3
    v = fb.verdict(["2.3", "4.6", "6.9"], ["2.3", "2.3", "2.3"])
    assert v["mean_holds"] and v["low_holds"]
    same = (10.0, 14.0, 18.0)
    table = {**arms("Pong", same, same), **arms("Breakout", same, same)}
    # a row of a seed the file does not declare is left out, not read into the rule
    rows(tmp_path, table, extra="input-norm-running_game-Pong,Pong,6,finished,5001216,-21,1\n")
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    out = capsys.readouterr().out
    assert "hold on every game" in out and "6:" not in out
    assert "cannot be decided" not in out and "declares no pair" in out
    # a row short of the trials' budget is not a finished trial at the budget
    rows(tmp_path, table, frames=4_000_000)
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    out = capsys.readouterr().out
    assert "3: 10.00 (finished short)" in out and "Rule 2 is not read yet" in out
    # two rows of one trial: a one-line error
    rows(tmp_path, table, extra="input-norm-none_game-Pong,Pong,3,finished,5001216,1,1\n")
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 2
    assert "two rows of input-norm-none_game-Pong seed 3" in capsys.readouterr().err


def test_failed_trials_are_named_and_the_arms_cannot_be_swapped(tmp_path, capsys):
    same = (10.0, 14.0, 18.0)
    rows(tmp_path, {**arms("Pong", same, same), **arms("Breakout", same, same)})
    text = (tmp_path / "rows.csv").read_text().replace(
        "input-norm-running_game-Pong,Pong,4,finished",
        "input-norm-running_game-Pong,Pong,4,failed")
    (tmp_path / "rows.csv").write_text(text)
    assert fb.main([str(study(tmp_path)), *PAIRED]) == 0
    out = capsys.readouterr().out
    assert "Failed (diverged or crashed): Pong fix seed 4" in out and "not read yet" in out
    assert fb.main([str(study(tmp_path)), "--paired", "input-norm-running",
                    "input-norm-none"]) == 2
    err = capsys.readouterr().err
    assert "sets agent.torso_options.input_norm=running where impala_atari.yaml has none" in err


def test_what_the_declared_pairs_can_decide():
    from scripts.compare.plan import PlanSpec

    plan = PlanSpec(pairs=[["a", "b"], ["c", "d"]], statistic="win")
    assert "With 3 paired seeds a pair (alpha 0.025 each) cannot be decided either way (8 " \
           "needed)" in fb.pairs_note(plan, 3)
    assert fb.pairs_note(plan, 8) == ""


def test_the_study_files_columns_are_found_by_what_fills_them():
    assert fb.column_names({"v": "variant", "g": "env.game", "s": "seed", "st": "status",
                            "f": "frames", "r": "train_return"})["return"] == "r"
    with pytest.raises(ValueError, match="fills no column with train_return"):
        fb.column_names({"variant": "variant", "game": "env.game", "seed": "seed",
                         "status": "status", "frames": "frames"})


def test_a_file_that_declares_the_mean_part_alone_is_read_by_it(tmp_path, capsys):
    # Breakout's fix: mean above the line, one seed below the shipped lowest (as by hand above)
    rows(tmp_path, {**arms("Pong", (10.0, 14.0, 18.0), (12.0, 11.0, 16.0)),
                    **arms("Breakout", (20.0, 21.0, 22.0), (19.5, 22.0, 23.0))})
    assert fb.main([str(study(tmp_path)), *PAIRED, "--parts", "mean"]) == 0
    out = capsys.readouterr().out
    assert "| 21.00 - 1.00 = 20.00; 21.50 | 20.00; 19.50 | holds |" in out
    assert "rule 2 (its mean part)" in out
    assert "Rule 2 (its mean part, as declared) holds on every game" in out
    rows(tmp_path, {**arms("Pong", (10.0, 14.0, 18.0), (5.0, 6.0, 7.0)),
                    **arms("Breakout", (20.0, 21.0, 22.0), (19.5, 22.0, 23.0))})
    assert fb.main([str(study(tmp_path)), *PAIRED, "--parts", "mean"]) == 0
    assert "| 14.00 - 4.00 = 10.00; 6.00 | 10.00; 5.00 | does not hold: mean |" in \
        capsys.readouterr().out
