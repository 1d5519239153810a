"""Torsos (encoders): observation + last action + last reward (+ instruction) -> features.

``shallow`` is the IMPALA "shallow" torso as the multiplicative-interactions paper uses
it (Jayakumar et al. 2020, appendix E; Espeholt et al. 2018, fig. 3 left): conv 16
8x8 stride 4, conv 32 4x4 stride 2, linear 256, ReLU, then concatenated with the
one-hot last action and the last reward (clipped to [-1, 1] as IMPALA feeds it). When
the observation carries an instruction, a word embedding of it is concatenated too:
``bow`` (mean of word embeddings; MiniGrid missions are short and order rarely matters,
and it costs nothing per step) or ``lstm`` (IMPALA's language encoder: an LSTM over the
embedded words, its last output).

``init`` chooses the conv/fc initialisation (``Init`` below). The instruction's vocabulary
size comes with the observation spec (``obs_vocab``, from the environment's observation
space): agents/ knows nothing of envs/.

``as_set=True`` presents the conv output as a set of spatial positions ``[T, B, N, E]``
(each position's 32 channels plus the shared extras) for cores that attend over an input
set (RIMs, section 2.2 "for spatially structured input").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from agents.registry import Registry, check_choices, typed_options

TORSOS: Registry = Registry("torso")

# ``torch``: PyTorch's defaults (kaiming-uniform with a = sqrt 5, so every layer shrinks its
# input's scale by about sqrt 3 before the ReLU halves it); ``orthogonal``: orthogonal weights
# with the ReLU gain sqrt 2 and zero biases (Saxe et al. 2014; the Atari CNN init of OpenAI
# baselines, Kostrikov's PPO and CleanRL), which keeps the scale through the ReLUs. On Pong
# frames the fc features' spread across frames is 0.0006 with ``torch`` and 0.011 with
# ``orthogonal`` (docs/results/pong.md), next to a one-hot last action of 1.
Init = Literal["torch", "orthogonal"]

# ``layer``: LayerNorm (Ba et al. 2016) on the linear layer's 256 pre-activations, before the
# ReLU. On Pong's frames, which differ in a few pixels, Adam moves each fc unit's
# pre-activation by about its whole scale per update, the same way on every frame, so a unit
# pushed down is off on every frame and gets no gradient to come back: with ``none`` the
# Atari preset has 77-92% of its fc units inactive on every frame after 10 updates (42-50%
# at its initial weights; docs/results/pong.md). Normalised per frame, about half of the
# units stay on whatever the layer's scale and offset; in a declared Pong pilot of the preset
# with it, two seeds of three went blind all the same (their conv1 channels all off), so the
# presets keep ``none`` (docs/results/studies.md, section 12).
Norm = Literal["none", "layer"]


@dataclass(frozen=True)
class ShallowConfig:
    """Options of the ``shallow`` torso (``torso_options``), checked on construction."""

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

    def __post_init__(self):
        check_choices(self, "agent.torso_options.")


@TORSOS.register("shallow")
class ShallowTorso(nn.Module):
    """IMPALA's shallow conv torso plus one-hot last action, clipped last reward and instruction."""

    Config = ShallowConfig

    def __init__(
        self,
        obs_shapes: dict[str, tuple[int, ...]],
        num_actions: int,
        as_set: bool = False,
        obs_vocab: dict[str, int] | None = None,
        config: ShallowConfig | None = None,
        **options,
    ):
        """``config``, or ``options`` as its fields (defaults and checks live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(ShallowConfig, config, options)
        hidden_size, instruction, init = cfg.hidden_size, cfg.instruction, cfg.init
        word_embedding_size, instruction_size = cfg.word_embedding_size, cfg.instruction_size
        c, h, w = obs_shapes["pixels"]
        self.num_actions = num_actions
        self.as_set = as_set
        self.conv = nn.Sequential(nn.Conv2d(c, 16, 8, stride=4), nn.ReLU(),
                                  nn.Conv2d(16, 32, 4, stride=2), nn.ReLU())
        with torch.no_grad():
            _, cc, hh, ww = self.conv(torch.zeros(1, c, h, w)).shape
        self.positions = hh * ww
        self.fc = None if as_set else nn.Linear(cc * hh * ww, hidden_size)
        # A set-reading core has no linear layer to normalise (agents.agent.agent_problem).
        self.fc_norm = nn.LayerNorm(hidden_size) if cfg.norm == "layer" and not as_set else None
        self.read_instruction = "instruction" in obs_shapes and instruction != "none"
        extras = num_actions + 1
        if self.read_instruction:
            vocab = (obs_vocab or {}).get("instruction")
            if not vocab:
                raise ValueError("the observation has an instruction but its vocabulary size is "
                                 "unknown: pass obs_vocab={'instruction': N} (EnvRunner.spec() "
                                 "carries it)")
            self.embed = nn.Embedding(vocab, word_embedding_size, padding_idx=0)
            self.instruction_mode = instruction
            if instruction == "lstm":
                self.instruction_rnn = nn.LSTM(word_embedding_size, instruction_size)
            else:
                self.instruction_proj = nn.Linear(word_embedding_size, instruction_size)
            extras += instruction_size
        self.extras_size = extras
        self.output_size = (cc if as_set else hidden_size) + extras
        if init == "orthogonal":
            for layer in (*self.conv, self.fc):
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    nn.init.orthogonal_(layer.weight, gain=nn.init.calculate_gain("relu"))
                    nn.init.zeros_(layer.bias)

    def _instruction(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` [N, L] int64 (0 = padding) -> [N, instruction_size]."""
        emb = self.embed(tokens)  # [N, L, E]
        mask = (tokens > 0).unsqueeze(-1).to(emb.dtype)
        if self.instruction_mode == "bow":
            mean = (emb * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return F.relu(self.instruction_proj(mean))
        lengths = (tokens > 0).sum(1).clamp(min=1)
        out, _ = self.instruction_rnn(emb.transpose(0, 1))  # [L, N, H]
        return out[lengths - 1, torch.arange(tokens.shape[0], device=tokens.device)]

    def training_layout(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``obs`` with the pixels' bytes in the order a training pass on CPU reads them.

        Such a pass runs the convs channels-last (``forward``). A learner that passes over
        one batch several times (epochs x minibatches) reorders its pixels once, here,
        instead of every pass: the same values and shape, the memory ``[..., H, W, C]``
        (minibatch picks keep it: ``learners.batch.minibatches``). Elsewhere ``obs`` as given.
        """
        pixels = obs["pixels"]
        if pixels.device.type != "cpu":
            return obs
        return {**obs, "pixels": pixels.movedim(-3, -1).contiguous().movedim(-1, -3)}

    def forward(self, obs: dict[str, torch.Tensor], last_action: torch.Tensor,
                last_reward: torch.Tensor) -> torch.Tensor:
        """obs["pixels"] uint8 [T, B, C, H, W]; last_action [T, B]; last_reward [T, B].

        Returns [T, B, output_size], or [T, B, N, output_size] when ``as_set``.
        """
        pixels = obs["pixels"]
        T, B = pixels.shape[:2]
        dtype = self.conv[0].weight.dtype
        src = pixels.reshape(T * B, *pixels.shape[2:])
        # Training on CPU, the convs run in channels-last layout: oneDNN's backward of the
        # 8x8/4 conv on 4 input channels is then about 3.5x faster (the learner's torso step
        # about 1.4x); acting (no grad) keeps the default layout, which is as fast there.
        # The features are the same up to float rounding; the layout is not a parameter.
        fmt = (torch.channels_last if torch.is_grad_enabled() and src.device.type == "cpu"
               else torch.contiguous_format)
        # The bytes are reordered first and converted after: a uint8 -> float copy into the
        # other layout is one strided pass, several times slower than the two contiguous ones.
        # Pixels already in that order (``training_layout``) are not copied to reorder them.
        x = src.contiguous(memory_format=fmt).to(dtype, copy=True).mul_(1.0 / 255.0)
        x = self.conv(x)  # [TB, 32, h, w]
        extras = [
            F.one_hot(last_action.reshape(T * B).long(), self.num_actions).to(dtype),
            last_reward.reshape(T * B, 1).to(dtype).clamp(-1.0, 1.0),
        ]
        if self.read_instruction:
            extras.append(self._instruction(obs["instruction"].reshape(T * B, -1)))
        extras = torch.cat(extras, dim=-1)
        if self.as_set:
            x = x.flatten(2).transpose(1, 2)  # [TB, N, 32]
            x = torch.cat([x, extras.unsqueeze(1).expand(-1, x.shape[1], -1)], dim=-1)
            return x.reshape(T, B, self.positions, -1)
        x = self.fc(x.flatten(1))
        if self.fc_norm is not None:
            x = self.fc_norm(x)
        x = F.relu(x)
        return torch.cat([x, extras], dim=-1).reshape(T, B, -1)
