"""ReDo: re-initialise the torso's dormant units (``learner.redo``; off by default).

Sokar et al. (2023, "The Dormant Neuron Phenomenon in Deep Reinforcement Learning", ICML,
algorithm 1): every ``F`` updates, score each unit ``i`` of each probed layer on a batch,
``s_i = E_x |h_i(x)| / ((1/H) sum_j E_x |h_j(x)|)`` (``learners/update/monitor.py``), and for
every unit with ``s_i <= tau``:

- its **incoming** weights and bias are drawn afresh from the layer's initial distribution
  (the torso's ``init``: ``ConvTorso.fresh_parameters``);
- its **outgoing** weights are set to 0, so the network's output does not move at that moment
  (a unit that was off passed nothing on; with ``tau > 0`` a barely-on unit's small share
  goes);
- the optimizer's running statistics of both are set back to where they start (Adam's
  moments to 0; TF-RMSProp's square average to 1, its momentum to 0). The step count is
  per tensor and stays, as in the authors' code (google/dopamine, ``labs/redo``).

All layers are scored on one probe before any is changed; all incoming weights are drawn
before any outgoing weight is zeroed, as in the authors' code. A conv layer's units are its
channels (averaged over positions), the features' outgoing weights are the core's input
weights (``Agent.unit_links``, ``agents/units.py``). The probe batch is the update's first
frames, as the monitor's (no random draw to choose them); the fresh weights come from a
generator seeded by the run's seed and the update's version, so a ``run.deterministic``
replay recycles the same units to the same weights and a resumed run draws what an
unbroken one would.

The recycled counts go to the update's metrics as ``redo/<layer>`` (units, on the updates
that recycle).
"""

from __future__ import annotations

import torch

from learners.update.monitor import probe_frames, unit_scores
from learners.update.optim import RMSpropTF


class Recycler:
    """Every ``learner.redo.every`` updates, ReDo on the agent's torso (module docstring)."""

    def __init__(self, agent, optimizer: torch.optim.Optimizer, config, seed: int):
        """``config``: the ``learner.redo`` section.

        Raises ValueError where the agent cannot say where its units' weights sit
        (``agents.agent.recycle_problem``).
        """
        self.agent, self.optimizer, self.config, self.seed = agent, optimizer, config, seed
        self.links = agent.unit_links()

    def due(self, version: int) -> bool:
        """Whether the update that starts from policy ``version`` recycles (every, 2 every, ...)."""
        return self.config.every > 0 and version > 0 and version % self.config.every == 0

    def _generator(self, version: int) -> torch.Generator:
        """The draws of update ``version``: the same in a replay and after a resume."""
        return torch.Generator().manual_seed(self.seed * 1_000_003 + version)

    def _fresh_state(self, name: str) -> float:
        """The value an optimizer's per-parameter statistic ``name`` starts from."""
        if isinstance(self.optimizer, RMSpropTF) and name == "square_avg":
            return 1.0
        return 0.0

    def _reset_state(self, param: torch.Tensor, index: tuple) -> None:
        """The optimizer's statistics of ``param[index]`` back to their start."""
        for name, value in self.optimizer.state.get(param, {}).items():
            if torch.is_tensor(value) and value.shape == param.shape:
                value[index] = self._fresh_state(name)

    @torch.no_grad()
    def dormant(self, batch) -> dict[str, torch.Tensor]:
        """Each probed layer's tau-dormant units on ``batch``'s first frames: ``[units]`` bool."""
        torso = self.agent.torso
        pixels = probe_frames(batch, self.config.frames)
        return {layer: unit_scores(h, torso.probe_channels[layer])[1] <= self.config.tau
                for layer, h in torso.probe({"pixels": pixels}).items()}

    @torch.no_grad()
    def recycle(self, batch, version: int) -> dict[str, float]:
        """ReDo on ``batch``'s first frames; ``{"redo/<layer>": units recycled}`` per layer."""
        generator = self._generator(version)
        dormant = self.dormant(batch)
        recycled = {layer: units for layer, units in dormant.items() if units.any()}
        # Every layer's incoming weights first, then every outgoing weight zeroed: where a
        # recycled unit reads another (a conv after a conv), the weight between them ends 0.
        for layer, units in recycled.items():
            link = self.links[layer]
            fresh = self.agent.torso.fresh_parameters(link.module, generator)
            for unit_slice, new in zip(link.incoming, fresh, strict=True):
                param, index = unit_slice.param, unit_slice.index(units)
                param[index] = new.to(param.device, param.dtype)[index]
                self._reset_state(param, index)
        for layer, units in recycled.items():
            for unit_slice in self.links[layer].outgoing:
                param, index = unit_slice.param, unit_slice.index(units)
                param[index] = 0.0
                self._reset_state(param, index)
        return {f"redo/{layer}": float(units.sum()) for layer, units in dormant.items()}
