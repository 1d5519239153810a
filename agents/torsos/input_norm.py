"""Input normalisation of the torsos' pixels (``agent.torso_options.input_norm``).

Applied after the uint8 -> float / 255 scaling, before the first conv (``conv_torso.py``):

- ``none``: the pixels as scaled (IMPALA's torsos; every preset);
- ``frame``: each frame's own mean, per input channel over its pixels, subtracted
  (``centre_frames``): the near-constant background brightness goes, and no state is kept;
- ``running``: ``RunningNorm``, a running per-pixel mean and standard deviation of the scaled
  input, as Sample Factory normalises its observations (its ``RunningMeanStdInPlace``, after
  rl_games): ``clip((x - mean) / sqrt(var + eps), -5, 5)`` with Sample Factory's
  ``eps = 1e-5`` and clip 5.

Why: on Pong a conv1 filter sees almost the same input on every frame, and one Adam step
moves its response to the background by about its whole scale
(docs/results/impala-atari.md, "The torso's first updates"); centring the input takes that
background out (docs/results/torso-health.md, the first candidate fix).
"""

from __future__ import annotations

import torch
from torch import nn

EPS = 1e-5  # added to the variance under the square root (Sample Factory's)
CLIP = 5.0  # the normalised input is clipped to [-CLIP, CLIP] (Sample Factory's)
# Frames summed at a time by ``observe``, in float32: 256 x 255^2 < 2^24, so every partial sum
# of the pixels and of their squares is an integer float32 holds exactly, in any order.
CHUNK = 256


def centre_frames(x: torch.Tensor) -> torch.Tensor:
    """``x`` float ``[N, C, H, W]`` minus each frame's mean per channel, in place (``frame``)."""
    return x.sub_(x.mean(dim=(-2, -1), keepdim=True))


class RunningNorm(nn.Module):
    """A running per-pixel mean and variance of the scaled pixels, and the input normalised by them.

    The statistics are buffers (``mean``, ``var`` ``[C, H, W]`` and ``count`` ``[]``, float64),
    not parameters: they travel with the weights in the agent's ``state_dict`` (to the
    runners, into checkpoints) and the optimizer never sees them. Only ``observe`` moves them,
    once per learner batch (``Learner.learn``); ``forward`` reads them and never updates them,
    so runners act with the statistics of the weights they were sent, and no pass of the
    epochs x minibatches moves them.

    Differences from Sample Factory's module, for exact statistics: the count starts at 0, not
    at 1 with the prior mean 0 and variance 1 (until the first batch the input passes as
    ``x / sqrt(1 + eps)``), and each batch's variance is the population variance (no Bessel
    correction), so after any batches ``mean`` and ``var`` are the mean and variance over
    every frame observed, as one pass over all of them would give. Each batch's moments are
    exact sums of the uint8 pixels and their squares; batches are merged with the
    parallel-variance update of Chan, Golub and LeVeque (1979) in float64, as Sample Factory
    keeps them: over a run's millions of frames a batch's share ``n / count`` falls to 1e-4
    or less, and float64 keeps the merged values within ~1e-12 of the one-pass ones
    (tests/test_input_norm.py) where float32 would drift by its rounding at every batch. The
    buffers are small (two [C, H, W] maps: 450 KB more per weights sent on Atari). The
    normalising pass itself runs in the pixels' float type. No random numbers are drawn, so
    replays stay bit-identical.
    """

    def __init__(self, shape: tuple[int, int, int]):
        """``shape``: the pixels' ``(C, H, W)``."""
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def observe(self, pixels: torch.Tensor) -> None:
        """Merge the frames ``pixels`` uint8 ``[..., C, H, W]`` into the statistics."""
        if pixels.dtype != torch.uint8:  # CHUNK's exact sums and the / 255 rest on bytes
            raise TypeError(f"RunningNorm.observe takes uint8 pixels, got {pixels.dtype}")
        frames = pixels.reshape(-1, *self.mean.shape)
        n = frames.shape[0]
        if n == 0:
            return
        s1 = torch.zeros(self.mean.shape, dtype=torch.float64, device=frames.device)
        s2 = torch.zeros_like(s1)
        for chunk in frames.split(CHUNK):  # exact sums (CHUNK), 5x faster than int32 ones
            x = chunk.to(torch.float32)
            s1 += x.sum(0)
            s2 += x.square_().sum(0)
        scale = 1.0 / 255.0
        batch_mean = s1 / n
        # E[x^2] - E[x]^2 of exact sums: float64 rounding alone, ~1e-11 of 255^2
        batch_var = (s2 / n - batch_mean.square()).clamp_(min=0.0) * scale ** 2
        batch_mean = batch_mean * scale
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)
        self.mean += delta * (n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` float ``[N, C, H, W]`` (pixels / 255) normalised and clipped, in place.

        The statistics are laid out as ``x`` is (channels-last in CPU training): a broadcast
        against the other layout is a strided pass, about 2.3x slower on Atari frames. The
        values are the same bit for bit (elementwise operations, no reduction).
        """
        fmt = (torch.channels_last if x.dim() == 4 and not x.is_contiguous()
               and x.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format)
        mean = self.mean.to(x.dtype)[None].contiguous(memory_format=fmt)
        inv_std = torch.rsqrt(self.var + EPS).to(x.dtype)[None].contiguous(memory_format=fmt)
        return x.sub_(mean).mul_(inv_std).clamp_(-CLIP, CLIP)
