"""IMPALA's shallow torso, as the multiplicative-interactions paper uses it.

Jayakumar et al. 2020, appendix E; Espeholt et al. 2018, fig. 3 left: conv 16 8x8 stride 4,
ReLU, conv 32 4x4 stride 2, ReLU, linear 256, ReLU; then the extras (``conv_torso.py``).
Probed layers: ``conv1``, ``conv2``, ``fc``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from agents.torsos.contract import TORSOS, TorsoConfig
from agents.torsos.conv_torso import ConvTorso, ReluStack


@dataclass(frozen=True)
class ShallowConfig(TorsoConfig):
    """Options of the ``shallow`` torso (``torso_options``), checked on construction."""


@TORSOS.register("shallow")
class ShallowTorso(ConvTorso):
    """IMPALA's shallow conv torso plus one-hot last action, clipped last reward and instruction."""

    Config = ShallowConfig
    stacked_trunk = True  # a ReluStack: its units can be re-initialised one by one

    @staticmethod
    def trunk(in_channels: int, config: ShallowConfig) -> ReluStack:
        """Conv 16 8x8/4, ReLU, conv 32 4x4/2, ReLU: 84x84 pixels -> 32 x 9 x 9."""
        return ReluStack(nn.Conv2d(in_channels, 16, 8, stride=4), nn.ReLU(),
                         nn.Conv2d(16, 32, 4, stride=2), nn.ReLU())
