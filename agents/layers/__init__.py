"""Layers that combine two streams multiplicatively, shared by cores, heads and scripts.

- ``multiplicative``: the multiplicative interaction M(x, z) (Jayakumar et al. 2020, eq. 1);
- ``arithmetic``: NAU and NMU (Madsen & Johansen 2020) and the NAC+, NAC*, NALU baselines;
- ``adaptive``: the IO-adaptive feed-forward layer (Flennerhag et al. 2018, eq. 3);
- ``encoding``: one-hot codes without a host read of the indices.
"""

from agents.layers.adaptive import AdaptiveLinear
from agents.layers.arithmetic import (
    NALU,
    NAU,
    NMU,
    NACAdd,
    NACMul,
    nac_init_range,
    regularizer_scale,
    sparsity_error,
)
from agents.layers.encoding import one_hot
from agents.layers.multiplicative import MultiplicativeInteraction

__all__ = [
    "AdaptiveLinear",
    "MultiplicativeInteraction",
    "NACAdd",
    "NACMul",
    "NALU",
    "NAU",
    "NMU",
    "nac_init_range",
    "one_hot",
    "regularizer_scale",
    "sparsity_error",
]
