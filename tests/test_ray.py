"""The distributed path on a real two-node local Ray cluster (``ray.cluster_utils.Cluster``)."""

import threading
import time
from pathlib import Path

import pytest

from learners.runtime.run_dir import RunDir
from learners.runtime.trainer import Trainer

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def node_of(actor) -> str:
    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


def test_two_runners_on_two_nodes_train(cluster, small_cfg):
    cfg = small_cfg(**{"runtime.num_runners": 2, "runtime.address": cluster.address,
                       "run.total_frames": 600})
    trainer = Trainer(cfg, RunDir.create(cfg, None), quiet=True)
    nodes = {node_of(r.actor) for r in trainer.fleet.runners}
    assert len(nodes) == 2, "runners should spread over both nodes"
    summary = trainer.train()
    assert summary["frames"] >= 600 and summary["updates"] >= 3
    assert summary["lost_unrolls"] == 0
    assert 0 <= summary["final_metrics"]["policy_lag"] <= summary["updates"]


def test_a_killed_runner_is_replaced_and_training_goes_on(cluster, small_cfg):
    cfg = small_cfg(**{"runtime.num_runners": 2, "run.total_frames": 3000})
    trainer = Trainer(cfg, RunDir.create(cfg, None), quiet=True)
    victim = trainer.fleet.runners[0]

    def kill_soon():
        # Mid-run: once training is under way, and well before it can finish.
        while trainer.frames < 300:
            time.sleep(0.05)
        ray.kill(victim.actor, no_restart=True)

    threading.Thread(target=kill_soon, daemon=True).start()
    summary = trainer.train()
    assert summary["lost_unrolls"] >= 1
    assert summary["frames"] >= 3000
    assert trainer.fleet.runners[0] is not victim
    ray.get(trainer.fleet.runners[0].spec())  # the replacement is alive


def test_ppo_lock_step_has_zero_policy_lag(cluster, small_cfg):
    cfg = small_cfg(**{"runtime.num_runners": 2, "learner.name": "ppo", "learner.minibatches": 2,
                       "run.total_frames": 300})
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["final_metrics"]["policy_lag"] == 0.0


def test_impala_in_lock_step_has_zero_policy_lag(cluster, small_cfg):
    """learner.lock_step: true runs IMPALA synchronously.

    Every batch is acted with one weights version.
    """
    cfg = small_cfg(**{"runtime.num_runners": 2, "learner.batch_size": 8,
                       "learner.lock_step": "true", "run.total_frames": 300})
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    assert summary["final_metrics"]["policy_lag"] == 0.0


def test_a_lost_node_costs_its_unrolls_not_the_run(cluster, small_cfg):
    """A lost node costs its unrolls, not the run.

    Remove a worker node mid-run: its runner is replaced on the remaining nodes, unrolls that lived
    in its object store are counted as lost, and training reaches its budget.
    """
    node = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    cfg = small_cfg(**{"runtime.num_runners": 3, "run.total_frames": 4000})
    trainer = Trainer(cfg, RunDir.create(cfg, None), quiet=True)
    doomed = {i for i, r in enumerate(trainer.fleet.runners) if node_of(r.actor) == node.node_id}
    assert doomed, "SPREAD should put a runner on the new node"
    assert ray.get(trainer.learner.actor.__ray_call__.remote(
        lambda self: ray.get_runtime_context().get_node_id())) != node.node_id

    def remove_soon():
        while trainer.frames < 400:
            time.sleep(0.05)
        cluster.remove_node(node)

    threading.Thread(target=remove_soon, daemon=True).start()
    summary = trainer.train()
    assert summary["lost_unrolls"] >= 1 and summary["frames"] >= 4000
    assert all(node_of(trainer.fleet.runners[i].actor) != node.node_id for i in doomed)


def test_a_cuda_learner_on_a_cluster_without_gpus_is_a_clear_error(cluster, small_cfg):
    from learners.config.schema import ConfigError

    cfg = small_cfg(**{"runtime.num_runners": 2, "learner.device": "cuda"})
    with pytest.raises(ConfigError, match="has no GPU"):
        Trainer(cfg, RunDir.create(cfg, None), quiet=True)


def test_a_run_the_cluster_cannot_hold_fails_with_the_numbers(cluster, small_cfg):
    from learners.config.schema import ConfigError

    # The cluster has 4 CPUs (2 nodes x 2): 4 runners + the learner's 1 would wait forever.
    cfg = small_cfg(**{"runtime.num_runners": 4, "runtime.address": cluster.address})
    with pytest.raises(ConfigError,
                       match=r"has 4 CPUs and this run needs 5 \(runtime.num_runners=4"):
        Trainer(cfg, RunDir.create(cfg, None), quiet=True)


def test_an_address_where_no_cluster_answers_fails_fast(tmp_path):
    # In a subprocess: connecting is the point, and this process stays on the module's cluster.
    import subprocess
    import sys

    from tests.conftest import small_overrides

    overrides = small_overrides(tmp_path, **{"runtime.num_runners": 1,
                                             "runtime.address": "127.0.0.1:1"})
    root = Path(__file__).resolve().parents[1]
    start = time.time()
    out = subprocess.run([sys.executable, "-m", "scripts.cli", "train",
                          str(root / "configs/impala_minigrid.yaml"), *overrides],
                         cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and time.time() - start < 30  # a socket probe, not Ray's GCS wait
    assert out.stderr.strip().splitlines()[-1].startswith(
        "mira: error: runtime.address=127.0.0.1:1: no Ray cluster answers")


def test_a_dead_learner_stops_the_run_with_a_resumable_directory(cluster, small_cfg):
    from learners.config.schema import RunStopped

    cfg = small_cfg(**{"runtime.num_runners": 1, "run.total_frames": 10**6,
                       "run.checkpoint_every_s": 1})
    trainer = Trainer(cfg, RunDir.create(cfg, None), quiet=True)

    def kill_soon():
        while RunDir(cfg.run.dir).latest_checkpoint() is None or trainer.frames < 400:
            time.sleep(0.05)
        ray.kill(trainer.learner.actor, no_restart=True)

    threading.Thread(target=kill_soon, daemon=True).start()
    with pytest.raises(RunStopped, match=r"the learner actor died .* continue it from its last "
                                         r"checkpoint \(ckpt_\d+\.pt\) with .mira train --resume"):
        trainer.train()
    run = RunDir(cfg.run.dir)
    assert (run.latest_checkpoint() is not None
            and "stopped" in (run.path / "summary.json").read_text())
    resumed = Trainer(run.load_config(["run.total_frames=800"]), run,
                      resume_from=run.latest_checkpoint(), quiet=True)
    assert resumed.train()["frames"] >= 800
