"""Recurrent cores: the middle of encoder -> core -> head (docs/design.md, "Contracts").

Every core is an ``nn.Module`` registered in ``CORES`` and honours one contract:

- a ``Config`` dataclass of the core's options, declared next to it (defaults, one-line
  docs, checks in ``__post_init__``); the config loader resolves ``agent.core_options``
  into it;
- ``Core(input_size: int, config: Config | None = None, **options)``: built from that
  ``Config`` (as the agent does) or from its fields as keywords (``typed_options``);
- ``core.output_size``: the width ``H`` of what the head reads;
- ``core.initial_state(batch_size, device=None) -> State``: a tuple of tensors whose
  first dimension is the batch, so a minibatch of sequences is ``tuple(s[idx] for s in state)``;
- ``core.forward(x [T, B, D], state, reset [T, B] bool) -> (y [T, B, H], state)``:
  before step ``t`` the state is multiplied by ``1 - reset[t]``, step by step, so an
  episode boundary inside an unroll starts the next episode from the initial (zero) state;
- optionally ``Core.input_form(config) -> "flat" | "spatial"`` (a static method): the
  input the core wants, ``x [T, B, D]`` or the torso's positions as a set ``x [T, B, N, D]``;
  ``"flat"`` when absent (``input_form`` below is what the agent asks);
- optionally ``stateless = True`` (a class attribute) for a core whose output does not
  depend on its state (``feedforward``);
- optionally ``core.diagnostics() -> dict[str, Tensor]`` with statistics of the last
  forward pass worth logging (e.g. RIMs' per-unit activation frequency);
- optionally ``core.input_weights() -> list[UnitSlice]``: every weight that reads the input
  ``x``, with the axis its features lie on (``agents/units.py``), so that a re-initialised
  torso feature's outgoing weights can be set to 0 (ReDo, ``learner.redo``). ``lstm``,
  ``mi_lstm``, ``alstm`` and ``rims`` (flat input) declare it.

A new core is one file here plus one import line below.
"""

# One line per core: importing the module registers it.
from agents.cores import alstm, feedforward, lstm, mi_lstm, rims  # noqa: F401
from agents.cores.contract import CORES, State, input_form, mask_state

__all__ = ["CORES", "State", "input_form", "mask_state"]
