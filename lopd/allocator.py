"""Keep freed heap memory for reuse on Linux CPUs (glibc ``mallopt``).

A CPU training step allocates and frees large tensors all the time: activations of every
micro-batch, the KV cache and logits of every decode step. glibc serves blocks above its mmap
threshold (128 KiB at first, growing up to 32 MiB) with a fresh ``mmap`` and returns them with
``munmap`` when freed, and it trims the top of the heap back to the OS; the next allocation of
the same size then faults every page in again and the kernel zeroes it. ``keep_freed_memory``
turns both off for this process (``M_MMAP_MAX = 0``, ``M_TRIM_THRESHOLD`` = 1 TiB): large blocks
come from the heap and freed ones are reused. The cost is that resident memory does not shrink
after a peak. ``tests/test_allocator.py`` checks that reused blocks stop faulting; its share of
the speed-up in ``benchmarks/results/throughput.md`` was not measured on its own.

Does nothing where the C library is not glibc (macOS, musl) or on failure.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_applied = False


def keep_freed_memory() -> bool:
    """Apply the settings once per process; True when glibc took them."""
    global _applied
    if _applied:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 40) == 1
    except (OSError, AttributeError):
        return False
    _applied = ok
    return ok
