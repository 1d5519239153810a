"""Where each probed torso unit's weights sit: what a unit re-initialisation (ReDo) touches.

Sokar et al. (2023, "The Dormant Neuron Phenomenon in Deep Reinforcement Learning", ICML,
algorithm 1, ReDo) recycle a dormant unit by drawing its **incoming** weights afresh from
the layer's initial distribution and setting its **outgoing** weights to zero: the network's
output is unchanged at that moment (a unit that was off passed nothing on, and now passes
nothing on until its outgoing weights grow back), while the unit itself is on again.

A torso that supports it declares, per probed layer (``probe_layers``), a ``UnitLayer``: the
module whose fresh draw gives the incoming weights, and the ``UnitSlice``s of its incoming
and outgoing weights. The outgoing weights of the torso's last layer, its features, are the
core's input weights (``core.input_weights()``); ``Agent.unit_links`` joins the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class UnitSlice:
    """A layer's units in one parameter.

    Unit ``u`` is indices ``[u * group, (u+1) * group)`` along ``dim``; indices past the
    layer's units (the extras beside the torso's features in the core's input) belong to no
    unit.
    """

    param: nn.Parameter
    dim: int
    group: int = 1

    def index(self, units: torch.Tensor) -> tuple:
        """The index of ``param`` that selects the units where ``units`` ([U] bool) is True."""
        mask = units.to(self.param.device).repeat_interleave(self.group)
        size = self.param.shape[self.dim]
        if len(mask) > size:
            raise ValueError(f"{len(units)} units x {self.group} do not fit dimension {self.dim} "
                             f"of a parameter of shape {tuple(self.param.shape)}")
        mask = torch.cat([mask, mask.new_zeros(size - len(mask))])
        return (slice(None),) * self.dim + (mask,)


@dataclass
class UnitLayer:
    """One probed layer's units: its module, incoming and outgoing weights.

    ``module``: its conv or linear layer; ``incoming``: its weight and bias, the unit along
    dim 0; ``outgoing``: where the next layer reads them.
    """

    module: nn.Module
    incoming: list[UnitSlice]
    outgoing: list[UnitSlice] = field(default_factory=list)
