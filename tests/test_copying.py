"""``python -m scripts.papers.copying``: the RIMs paper's copying task script."""

import math


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


def test_copying_continued_run_trains_the_same_model_and_keeps_one_curve(tmp_path):
    import csv

    import torch

    from scripts.papers import copying

    straight = copying.main(SMALL + ["--steps", "6", "--out", str(tmp_path / "a")])
    copying.main(SMALL + ["--steps", "3", "--out", str(tmp_path / "b")])
    continued = copying.main(SMALL + ["--steps", "6", "--out", str(tmp_path / "b")])
    a = torch.load(tmp_path / "a" / "lstm-seed0.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "lstm-seed0.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert straight[0]["ce_test_length"] == continued[0]["ce_test_length"]
    with (tmp_path / "b" / "lstm-seed0.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [2, 4, 6]
    assert (tmp_path / "b" / "lstm-seed0.json").is_file()


def test_copying_refuses_a_checkpoint_of_other_settings(tmp_path):
    import pytest

    from scripts.papers import copying

    copying.main(SMALL + ["--steps", "2", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="other settings"):
        copying.main(SMALL + ["--hidden", "32", "--steps", "4", "--out", str(tmp_path)])
