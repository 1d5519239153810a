"""The torso-blindness study's declared rule (scripts/papers/torso_blind.py), on made-up probes.

Spans by hand: three blind probes in a row start one at the first of them, three seeing ones
end it; a wholly inactive conv layer is blind whatever the fc share; the pilot's F is the
smallest candidate where no trial blind there sees again later, the cap when none is or no
trial goes blind; the study's count has its exact binomial interval.
"""

from __future__ import annotations

import csv

import pytest

from scripts.papers import torso_blind as tb

STEP = 102_400


def table(path, trials: dict[tuple[str, int], list[tuple[float, float]]]):
    """A probe csv: per trial a list of (fc inactive, conv1 inactive) at probes 0, STEP, ..."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "frames", "tag", "value"])
        for (variant, seed), probes in trials.items():
            for i, (fc, conv1) in enumerate(probes):
                frames = (i + 1) * STEP
                w.writerow([variant, seed, frames, "torso/conv1/inactive", conv1])
                w.writerow([variant, seed, frames, "torso/fc/inactive", fc])
                w.writerow([variant, seed, frames, "policy/spread", 0.1])
    return path


SEE, BLIND, DEAD_CONV = (0.1, 0.0), (0.85, 0.0), (0.3, 1.0)


def test_spans_start_and_end_at_the_first_of_three(tmp_path):
    probes = [SEE, BLIND, BLIND, SEE, BLIND, BLIND, BLIND, SEE, BLIND, SEE, SEE, SEE, DEAD_CONV,
              DEAD_CONV, DEAD_CONV]
    (trial,) = tb.read(table(tmp_path / "p.csv", {("a", 0): probes}))
    at = lambda i: (i + 1) * STEP  # noqa: E731
    # blind from probe 4 (three in a row); probes 7-9 are not three seeing ones (8 is blind);
    # 9, 10, 11 see: sees again at 9; a dead conv1 from probe 12 is blind to the end
    assert tb.spans(trial) == [(at(4), at(9)), (at(12), None)]
    assert tb.blind_at(trial, at(6)) == (at(4), at(9))
    assert tb.blind_at(trial, at(9)) is None
    assert tb.blind_at(trial, at(14)) == (at(12), None)
    assert tb.blind_at(trial, 0) is None  # no probe yet
    assert tb.spans(trial, run=4) == []  # no four blind probes in a row
    assert tb.is_blind({"torso/fc/inactive": 0.8}) and not tb.is_blind({"torso/fc/inactive": 0.79})


def test_the_pilot_budget_follows_the_declared_rule(tmp_path):
    n = 30  # probes to 3.07M frames
    seeing = [SEE] * n
    # blind from probe 8 (0.92M) to probe 17 (1.84M): blind at 1.0 and 1.5M, seeing by 2.0M
    recovers = [SEE] * 8 + [BLIND] * 9 + [SEE] * (n - 17)
    for_good = [SEE] * 5 + [BLIND] * (n - 5)
    trials = tb.read(table(tmp_path / "p.csv", {("ppo", 0): recovers, ("ppo", 1): for_good,
                                                ("impala", 0): seeing}))
    budget, why = tb.pilot_budget(trials)
    assert budget == 2.0e6
    assert why[1.0e6] == why[1.5e6] == ["ppo seed 0"]
    assert why[2.0e6] == []
    # nobody blind: the cap; somebody blind at every candidate who sees again: the cap
    assert tb.pilot_budget(tb.read(table(tmp_path / "q.csv", {("x", 0): seeing})))[0] == 2.5e6
    late = [SEE] * 2 + [BLIND] * 25 + [SEE] * 3
    assert tb.pilot_budget(tb.read(table(tmp_path / "r.csv", {("x", 0): late})))[0] == 2.5e6


def test_the_study_count_has_its_exact_interval(tmp_path, capsys):
    trials = {("cell", s): ([SEE] * 3 + [BLIND] * 25) if s < 2 else [SEE] * 28 for s in range(8)}
    path = table(tmp_path / "p.csv", trials)
    assert tb.clopper_pearson(2, 8) == pytest.approx((0.0319, 0.6509), abs=1e-4)
    assert tb.clopper_pearson(0, 8) == pytest.approx((0.0, 0.3694), abs=1e-4)
    assert tb.main([str(path), "--budget", "2.5e6"]) == 0
    out = capsys.readouterr().out
    assert "| cell | 2 of 8 | [0.032, 0.651] | 2 of 8 | none |" in out
    # a trial whose last probe is within one probe of the budget has reached it; one that
    # stopped earlier is named as short of it
    last = int(2.5e6 // STEP) * STEP
    cut = table(tmp_path / "c.csv", {("cell", 0): [SEE] * int(2.5e6 // STEP),
                                     ("cell", 1): [SEE] * 10})
    assert tb.main([str(cut), "--budget", "2.5e6"]) == 0
    out = capsys.readouterr().out
    assert f"seed 1 ({10 * STEP:,})" in out and f"seed 0 ({last:,})" not in out
    assert tb.main([str(tmp_path / "missing.csv")]) == 2
    assert "no probe table at" in capsys.readouterr().err


def test_a_fix_has_fewer_blind_trials_only_when_the_discordant_seeds_say_so(tmp_path, capsys):
    blind, seeing = [SEE] * 3 + [BLIND] * 25, [SEE] * 28
    # cell a: 6 seeds blind only without the fix, one blind in both, one in neither; cell b:
    # one seed blind only with the fix, and a seed whose fix arm did not run
    arms = {**{("a_norm-none", s): blind for s in range(7)}, ("a_norm-none", 7): seeing,
            **{("a_norm-running", s): seeing for s in range(6)}, ("a_norm-running", 6): blind,
            ("a_norm-running", 7): seeing,
            ("b_norm-none", 0): seeing, ("b_norm-running", 0): blind, ("b_norm-none", 1): blind}
    path = table(tmp_path / "p.csv", arms)
    assert tb.main([str(path), "--budget", "2.5e6", "--paired", "norm-none", "norm-running"]) == 0
    out = capsys.readouterr().out
    assert "| a | 6 | 0 | 1 | 1 | 0 |" in out and "| b | 0 | 1 | 0 | 0 | 1 |" in out
    # 6 of 7 discordant seeds one way: the interval [0.421, 0.996] does not lie above 1/2
    low, high = tb.clopper_pearson(6, 7)
    assert low == pytest.approx(0.4213, abs=1e-4) and low < 0.5
    assert "exactly one arm blind: 7; only norm-none blind on 6" in out
    assert "Rule 1 does not hold" in out
    # all 7 one way: it holds (the smallest such count is 6, as the page says)
    arms[("b_norm-running", 0)] = seeing
    arms[("b_norm-none", 0)] = blind
    assert tb.main([str(table(tmp_path / "q.csv", arms)), "--budget", "2.5e6",
                    "--paired", "norm-none", "norm-running"]) == 0
    assert "Rule 1 holds: the fix has fewer blind trials" in capsys.readouterr().out
    assert tb.clopper_pearson(6, 6)[0] > 0.5 > tb.clopper_pearson(5, 5)[0]
    with pytest.raises(SystemExit):
        tb.main([str(path), "--paired", "norm-none", "norm-running"])  # needs --budget
    assert tb.main([str(path), "--budget", "2.5e6", "--paired", "norm-none", "norm-frame"]) == 2
    out, err = capsys.readouterr()
    assert "no variant's name holds norm-frame; the variants: a_norm-none" in err
    assert out == ""  # refused before any table


@pytest.mark.parametrize("args, says", [
    (["--run", "0"], "--run must be at least 1, got 0"),
    (["--budget", "-1"], "--budget must be a positive number of frames, got -1"),
    (["--budget", "nan"], "--budget must be a positive number of frames, got nan"),
    (["--fc-share", "5"], "--fc-share must be in (0, 1], got 5"),
    (["--fc-share", "0"], "--fc-share must be in (0, 1], got 0"),
])
def test_a_setting_out_of_range_is_one_line_before_any_table(tmp_path, capsys, args, says):
    path = table(tmp_path / "p.csv", {("a_norm-none", 0): [SEE] * 4})
    with pytest.raises(SystemExit):
        tb.main([str(path), *args])
    out, err = capsys.readouterr()
    assert out == "" and says in err.strip().splitlines()[-1], err


def test_run_directories_read_as_the_compare_table_does(tmp_path, capsys):
    """Run directories (a ``mira train`` run's event files) give the table's spans and count.

    The same made-up series written as a compare's probe table and as two runs' TensorBoard
    scalars print the same tables; a directory that is not a run is a one-line error.
    """
    from torch.utils.tensorboard import SummaryWriter

    trials = {("cell", 3): [SEE] * 3 + [BLIND] * 6 + [SEE] * 4, ("cell", 4): [SEE] * 13}
    path = table(tmp_path / "p.csv", trials)
    dirs = []
    for (variant, seed), probes in trials.items():
        run = tmp_path / f"{variant}-seed{seed}"
        run.mkdir()
        (run / "config.yaml").write_text(f"run:\n  seed: {seed}\n")
        with SummaryWriter(str(run)) as w:
            for i, (fc, conv1) in enumerate(probes):
                frames = (i + 1) * STEP
                w.add_scalar("torso/conv1/inactive", conv1, frames)
                w.add_scalar("torso/fc/inactive", fc, frames)
                w.add_scalar("policy/spread", 0.1, frames)
        dirs.append(str(run))
    assert tb.main([str(path), "--budget", "1.2e6"]) == 0
    from_table = capsys.readouterr().out
    assert tb.main([*dirs, "--budget", "1.2e6"]) == 0
    assert capsys.readouterr().out == from_table
    assert f"{4 * STEP:,} - {10 * STEP:,}" in from_table
    assert tb.main([*dirs, str(tmp_path)]) == 2
    assert "not run directories" in capsys.readouterr().err


def test_redo_counts_in_the_table_are_not_probes(tmp_path):
    """ReDo's redo/<layer> rows, logged at frames of their own, leave the spans as they were."""
    probes = [SEE, BLIND, BLIND, BLIND, SEE, SEE, SEE]
    path = table(tmp_path / "p.csv", {("a", 0): probes})
    (plain,) = tb.read(path)
    with open(path, "a", newline="") as f:
        for i in range(len(probes)):  # between every two probes, a seeing-looking count
            csv.writer(f).writerow(["a", 0, (i + 1) * STEP + STEP // 2, "redo/fc", 5])
    (with_redo,) = tb.read(path)
    assert with_redo.probes == plain.probes
    assert tb.spans(with_redo) == [(2 * STEP, 5 * STEP)]


def test_the_signal_into_the_core_is_read_on_the_seeds_only_the_shipped_arm_is_blind(tmp_path,
                                                                                     capsys):
    blind, seeing = [SEE] * 3 + [BLIND] * 25, [SEE] * 28
    arms = {**{("k_every-0", s): blind for s in range(3)}, ("k_every-0", 3): seeing,
            **{("k_every-25", s): seeing for s in range(4)}}
    path = table(tmp_path / "p.csv", arms)
    budget = 2.5e6
    with open(path, "a", newline="") as f:  # the signal at every probe; the fix's higher on 0, 1
        for (variant, seed), probes in arms.items():
            value = {("k_every-0", 2): 0.5, ("k_every-25", 2): 0.2}.get(
                (variant, seed), 0.3 if "25" in variant else 0.1)
            for i in range(len(probes)):
                csv.writer(f).writerow([variant, seed, (i + 1) * STEP, "torso/fc/signal", value])
    assert tb.main([str(path), "--budget", str(budget), "--paired", "every-0", "every-25"]) == 0
    out = capsys.readouterr().out
    assert "| k | 0 | 0.1 | 0.3 |" in out and "| k | 2 | 0.5 | 0.2 |" in out
    assert "| k | 3 | 0." not in out  # neither arm blind: not a seed the guard reads
    assert "On the 3 seeds where only every-0 is blind, every-25's signal into the core is " \
           "higher on 2." in out
    assert tb.main([str(table(tmp_path / "q.csv", arms)), "--budget", str(budget),
                    "--paired", "every-0", "every-25"]) == 0
    assert "signal into the core" not in capsys.readouterr().out  # no signal logged: no lines
