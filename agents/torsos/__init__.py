"""Torsos (encoders): the start of torso -> core -> head (docs/design.md, "Contracts").

observation + last action + last reward (+ instruction) -> features. Registered in ``TORSOS``:

- ``shallow``: IMPALA's shallow torso, as the multiplicative-interactions paper uses it
  (Espeholt et al. 2018, fig. 3 left; Jayakumar et al. 2020, appendix E);
- ``nature``: DQN's Nature CNN (Mnih et al. 2015); ``channels: [32, 64, 32]`` is Kostrikov's;
- ``resnet``: IMPALA's deep residual torso (Espeholt et al. 2018, fig. 3 right).

They differ in their convs alone (``trunk``); the rest is shared (``conv_torso.py``). Every
torso is an ``nn.Module`` registered in ``TORSOS`` and honours one contract
(tests/test_torsos.py checks it for every registered name):

- a ``Config`` dataclass of its options, declared next to it (defaults, one-line docs,
  checks in ``__post_init__``: a bad value is a one-line ValueError naming the key); the
  config loader resolves ``agent.torso_options`` into it;
- ``Torso(obs_shapes, num_actions, as_set=False, obs_vocab=None, config=None, **options)``:
  ``obs_shapes["pixels"]`` is ``(C, H, W)``; ``obs_vocab["instruction"]``, the instruction's
  vocabulary size, comes with the observation spec (agents/ knows nothing of envs/);
- ``torso.output_size`` (the width the core reads: features + extras), ``torso.extras_size``
  (one-hot last action, clipped reward, instruction feature), ``torso.positions`` (the last
  conv layer's height x width), ``torso.as_set``, ``torso.config``;
- ``forward(obs, last_action [T, B], last_reward [T, B]) -> [T, B, output_size]``, with
  ``obs["pixels"]`` uint8 ``[T, B, C, H, W]``. A torso has no state: ``[T, B]`` at once
  equals each step alone. The extras follow the features, at the end of the last axis;
- ``as_set=True`` (for cores that attend over an input set: RIMs, section 2.2 "for
  spatially structured input"): no linear layer; ``forward`` returns the last conv layer's
  positions as a set ``[T, B, positions, C + extras_size]``, each position's channels
  followed by the shared extras;
- ``training_layout(obs) -> obs``: the same pixels laid out in memory as a CPU training
  pass reads them (channels-last), for a learner that passes over one batch several times;
- ``probe(obs) -> dict[str, Tensor]``: for a dormant-unit monitor. ``obs["pixels"]`` uint8
  ``[N, C, H, W]`` (frames as stored, no time axis) -> ``{layer: [N, units]}`` for each name
  of ``torso.probe_layers``, in order from input to output: the post-ReLU activations of
  that layer, every output element of its ReLU flattened per frame (a conv layer's units
  are its channels x positions, channel-major). The last entry is the torso's features
  before the extras: ``fc`` (equal to the first ``hidden_size`` columns of ``forward``), or
  with ``as_set`` the last conv layer. Runs under ``torch.no_grad`` in the default layout
  and draws no random numbers. Layers: ``shallow`` conv1, conv2, fc; ``nature`` conv1,
  conv2, conv3, fc; ``resnet`` stack1, stack2, stack3 (each stack's residual-block hidden
  units), conv_out (the ReLU after the last stack, which the linear layer reads), fc.
  ``torso.probe_channels`` maps each of those layers to its channels (its units are channels
  x positions, channel-major; a linear layer's units are each their own channel, one
  position), so a monitor can take a conv layer's units per channel without naming layers
  (``learners/update/monitor.py``);
- ``observe(obs)``: ``obs["pixels"]`` uint8 ``[..., C, H, W]``, each frame once: moves the
  input statistics a torso keeps (``input_norm: running``), a no-op otherwise. The learner
  calls it once per batch, before the batch's steps; ``forward`` and ``probe`` only read
  them, so a runner acts with those of the weights it was sent;
- optionally ``unit_links() -> {layer: UnitLayer}`` and ``fresh_parameters(module,
  generator)``: where each probed unit's incoming and outgoing weights sit and a fresh draw
  of a layer's weights (``agents/units.py``), for ReDo (``learner.redo``); a class method
  ``recycle_problem(config, as_set)`` says in one line why not. ``shallow`` and ``nature``
  declare them; ``resnet``'s residual blocks read a unit on two paths, so it does not;

Options every torso takes (``TorsoConfig``): ``hidden_size``, the instruction's reading
(``bow``: mean of word embeddings; MiniGrid missions are short and order rarely matters,
and it costs nothing per step; ``lstm``: IMPALA's language encoder), ``init`` (``torch`` or
``orthogonal``, every conv and linear weight), ``norm`` (``layer``: a LayerNorm before the
linear layer's ReLU), ``input_norm`` (the pixels after /255: ``none``, ``frame``: each
frame's mean per channel subtracted, ``running``: a running per-pixel mean and standard
deviation as Sample Factory's, ``input_norm.py``); ``nature`` and ``resnet`` take
``channels`` too.

A new torso is one file here (its ``Config`` and its ``trunk`` on ``ConvTorso``, or a
module of its own honouring the contract) plus one name in the import line below.
"""

# One line per torso: importing the module registers it.
from agents.torsos import nature, resnet, shallow  # noqa: F401
from agents.torsos.contract import TORSOS, TorsoConfig
from agents.torsos.nature import NatureConfig, NatureTorso
from agents.torsos.resnet import ResNetConfig, ResNetTorso
from agents.torsos.shallow import ShallowConfig, ShallowTorso

__all__ = ["TORSOS", "NatureConfig", "NatureTorso", "ResNetConfig", "ResNetTorso",
           "ShallowConfig", "ShallowTorso", "TorsoConfig"]
