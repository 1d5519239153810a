"""The Learner: turns batches of trajectories into parameter updates (docs/design.md).

It owns the model, optimizer, learning-rate schedule, PopArt statistics and step counters,
and the update itself (``fit``): targets, epochs, minibatches, chunks, forward, backward,
clipping, the non-finite guard, PopArt's statistics, the optimizer step and the version. The
algorithm (``learners/algorithms/``) supplies only its targets and its loss, pure functions
of tensors and the config.

It is a plain class: learners/runtime/fleet.py wraps it in a Ray actor (asking for a GPU when
``learner.device`` wants one) or, with ``runtime.num_runners: 0``, calls it in-process.
On CUDA it stages batches through pinned memory (skipped on CPU). On either device it can
autocast the forward pass to bfloat16 (``learner.mixed_precision``; on CPU this pays only
where the CPU has bfloat16 instructions, e.g. AVX512-BF16 or AMX: measure with ``mira bench``).

Devices (``learners/update/device.py``): the learner uses a GPU only where it may
(``resolve_device``), computes in full float32 with TensorFloat-32 off (``use_full_float32``),
flushes denormal floats to zero on CPU (``flush_denormals``, ``learner.flush_denormal``),
and every tensor it hands out (weights, optimizer state, PopArt statistics, checkpoints) is a
CPU copy that shares no storage with its live tensors (``to_cpu``), whatever its device.

Before its steps, ``learn`` moves the agent's running input statistics once per batch
(``input_norm: running``; ``Agent.observe``), and on its schedules runs the torso monitor's
probe (``learners/update/monitor.py``) and ReDo (``learners/update/redo.py``); steps whose
gradient spikes are kept for replay with ``learner.capture_grad_norm``
(``learners/update/bursts.py``). Each is described where it lives.
"""

from __future__ import annotations

import collections
import math
import time

import numpy as np
import torch

from agents.agent import Agent, AgentOutput
from envs.trajectory import Trajectory
from learners.algorithms import LEARNERS
from learners.algorithms.batch import Batch, chunk_sequences, minibatch_indices, pick
from learners.update import bursts
from learners.update.clipping import CompiledClip
from learners.update.device import flush_denormals, resolve_device, to_cpu, use_full_float32
from learners.update.malloc import keep_freed_memory
from learners.update.monitor import TorsoMonitor, features_outgoing
from learners.update.optim import make_optimizer, match_groups, parameter_groups
from learners.update.outputs import kept_outputs, mean_metrics
from learners.update.redo import Recycler
from learners.update.report import UpdateReport
from learners.update.schedule import lr_at
from learners.update.staging import StaticBatch

CAPTURE_LIMIT = 10  # steps a run keeps of learner.capture_grad_norm (an Atari minibatch ~30 MB)


def behaviour_output(batch: Batch) -> AgentOutput:
    """The agent's output over all ``T + 1`` rows of ``batch`` as its runners computed it.

    Runners act in eval mode, as the learner runs the agent, on the same inputs from the same
    core states, and a training unroll acts on its last row with the weights it is stamped
    with (``envs/runner.py``). So when those weights are the learner's (policy lag 0) the
    recorded ``behaviour_logits`` and ``behaviour_value`` are what a forward pass over the
    batch would return, up to float rounding (``tests/test_losses.py`` checks the targets
    both give), and the importance weights pi / mu are exactly 1, except where the agent
    keeps running input statistics (``input_norm: running``): ``learn`` moves them before the
    steps, so the learner's first policy reads newer statistics than the runners acted with
    (see there). PPO's GAE reads the runners' values for the same reason. One step at a time
    against a whole unroll at once, the rounding can differ enough to flip a near-tie in which
    RIMs units are active; the runners' output is then the policy that actually acted.
    """
    return AgentOutput(logits=batch.behaviour_logits, value=batch.behaviour_value)


class Learner:
    """The model and its optimizer, PopArt and counters; ``update`` is one learner update."""

    def __init__(self, cfg, spec: dict, threads: int | None = None,
                 reserved_gpus: int | None = None):
        """Build the agent, optimizer and PopArt statistics on the learner's device.

        ``cfg``: the ExperimentConfig; ``spec``: ``EnvRunner.spec()`` (obs shapes, actions,
        tasks); ``threads``: torch's intra-op threads (unset: torch's default);
        ``reserved_gpus``: the GPUs Ray reserved for this learner actor, None outside Ray
        (``resolve_device``). Also turns TF32 off in this process (``use_full_float32``), sets
        its denormal flushing (``flush_denormals``) and keeps its freed heap memory for reuse
        (``learners/update/malloc.py``).
        """
        flush_denormals(cfg.learner.flush_denormal)  # before its threads start: see there
        if threads:
            torch.set_num_threads(threads)
        keep_freed_memory()  # updates reuse their buffers instead of faulting in new pages
        torch.manual_seed(cfg.run.seed)
        use_full_float32()
        if cfg.run.deterministic:  # replayable runs (learners/runtime/trainer.py)
            torch.use_deterministic_algorithms(True)
        self.cfg = cfg
        self.lcfg = cfg.learner
        self.spec = spec
        self.device = resolve_device(self.lcfg.device, reserved_gpus)
        self.agent = Agent(cfg.agent, spec["obs_shapes"], spec["num_actions"], len(spec["tasks"]),
                           spec.get("obs_vocab"), popart=self.lcfg.popart).to(self.device)
        # The learner evaluates the policy in the actors' mode (eval, EnvRunner): importance
        # ratios (V-trace, PPO) need the learner's pi to be the behaviour policy mu for the
        # same weights, and train-mode dropout (RIMs' attention dropout) would make them differ.
        self.agent.eval()
        self.optimizer = make_optimizer(parameter_groups(self.agent, self.lcfg.optimizer),
                                        self.lcfg.optimizer)
        self.popart = None
        if getattr(self.lcfg, "popart", False):
            from learners.algorithms.popart import PopArt

            self.popart = PopArt(self.agent.value_output, len(spec["tasks"]),
                                 beta=self.lcfg.popart_beta).to(self.device)
        self.version = 0  # number of parameter updates so far = the policy version
        self.step_skipped = False  # a step of the current update met a non-finite loss or gradient
        self.skipped_updates = 0  # updates skipped by the divergence guard (``step``), in all
        self.skipped_in_row = 0
        self.last_good_version = 0
        self.frames = 0  # environment frames consumed by updates (drives the lr schedule)
        self.captures: list[dict] = []  # steps kept for learner.capture_grad_norm, not yet taken
        self.captured = 0  # steps kept so far by this learner (at most CAPTURE_LIMIT)
        self.frames_per_step = spec["frames_per_step"]
        # inactive and dormant torso units and the features' signal into the core, every
        # learner.monitor.every updates
        self.monitor = TorsoMonitor(self.agent.torso, self.lcfg.monitor,
                                    features_outgoing(self.agent))
        # ReDo: dormant torso units re-initialised every learner.redo.every updates (0: never)
        self.recycler = (Recycler(self.agent, self.optimizer, self.lcfg.redo, cfg.run.seed)
                         if self.lcfg.redo.every else None)
        # PopArt's statistics read each minibatch's value targets of the last pass (IMPALA)
        self.keeps_targets = (self.popart is not None
                              and LEARNERS.get(self.lcfg.name).popart_from_last_pass)
        # learner.compile: each minibatch's pick, forward and loss as one compiled graph
        self.minibatch_loss = self.eager_minibatch_loss
        self.compiled_clip = None  # learner.compile: gradient clipping as a graph of its own
        if self.lcfg.compile:
            graphs = self.device.type == "cuda"
            compiled = torch.compile(self.eager_minibatch_loss,
                                     mode="reduce-overhead" if graphs else None, dynamic=False)
            self.minibatch_loss = (
                compiled if not graphs
                else lambda batch, state, idx: kept_outputs(*compiled(batch, state, idx)))
            self.compiled_clip = CompiledClip(self.agent, self.lcfg.optimizer.max_grad_norm,
                                              graphs)
        # CUDA graphs: the batch in buffers that keep their addresses, so a replay copies only
        # the minibatch's sequences in (learners/update/staging.py)
        self.static_batch = (StaticBatch() if self.lcfg.compile and self.device.type == "cuda"
                             else None)

    # ------------------------------------------------------------------ data

    def to_batch(self, trajectories: list[Trajectory]) -> tuple[Batch, tuple]:
        """The trajectories as one ``Batch`` on the learner's device, and its initial core state.

        Several trajectories are joined along the batch axis (``Trajectory.concat``); on CUDA the
        arrays go through pinned memory, so the copies to the GPU do not block.
        """
        traj = trajectories[0] if len(trajectories) == 1 else Trajectory.concat(trajectories)
        pin = self.device.type == "cuda"

        def move(x: np.ndarray) -> torch.Tensor:
            t = torch.from_numpy(np.ascontiguousarray(x) if x.flags.writeable else np.array(x))
            if pin:
                t = t.pin_memory()
            return t.to(self.device, non_blocking=pin)

        batch = Batch(obs={k: move(v) for k, v in traj.obs.items()},
                      **{f: move(getattr(traj, f)) for f in Trajectory.STEP_FIELDS},
                      chunk_states=None if traj.chunk_states is None
                      else tuple(move(s) for s in traj.chunk_states))
        state = tuple(move(s) for s in traj.initial_state)
        return batch, state

    def forward(self, batch: Batch, state: tuple):
        """The agent's output over all of ``batch``'s rows from core ``state``, in float32.

        With ``learner.mixed_precision`` the forward runs under bfloat16 autocast and its outputs
        are cast back to float32 for the losses.
        """
        autocast = bool(self.lcfg.mixed_precision)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
            out, _ = self.agent(batch.inputs(), state)
        if autocast:
            out = type(out)(*(x.float() for x in out))
        return out

    # ------------------------------------------------------------------ updates

    def lr(self) -> float:
        """The learning rate now, on the config's schedule (``learners.update.schedule.lr_at``)."""
        return lr_at(self.cfg, self.frames)

    def step(self, loss: torch.Tensor, inputs: tuple | None = None) -> float:
        """One optimizer step at the scheduled lr; returns the pre-clip gradient norm.

        Divergence guard: a non-finite loss or gradient norm skips the step (weights and
        optimizer state untouched) and marks the current update as skipped; ``update``
        counts such updates and reports the run as diverged after
        ``learner.max_skipped_updates`` of them in a row. ``inputs`` (the batch, its core
        state, the minibatch's sequences in it and the step's index in the update) are what
        ``capture`` keeps of a burst.
        The loss and the gradient norm come back to the host together, one read a step
        besides PPO's ``target_kl`` check and a burst capture's (on a GPU each read waits for
        the device); the backward of a non-finite loss is harmless, its gradients are dropped.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr() * group["lr_scale"]
        self.optimizer.zero_grad(set_to_none=True)
        threshold = self.lcfg.capture_grad_norm
        watch = bool(threshold) and inputs is not None and self.captured < CAPTURE_LIMIT
        loss.backward()
        norms = bursts.grad_norms(self.agent) if watch else None
        if self.compiled_clip is None:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.agent.parameters(),
                                                       self.lcfg.optimizer.max_grad_norm)
            read = torch.stack([loss.detach().float(), grad_norm.float()])
        else:  # the same as one graph (learners/update/clipping.py)
            read = self.compiled_clip.clip(loss)
        loss_value, grad_norm = read.tolist()
        if not math.isfinite(loss_value):
            if watch:  # kept without gradient norms (all non-finite): its replay's loss terms
                # show which one broke
                self.capture(float("nan"), {}, *inputs)
            grad_norm = float("nan")
        elif watch and not grad_norm <= threshold:  # a non-finite norm is kept too
            self.capture(grad_norm, norms, *inputs)
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            self.step_skipped = True
            return grad_norm
        self.optimizer.step()
        return grad_norm

    def capture(self, grad_norm: float, norms: dict[str, float], batch: Batch, state: tuple,
                idx: torch.Tensor | None, index: int) -> None:
        """Keep the step about to be taken (``learners/update/bursts.py``'s ``record``)."""
        self.captures.append(bursts.record(self, grad_norm, norms, batch, state, idx, index))
        self.captured += 1

    def take_captures(self) -> list[dict]:
        """The steps kept since the last call (CPU tensors), handed over once."""
        taken, self.captures = self.captures, []
        return taken

    def replay(self, capture: dict) -> tuple[dict[str, float], dict[str, float]]:
        """``(norms, terms)`` recomputed from a capture (``learners/update/bursts.py``)."""
        return bursts.replay(self, capture)

    def eager_minibatch_loss(self, batch: Batch, state: tuple,
                             idx: torch.Tensor | None) -> tuple:
        """``(loss, metrics, kept)`` of the minibatch of ``batch``'s sequences ``idx``.

        The pick (``pick``; ``idx = None``: the whole batch), the forward, the algorithm's
        targets where they are not fixed per batch, and the loss; ``kept``: the minibatch's
        value targets and task ids where PopArt reads them after the epochs
        (``keeps_targets``), else None. ``learner.compile`` compiles this (``__init__``),
        the pick inside the graph.
        """
        algorithm, cfg = LEARNERS.get(self.lcfg.name), self.lcfg
        mb, mb_state = pick(batch, state, idx)
        out = self.forward(mb, mb_state)
        if not algorithm.fixed_targets(cfg):
            mb = algorithm.targets(out, mb, cfg, self.popart)
        loss, metrics = algorithm.loss(out, mb, cfg)
        return loss, metrics, (mb.value_targets, mb.task_id) if self.keeps_targets else None

    def fit(self, batch: Batch, state: tuple, on_policy: bool = False) -> dict:
        """The optimizer steps of one update on ``batch`` from core ``state``; returns metrics.

        The algorithm's targets are computed once, from the weights at the update's start,
        when it fixes them (PPO's GAE; IMPALA with ``learner.impala.fixed_targets``), and the
        batch may then be cut into chunks of ``learner.recurrence`` steps, each started from
        the core state stored at its first row; otherwise before each step, from that step's
        output (the paper's IMPALA). ``on_policy``: every unroll of the batch was acted with
        the weights the update starts from (policy lag 0, as lock-step runners always are),
        so the once-per-batch targets read the logits and values the runners recorded
        (``behaviour_output``) instead of recomputing them (in float32; not under
        ``learner.mixed_precision``). ``learner.epochs`` passes of ``learner.minibatches``
        steps each follow, minibatches drawn with a generator seeded by the run's seed and
        the version (``run.seed * 7 + version``), so a resumed run draws the same ones. The
        algorithm may end the epochs early (PPO's ``target_kl``). PopArt's statistics move
        after the steps, unless one was skipped (``step``).
        """
        algorithm, cfg, popart = LEARNERS.get(self.lcfg.name), self.lcfg, self.popart
        fixed = algorithm.fixed_targets(cfg)
        batch_targets = None
        if fixed:
            with torch.no_grad():
                out = None
                if algorithm.reads_output:
                    # Under bfloat16 autocast the learner's pass is not the runners' float32
                    # one, and learner.mixed_precision's A/B measures the whole bf16 learner.
                    reuse = on_policy and not self.lcfg.mixed_precision
                    out = behaviour_output(batch) if reuse else self.forward(batch, state)
                batch = algorithm.targets(out, batch, cfg, popart)
            batch_targets = (batch.value_targets, batch.task_id)
            if cfg.recurrence and cfg.recurrence < batch.steps:
                batch, state = chunk_sequences(batch, state, cfg.recurrence, self.agent)
        # The epochs pass over the same observations again and again: lay them out once as
        # the training pass reads them (the same values).
        batch = batch.replace(obs=self.agent.training_layout(batch.obs))
        if self.static_batch is not None:
            batch, state = self.static_batch.stage(batch, state)
        history = collections.defaultdict(list)
        generator = torch.Generator().manual_seed(self.cfg.run.seed * 7 + self.version)
        stop, epochs_done = False, 0
        index = 0  # the optimizer step's position in this update
        for _ in range(cfg.epochs):
            epochs_done += 1
            last_pass = []
            for idx in minibatch_indices(batch.reset.shape[1], cfg.minibatches, generator,
                                         batch.reset.device):
                if cfg.compile:  # one CUDA-graph step: forward, backward, clipping
                    torch.compiler.cudagraph_mark_step_begin()
                loss, metrics, kept = self.minibatch_loss(batch, state, idx)
                metrics["grad_norm"] = self.step(loss, (batch, state, idx, index))
                index += 1
                last_pass.append(kept)
                for k, v in metrics.items():  # read back once, after the epochs
                    history[k].append(v.detach() if torch.is_tensor(v) else v)
                if algorithm.stop_early is not None and algorithm.stop_early(metrics, cfg):
                    stop = True
                    break
            if stop:
                break
        result = mean_metrics(history)
        if algorithm.stop_early is not None:
            result["epochs_done"] = epochs_done
        if popart is not None and not self.step_skipped:
            # Return-scale targets: the last pass's minibatches', joined, or the whole batch's.
            targets, task = (
                (torch.cat([t for t, _ in last_pass], 1), torch.cat([k for _, k in last_pass], 1))
                if algorithm.popart_from_last_pass else batch_targets)
            result.update(popart.update(targets, task))
        return result

    def update(self, *trajectories: Trajectory) -> dict:
        """``learn``'s report as one dict of floats (``UpdateReport.flat``): tests, bench."""
        return self.learn(*trajectories).flat()

    def learn(self, *trajectories: Trajectory) -> UpdateReport:
        """One learner update on a batch made of ``trajectories``: its metrics and counters."""
        start = time.perf_counter()
        lags = [self.version - t.policy_version for t in trajectories]
        batch, state = self.to_batch(list(trajectories))
        batch_s = time.perf_counter() - start
        # The input statistics the agent keeps (agent.torso_options.input_norm: running) move
        # once per batch, here, before the steps and the monitor's probe, which then read them
        # as the update does (Sample Factory normalises a batch once, before its epochs). Rows
        # 0..T-1: row T is row 0 of the next unroll, so each frame counts once. The update's
        # first policy then differs from the runners' by that move (most at the first batch,
        # little once the statistics have settled), as a slightly stale policy does: PPO's ratio
        # and V-trace's weights see it, targets read from the runners' output do not.
        self.agent.observe({k: v[:-1] for k, v in batch.obs.items()})
        # the monitor's probe first: the weights as the previous updates left them, so where
        # ReDo recycles on the same update the probe shows what the last updates did to the
        # units, not the fresh draw (read after the steps: no sync)
        probe = self.monitor.start(batch) if self.monitor.due(self.version) else None
        # ReDo before the steps, so the recycled units take part in this update's
        recycled = (self.recycler.recycle(batch, self.version)
                    if self.recycler is not None and self.recycler.due(self.version) else {})
        self.step_skipped = False
        metrics = self.fit(batch, state, on_policy=all(lag == 0 for lag in lags))
        T, B = batch.unroll_length, batch.reset.shape[1]
        self.frames += T * B * self.frames_per_step
        self.version += 1
        if self.step_skipped:
            self.skipped_updates += 1
            self.skipped_in_row += 1
        else:
            self.skipped_in_row = 0
            self.last_good_version = self.version
        metrics = {k: float(v) for k, v in metrics.items()}
        metrics.update(
            lr=self.lr(), policy_lag=float(np.mean(lags)), update_s=time.perf_counter() - start,
            batch_s=batch_s,
            skipped_updates=float(self.skipped_updates),
        )
        metrics.update(recycled)
        for k, v in self.agent.diagnostics().items():
            v = v.detach().cpu().reshape(-1)
            for i, x in enumerate(v.tolist()):
                metrics[f"{k}/{i}"] = x
        # Diverged: the driver stops the run; the weights are still those of update
        # ``last_good_version`` (skipped steps never touch them).
        diverged = (self.last_good_version
                    if self.skipped_in_row >= self.lcfg.max_skipped_updates else None)
        return UpdateReport(metrics, self.frames, self.version, diverged, len(self.captures),
                            probe.values() if probe is not None else {})

    # ------------------------------------------------------------------ state

    def get_weights(self) -> dict:
        """A snapshot of the agent's state dict: CPU copies (what the runners load).

        It holds the weights of version ``get_version()`` now and does not change with later
        updates, also when the learner runs on CPU in the caller's process.
        """
        return to_cpu(self.agent.state_dict())

    def get_version(self) -> int:
        """The policy version: the number of updates so far."""
        return self.version

    def state_counters(self) -> dict:
        """``{"version": ..., "frames": ...}``: updates so far and the frames they consumed."""
        return {"version": self.version, "frames": self.frames}

    def state_dict(self) -> dict:
        """Everything needed to continue: plain tensors and numbers (``weights_only`` loadable).

        All tensors are CPU copies (``to_cpu``): a checkpoint never holds CUDA tensors or the
        learner's live optimizer state.
        """
        state = {
            "agent": self.agent.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": {"version": self.version, "frames": self.frames},
        }
        if self.popart is not None:
            state["popart"] = self.popart.state_dict()
        return to_cpu(state)

    def load_state_dict(self, state: dict) -> None:
        """Continue from a ``state_dict()``: weights, optimizer state, counters, PopArt stats."""
        self.agent.load_state_dict(state["agent"])
        # The optimizer keeps the tensors it is given where their device already fits (CPU):
        # copy them, so the caller's dict never becomes the live optimizer state.
        saved = to_cpu(state["optimizer"])
        own_groups = self.optimizer.param_groups
        match_groups(saved, own_groups)
        for group, own in zip(saved["param_groups"], own_groups):
            # How the step runs and the torso's share of the rate are this learner's, not the
            # checkpoint's (an unfused Adam's checkpoint into a fused one; a changed
            # torso_lr_scale); set before loading, which places the state by them.
            group["lr_scale"] = own["lr_scale"]
            if "fused" in own:
                group["fused"] = own["fused"]
        self.optimizer.load_state_dict(saved)
        self.version = int(state["counters"]["version"])
        self.frames = int(state["counters"]["frames"])
        if self.popart is not None and "popart" in state:
            self.popart.load_state_dict(state["popart"])
