"""``python -m scripts.papers.copying``: the RIMs paper's copying task script."""

import math

import pytest


def test_copying_script_smoke(capsys):
    from scripts.papers import copying

    rows = copying.main(["--cores", "lstm", "rims", "mi_lstm", "alstm", "--steps", "2",
                         "--batch-size", "4", "--hidden", "24", "--train-dormant", "3",
                         "--test-dormant", "6", "--eval-batch-size", "8"])
    out = capsys.readouterr().out
    assert "| core |" in out and "rims" in out
    assert [r["core"] for r in rows] == ["lstm", "rims", "mi_lstm", "alstm"]
    assert all(math.isfinite(r["ce_train_length"]) and math.isfinite(r["ce_test_length"])
               for r in rows)


def test_copying_ctrl_c_evaluates_what_it_has_and_skips_the_rest(capsys, monkeypatch):
    from scripts.papers import copying

    batches, calls = copying.copying_batch, []

    def interrupted_at_the_third(n, dormant, g):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return batches(n, dormant, g)

    monkeypatch.setattr(copying, "copying_batch", interrupted_at_the_third)
    rows = copying.main(["--cores", "lstm", "rims", "--steps", "5", "--batch-size", "4",
                         "--hidden", "24", "--train-dormant", "3", "--test-dormant", "6",
                         "--eval-batch-size", "8"])
    out = capsys.readouterr().out
    assert [(r["core"], r["steps"], r["stopped"]) for r in rows] == [("lstm", 2, True)]
    assert math.isfinite(rows[0]["ce_test_length"])
    assert "| 2 (stopped) |" in out and "not trained after Ctrl-C: rims" in out


SMALL = ["--cores", "lstm", "--batch-size", "4", "--hidden", "24", "--train-dormant", "3",
         "--test-dormant", "6", "--eval-batch-size", "8", "--eval-every", "2"]


@pytest.mark.parametrize("core", ["lstm", "rims"])  # RIMs: dropout draws from torch's generator
def test_copying_continued_run_trains_the_same_model_and_keeps_one_curve(tmp_path, core):
    import csv

    import torch

    from scripts.papers import copying

    small = SMALL[:1] + [core] + SMALL[2:]
    straight = copying.main(small + ["--steps", "6", "--out", str(tmp_path / "a")])
    copying.main(small + ["--steps", "3", "--out", str(tmp_path / "b")])
    # the end of the short run is saved (step 3, between evaluations at 2 and 4), so the
    # continued run starts there, not from the evaluation checkpoint at step 2
    assert torch.load(tmp_path / "b" / f"{core}-seed0.pt", weights_only=False)["step"] == 3
    curve = tmp_path / "b" / f"{core}-seed0.csv"
    with curve.open("a") as f:  # a point written after the last checkpoint, by a killed run
        f.write("4,0.0,9,0,9,0\n")
    continued = copying.main(small + ["--steps", "6", "--out", str(tmp_path / "b")])
    a = torch.load(tmp_path / "a" / f"{core}-seed0.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / f"{core}-seed0.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert straight[0]["ce_test_length"] == continued[0]["ce_test_length"]
    with curve.open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [2, 4, 6] and float(rows[1]["ce_train_length"]) != 9
    assert (tmp_path / "b" / f"{core}-seed0.json").is_file()


def test_copying_ctrl_c_stops_at_a_step_boundary_and_continues_the_same_run(tmp_path,
                                                                           monkeypatch):
    import os
    import signal

    import torch

    from scripts.papers import copying

    straight = copying.main(SMALL + ["--steps", "6", "--out", str(tmp_path / "a")])
    batches, calls = copying.copying_batch, []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where pytest runs as a background job

    def ctrl_c_during_the_third(n, dormant, g):
        calls.append(n)
        if calls.count(4) == 3 and n == 4:  # the third training batch (evaluation draws 8)
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-step: the step still completes
        return batches(n, dormant, g)

    monkeypatch.setattr(copying, "copying_batch", ctrl_c_during_the_third)
    (row,) = copying.main(SMALL + ["--steps", "6", "--out", str(tmp_path / "b")])
    assert row["stopped"] and row["steps"] == 3
    # Ctrl-C saved step 3 (the last evaluation's checkpoint is step 2)
    assert torch.load(tmp_path / "b" / "lstm-seed0.pt", weights_only=False)["step"] == 3
    assert signal.getsignal(signal.SIGINT) is before  # the handler it found is back
    monkeypatch.setattr(copying, "copying_batch", batches)
    continued = copying.main(SMALL + ["--steps", "6", "--out", str(tmp_path / "b")])
    a = torch.load(tmp_path / "a" / "lstm-seed0.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "lstm-seed0.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert straight[0]["ce_test_length"] == continued[0]["ce_test_length"]


def test_copying_refuses_a_checkpoint_of_other_settings_before_any_core_trains(tmp_path):
    from scripts.papers import copying

    copying.main(SMALL + ["--steps", "4", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="other settings"):
        copying.main(SMALL + ["--hidden", "32", "--steps", "4", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="past --steps 2"):
        copying.main(SMALL + ["--steps", "2", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="other settings"):  # rims would train first
        copying.main(["--cores", "rims"] + SMALL[2:] + ["--cores", "rims", "lstm", "--hidden",
                                                         "24", "--lr", "0.01", "--steps", "4",
                                                         "--out", str(tmp_path)])
    assert not (tmp_path / "rims-seed0.pt").exists()


def test_copying_join_finds_the_first_step_every_lstm_seed_learnt(tmp_path, capsys):
    """``--join``: one csv of every curve, and the declared result read off it."""
    import csv

    from scripts.papers import copying, copying_curves

    def curve(core, seed, train_ce, test_ce, tail=""):
        with (tmp_path / f"{core}-seed{seed}.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=copying_curves.CURVE_COLUMNS)
            w.writeheader()
            for i, (a, b) in enumerate(zip(train_ce, test_ce)):
                w.writerow({"step": 500 * (i + 1), "seconds": i, "ce_train_length": a,
                            "acc_train_length": 0, "ce_test_length": b, "acc_test_length": 0})
            f.write(tail)

    curve("lstm", 0, [2.0, 0.05, 0.01, 0.0], [3.0, 2.0, 1.0, 0.5])
    curve("lstm", 1, [2.0, 0.08, 0.02, 0.0], [3.0, 4.0, 3.0, 2.5],  # both learnt at 1,000
          tail="2500,9\n")  # cut short by a kill: left out
    curve("rims", 0, [2.0, 1.0, 0.0], [2.0, 0.25, 0.5])  # stops at 1,500
    (tmp_path / "notes.csv").write_text("a,b\n")  # not a curve: left out
    rows = copying.main(["--out", str(tmp_path), "--join", str(tmp_path / "joined" / "all.csv")])
    assert len(rows) == 11
    assert (rows[0]["core"], rows[0]["seed"], rows[0]["step"]) == ("lstm", 0, 500)
    with (tmp_path / "joined" / "all.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 11
    out = capsys.readouterr().out
    assert "notes.csv is not a <core>-seed<S>.csv curve; left out" in out
    assert "lstm-seed1.csv: an incomplete row left out" in out
    assert "| lstm | 1 | 2,000 |" in out and "| rims | 0 | 1,500 |" in out
    learnt, last = out.split("**first step where")[1].split("**last step every run reached")
    assert learnt.startswith(" every lstm seed is under 0.1 at the train length: step 1,000**")
    assert "| lstm | 0, 1 | 0.065 [0.050, 0.080] | 3.000 [2.000, 4.000] |" in learnt
    assert "| rims | 0 | 1.000 [1.000, 1.000] | 0.250 [0.250, 0.250] |" in learnt
    assert last.startswith(": step 1,500**")  # rims stops there; lstm's 2,000 is not common
    assert "| lstm | 0, 1 | 0.015 [0.010, 0.020] | 2.000 [1.000, 3.000] |" in last
    assert "| rims | 0 | 0.000 [0.000, 0.000] | 0.500 [0.500, 0.500] |" in last

    curve("lstm", 1, [2.0, 0.5, 0.2], [3.0, 4.0, 3.0])  # never under 0.1
    result = copying_curves.learnt_at(copying_curves.join_curves(tmp_path))
    assert "is not a generalisation result" in result
    curve("rims", 0, [2.0], [2.0])
    curve("lstm", 0, [2.0, 0.05], [3.0, 2.0])
    (tmp_path / "lstm-seed0.csv").write_text(  # evaluated at other steps than the rest
        (tmp_path / "lstm-seed0.csv").read_text().replace("\n500,", "\n700,"))
    assert "No step was evaluated in every run" in copying_curves.learnt_at(
        copying_curves.join_curves(tmp_path))


def test_copying_run_keeps_its_device(tmp_path):
    """A checkpoint continues only on the device it was trained on (dropout's generator)."""
    import torch

    from scripts.papers import copying

    args = SMALL + ["--steps", "2", "--out", str(tmp_path)]
    copying.main(args)
    ckpt = tmp_path / "lstm-seed0.pt"
    state = torch.load(ckpt, weights_only=False)
    assert state["device"] == "cpu"
    state["device"] = "cuda"
    torch.save(state, ckpt)
    with pytest.raises(SystemExit, match="was trained on cuda; continue it with --device cuda"):
        copying.main(SMALL + ["--steps", "4", "--out", str(tmp_path)])


def test_an_ungated_rims_checkpoint_continues_only_as_ungated(tmp_path):
    import torch

    from scripts.papers import copying

    rims = ["--cores", "rims"] + [a for a in SMALL if a not in ("--cores", "lstm")]
    copying.main(rims + ["--steps", "2", "--no-comm-gate", "--out", str(tmp_path)])
    state = torch.load(tmp_path / "rims-seed0.pt", weights_only=False)
    assert "comm_bias" not in {k.split(".")[-1] for k in state["model"]}
    del state["settings"]["comm_gate"]  # as the script wrote it before the gate existed
    torch.save(state, tmp_path / "rims-seed0.pt")
    with pytest.raises(SystemExit, match="other settings"):
        copying.main(rims + ["--steps", "4", "--out", str(tmp_path)])
    copying.main(rims + ["--steps", "4", "--no-comm-gate", "--out", str(tmp_path)])
    assert torch.load(tmp_path / "rims-seed0.pt", weights_only=False)["step"] == 4
