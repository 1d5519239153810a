"""One-hot codes computed on the device without reading the indices back to the host.

``torch.nn.functional.one_hot`` checks that its indices lie in range, and that check reads
them on the host: on a GPU every call waits for the device (two reads a call), and the
torso and the task-ID heads call it on every forward. Here the code is a comparison with
``arange(n)``: the same values for indices in range, no host read; an index out of range
gives a row of zeros instead of an error (actions and task IDs come from the runners, in
range by construction).
"""

from __future__ import annotations

import torch


def one_hot(index: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``index`` [...] integer -> [..., n] in ``dtype``: 1 at each index, 0 elsewhere."""
    return (index.long().unsqueeze(-1) == torch.arange(n, device=index.device)).to(dtype)
