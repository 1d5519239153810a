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
