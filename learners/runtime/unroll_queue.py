"""The unrolls between the runners and the learner, and when a runner goes out again.

One policy object serves both kinds of learner in the trainer's single driver loop
(``learners/runtime/trainer.py``): IMPALA's asynchronous runners with backpressure, and PPO's
lock-step rounds.
"""

from __future__ import annotations

import collections


class UnrollQueue:
    """The unrolls between the runners and the learner, and when a runner goes out again.

    The queue holds unrolls (trajectory refs); its policy says when a returning runner goes
    out again: the one driver loop serves both kinds of learner through it.

    - IMPALA (``lock_step=False``): a runner goes straight back out with the newest weights
      it lacks. Backpressure: one whose unroll arrives while the queue is full is parked, and
      released when an update takes a batch, so a slow learner bounds the queue (and the
      object store's load and the policy lag) instead of letting it grow for as long as the
      run lasts. Full is ``max_batches`` batches or one waiting unroll per runner, whichever
      is more: with the one each runner has in flight, about two unrolls per runner, as in
      TorchBeast, whose actors share ``max(2 x actors, batch_size)`` unroll buffers. A
      bound of two batches alone, with many runners and small batches, parks runners in
      convoys: all parked runners go out at the same take, come back together, and are
      parked again, while the learner waits between the bursts (``tests/test_unroll_queue.py``
      simulates it).
    - Lock-step (PPO, ``lock_step=True``): every returning runner is parked; a batch is one
      unroll from each runner, and the runners are released only when its update is done, so
      every unroll of the next batch is acted with the one new weights version (policy lag 0).
      A runner whose unroll was lost goes out again at once (same weights) to fill the round.
    """

    def __init__(self, per_update: int, max_batches: int = 2, lock_step: bool = False,
                 runners: int = 0):
        self.per_update, self.lock_step = per_update, lock_step
        self.limit = per_update if lock_step else max(max_batches * per_update, runners)
        self.unrolls: collections.deque = collections.deque()
        self.parked: list[int] = []

    def add(self, runner: int, unroll=None) -> bool:
        """Runner ``runner`` is back (``unroll`` None: it was lost); True: send it out again now.

        False: it is parked until ``take`` (IMPALA) or ``update_done`` (lock-step) releases it.
        """
        if unroll is not None:
            self.unrolls.append(unroll)
        elif self.lock_step:
            return True
        if self.lock_step or len(self.unrolls) >= self.limit:
            self.parked.append(runner)
            return False
        return True

    def ready(self) -> bool:
        """Whether a whole batch (``per_update`` unrolls) is waiting."""
        return len(self.unrolls) >= self.per_update

    def take(self) -> tuple[list, list[int]]:
        """One batch for the learner, and the parked runners that may go out again now."""
        batch = [self.unrolls.popleft() for _ in range(self.per_update)]
        released = []
        while not self.lock_step and self.parked and len(self.unrolls) < self.limit:
            released.append(self.parked.pop(0))
        return batch, released

    def update_done(self) -> list[int]:
        """The runners that may go out again now that an update is done (lock-step: all)."""
        if not self.lock_step:
            return []
        released, self.parked = self.parked, []
        return released
