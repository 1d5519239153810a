"""One-hot codes as a comparison with ``arange(n)``, the same on every device.

``torch.nn.functional.one_hot`` checks on CPU that its indices lie in range, reading their
minimum and maximum back (on CUDA it leaves the check to the device's asserts); the torso and
the task-ID heads call it on every forward. Here the code is ``index == arange(n)``: the same
values for indices in range, no read, and the same few operators on every device, so an
update's operator count on CPU (``scripts/bench/dispatch.py``) is the one a GPU dispatches. An
index out of range gives a row of zeros instead of an error (actions and task IDs come from
the runners, in range by construction).
"""

from __future__ import annotations

import torch


def one_hot(index: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``index`` [...] integer -> [..., n] in ``dtype``: 1 at each index, 0 elsewhere."""
    return (index.long().unsqueeze(-1) == torch.arange(n, device=index.device)).to(dtype)
