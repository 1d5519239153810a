"""``StopFlag``: how a run answers Ctrl-C (a checkpoint first, then a quick exit)."""

from __future__ import annotations

import signal


class StopFlag:
    """First Ctrl-C: finish the current step, checkpoint, return. Second: stop at once."""

    def __init__(self):
        self.stop = False
        self._previous = None

    def __enter__(self):
        def handler(signum, frame):
            if self.stop:
                raise KeyboardInterrupt
            self.stop = True
            print("\n[mira] interrupted: writing a checkpoint (Ctrl-C again to quit at once)",
                  flush=True)

        try:
            self._previous = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
