"""The torso monitor: which units of each torso layer are off, and does the policy read frames?

A run whose torso goes blind (every feature unit off on every frame, so the policy no longer
depends on the observation) keeps training and says nothing; this module measures it on
frames the learner already holds (``learner.monitor``; docs/reliability.md). For each layer
of ``torso.probe_layers`` (post-ReLU activations ``h [N, units]``, ``torso.probe``), with
units taken per channel: a linear layer's units are its own, a conv layer's are its
channels, each averaged over its positions, as Sokar et al. (2023) score conv layers:

- **inactive**: the share of units whose activation is 0 on every frame of the probe batch
  (at every position, for a channel): a dead ReLU unit, which gets no gradient to come back;
- **dormant**: the share of tau-dormant units of Sokar et al. (2023, "The Dormant Neuron
  Phenomenon in Deep Reinforcement Learning", ICML, definition 3.1): unit ``i``'s score
  ``s_i = mean_x |h_i(x)| / ((1/H) sum_j mean_x |h_j(x)|)`` over the ``H`` units of its
  layer and the frames ``x`` of the batch; dormant if ``s_i <= tau``. A layer whose units
  are all 0 is wholly dormant (its scores are 0/0; Sokar et al.'s code adds 1e-9 to the
  layer's mean). At ``tau = 0`` this is ``inactive``.

and, where the core declares its input weights (``input_weights``, as ReDo reads them:
every core but ``feedforward``, the torso not read as a set), for the features (the last
layer) **signal**: how much the features move the core
across frames, ``sqrt(sum_x ||W (f(x) - fbar)||^2 / (N R))`` with ``W`` the core's weights on
the features (``R`` rows in all; every parameter that reads them), ``f(x)`` the features on
frame ``x`` and ``fbar`` their mean over the ``N`` frames: the rms over frames and rows of
the features' image under the core's input weights (before any gate or modulation the core
applies), the part of it that moves with the screen. It is 0 when the features are
the same on every frame, and a unit whose outgoing weights are 0 (just recycled) adds
nothing, however active it is;

and for the policy, **spread**: the mean over the batch's frames of the total-variation
distance between the frame's action distribution and the batch's mean distribution,
``(1/N) sum_n (1/2) sum_a |p_n(a) - pbar(a)|`` with ``pbar = (1/N) sum_n p_n``, in [0, 1):
0 when the policy is the same on every frame. In a multitask run it also moves with the task
ID of a head that reads one.

``measure`` returns 0-d tensors on the torso's device, keyed by their TensorBoard tags
(``torso/<layer>/inactive``, ``torso/<layer>/dormant``, ``torso/<features>/signal``,
``policy/spread``); ``TorsoMonitor``
runs it inside the learner without a device sync of its own; ``BlindWatch`` applies the
blind rule to a run's probes. ``scripts/evaluate.py`` and ``scripts/papers/atari_probe.py``
call ``measure`` on frames they play.
"""

from __future__ import annotations

import torch

SPREAD = "policy/spread"


def layer_tags(layer: str) -> tuple[str, str]:
    """The tags of one torso layer's shares: ``torso/<layer>/inactive`` and ``.../dormant``."""
    return f"torso/{layer}/inactive", f"torso/{layer}/dormant"


def unit_scores(h: torch.Tensor, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(off, score)`` per unit of one layer, each ``[channels]`` (module docstring).

    ``h``: post-ReLU activations ``[N, units]``, ``units = channels x positions``,
    channel-major; each channel is one unit, averaged over its positions. ``off``: True where
    the unit is 0 on every frame and position; ``score``: Sokar et al.'s ``s_i``.
    """
    per = h.reshape(h.shape[0], channels, -1).abs()  # [N, channels, positions]
    off = per.amax(dim=(0, 2)) == 0
    mean = per.mean(dim=(0, 2))  # mean_x |h_i(x)|, positions averaged per channel
    # An all-zero layer scores 0 (dormant), not 0/0; a positive mean is at least float32's
    # smallest normal number, so the clamp changes no other score.
    return off, mean / mean.mean().clamp_min(torch.finfo(mean.dtype).tiny)


def layer_shares(h: torch.Tensor, channels: int, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inactive, dormant)`` shares of one layer's units, 0-d tensors (module docstring)."""
    off, score = unit_scores(h, channels)
    return off.float().mean(), (score <= tau).float().mean()


def probe_frames(batch, frames: int | None) -> torch.Tensor:
    """The first ``frames`` observations of ``batch`` (a ``Batch``), a probe's frames.

    Its unroll's ``T`` rows in time-major order (row 0 of every column, then row 1, ...): a
    fixed slice, no random draw. ``frames`` unset: 256 or all there are.
    """
    pixels = batch.obs["pixels"][:batch.unroll_length].flatten(0, 1)
    return pixels[:frames or min(256, len(pixels))]


def policy_spread(logits: torch.Tensor) -> torch.Tensor:
    """Mean total-variation distance of each frame's policy to the mean policy; 0-d.

    ``logits``: ``[N, A]``, one row per frame.
    """
    probs = torch.softmax(logits.float(), dim=-1)
    return 0.5 * (probs - probs.mean(0)).abs().sum(-1).mean()


def features_signal(features: torch.Tensor, outgoing) -> torch.Tensor:
    """The features' signal into the core, a 0-d tensor (module docstring).

    ``features``: ``[N, H]``, one row per frame; ``outgoing``: the ``UnitSlice``s of the
    core's weights on them (``agents/units.py``: unit ``u`` is ``group`` indices along
    ``dim``).
    """
    n, units = features.shape
    f = features.float()
    centred = f - f.mean(0)
    total, rows = centred.new_zeros(()), 0
    for s in outgoing:
        # the units are the first H x group indices along dim (UnitSlice); a view, so a CUDA
        # probe waits for nothing (a boolean mask would sync to size its result)
        w = s.param.detach().narrow(s.dim, 0, units * s.group).float()
        w = w.movedim(s.dim, -1).reshape(-1, units * s.group)  # [rows, H x group]
        x = centred.repeat_interleave(s.group, dim=1) if s.group > 1 else centred
        total = total + (x @ w.T).square().sum()
        rows += w.shape[0]
    return (total / (n * max(rows, 1))).sqrt()


def features_outgoing(agent):
    """The core's weights on the torso's features (``UnitSlice``s), or None where it has none.

    The core's ``input_weights()`` (``agents/units.py``; the features first in its input, as
    ReDo reads them); None for a core without them (``feedforward``) or a torso read as a set
    (a spatial core reads positions, not one feature vector).
    """
    read = getattr(agent.core, "input_weights", None)
    if read is None or getattr(agent.torso, "as_set", False):
        return None
    return read()


def signal_tag(layer: str) -> str:
    """The tag of the features' signal into the core: ``torso/<layer>/signal``."""
    return f"torso/{layer}/signal"


@torch.no_grad()
def measure(torso, pixels: torch.Tensor, logits: torch.Tensor | None, tau: float,
            outgoing=None) -> dict[str, torch.Tensor]:
    """Each probed layer's shares, the features' signal and the policy's spread, on ``pixels``.

    ``torso``: any registered torso (its ``probe``, ``probe_layers`` and ``probe_channels``);
    ``pixels``: uint8 ``[N, C, H, W]``; ``logits``: ``[N, A]``, the policy on those frames
    (None: no spread); ``outgoing``: the core's weights on the features (``UnitSlice``s;
    None: no signal). Returns 0-d tensors on the torso's device keyed by tag, the layers
    input to output, then the signal and ``policy/spread``. Draws no random numbers.
    """
    out, last = {}, None
    for layer, h in torso.probe({"pixels": pixels}).items():
        inactive, dormant = layer_shares(h, torso.probe_channels[layer], tau)
        tag_inactive, tag_dormant = layer_tags(layer)
        out[tag_inactive], out[tag_dormant] = inactive, dormant
        last = (layer, h)
    if outgoing and last is not None and last[1].shape[1] == torso.probe_channels[last[0]]:
        out[signal_tag(last[0])] = features_signal(last[1], outgoing)
    if logits is not None:
        out[SPREAD] = policy_spread(logits)
    return out


def values(measures: dict[str, torch.Tensor]) -> dict[str, float]:
    """``measure``'s tensors as floats, in one copy to the CPU."""
    return dict(zip(measures, torch.stack(list(measures.values())).tolist()))


def features_layer(measured: dict[str, float]) -> str | None:
    """The last layer with an ``inactive`` share in ``measured`` (tags input to output)."""
    layers = [k.split("/")[1] for k in measured if k.startswith("torso/") and
              k.endswith("/inactive")]
    return layers[-1] if layers else None


class Pending:
    """A probe's results on their way to the CPU; ``values()`` reads them once they are there.

    On CUDA the results are copied to pinned memory without blocking, right behind the probe's
    kernels, and an event marks the copy's end. The learner reads them after the update's
    steps, which already wait for the device (each step reads its gradient norm), so the
    event has passed by then and reading waits for nothing: the monitor adds no sync.
    """

    def __init__(self, measures: dict[str, torch.Tensor]):
        self.tags = list(measures)
        stacked = torch.stack(list(measures.values()))
        self.event = None
        if stacked.device.type == "cuda":
            self.host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
            self.host.copy_(stacked, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = stacked

    def values(self) -> dict[str, float]:
        """Tag -> value."""
        if self.event is not None:
            self.event.synchronize()  # already passed: see the class docstring
        return dict(zip(self.tags, self.host.tolist()))


class TorsoMonitor:
    """The learner's probe: every ``learner.monitor.every`` updates, on its batch's first frames.

    ``config``: the ``learner.monitor`` section (``learners.config.schema.MonitorConfig``).
    """

    def __init__(self, torso, config, outgoing=None):
        """``outgoing``: the core's weights on the features (``features_outgoing``), or None."""
        self.torso, self.config, self.outgoing = torso, config, outgoing

    def due(self, version: int) -> bool:
        """Whether the update that starts from policy ``version`` probes (0, every, 2 every...)."""
        return self.config.every > 0 and version % self.config.every == 0

    def start(self, batch) -> Pending:
        """Probe the first frames of ``batch`` (a ``Batch``) with the weights it starts from.

        The probe batch is the first ``frames`` observations of the unroll's ``T`` rows in
        time-major order (row 0 of every column, then row 1, ...): a fixed slice, no random
        draw. The policy on them is the one the runners recorded (``behaviour_logits``; with
        policy lag, from weights a few updates older), which costs no forward pass.
        """
        pixels = probe_frames(batch, self.config.frames)
        logits = batch.behaviour_logits[:batch.unroll_length].flatten(0, 1)[:len(pixels)]
        return Pending(measure(self.torso, pixels, logits, self.config.tau, self.outgoing))


def blind_layer(measured: dict[str, float], share: float,
                features: str | None = None) -> tuple[str, float] | None:
    """Why one probe is blind: ``(layer, its inactive share)``, or None when it sees.

    A probe is blind when some torso layer is wholly inactive (every unit off on every probe
    frame: nothing below it gets a gradient, and in mira's kept trials no such layer came
    back), else when at least ``share`` of the features (the last layer) are inactive. The
    definition of docs/results/torso-health.md's declared study, which
    ``scripts/papers/torso_blind.py`` applies to kept probes. ``measured``: tag -> value,
    layers input to output, as ``measure`` writes them; ``features``: the features' layer
    by name where the tags' order is not the torso's (a table sorted by tag), else the last.
    """
    inactive = {k.split("/")[1]: v for k, v in measured.items()
                if k.startswith("torso/") and k.endswith("/inactive")}
    for layer, v in inactive.items():
        if v >= 1.0:
            return layer, v
    last = features if features in inactive else features_layer(measured)
    return (last, inactive[last]) if last is not None and inactive[last] >= share else None


class BlindWatch:
    """The blind rule over a run's probes: blind probes (``blind_layer``) ``probes`` in a row.

    A run is blind from the first of ``probes`` blind probes in a row and sees again at the
    first of ``probes`` in a row that are not; ``add`` returns one line at each such change
    (a torso can see again: in the declared study one in four continued blind trials did).
    ``blind`` keeps the first span (``frames``, ``layer``, ``inactive``, ``probes``,
    ``sees_again``: None while it lasts) and ``spans`` every span, ``[from, again or None]``.
    """

    def __init__(self, share: float, probes: int):
        self.share, self.probes = share, probes
        self.run: list[int] = []  # frames of the probes in a row that disagree with the state
        self.blind: dict | None = None
        self.spans: list[list] = []

    @property
    def is_blind(self) -> bool:
        """Whether the run is blind now (its last span has not ended)."""
        return bool(self.spans) and self.spans[-1][1] is None

    def add(self, frames: int, measured: dict[str, float]) -> str | None:
        """Count one probe (``measured`` at ``frames``); a line if the state changes, else None."""
        if features_layer(measured) is None:
            return None
        why = blind_layer(measured, self.share)
        self.run = self.run + [frames] if (why is not None) != self.is_blind else []
        if len(self.run) < self.probes:
            return None
        start, count, self.run = self.run[0], len(self.run), []
        if self.is_blind:
            self.spans[-1][1] = start
            if self.blind["sees_again"] is None:
                self.blind["sees_again"] = start
            return (f"the torso sees again from {start:,} frames (blind from "
                    f"{self.spans[-1][0]:,}): no torso layer wholly inactive and fewer than "
                    f"{self.share:.0%} of the features inactive at {count} probes in a row")
        layer, inactive = why
        self.spans.append([start, None])
        if self.blind is None:
            self.blind = {"frames": start, "layer": layer, "inactive": inactive,
                          "probes": count, "sees_again": None}
        return (f"the torso has gone blind from {start:,} frames: {inactive:.0%} of its "
                f"{layer} units were inactive on every probe frame at {count} probes in a row "
                f"(blind: a layer wholly inactive, or learner.monitor.blind_share "
                f"{self.share:g} of the features), so the policy no longer depends on the "
                "screen")

    def state_dict(self) -> dict:
        """The spans and the verdict, for a checkpoint (a resumed run says no line again)."""
        return {"run": list(self.run), "blind": self.blind, "spans": self.spans}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()`` (or from one written before spans were kept)."""
        self.run, self.blind = list(state.get("run", [])), state.get("blind")
        self.spans = [list(s) for s in state.get("spans", [])]
        if self.blind is not None and "spans" not in state:  # blind, and its run counted on
            self.blind, self.spans, self.run = ({"sees_again": None, **self.blind},
                                                [[self.blind["frames"], None]], [])
