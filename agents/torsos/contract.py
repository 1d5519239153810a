"""The torsos' registry and the options they share (the contract: ``agents/torsos/__init__.py``).

Each torso module imports these from here, not from the package, so no import goes in a
circle: the package imports the torsos, and the torsos import this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from agents.registry import Registry, check_choices

TORSOS: Registry = Registry("torso")

# ``torch``: PyTorch's defaults (kaiming-uniform with a = sqrt 5, so every layer shrinks its
# input's scale by about sqrt 3 before the ReLU halves it); ``orthogonal``: orthogonal weights
# with the ReLU gain sqrt 2 and zero biases (Saxe et al. 2014; the Atari CNN init of OpenAI
# baselines, Kostrikov's PPO and CleanRL), which keeps the scale through the ReLUs. On Pong
# frames the fc features' spread across frames is 0.0006 with ``torch`` and 0.011 with
# ``orthogonal`` (docs/results/impala-atari.md), next to a one-hot last action of 1.
Init = Literal["torch", "orthogonal"]

# ``layer``: LayerNorm (Ba et al. 2016) on the linear layer's pre-activations, before the
# ReLU. On Pong's frames, which differ in a few pixels, Adam moves each fc unit's
# pre-activation by about its whole scale per update, the same way on every frame, so a unit
# pushed down is off on every frame and gets no gradient to come back: with ``none`` the
# Atari preset has 77-92% of its fc units inactive on every frame after 10 updates (42-50%
# at its initial weights; docs/results/impala-atari.md). Normalised per frame, about half of the
# units stay on whatever the layer's scale and offset; in a declared Pong pilot of the preset
# with it, two seeds of three went blind all the same (their conv1 channels all off), so the
# presets keep ``none`` (docs/results/tuning-log.md).
Norm = Literal["none", "layer"]

# ``frame``: each frame's mean per input channel subtracted; ``running``: a running per-pixel
# mean and standard deviation, as Sample Factory normalises observations, moved once per
# learner batch (``agents/torsos/input_norm.py``). Pong's frames differ in a few pixels, so a
# conv1 filter sees almost the same input on every frame; centring it takes the background
# out (docs/results/torso-health.md). The presets keep ``none``.
InputNorm = Literal["none", "running", "frame"]


@dataclass(frozen=True)
class TorsoConfig:
    """Options every torso takes (``torso_options``): its linear layer, the instruction, init."""

    hidden_size: int = 256  # the linear layer after the convs
    # how to read instructions when present: bow, lstm or none
    instruction: Literal["bow", "lstm", "none"] = "bow"
    word_embedding_size: int = 20  # IMPALA's language encoder: 20-d word embeddings
    instruction_size: int = 64  # width of the instruction feature (LSTM: 64 units, as IMPALA)
    # conv/fc weights: torch (PyTorch's defaults) or orthogonal (gain sqrt 2, zero biases)
    init: Init = "torch"
    # the linear layer's pre-activations: none (IMPALA's torso) or layer (a LayerNorm before
    # the ReLU, which keeps about half of the units on)
    norm: Norm = "none"
    # the pixels after /255: none, running (per-pixel mean and std over the batches the
    # learner saw, clipped to [-5, 5]) or frame (each frame's mean per channel subtracted)
    input_norm: InputNorm = "none"

    def __post_init__(self):
        prefix = "agent.torso_options."
        check_choices(self, prefix)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if type(value) is int and value < 1:
                raise ValueError(f"{prefix}{f.name} must be at least 1, got {value}")
        channels = getattr(self, "channels", None)
        if channels is not None:
            if (not isinstance(channels, (list, tuple)) or len(channels) != 3
                    or not all(type(c) is int and c >= 1 for c in channels)):
                raise ValueError(f"{prefix}channels must be three widths of at least 1 "
                                 f"(e.g. [32, 64, 64]), got {channels!r}")
            object.__setattr__(self, "channels", list(channels))  # a list saves as YAML
