"""EnvRunner: a batch of environments and a CPU copy of the agent (docs/design.md).

Each ``rollout`` call steps its batch of envs (``envs.batch``: gymnasium envs one by one, or
ale-py's vector env for Atari) ``T`` times with the latest weights it was given
and returns one ``Trajectory`` of ``[T + 1, B, ...]``; row 0 is the previous call's
last row, so consecutive unrolls tile the experience stream without a gap (with new
weights, row 0's not yet executed action is sampled again from them). Its buffers hold one
array per observation key and per step field declared in ``agents/steps.py``; evaluation
(``run_episodes``) steps through the same two functions as training, keeping no trajectory.
The runner knows nothing of learning (targets are the learner's) and nothing of Ray:
learners/runtime/fleet.py wraps this class in a Ray actor; ``runtime.num_runners: 0`` uses it
in-process.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from agents.agent import Agent
from agents.config import AgentConfig
from agents.steps import AGENT_INPUTS, STEP_FIELDS, fields_by, observation_fields
from envs.batch import BatchStep
from envs.suites import EnvConfig, build_suite, make_batch
from envs.trajectory import Trajectory


def assign_tasks(runner_id: int, num_runners: int, envs_per_runner: int, num_tasks: int,
                 runners_per_task: int = 0) -> list[int]:
    """Task index of each env of one runner.

    ``runners_per_task > 0``: runner ``r`` plays task ``r // runners_per_task`` (the MI
    paper's 5 actors per DMLab level). Otherwise, with at least as many runners as
    tasks, runner ``r`` plays task ``r % num_tasks``; with fewer runners, tasks are dealt
    env by env so every task is played.
    """
    if runners_per_task > 0:
        return [min(runner_id // runners_per_task, num_tasks - 1)] * envs_per_runner
    if num_runners >= num_tasks:
        return [runner_id % num_tasks] * envs_per_runner
    return [(runner_id * envs_per_runner + i) % num_tasks for i in range(envs_per_runner)]


class EnvRunner:
    """A batch of environments and a CPU copy of the agent; each unroll is a ``Trajectory``."""

    def __init__(
        self,
        env_cfg: EnvConfig,
        agent_cfg: AgentConfig,
        runner_id: int = 0,
        num_runners: int = 1,
        envs_per_runner: int = 8,
        unroll_length: int = 20,
        seed: int = 0,
        runners_per_task: int = 0,
        torch_threads: int = 1,
        tasks: list[int] | None = None,
        state_every: int = 0,
        popart: bool = False,
    ):
        torch.set_num_threads(torch_threads)
        self.runner_id = runner_id
        # How to build this runner again on another backend (video records on gymnasium's).
        self.args = dict(env_cfg=env_cfg, agent_cfg=agent_cfg, runner_id=runner_id,
                         num_runners=num_runners, envs_per_runner=envs_per_runner,
                         unroll_length=unroll_length, seed=seed, runners_per_task=runners_per_task,
                         torch_threads=torch_threads, tasks=tasks, state_every=state_every,
                         popart=popart)
        self.suite = build_suite(env_cfg)
        self.T = unroll_length
        self.B = envs_per_runner
        # Record the core state before every state_every-th row (PPO's chunk starts); 0: never.
        self.state_every = state_every if state_every and unroll_length % state_every == 0 else 0
        self.tasks = tasks if tasks is not None else assign_tasks(
            runner_id, max(num_runners, 1), envs_per_runner, len(self.suite.tasks), runners_per_task
        )
        base_seed = seed * 100_003 + runner_id * envs_per_runner
        self.batch = make_batch(self.suite, list(self.tasks),
                                [base_seed + i for i in range(envs_per_runner)])
        space = self.batch.observation_space
        self.obs_shapes = {k: space[k].shape for k in space}
        # Token-valued keys (the instruction): ids 0..high, read off the observation space.
        self.obs_vocab = {k: int(np.max(space[k].high)) + 1 for k in space
                          if k != "pixels" and np.issubdtype(space[k].dtype, np.integer)}
        self.agent = Agent(agent_cfg, self.obs_shapes, self.suite.num_actions,
                           len(self.suite.tasks), self.obs_vocab,
                           popart=popart)  # the learner's agent, so its weights load
        self.agent.eval()
        self.generator = torch.Generator().manual_seed(base_seed)
        self.version = -1
        self._allocate()
        self._start()

    # ------------------------------------------------------------------ buffers

    def _allocate(self) -> None:
        """One ``[T + 1, B, ...]`` buffer per observation key and per step field, as declared."""
        sizes = dict(T1=self.T + 1, B=self.B, A=self.suite.num_actions)
        space = self.batch.observation_space
        self.obs = {f.name: np.zeros(f.sized(**sizes), f.dtype) for f in observation_fields(space)}
        self.buf = {f.name: np.zeros(f.sized(**sizes), f.dtype) for f in STEP_FIELDS}
        for f in fields_by("task"):
            self.buf[f.name][:] = np.asarray(self.tasks)[None]

    def _start(self) -> None:
        """Reset every env and compute the agent's output at step 0 of the first unroll."""
        for k, v in self.batch.reset().items():
            self.obs[k][0] = v
        # A reset row has no previous action or reward (agents/steps.py); after an
        # evaluation the row still holds the last played step's.
        self.buf["reset"][0] = True
        self.buf["last_action"][0] = 0
        self.buf["last_reward"][0] = 0.0
        self.state_before = self.agent.initial_state(self.B)
        self._started = False
        self._act(0)

    def step_inputs(self, t: int) -> dict[str, torch.Tensor]:
        """The agent's inputs at row ``t`` of the unroll, each ``[1, B, ...]``.

        The runner acts on them; ``mira bench`` times inference on them.
        """
        rows = {k: torch.from_numpy(v[t : t + 1]) for k, v in self.obs.items()}
        for k in AGENT_INPUTS:
            rows[k] = torch.from_numpy(self.buf[k][t : t + 1])
        return rows

    # ------------------------------------------------------------------ the step loop
    # One step, in training and evaluation alike: act on row t (``_act``), then step the envs
    # with its actions and write what followed (``_step``). A training unroll acts on each row
    # right after writing it, so that its last row is acted on with the weights it is stamped
    # with; evaluation acts on row 0 and writes the next step back into row 0.

    @torch.inference_mode()
    def _act(self, t: int) -> None:
        """Run the agent on row ``t`` (state ``self.state_before``) and sample actions."""
        out, self.state_after = self.agent(self.step_inputs(t), self.state_before)
        logits = out.logits[0]
        action = torch.multinomial(torch.softmax(logits, -1), 1, generator=self.generator)[:, 0]
        acted = dict(action=action, behaviour_logits=logits, behaviour_value=out.value[0])
        for f in fields_by("act"):
            self.buf[f.name][t] = acted[f.name].numpy()

    def _step(self, t: int, nxt: int, keep: bool = True, screens: bool = False) -> BatchStep:
        """Step every env with row ``t``'s actions; write row ``t``'s outcome, row ``nxt``'s inputs.

        ``keep``: the experience is kept for learning, so truncated episodes get their final
        value. The state after acting on row ``t`` becomes the state before row ``nxt``.
        Returns the envs' step (its episodes, screens and final observations).
        """
        buf = self.buf
        step = self.batch.step(buf["action"][t], screens=screens)
        for f in fields_by("env"):
            buf[f.name][t] = getattr(step, f.name)
        for k, v in step.obs.items():
            self.obs[k][nxt] = v
        buf["final_value"][t] = 0.0
        if keep and step.final_obs:
            self._final_values(t, step.final_obs, step.reward)
        for k, v in self._next_inputs(t, step.reward, step.terminated | step.truncated).items():
            buf[k][nxt] = v
        self.state_before = self.state_after
        return step

    def _next_inputs(self, t: int, reward: np.ndarray, done: np.ndarray) -> dict[str, np.ndarray]:
        """The step-written agent inputs of the row after row ``t``, ``[B]`` each.

        ``done``: a new episode starts there, so the previous action and reward are zeroed.
        """
        return dict(reset=done, last_action=np.where(done, 0, self.buf["action"][t]),
                    last_reward=np.where(done, 0.0, reward))

    @torch.inference_mode()
    def _final_values(self, t: int, final_obs: dict[int, dict], rewards: np.ndarray) -> None:
        """Value of the last observation of episodes truncated at step ``t``.

        The agent sees it as the next row of the episode (no reset), from the state after row ``t``.
        """
        idx = sorted(final_obs)
        inputs = {**self._next_inputs(t, rewards, np.zeros(self.B, bool)),
                  **{f.name: self.buf[f.name][t] for f in fields_by("task")}}
        rows = {k: np.stack([final_obs[i][k] for i in idx]) for k in self.obs}
        rows.update({k: v[idx] for k, v in inputs.items()})
        rows = {k: torch.from_numpy(v[None]) for k, v in rows.items()}
        state = tuple(s[idx] for s in self.state_after)
        out, _ = self.agent(rows, state)
        self.buf["final_value"][t, idx] = out.value[0].numpy()

    # ------------------------------------------------------------------ API

    def set_weights(self, weights: dict, version: int) -> None:
        """Load the agent's ``state_dict``; later trajectories are stamped ``version``."""
        self.agent.load_state_dict(weights)
        self.version = version

    def rollout(self, weights: dict | None = None, version: int | None = None) -> Trajectory:
        """Step every env ``T`` times; returns the trajectory ``[T + 1, B]``."""
        # Row 0 is the last row of the previous unroll; the very first unroll starts from
        # the rows _start() filled.
        if self._started:
            for arr in (*self.obs.values(), *self.buf.values()):
                arr[0] = arr[self.T]
        self._started = True
        if weights is not None:
            self.set_weights(weights, version if version is not None else self.version + 1)
            # Row 0 was acted on with the old weights, but its action has not reached the env
            # yet: act again so that every row of this unroll (and the state carried into
            # row 1) comes from the weights it is stamped with. PPO's lock-step batches are
            # then exactly on-policy (ratio 1 before the first update).
            self._act(0)
        initial_state = tuple(s.numpy().copy() for s in self.state_before)
        chunk_states = [initial_state] if self.state_every else None
        episodes = []
        for t in range(1, self.T + 1):
            step = self._step(t - 1, t)
            episodes += [(int(self.tasks[i]), ret, length) for i, ret, length in step.episodes]
            if chunk_states is not None and t < self.T and t % self.state_every == 0:
                chunk_states.append(tuple(s.numpy().copy() for s in self.state_before))
            self._act(t)
        # self.state_before is now the state before row T = row 0 of the next unroll.
        return Trajectory(
            obs={k: v.copy() for k, v in self.obs.items()},
            **{k: v.copy() for k, v in self.buf.items()},
            initial_state=initial_state,
            chunk_states=(None if chunk_states is None
                          else tuple(np.stack(s) for s in zip(*chunk_states))),
            policy_version=self.version,
            runner_id=self.runner_id,
            episodes=episodes,
        )

    def rollout_with_info(self, weights: dict | None = None,
                          version: int | None = None) -> tuple[Trajectory, dict]:
        """``rollout`` plus the small facts the driver reads without fetching the unroll.

        ``rollout_s``: the seconds the runner spent in ``rollout`` (``mira bench`` sets them
        beside the time the driver waited for the unroll).
        """
        start = time.perf_counter()
        traj = self.rollout(weights, version)
        return traj, {"episodes": traj.episodes, "version": traj.policy_version,
                      "steps": self.T * self.B, "rollout_s": time.perf_counter() - start}

    @torch.inference_mode()
    def run_episodes(self, episodes_per_env: int | list[int], weights: dict | None = None,
                     observe=None) -> list[tuple[int, float, int]]:
        """Evaluation: fresh episodes, agent in eval mode, no trajectories kept.

        Every env plays exactly ``episodes_per_env`` whole episodes (one count for all, or
        one per env; counting the first episodes to finish across envs would favour short
        ones). Each step is the training loop's (``_act``, ``_step``) on row 0 alone, keeping
        no final values; the ``Agent`` shows the task ID to its head only if the head reads
        it. Returns (task, return, length) per episode.
        Leaves the training stream restarted (fresh episodes) afterwards.
        ``observe(i, screen, obs, episode)``, if given, is called after every step of env ``i``
        that counts, with the env's RGB picture after that step (before any reset; the batch
        must render: ``batch.renders``), its observation (the last of a truncated episode,
        else the step's) and ``episode = (return, length)`` on the step that ends a counted
        episode, else None (``envs/video.py`` records frames with it).
        """
        if weights is not None:
            self.agent.load_state_dict(weights)
        self.agent.eval()
        target = np.broadcast_to(np.asarray(episodes_per_env, dtype=int), (self.B,))
        done_count = np.zeros(self.B, dtype=int)
        results: list[tuple[int, float, int]] = []
        self._start()
        while (done_count < target).any():
            counting = done_count < target
            self._act(0)
            step = self._step(0, 0, keep=False, screens=observe is not None)
            ended: dict[int, tuple[float, int]] = {}
            for i, ret, length in step.episodes:
                if counting[i]:
                    ended[i] = (ret, length)
                    results.append((int(self.tasks[i]), ret, length))
                    done_count[i] += 1
            if observe is not None:
                for i in np.flatnonzero(counting):
                    last = step.final_obs.get(i) or {k: v[i] for k, v in step.obs.items()}
                    observe(int(i), step.screens[i], last, ended.get(i))
        self._start()
        return results

    def spec(self) -> dict:
        """What the learner needs to build the same agent."""
        return dict(
            obs_shapes=self.obs_shapes,
            obs_vocab=self.obs_vocab,
            num_actions=self.suite.num_actions,
            tasks=list(self.suite.tasks),
            frames_per_step=self.suite.frames_per_step,
            score_suite=self.suite.score_suite,
        )

    def on_backend(self, backend: str) -> EnvRunner:
        """The same runner (envs, tasks, seeds, current weights) on another Atari backend."""
        import dataclasses

        env_cfg = dataclasses.replace(self.args["env_cfg"], backend=backend)
        other = EnvRunner(**{**self.args, "env_cfg": env_cfg, "tasks": list(self.tasks)})
        other.set_weights(self.agent.state_dict(), self.version)
        return other

    def close(self) -> None:
        """Close every environment."""
        self.batch.close()
