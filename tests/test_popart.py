"""PopArt: outputs preserved exactly across a statistics update; targets normalised per task."""

import pytest
import torch

from agents.agent import Agent, AgentOutput
from agents.config import AgentConfig
from agents.heads import HEADS
from learners.algorithms.batch import Batch
from learners.algorithms.popart import PopArt

OBS = {"pixels": (3, 56, 56), "instruction": (32,)}
TASKS = 3


def inputs(T=4, B=6):
    g = torch.Generator().manual_seed(0)
    return {
        "pixels": torch.randint(0, 256, (T, B, *OBS["pixels"]), generator=g, dtype=torch.uint8),
        "instruction": torch.randint(0, 1024, (T, B, 32), generator=g),
        "last_action": torch.zeros(T, B, dtype=torch.long), "last_reward": torch.zeros(T, B),
        "reset": torch.zeros(T, B, dtype=torch.bool),
        "task_id": torch.arange(B).remainder(TASKS).expand(T, B),
    }


@pytest.mark.parametrize("head", HEADS.names())
def test_outputs_preserved_across_a_statistics_update(head):
    torch.manual_seed(0)
    agent = Agent(AgentConfig(head=head, core_options={"hidden_size": 16},
                              torso_options={"hidden_size": 16}), OBS, 5, TASKS,
                  {"instruction": 1024}, popart=True)
    agent.eval().double()  # float64: the check is of the algebra, not of float32 rounding
    popart = PopArt(agent.value_output, TASKS, beta=0.5).double()
    x = inputs()
    with torch.no_grad():
        out, _ = agent(x, tuple(s.double() for s in agent.initial_state(6)))
        before = popart.denormalize(out.value, x["task_id"])
        # Targets on wildly different scales per task.
        targets = (torch.tensor([1.0, 100.0, -1000.0], dtype=torch.float64)[x["task_id"]]
                   * (1 + torch.rand(4, 6, dtype=torch.float64)))
        popart.update_stats(targets.reshape(-1), x["task_id"].reshape(-1))
        out2, _ = agent(x, tuple(s.double() for s in agent.initial_state(6)))
        after = popart.denormalize(out2.value, x["task_id"])
    assert not torch.allclose(popart.sigma, torch.ones(TASKS, dtype=torch.float64))
    assert (after - before).abs().max() < 1e-5
    torch.testing.assert_close(out2.logits, out.logits)  # the policy is untouched


def test_targets_are_normalised_per_task():
    out = torch.nn.Module()
    out.weight, out.bias = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(2))
    popart = PopArt(out, 2, beta=1.0)  # beta 1: the statistics equal this batch's moments
    task = torch.tensor([[0, 1], [0, 1], [0, 1]])
    targets = torch.tensor([[1.0, 10.0], [3.0, 30.0], [5.0, 50.0]])
    popart.update_stats(targets.reshape(-1), task.reshape(-1))
    torch.testing.assert_close(popart.mu, torch.tensor([3.0, 30.0]))
    torch.testing.assert_close(popart.sigma, torch.tensor([(8 / 3) ** 0.5, (800 / 3) ** 0.5]))
    norm, adv = popart.normalize_targets(targets, torch.ones(3, 2), task)
    torch.testing.assert_close(norm.mean(0), torch.zeros(2))
    torch.testing.assert_close(norm[:, 0], norm[:, 1])  # same shape after scaling
    torch.testing.assert_close(adv[0], 1 / popart.sigma)


@pytest.mark.parametrize("learner", ["impala", "ppo"])
def test_training_with_popart(small_cfg, learner):
    from learners.runtime.run_dir import RunDir
    from learners.runtime.trainer import Trainer

    cfg = small_cfg(**{"learner.popart": "true", "learner.name": learner, "learner.minibatches": 2,
                       "env.levels": "[MiniGrid-Empty-5x5-v0, BabyAI-GoToRedBall-v0]",
                       "learner.popart_beta": 0.1})
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    m = summary["final_metrics"]
    assert "popart_sigma/0" in m and "popart_sigma/1" in m
    assert m["popart_sigma/0"] != 1.0


def test_configs_saved_with_the_old_agent_popart_key_still_load(tmp_path):
    """Configs and checkpoints saved with the old ``agent.popart`` key still load.

    Every config.yaml and checkpoint written before the flag had one owner carries ``agent.popart``
    (a copy of ``learner.popart``): it loads, meaning ``learner.popart``.
    """
    import yaml

    from learners.config.schema import load_config

    for old, expected in ((True, True), (False, False)):
        path = tmp_path / f"old_{old}.yaml"
        path.write_text(yaml.safe_dump({"agent": {"core": "lstm", "popart": old},
                                        "learner": {"name": "impala"}}))
        cfg = load_config(path, ["runtime.num_runners=0"])
        assert cfg.learner.popart is expected and not hasattr(cfg.agent, "popart")


def popart_with_stats():
    out = torch.nn.Module()
    out.weight, out.bias = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(2))
    popart = PopArt(out, 2)
    popart.mu.copy_(torch.tensor([2.0, -5.0]))
    popart.nu.copy_(popart.mu**2 + torch.tensor([9.0, 0.25]))  # sigma = 3 and 0.5
    return popart


def test_impala_loss_runs_vtrace_on_returns_and_regresses_normalised_targets():
    """Hessel et al. section 3: the IMPALA loss with PopArt.

    V-trace on de-normalised values; the value loss on normalised targets; policy-gradient
    advantages divided by sigma.
    """
    from learners.algorithms import fill_defaults
    from learners.algorithms.impala import impala_loss, impala_targets
    from learners.algorithms.returns import vtrace
    from learners.algorithms.terms import action_log_probs
    from learners.config.schema import LearnerConfig
    from tests.conftest import random_batch

    T, B, A = 5, 4, 3
    g = torch.Generator().manual_seed(0)
    batch = random_batch(T, B, A, g)
    batch["task_id"] = torch.tensor([0, 1, 0, 1]).expand(T + 1, B)
    popart = popart_with_stats()
    cfg = fill_defaults(LearnerConfig(reward_clip="none", entropy_cost=0.0))
    logits, n = torch.randn(T + 1, B, A, generator=g), torch.randn(T + 1, B, generator=g)
    with_targets = impala_targets(AgentOutput(logits, n), Batch.from_dict(batch), cfg, popart)
    _, m = impala_loss(AgentOutput(logits, n), with_targets, cfg)
    targets = with_targets.value_targets

    sigma, mu = popart.sigma[batch["task_id"]], popart.mu[batch["task_id"]]
    raw = sigma * n + mu
    logp = action_log_probs(logits[:T], batch["action"][:T])
    log_rhos = logp - action_log_probs(batch["behaviour_logits"][:T], batch["action"][:T])
    discounts = cfg.gamma * (~batch["terminated"][:T]).float()
    ref = vtrace(log_rhos, discounts, batch["reward"][:T], raw[:T], raw[T])
    torch.testing.assert_close(m["value_loss"],
                               (0.5 * ((ref.vs - mu[:T]) / sigma[:T] - n[:T]) ** 2).sum())
    torch.testing.assert_close(m["policy_loss"], (-logp * ref.pg_advantages / sigma[:T]).sum())
    torch.testing.assert_close(targets, ref.vs)  # handed to PopArt.update at return scale


def test_ppo_advantages_come_from_returns_and_targets_are_normalised():
    from learners.algorithms.ppo import add_advantages
    from learners.algorithms.returns import gae
    from learners.config.schema import LearnerConfig
    from tests.conftest import random_batch

    T, B = 5, 4
    batch = random_batch(T, B, 3, torch.Generator().manual_seed(1))
    batch["task_id"] = torch.tensor([0, 1, 0, 1]).expand(T + 1, B)
    popart = popart_with_stats()
    cfg = LearnerConfig(reward_clip="none", lambda_=0.95)
    out = add_advantages(Batch.from_dict(batch), cfg, popart)
    sigma, mu = popart.sigma[batch["task_id"]], popart.mu[batch["task_id"]]
    raw = sigma * batch["behaviour_value"] + mu
    discounts = cfg.gamma * (~batch["terminated"][:T]).float()
    adv, returns = gae(batch["reward"][:T], raw[:T], raw[T], discounts, lambda_=0.95)
    torch.testing.assert_close(out.returns, (returns - mu[:T]) / sigma[:T])
    torch.testing.assert_close(out.advantages, adv / sigma[:T])
