"""Output heads: the end of encoder -> core -> head (docs/design.md, "Contracts").

Every head is an ``nn.Module`` registered in ``HEADS``:

- ``Head(input_size, num_actions, num_tasks, config: Config | None = None, **options)``:
  built from the head's ``Config`` dataclass (what ``agent.head_options`` resolves to on
  load) or from its fields as keywords (``typed_options``);
- class attribute ``reads_task_id: bool``: whether ``forward`` uses ``task_id``. A head
  that declares ``False`` must work with ``task_id=None`` (evaluation never passes it);
- ``forward(h [T, B, H], task_id [T, B] int64 | None) -> (logits [T, B, A], value [T, B])``.

A new head is one file here plus one import line below.
"""

# One line per head: importing the module registers it.
from agents.heads import linear, multi_head, multiplicative  # noqa: F401
from agents.heads.contract import HEADS

__all__ = ["HEADS"]
