"""IMPALA's deep torso (Espeholt et al. 2018, fig. 3 right).

Three stacks, each conv 3x3 stride 1, max-pool 3x3 stride 2 (padding 1, TensorFlow's
"SAME"), then two residual blocks ``x + conv(ReLU(conv(ReLU(x))))``, all convs 3x3 stride 1
padding 1; widths 16, 32, 32 (``channels``). Then ReLU, linear 256, ReLU and the extras
(``conv_torso.py``). 84x84 pixels leave 32 x 11 x 11 positions.

Probed layers: ``stack1``, ``stack2``, ``stack3``, ``conv_out``, ``fc``. ``stackK`` is
the hidden units of stack K, the ReLU between each residual block's two convs (both blocks,
``[N, 2 x C x h x w]``): a unit off on every frame passes nothing on. The residual stream's
own ReLUs (each block's first) are not probed, since the skip connection carries the stream
past them; the one after the last stack is, as ``conv_out``, since the linear layer reads
only it (and a set-reading core reads its positions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from agents.torsos.contract import TORSOS, TorsoConfig
from agents.torsos.conv_torso import ConvTorso


class ResidualBlock(nn.Module):
    """``x + conv1(ReLU(conv0(ReLU(x))))``, both convs 3x3, stride 1, the width of ``x``."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, hidden: list | None = None) -> torch.Tensor:
        """``x`` [N, C, h, w] -> the same shape; the hidden ReLU's output appended to ``hidden``."""
        h = F.relu(self.conv0(F.relu(x)))
        if hidden is not None:
            hidden.append(h)
        return x + self.conv1(h)


class ResNetStack(nn.Module):
    """conv 3x3/1, max-pool 3x3/2 (padding 1), two residual blocks: halves height and width."""

    def __init__(self, in_channels: int, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.blocks = nn.ModuleList([ResidualBlock(channels), ResidualBlock(channels)])

    def forward(self, x: torch.Tensor, hidden: list | None = None) -> torch.Tensor:
        """``x`` [N, C_in, H, W] -> [N, C, ceil(H / 2), ceil(W / 2)]; see ``ResidualBlock``."""
        x = self.pool(self.conv(x))
        for block in self.blocks:
            x = block(x, hidden)
        return x


class ResNetTrunk(nn.Module):
    """The three stacks and the ReLU after them: the trunk of the ``resnet`` torso."""

    layers = ("stack1", "stack2", "stack3", "conv_out")

    def __init__(self, in_channels: int, channels: list[int]):
        super().__init__()
        widths = [in_channels, *channels]
        self.stacks = nn.ModuleList([ResNetStack(a, b) for a, b in zip(widths, widths[1:])])

    def forward(self, x: torch.Tensor, probed: list | None = None) -> torch.Tensor:
        """``x`` [N, C, H, W] -> [N, channels[-1], h, w] after the ReLU; ``probed`` as ``probe``."""
        for stack in self.stacks:
            hidden = None if probed is None else []
            x = stack(x, hidden)
            if probed is not None:
                probed.append(torch.cat(hidden, dim=1))  # [N, 2 C, h, w]: both blocks' channels
        x = F.relu(x)
        if probed is not None:
            probed.append(x)
        return x

    def probe(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each stack's hidden units [N, 2 C, h, w], then the output [N, C, h, w] (``layers``)."""
        probed: list[torch.Tensor] = []
        self(x, probed)
        return probed


@dataclass(frozen=True)
class ResNetConfig(TorsoConfig):
    """Options of the ``resnet`` torso (``torso_options``), checked on construction."""

    # the three stacks' widths (IMPALA's 16, 32, 32)
    channels: list[int] = field(default_factory=lambda: [16, 32, 32])


@TORSOS.register("resnet")
class ResNetTorso(ConvTorso):
    """IMPALA's deep torso plus one-hot last action, clipped last reward and instruction."""

    Config = ResNetConfig

    @staticmethod
    def trunk(in_channels: int, config: ResNetConfig) -> ResNetTrunk:
        """Three stacks of ``config.channels``, then a ReLU."""
        return ResNetTrunk(in_channels, config.channels)
