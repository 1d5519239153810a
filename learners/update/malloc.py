"""The C heap's settings for a process that trains: freed memory is kept for reuse.

A learner update allocates and frees the same large buffers over and over (a minibatch's
pixels as floats, 29 MB for 256 Atari frames; the torso's activations; the whole batch's
for the targets, 116 MB). glibc serves blocks above its mmap threshold (128 KB, rising to at
most 32 MB) with fresh ``mmap`` calls and hands them back with ``munmap`` when freed, and
trims the heap's free top back to the OS, so each update touches new pages: the kernel
faults and zeroes them one 4 KB page at a time. On the Atari preset's learner that was
about 1.2 million page faults per 20 s of updates, and 12-20% of the update's time
(``python -m scripts.bench.learner``).

``keep_freed_memory`` turns both off (``mallopt``: no mmap'd blocks, no trimming), so freed
blocks stay in the heap and the next update reuses them already faulted in. The process
then keeps its peak heap for as long as it lives (the Atari learner's peak resident size
measured 846 MB against 819 before; a heap that never shrinks can also fragment above its
peak). The setting is process-wide and stays: an in-process learner's driver and a Ray
worker reused by later tasks keep it. Nothing numerical changes. It is a no-op where the C
library is not glibc (macOS, musl).
"""

from __future__ import annotations

import ctypes
import functools

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


@functools.cache
def keep_freed_memory() -> bool:
    """Keep freed heap memory in this process for reuse; True if glibc took the settings.

    Once per process (cached): the settings stay for the process's life.
    """
    try:
        libc = ctypes.CDLL(None)  # the C library the interpreter runs on
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: musl's mallopt ignores these
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # the largest int: never trim the heap's top; 0 mmap'd blocks: every block from the heap
    trim = mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    no_mmap = mallopt(M_MMAP_MAX, 0)
    return bool(trim) and bool(no_mmap)
