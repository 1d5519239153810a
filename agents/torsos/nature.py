"""The Nature DQN torso (Mnih et al. 2015, "Methods: model architecture").

conv 32 8x8 stride 4, ReLU, conv 64 4x4 stride 2, ReLU, conv 64 3x3 stride 1, ReLU, linear
512, ReLU; then the extras (``conv_torso.py``). The default encoder of CleanRL's and Sample
Factory's Atari agents; ``channels: [32, 64, 32]`` is the variant of Kostrikov's PyTorch
A2C/PPO. 84x84 pixels leave 64 x 7 x 7 positions; the convs need at least 36x36.
Probed layers: ``conv1``, ``conv2``, ``conv3``, ``fc``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from agents.torsos.contract import TORSOS, TorsoConfig
from agents.torsos.conv_torso import ConvTorso, ReluStack


@dataclass(frozen=True)
class NatureConfig(TorsoConfig):
    """Options of the ``nature`` torso (``torso_options``), checked on construction."""

    hidden_size: int = 512  # the linear layer after the convs (DQN's 512)
    # the three convs' widths (DQN's 32, 64, 64; Kostrikov's A2C/PPO: 32, 64, 32)
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])


@TORSOS.register("nature")
class NatureTorso(ConvTorso):
    """The Nature DQN torso plus one-hot last action, clipped last reward and instruction."""

    Config = NatureConfig
    stacked_trunk = True  # a ReluStack: its units can be re-initialised one by one

    @staticmethod
    def trunk(in_channels: int, config: NatureConfig) -> ReluStack:
        """The convs 8x8/4, 4x4/2 and 3x3/1 of ``config.channels``, each followed by a ReLU."""
        c1, c2, c3 = config.channels
        return ReluStack(nn.Conv2d(in_channels, c1, 8, stride=4), nn.ReLU(),
                         nn.Conv2d(c1, c2, 4, stride=2), nn.ReLU(),
                         nn.Conv2d(c2, c3, 3, stride=1), nn.ReLU())
