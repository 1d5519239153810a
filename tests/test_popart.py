"""PopArt: outputs preserved exactly across a statistics update; targets normalised per task."""

import pytest
import torch

from agents.agent import Agent
from agents.config import AgentConfig
from agents.heads import HEADS
from learners.popart import PopArt

OBS = {"pixels": (3, 56, 56), "instruction": (32,)}
TASKS = 3


def inputs(T=4, B=6):
    g = torch.Generator().manual_seed(0)
    return {
        "pixels": torch.randint(0, 256, (T, B, *OBS["pixels"]), generator=g, dtype=torch.uint8),
        "instruction": torch.randint(0, 1024, (T, B, 32), generator=g),
        "last_action": torch.zeros(T, B, dtype=torch.long), "last_reward": torch.zeros(T, B),
        "reset": torch.zeros(T, B, dtype=torch.bool), "task_id": torch.arange(B).remainder(TASKS).expand(T, B),
    }


@pytest.mark.parametrize("head", HEADS.names())
def test_outputs_preserved_across_a_statistics_update(head):
    torch.manual_seed(0)
    agent = Agent(AgentConfig(head=head, popart=True, core_options={"hidden_size": 16}, torso_options={"hidden_size": 16}), OBS, 5, TASKS)
    agent.eval().double()  # float64: the check is of the algebra, not of float32 rounding
    popart = PopArt(agent.value_output, TASKS, beta=0.5).double()
    x = inputs()
    batch = {"task_id": x["task_id"]}
    with torch.no_grad():
        out, _ = agent(x, tuple(s.double() for s in agent.initial_state(6)))
        before = popart.denormalize(out.value, batch)
        # Targets on wildly different scales per task.
        targets = torch.tensor([1.0, 100.0, -1000.0], dtype=torch.float64)[x["task_id"]] * (1 + torch.rand(4, 6, dtype=torch.float64))
        popart.update_stats(targets.reshape(-1), x["task_id"].reshape(-1))
        out2, _ = agent(x, tuple(s.double() for s in agent.initial_state(6)))
        after = popart.denormalize(out2.value, batch)
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
    norm, adv = popart.normalize_targets(targets, torch.ones(3, 2), {"task_id": task})
    torch.testing.assert_close(norm.mean(0), torch.zeros(2))
    torch.testing.assert_close(norm[:, 0], norm[:, 1])  # same shape after scaling
    torch.testing.assert_close(adv[0], 1 / popart.sigma)


@pytest.mark.parametrize("learner", ["impala", "ppo"])
def test_training_with_popart(small_cfg, learner):
    from learners.run_dir import RunDir
    from learners.trainer import Trainer

    cfg = small_cfg(**{"learner.popart": "true", "learner.name": learner, "learner.minibatches": 2,
                       "env.levels": "[MiniGrid-Empty-5x5-v0, BabyAI-GoToRedBall-v0]", "learner.popart_beta": 0.1})
    summary = Trainer(cfg, RunDir.create(cfg, None), quiet=True).train()
    m = summary["final_metrics"]
    assert "popart_sigma/0" in m and "popart_sigma/1" in m
    assert m["popart_sigma/0"] != 1.0
