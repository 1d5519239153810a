"""mira compare's population-based training: exploit/explore, its checks, and a real run."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from learners.config.schema import ConfigError, load_config
from scripts.compare.command import load_spec, run_compare
from scripts.compare.pbt import exploit_explore
from tests.test_compare import write_compare


def test_pbt_exploit_explore_and_its_checks(tmp_path):
    population = [("a", 0.1, {"lr": 1.0}), ("b", 0.9, {"lr": 2.0}), ("c", None, {"lr": 3.0}),
                  ("d", 0.5, {"lr": 4.0})]
    moves = exploit_explore(population, quantile=0.25, perturb=[0.5, 2.0],
                            rng=np.random.default_rng(0))
    assert list(moves) == ["c"]  # no finished episode ranks last
    donor, hyper = moves["c"]
    assert donor == "b" and hyper["lr"] in (1.0, 4.0)
    assert exploit_explore(population[:1], 0.25, [0.8], np.random.default_rng(0)) == {}
    pbt = {"enabled": True, "interval_frames": 200}
    with pytest.raises(ConfigError, match="lr_schedule: constant"):
        load_spec(write_compare(tmp_path, pbt=pbt))
    with pytest.raises(ConfigError, match="at least 2 seeds"):
        load_spec(write_compare(tmp_path, pbt=pbt, seeds=[0]))


def test_pbt_generations_keep_one_learning_rate_schedule_over_the_run(tmp_path):
    """Each generation trains to its boundary; the linear schedule still spans the whole run."""
    from scripts.compare.pbt import run_population

    pbt = {"enabled": True, "interval_frames": 200, "hyperparams": ["learner.entropy_cost"]}
    spec, trials, _ = load_spec(write_compare(tmp_path, pbt=pbt))
    total = trials[0].cfg.run.total_frames
    seen = []

    def first_generation_only(jobs):
        seen.extend(jobs)
        return {}, {"stop": "after the first generation"}

    run_population(spec, trials, tmp_path / "out", first_generation_only, quiet=True)
    assert len(seen) == len(trials) and all(j["frames"] == 200 < total for j in seen)
    for job in seen:
        cfg = load_config(job["base"], job["overrides"])
        assert cfg.run.total_frames == 200
        assert cfg.learner.optimizer.lr_decay_frames == total  # not 200: no decay to 0 at 200



@pytest.mark.ray
def test_pbt_copies_a_better_checkpoint(tmp_path, ray_local):
    path = write_compare(tmp_path, matrix={}, seeds=[0, 1], evaluate={"episodes": 1}, plan={},
                         pbt={"enabled": True, "interval_frames": 200, "quantile": 0.5,
                              "init_range": 1.0})
    overrides = yaml.safe_load(path.read_text())
    overrides["overrides"]["learner.optimizer.lr_schedule"] = "constant"
    path.write_text(yaml.safe_dump(overrides))
    result = run_compare(str(path), quiet=True)
    assert set(result["trials"].values()) == {"trained"}
    state = json.loads((Path(result["out"]) / "pbt.json").read_text())
    (generation,) = state["generations"]  # 400 frames in segments of 200: one exploit/explore step
    ((recipient, move),) = generation["moves"].items()
    assert move["copied"] != recipient and state["hyperparams"][recipient] == move["hyperparams"]
    assert json.loads((Path(result["out"]) / "results.json").read_text())["pbt"]["generations"]
