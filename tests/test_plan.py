"""The declared plan of a compare (compare/plan.py): its record, its looks, its intervals."""

import numpy as np
import pytest

from scripts.compare import plan as plan_mod
from scripts.compare import plan_sections
from scripts.compare import sequential as sq


def test_the_plan_is_kept_as_first_seen_and_later_changes_are_dated(tmp_path):
    plan = plan_mod.PlanSpec(pairs=[["a", "b"]], bounds=[0, 1])
    first = plan_mod.record(plan, [0, 1, 2], {"a": 100, "b": 100}, 30)
    plan_mod.register(tmp_path, first)
    more = plan_mod.record(plan, [0, 1, 2, 3, 4], {"a": 100, "b": 100}, 30)
    state = plan_mod.register(tmp_path, more)  # before any report: a change, not a look
    assert state["changes"][0]["after_report"] is False
    plan_mod.note_report(tmp_path)
    assert plan_mod.register(tmp_path, more)["changes"] == state["changes"]  # nothing new
    longer = plan_mod.record(plan, [0, 1, 2, 3, 4], {"a": 200, "b": 200, "c": 200}, 30)
    state = plan_mod.register(tmp_path, longer)
    change = state["changes"][-1]
    assert change["after_report"] and change["what"] == ["variants added: ['c']",
                                                          "frames raised 100 -> 200"]
    assert state["plan"] == first
    lines = "\n".join(plan_sections.markdown({"plan": state, "primary": []}))
    assert "**Unplanned looks**" in lines and "variants added" in lines
    assert "changed before any report" in lines and "seeds added: [3, 4] (3 -> 5)" in lines
    # the primary table names the null it tests: 0.5 for win, 0 for difference
    for statistic, null, scores in (("win", "0.5", {"a": 9.0, "b": 1.0}),
                                    ("difference", "0", {"a": 1.0, "b": 0.0})):
        plan = plan_mod.PlanSpec(pairs=[["a", "b"]], bounds=[0, 1], statistic=statistic)
        primary = plan_mod.primary_intervals(
            plan, {v: {s: x for s in range(9)} for v, x in scores.items()}, list(range(9)))
        text = "\n".join(plan_sections.markdown({"plan": state, "primary": primary}))
        assert f"| excludes {null} |" in text and "| yes: a above b |" in text
        assert f"Decided: every primary interval excludes {null} (no difference)." in text
        assert "No pair is decided with a below b." in text
    # a pair decided the other way says so, in its row and under the table
    primary = plan_mod.primary_intervals(
        plan, {v: {s: x for s in range(9)} for v, x in {"a": 0.0, "b": 1.0}.items()},
        list(range(9)))
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": primary}))
    assert "| yes: a below b |" in text and "Decided with a below b: a below b." in text
    # a partly decided study says how many of its pairs are decided
    plan = plan_mod.PlanSpec(pairs=[["a", "b"], ["a", "c"]], statistic="win")
    primary = plan_mod.primary_intervals(
        plan, {"a": {s: 9.0 for s in range(12)}, "b": {s: 1.0 for s in range(12)},
               "c": {0: 1.0, 1: 1.0}}, list(range(12)))
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": primary}))
    assert "Not decided: 1 of 2 primary intervals exclude 0.5 (no difference)" in text


def test_after_a_dated_change_the_report_states_the_level_and_score_its_intervals_used(tmp_path):
    # Declared at alpha 0.05 on the evaluation; changed later to 0.1 on the training return.
    # The intervals are the current plan's, and so must be the level and score they are
    # described with (the change itself is listed, dated, above them).
    first = plan_mod.PlanSpec(pairs=[["a", "b"]], bounds=[0, 1], alpha=0.05, score="eval")
    plan_mod.register(tmp_path, plan_mod.record(first, [0, 1], {"a": 100, "b": 100}, 30))
    plan_mod.note_report(tmp_path)
    now = plan_mod.PlanSpec(pairs=[["a", "b"]], bounds=[0, 1], alpha=0.1, score="train")
    state = plan_mod.register(tmp_path, plan_mod.record(now, [0, 1], {"a": 100, "b": 100}, 30))
    assert state["plan"]["alpha"] == 0.05 and state["changes"][-1]["after_report"]
    primary = plan_mod.primary_intervals(now, {"a": {0: 0.9, 1: 0.8}, "b": {0: 0.1, 1: 0.2}},
                                         [0, 1])
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": primary}))
    assert "Level 1 - 0.1/1 each" in text and "with probability 0.90" in text, text
    assert "the last-100 training return's mean" in text, text


def test_primary_intervals_pair_by_seed_and_split_alpha():
    plan = plan_mod.PlanSpec(pairs=[["a", "b"], ["a", "c"]], bounds=[0, 10], alpha=0.1)
    scores = {"a": {s: 9.0 for s in range(12)}, "b": {s: 1.0 for s in range(12)},
              "c": {0: 9.0, 1: 9.0}}
    ab, ac = plan_mod.primary_intervals(plan, scores, list(range(12)))
    assert ab["alpha"] == ac["alpha"] == 0.05 and ac["seeds"] == [0, 1]
    assert ab["estimate"] == pytest.approx(8.0) and ab["excludes_null"] and not ac["excludes_null"]
    assert not plan_mod.decided([ab, ac]) and plan_mod.decided([ab])
    # each pair's interval is the paired sequence's at alpha / 2, over the seeds both ran
    for row, other, seeds in ((ab, "b", range(12)), (ac, "c", (0, 1))):
        x = np.array([scores["a"][s] for s in seeds])
        y = np.array([scores[other][s] for s in seeds])
        cs = sq.paired_difference_cs(x, y, (0, 10), 0.05)
        assert (row["low"], row["high"]) == pytest.approx((cs.low[-1], cs.high[-1]))
    assert ab["low"] > 0 and ac["low"] < 0 < ac["high"]


def test_scores_outside_the_bounds_are_counted_and_said_in_the_report(tmp_path):
    """The difference interval reads scores clipped to plan.bounds: the report says how many."""
    plan = plan_mod.PlanSpec(pairs=[["a", "b"]], bounds=[0, 10])
    scores = {"a": {0: 12.0, 1: 9.0, 2: 11.0}, "b": {0: 1.0, 1: -3.0, 2: 2.0}}
    (row,) = plan_mod.primary_intervals(plan, scores, [0, 1, 2])
    assert row["clipped"] == 3
    assert "3 of 6 scores outside plan.bounds" in plan_mod.interval_lines([row])[0]
    state = plan_mod.register(tmp_path, plan_mod.record(plan, [0, 1, 2], {"a": 1, "b": 1}, 1))
    assert "3 of 6 scores lay outside plan.bounds [0, 10]" in "\n".join(
        plan_sections.markdown({"plan": state, "primary": [row]}))
    (inside,) = plan_mod.primary_intervals(plan, {"a": {0: 9.0}, "b": {0: 1.0}}, [0])
    assert inside["clipped"] == 0 and "outside" not in plan_mod.interval_lines([inside])[0]


def test_the_report_shows_the_scores_the_intervals_read_paired_by_seed():
    """One row per seed with each pair's two scores, a mean row, and each pair's tally."""
    plan = plan_mod.PlanSpec(pairs=[["t", "lin"], ["l", "lin"]], statistic="win")
    scores = {"lin": {0: 65.03, 1: 68.13, 2: 73.5}, "t": {0: 72.74, 1: 72.64, 2: 74.1},
              "l": {0: 70.0, 1: 66.7, 2: 73.5}}
    primary = plan_mod.primary_intervals(plan, scores, [0, 1, 2])
    assert primary[1]["scores"] == [[70.0, 65.03], [66.7, 68.13], [73.5, 73.5]]
    lines = plan_sections.paired_markdown(primary, "eval", "mean")
    assert "| seed | t | lin | l |" in lines
    assert "| 0 | 72.7 | 65.0 | 70.0 |" in lines and "| 1 | 72.6 | 68.1 | 66.7 |" in lines
    assert "| mean | 73.2 | 68.9 | 70.1 |" in lines
    assert "- t above lin at 3 of 3 seed(s)." in lines
    assert "- l above lin at 1 of 3 seed(s); below at seed(s) 1; tied at 1." in lines
    big = plan_mod.primary_intervals(plan, {"t": {0: 1736.5}, "lin": {0: 0.9551},
                                            "l": {}}, [0])
    assert "| 0 | 1,737 | 0.955 |  |" in plan_sections.paired_markdown(big, "train", "mean")
    assert plan_sections.paired_markdown(plan_mod.primary_intervals(plan, {}, [0]), "eval",
                                    "mean") == []


def test_an_edit_to_the_preset_a_variant_builds_on_is_a_dated_change(tmp_path):
    """Each variant's resolved settings and the threshold are kept beside the plan.

    A plan.json kept before they were takes them in without a change, and its report says
    from when they are compared; a setting a newer mira adds is not a change.
    """
    import json
    from pathlib import Path

    import yaml

    from scripts.compare.command import load_spec

    root = Path(__file__).resolve().parents[1]
    preset = yaml.safe_load((root / "configs" / "impala_minigrid.yaml").read_text())
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(preset))
    (tmp_path / "compare.yaml").write_text(yaml.safe_dump({
        "name": "t", "base": "preset.yaml", "out": str(tmp_path / "out"), "seeds": [0, 1],
        "matrix": {"agent.core_options.hidden_size": [16, 32]}, "threshold": 0.5,
        "overrides": {"run.checkpoint_every_s": 60},
        "plan": {"pairs": [["hidden-size-32", "hidden-size-16"]], "bounds": [0, 1]}}))

    def register(threshold=0.5, checkpoint_every_s=60):
        data = yaml.safe_load((tmp_path / "compare.yaml").read_text())
        data.update(threshold=threshold, overrides={"run.checkpoint_every_s": checkpoint_every_s})
        (tmp_path / "compare.yaml").write_text(yaml.safe_dump(data))
        spec, trials, _ = load_spec(str(tmp_path / "compare.yaml"))
        plan = plan_mod.record(spec.plan, spec.seeds, {t.variant: 100 for t in trials}, 30)
        return plan_mod.register(tmp_path, plan, plan_mod.settings_of(trials), spec.threshold)

    # a plan.json written before settings were kept: they are taken in, not a change
    spec, trials, _ = load_spec(str(tmp_path / "compare.yaml"))
    plan = plan_mod.record(spec.plan, spec.seeds, {t.variant: 100 for t in trials}, 30)
    (tmp_path / "plan.json").write_text(json.dumps(
        {"first_seen": "2026-01-01 00:00:00", "plan": plan, "changes": [], "reports": ["x"]}))
    state = register()
    since = state["settings"]["since"]
    assert state["changes"] == [] and state["settings"]["threshold"] == 0.5
    kept = state["settings"]["variants"]["hidden-size-16"]
    assert kept["agent.core_options.hidden_size"] == 16
    assert not {"run.seed", "run.dir", "run.checkpoint_every_s"} & set(kept)
    # how often it checkpoints is not a setting of the study's; a key the record lacks is new
    del state["settings"]["variants"]["hidden-size-16"]["learner.gamma"]
    (tmp_path / "plan.json").write_text(json.dumps(state))
    assert register(checkpoint_every_s=300)["changes"] == []
    # the preset's learning rate edited after a report, and the threshold moved
    lr = preset["learner"]["optimizer"]["lr"]
    preset["learner"]["optimizer"]["lr"] = lr * 4
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(preset))
    state = register(threshold=0.9)
    change = state["changes"][-1]
    assert change["after_report"] and change["what"] == [
        "threshold: 0.5 -> 0.9",
        f"settings of hidden-size-16: learner.optimizer.lr {lr!r} -> {lr * 4!r}",
        f"settings of hidden-size-32: learner.optimizer.lr {lr!r} -> {lr * 4!r}"]
    assert state["settings"]["since"] == since and state["settings"]["threshold"] == 0.9
    assert register(threshold=0.9)["changes"] == state["changes"]  # nothing new
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": []}))
    assert "**Unplanned looks**" in text and "learner.optimizer.lr" in text
    assert f"on record from {since}" in text


def test_a_pair_no_seed_left_can_decide_is_undecidable_and_settles_the_study(tmp_path):
    # 20 declared seeds; a won at 4 of the first 8 (W L L L W W W L): even 12 straight wins
    # leave 1/2 inside the interval, so the pair is undecidable; the decided pair is not.
    plan = plan_mod.PlanSpec(pairs=[["a", "b"], ["c", "b"]], statistic="win", stop="settled")
    wins = [1, 0, 0, 0, 1, 1, 1, 0]
    scores = {"a": {s: 5.0 + w for s, w in enumerate(wins)}, "b": {s: 5.5 for s in range(12)},
              "c": {s: 9.0 for s in range(12)}}
    ab, cb = plan_mod.primary_intervals(plan, scores, list(range(20)))
    assert ab["seeds_left"] == 12 and ab["undecidable"] and not ab["excludes_null"]
    assert cb["excludes_null"] and not cb["undecidable"]
    assert plan_mod.settled([ab, cb]) and not plan_mod.decided([ab, cb])
    assert plan_mod.stops("settled", [ab, cb]) and not plan_mod.stops("decided", [ab, cb])
    assert "cannot exclude 0.5 within the declared seeds, whatever the 12 left bring" in (
        plan_mod.interval_lines([ab])[0])
    # declared `decided`, changed to `settled`: the verdict reads the plan as it is now
    first = plan_mod.PlanSpec(pairs=[["a", "b"], ["c", "b"]], statistic="win", stop="decided")
    kept = {"a": 1, "b": 1, "c": 1}
    state = plan_mod.register(tmp_path, plan_mod.record(first, list(range(20)), kept, 30))
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": [ab, cb]}))
    assert "a vs b cannot exclude 0.5 within the declared seeds" in text
    assert "which ends the compare" not in text  # the `decided` rule goes on
    state = plan_mod.register(tmp_path, plan_mod.record(plan, list(range(20)), kept, 30))
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": [ab, cb]}))
    assert "which ends the compare under its rule (stop: settled)" in text
    assert "stop: 'decided' -> 'settled'" in text
    # one seed fewer in the plan's reach: seven seeds in, the pair can still be decided
    early = {v: {s: x for s, x in col.items() if s < 7} for v, col in scores.items()}
    ab7, _ = plan_mod.primary_intervals(plan, early, list(range(20)))
    assert not ab7["undecidable"] and not plan_mod.settled([ab7])
    # every declared seed in: nothing left to run, and no words about seeds left
    full = plan_mod.PlanSpec(pairs=[["a", "b"]], statistic="win")
    (done,) = plan_mod.primary_intervals(full, scores, list(range(8)))
    assert done["undecidable"] and done["seeds_left"] == 0
    assert "cannot exclude" not in plan_mod.interval_lines([done])[0]


def test_a_pair_says_what_it_tests_and_the_report_names_an_untested_claim(tmp_path):
    """A pair's claim is printed beside its verdict; a plan claim no pair tests gets one line."""
    from learners.config.schema import ConfigError
    from learners.config.typed_yaml import from_dict

    plan = from_dict(plan_mod.PlanSpec, {
        "statistic": "win",
        "claims": {"fig4b": "task-ID above multi-head: Fig. 4b",
                   "fig4c": "learnt above linear: Fig. 4c"},
        "pairs": [{"pair": ["t", "lin"], "claim": "task-ID above linear (task information)"},
                  {"pair": ["l", "lin"], "claim": "fig4c"},
                  ["t", "l"]]}, "plan")
    assert plan.pairs == [["t", "lin"], ["l", "lin"], ["t", "l"]]  # what the rules read
    assert [plan.claim(i) for i in range(3)] == [
        "task-ID above linear (task information)", "learnt above linear: Fig. 4c", None]
    assert plan.untested_claims() == ["task-ID above multi-head: Fig. 4b"]
    scores = {"t": {s: 9.0 for s in range(9)}, "lin": {s: 1.0 for s in range(9)},
              "l": {s: 5.0 for s in range(9)}}
    primary = plan_mod.primary_intervals(plan, scores, list(range(9)))
    first = plan_mod.record(plan, list(range(9)), {"t": 10, "lin": 10, "l": 10}, 0)
    state = plan_mod.register(tmp_path, first)
    text = "\n".join(plan_sections.markdown({"plan": state, "primary": primary,
                                             "untested_claims": plan.untested_claims()}))
    assert "| excludes 0.5 | claim |" in text
    assert "| yes: a above b | task-ID above linear (task information) |" in text
    assert "| yes: a above b | learnt above linear: Fig. 4c |" in text
    assert [line for line in text.splitlines() if "no declared pair tests" in line] == [
        "The plan names a claim no declared pair tests: task-ID above multi-head: Fig. 4b."]
    assert "(learnt above linear: Fig. 4c): win" in plan_mod.interval_lines(primary)[1]
    # relabelling after a report is listed with the unplanned looks; the pairs stand
    plan_mod.note_report(tmp_path)
    bare = plan_mod.PlanSpec(pairs=[["t", "lin"], ["l", "lin"], ["t", "l"]], statistic="win")
    state = plan_mod.register(tmp_path, plan_mod.record(bare, list(range(9)),
                                                        {"t": 10, "lin": 10, "l": 10}, 0))
    assert state["changes"][-1]["after_report"]
    assert state["changes"][-1]["what"] == [
        "claims relabelled (labels: no score or stopping rule reads them)"]
    # a plan without claims keeps the record it always had, and its report no claim column
    assert set(plan_mod.record(bare, [0], {"t": 1}, 0)) == set(first) - {"claims", "pair_claims"}
    text = "\n".join(plan_sections.markdown(
        {"plan": state, "primary": plan_mod.primary_intervals(bare, scores, list(range(9)))}))
    assert "claim" not in text.split("## Primary")[1]
    for bad, words in (({"pair": ["t", "lin"], "claim": "fig4x"}, "names no claim"),
                       ({"pair": ["t", "lin"], "claim": "two\nlines"}, "one line"),
                       ({"pairs": ["t", "lin"]}, "expected [a, b] or")):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[")):
            from_dict(plan_mod.PlanSpec, {"claims": {"fig4b": "x y"}, "pairs": [bad]}, "plan")
