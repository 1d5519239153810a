"""A compare's training health (scripts/compare/health.py): bursts, skipped updates, entropy."""

import json

import pytest
from torch.utils.tensorboard import SummaryWriter

from scripts.compare import health
from scripts.compare.trials import RECORD


def _run(path, norms, entropy, skipped):
    """A run directory whose event files log one update per 1,000 frames."""
    with SummaryWriter(str(path)) as w:
        for i, (g, e, s) in enumerate(zip(norms, entropy, skipped)):
            w.add_scalar("grad_norm", g, (i + 1) * 1000)
            w.add_scalar("entropy", e, (i + 1) * 1000)
            w.add_scalar("skipped_updates", s, (i + 1) * 1000)
    return path


def test_a_trial_whose_updates_burst_is_counted_and_named(tmp_path):
    n = 40
    norms = [1.0] * n
    norms[10], norms[30] = 11.0, 3e8  # two bursts over 10x the median; 9.9x is not one
    norms[20] = 9.9
    burst = _run(tmp_path / "a-seed0", norms, [2.8] * n, [0] * 35 + [1] * 5)
    h = health.summary(burst)
    assert h == {"updates": n, "grad_norm_median": 1.0, "grad_norm_max": pytest.approx(3e8),
                 "bursts": 2, "first_burst_frames": 11_000, "skipped": 1,
                 "entropy_first": pytest.approx(2.8), "entropy_last": pytest.approx(2.8),
                 "frozen": None, "blind": None}  # an LSTM logs no competition; not blind
    calm = health.summary(_run(tmp_path / "b-seed0", [0.5] * n,
                               [2.0 - i / n for i in range(n)], [0] * n))
    assert calm["bursts"] == 0 and calm["first_burst_frames"] is None and calm["skipped"] == 0
    # the first and last 5% of 40 logged updates: two each
    assert calm["entropy_first"] == pytest.approx(1.9875)
    assert calm["entropy_last"] == pytest.approx(1.0375)
    rows = [{"trial": "a-seed0", "variant": "a", "health": h},
            {"trial": "b-seed0", "variant": "b", "health": calm},
            {"trial": "c-seed0", "variant": "c", "health": None}]  # rebuilt from a table
    text = "\n".join(health.markdown(rows, {"a": "variant a"}))
    assert "| variant a | 1 | 1 (1-1) | 3.0e+08 | 1 | 1 | 2.80 -> 2.80 |" in text
    assert "| b | 1 |" in text and "| c |" not in text
    assert ("- a-seed0: 2 of 40 logged updates over 10x its median norm 1 (largest 3.0e+08), "
            "the first at 11,000 frames; 1 skipped; entropy 2.80 -> 2.80.") in text
    assert "b-seed0:" not in text
    clean = "\n".join(health.markdown(rows[1:], {}))
    assert "No trial had a burst or a skipped update." in clean
    assert health.markdown(rows[2:], {}) == []  # nothing logged: no section


def test_a_restored_trial_reads_its_health_from_its_record(tmp_path):
    run = tmp_path / "r-seed0"
    run.mkdir()
    kept = {"updates": 3, "grad_norm_median": 0.5, "grad_norm_max": 0.7, "bursts": 0,
            "first_burst_frames": None, "skipped": 0, "entropy_first": 1.0, "entropy_last": 0.5}
    (run / RECORD).write_text(json.dumps({"params": 1, "curves": {}, "health": kept}))
    assert health.summary(run) == kept
    (run / RECORD).write_text(json.dumps({"params": 1, "curves": {}}))  # kept before health
    assert health.summary(run) is None
    (tmp_path / "empty").mkdir()
    assert health.summary(tmp_path / "empty") is None  # no event files, no record


def test_a_frozen_competition_is_the_share_of_updates_with_a_unit_left_out(tmp_path):
    n = 20
    run = _run(tmp_path / "rims-seed0", [0.5] * n, [2.0] * n, [0] * n)
    with SummaryWriter(str(run)) as w:  # three units; unit 2 frozen out from the 16th update
        for i in range(n):
            for k, freq in enumerate((1.0, 0.9, 0.005 if i >= 15 else 0.4)):
                w.add_scalar(f"activation_frequency/{k}", freq, (i + 1) * 1000)
            if i == 19:  # a unit's last point without the others': not a common update
                w.add_scalar("activation_frequency/0", 0.0, 99_000)
    h = health.summary(run)
    assert h["frozen"] == pytest.approx(5 / 20)  # 0.005 <= FROZEN; 0.4 is not
    assert health.FROZEN == 0.01
    rows = [{"trial": "rims-seed0", "variant": "rims", "health": h},
            {"trial": "lstm-seed0", "variant": "lstm",
             "health": {**h, "frozen": None, "bursts": 1, "first_burst_frames": 3000}}]
    text = "\n".join(health.markdown(rows, {}))
    assert "frozen (per trial) |" in text and "at most 1% of steps" in text
    row = {line.split(" |")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert row["| rims"].endswith("| 25% |") and row["| lstm"].endswith("| — |")
    assert "; entropy 2.00 -> 2.00." in text  # no competition: no frozen clause
    flagged = health.markdown([{**rows[0], "health": {**h, "bursts": 2,
                                                      "first_burst_frames": 5000}}], {})
    assert flagged[-1].endswith("; a unit frozen out on 25% of logged updates.")
    calm = health.markdown(rows[1:], {})
    assert not any("frozen" in line for line in calm)  # no core with a competition: no column
