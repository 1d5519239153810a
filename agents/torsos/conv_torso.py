"""What every torso shares: pixels -> conv trunk -> linear -> ReLU, beside the extras.

A torso is ``ConvTorso`` with its own ``Config`` and ``trunk`` (``shallow.py``, ``nature.py``,
``resnet.py``): the trunk is the only part that differs. Around it, once for all:

- the pixels' layout and conversion (uint8 -> float / 255, channels-last when training on CPU)
  and their ``input_norm`` (``input_norm.py``: none, per frame, or running statistics that
  ``observe`` moves);
- the linear layer (``hidden_size``), its optional LayerNorm and ReLU, or, ``as_set``, the
  trunk's last positions as a set ``[T, B, N, C + extras]``;
- the extras concatenated to the features: the one-hot last action, the last reward clipped
  to [-1, 1] as IMPALA feeds it, and the instruction when the observation has one (``bow``:
  a projection of the mean word embedding; ``lstm``: IMPALA's language encoder, an LSTM over
  the embedded words, its last output);
- the ``init`` of every conv and linear weight;
- ``probe``: the post-ReLU activations of each declared layer (the contract, in
  ``agents/torsos/__init__.py``);
- ``unit_links`` and ``fresh_parameters``: where each probed unit's weights sit and a fresh
  draw of them, for re-initialising dormant units (``agents/units.py``; a trunk that is a
  plain stack of convs and ReLUs, ``ReluStack``, and a linear layer without LayerNorm).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from agents.layers.encoding import one_hot
from agents.registry import typed_options
from agents.torsos.contract import TorsoConfig
from agents.torsos.input_norm import RunningNorm, centre_frames
from agents.units import UnitLayer, UnitSlice


class ReluStack(nn.Sequential):
    """Convs each followed by a ReLU; the probe's layers are the ReLUs' outputs, ``conv1``..."""

    @property
    def layers(self) -> tuple[str, ...]:
        """The names of the probed layers: one per ReLU, ``conv1``, ``conv2``, ..."""
        return tuple(f"conv{i + 1}" for i in range(sum(isinstance(m, nn.ReLU) for m in self)))

    def probe(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``x`` [N, C, H, W] -> each ReLU's output [N, C_i, H_i, W_i]; the last is ``self(x)``."""
        out = []
        for module in self:
            x = module(x)
            if isinstance(module, nn.ReLU):
                out.append(x)
        return out


class ConvTorso(nn.Module):
    """A conv trunk, then linear + ReLU, concatenated with last action, reward and instruction.

    Not registered: each torso is a registry entry that gives ``Config`` and ``trunk``.
    """

    Config: type = TorsoConfig
    # True where ``trunk`` returns a ``ReluStack`` (each conv's units read by the next conv
    # alone), which ``unit_links`` needs; declared, so checking it builds nothing
    stacked_trunk: bool = False
    # Each torso defines ``trunk(in_channels, config) -> nn.Module`` as a static method: its
    # convs, ``[N, in_channels, H, W]`` float -> ``[N, C, h, w]`` after a ReLU, the module
    # having ``layers`` (names of its probed layers) and ``probe(x)`` (their post-ReLU
    # outputs, in order, the last equal to its output). A class without one fails where it
    # is defined (``__init_subclass__``), not when it is first built.

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not callable(getattr(cls, "trunk", None)):
            raise TypeError(f"{cls.__name__} must define trunk(in_channels, config): its convs")

    def __init__(
        self,
        obs_shapes: dict[str, tuple[int, ...]],
        num_actions: int,
        as_set: bool = False,
        obs_vocab: dict[str, int] | None = None,
        config: TorsoConfig | None = None,
        **options,
    ):
        """``config``, or ``options`` as its fields (defaults and checks live there, once)."""
        super().__init__()
        self.config = cfg = typed_options(self.Config, config, options)
        c, h, w = obs_shapes["pixels"]
        self.num_actions = num_actions
        self.as_set = as_set
        # Buffers alone, no random draws: the weights at one seed are the same for every mode.
        self.input_norm = RunningNorm((c, h, w)) if cfg.input_norm == "running" else None
        self.centre_frames = cfg.input_norm == "frame"
        # The modules are built in this order (trunk, linear, instruction) so that one seed
        # gives a torso the same weights whatever else the agent holds.
        self.conv = self.trunk(c, cfg)
        with torch.no_grad():
            try:
                _, cc, hh, ww = self.conv(torch.zeros(1, c, h, w)).shape
            except RuntimeError:
                raise ValueError(f"pixels of {h}x{w} are too small for the "
                                 f"{type(self).__name__}'s convs") from None
        self.positions = hh * ww
        self.fc = None if as_set else nn.Linear(cc * hh * ww, cfg.hidden_size)
        # A set-reading core has no linear layer to normalise (agents.agent.agent_problem).
        self.fc_norm = (nn.LayerNorm(cfg.hidden_size) if cfg.norm == "layer" and not as_set
                        else None)
        self.probe_layers = (*self.conv.layers, *(() if as_set else ("fc",)))
        with torch.no_grad():  # each probed layer's channels: a linear layer's units are its own
            probed = self.conv.probe(torch.zeros(1, c, h, w))
        self.probe_channels = {name: y.shape[1] for name, y in zip(self.conv.layers, probed)}
        if not as_set:
            self.probe_channels["fc"] = cfg.hidden_size
        self.read_instruction = "instruction" in obs_shapes and cfg.instruction != "none"
        extras = num_actions + 1
        if self.read_instruction:
            vocab = (obs_vocab or {}).get("instruction")
            if not vocab:
                raise ValueError("the observation has an instruction but its vocabulary size is "
                                 "unknown: pass obs_vocab={'instruction': N} (EnvRunner.spec() "
                                 "carries it)")
            self.embed = nn.Embedding(vocab, cfg.word_embedding_size, padding_idx=0)
            self.instruction_mode = cfg.instruction
            if cfg.instruction == "lstm":
                self.instruction_rnn = nn.LSTM(cfg.word_embedding_size, cfg.instruction_size)
            else:
                self.instruction_proj = nn.Linear(cfg.word_embedding_size, cfg.instruction_size)
            extras += cfg.instruction_size
        self.extras_size = extras
        self.output_size = (cc if as_set else cfg.hidden_size) + extras
        if cfg.init == "orthogonal":
            for layer in (*self.conv.modules(), self.fc):
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    _orthogonal(layer.weight, layer.bias)

    @classmethod
    def recycle_problem(cls, config: TorsoConfig, as_set: bool) -> str | None:
        """Why this torso's units cannot be re-initialised one by one, in one line; else None.

        Each probed unit needs one layer that reads it (``unit_links``): a trunk that is a
        plain ``ReluStack`` and a linear layer whose units are independent (no LayerNorm).
        """
        name = cls.__name__
        if as_set:
            return (f"{name} read as a set (a spatial core) has no linear layer whose units a "
                    "core's input weights read one by one")
        if config.norm != "none":
            return (f"agent.torso_options.norm={config.norm}: a LayerNorm ties each fc unit to "
                    "the others, so one unit cannot be re-initialised alone")
        if not cls.stacked_trunk:
            return (f"{name}'s trunk is not a plain stack of convs and ReLUs (residual blocks "
                    "read a unit on two paths), so its units have no single next layer")
        return None

    def unit_links(self) -> dict[str, UnitLayer]:
        """Each probed layer's ``UnitLayer`` (``agents/units.py``), input to output.

        A conv's units are its output channels: incoming ``weight[c]`` and ``bias[c]``,
        outgoing the next conv's ``weight[:, c]``, or for the last conv the linear layer's
        columns of channel ``c`` (its ``positions`` inputs, channel-major). ``fc``'s outgoing
        weights are the core's (``Agent.unit_links``): none here. Raises ValueError with
        ``recycle_problem``'s line where there is one.
        """
        problem = self.recycle_problem(self.config, self.as_set)
        if problem:
            raise ValueError(problem)
        assert isinstance(self.conv, ReluStack), f"{type(self).__name__}.stacked_trunk is wrong"
        convs = [m for m in self.conv if isinstance(m, nn.Conv2d)]
        links = {}
        for i, (name, conv) in enumerate(zip(self.conv.layers, convs, strict=True)):
            out = ([UnitSlice(convs[i + 1].weight, 1)] if i + 1 < len(convs)
                   else [UnitSlice(self.fc.weight, 1, self.positions)])
            links[name] = UnitLayer(conv, [UnitSlice(conv.weight, 0), UnitSlice(conv.bias, 0)],
                                    out)
        links["fc"] = UnitLayer(self.fc, [UnitSlice(self.fc.weight, 0),
                                          UnitSlice(self.fc.bias, 0)])
        return links

    def fresh_parameters(self, module: nn.Module,
                         generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh ``(weight, bias)`` for ``module`` (a conv or the linear) from the torso's init.

        Drawn with ``generator`` on the CPU (the global stream untouched).
        ``orthogonal``: an orthogonal weight of ReLU gain, zero bias (as at construction);
        ``torch``: PyTorch's ``reset_parameters`` for conv and linear layers (kaiming-uniform
        with a = sqrt 5; bias uniform in +-1/sqrt(fan_in)).
        """
        weight = torch.empty(module.weight.shape)
        bias = torch.empty(module.bias.shape)
        if self.config.init == "orthogonal":
            _orthogonal(weight, bias, generator)
        else:
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
            bound = 1.0 / math.sqrt(weight[0].numel())
            bias.uniform_(-bound, bound, generator=generator)
        return weight, bias

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

    def _pixels(self, pixels: torch.Tensor, fmt: torch.memory_format) -> torch.Tensor:
        """uint8 ``pixels`` [N, C, H, W] -> float / 255, ``input_norm``ed, laid out as ``fmt``.

        With ``input_norm: none`` the values are in [0, 1]; the other modes work in place,
        so the layout stays ``fmt``.
        """
        dtype = self._dtype()
        # The bytes are reordered first and converted after: a uint8 -> float copy into the
        # other layout is one strided pass, several times slower than the two contiguous ones.
        # Pixels already in that order (``training_layout``) are not copied to reorder them.
        x = pixels.contiguous(memory_format=fmt).to(dtype, copy=True).mul_(1.0 / 255.0)
        if self.centre_frames:
            return centre_frames(x)
        if self.input_norm is not None:
            return self.input_norm(x)
        return x

    @torch.no_grad()
    def observe(self, obs: dict[str, torch.Tensor]) -> None:
        """Move the running input statistics (``input_norm: running``) by ``obs["pixels"]``.

        uint8 ``[..., C, H, W]``, each frame once. The learner calls it once per batch, before
        the batch's steps (``Learner.learn``); nothing else moves them, so ``forward`` and
        ``probe`` read the statistics the weights carry. A no-op in the other modes.
        """
        if self.input_norm is not None:
            self.input_norm.observe(obs["pixels"])

    def _dtype(self) -> torch.dtype:
        """The weights' float type: the pixels' and the extras' (autocast or not)."""
        return next(self.conv.parameters()).dtype

    def _fc(self, x: torch.Tensor) -> torch.Tensor:
        """The trunk's output [N, C, h, w] -> the features [N, hidden_size] (linear, norm, ReLU)."""
        x = self.fc(x.flatten(1))
        if self.fc_norm is not None:
            x = self.fc_norm(x)
        return F.relu(x)

    def training_layout(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``obs`` with the pixels' bytes in the order a training pass on CPU reads them.

        Such a pass runs the convs channels-last (``forward``). A learner that passes over
        one batch several times (epochs x minibatches) reorders its pixels once, here,
        instead of every pass: the same values and shape, the memory ``[..., H, W, C]``
        (minibatch picks keep it: ``learners.algorithms.batch.minibatches``). Elsewhere
        ``obs`` as given.
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
        # Training on CPU, the convs run in channels-last layout: oneDNN's backward of the
        # 8x8/4 conv on 4 input channels is then about 3.5x faster (the learner's torso step
        # about 1.4x); acting (no grad) keeps the default layout, which is as fast there.
        # The features are the same up to float rounding; the layout is not a parameter.
        fmt = (torch.channels_last if torch.is_grad_enabled() and pixels.device.type == "cpu"
               else torch.contiguous_format)
        x = self.conv(self._pixels(pixels.reshape(T * B, *pixels.shape[2:]), fmt))
        dtype = self._dtype()
        extras = [
            one_hot(last_action.reshape(T * B), self.num_actions, dtype),
            last_reward.reshape(T * B, 1).to(dtype).clamp(-1.0, 1.0),
        ]
        if self.read_instruction:
            extras.append(self._instruction(obs["instruction"].reshape(T * B, -1)))
        extras = torch.cat(extras, dim=-1)
        if self.as_set:
            x = x.flatten(2).transpose(1, 2)  # [TB, N, C]
            x = torch.cat([x, extras.unsqueeze(1).expand(-1, x.shape[1], -1)], dim=-1)
            return x.reshape(T, B, self.positions, -1)
        return torch.cat([self._fc(x), extras], dim=-1).reshape(T, B, -1)

    @torch.no_grad()
    def probe(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each of ``probe_layers``' post-ReLU activations on ``obs["pixels"]`` uint8 [N, C, H, W].

        Returns ``{name: [N, units]}`` in ``probe_layers``' order, input to output: every
        output element of the layer's ReLU, flattened per frame (a conv layer's units are
        its channels x positions, channel-major). The last is the torso's features before the
        extras: ``fc`` (what ``forward`` puts first), or with ``as_set`` the last conv layer.
        Runs without gradients in the default layout and draws no random numbers.
        """
        x = self._pixels(obs["pixels"], torch.contiguous_format)
        layers = self.conv.probe(x)
        if self.fc is not None:
            layers.append(self._fc(layers[-1]))
        return {name: y.flatten(1) for name, y in zip(self.probe_layers, layers, strict=True)}


def _orthogonal(weight: torch.Tensor, bias: torch.Tensor,
                generator: torch.Generator | None = None) -> None:
    """The ``orthogonal`` init in place: orthogonal weight of ReLU gain sqrt 2, zero bias."""
    nn.init.orthogonal_(weight, gain=nn.init.calculate_gain("relu"), generator=generator)
    nn.init.zeros_(bias)
