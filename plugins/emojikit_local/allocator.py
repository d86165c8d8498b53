"""Keep freed tensor memory in the process instead of handing it back to the OS at every free.

glibc's malloc serves a block above its mmap threshold (128 KB, growing to at most 32 MB as
such blocks are freed) with a fresh mmap and returns it with munmap on free, and trims the top of
the heap back to the OS. A training step allocates and frees the same few hundred MB of
activations every step, so on CPU each step paid for them again in page faults: 72,000 minor
faults per SFT step of 16 on SmolLM2 (288 MB of first touches), ~16 % of the step's wall time
(docs/performance.md, change 10). Raising both thresholds and the heap's top pad lets the
heap reuse the blocks (~1,100 faults per step). Cost: the process keeps its peak heap (RSS
stays near peak instead of falling between steps); the peak itself does not grow.

The same thing, set before the process starts: MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=2147483647 MALLOC_TOP_PAD_=536870912; jemalloc or tcmalloc through
LD_PRELOAD do it too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameter numbers from glibc's malloc.h
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = (
    (M_MMAP_THRESHOLD, 32 * 1024 * 1024),  # glibc's ceiling on 64-bit (HEAP_MAX_SIZE / 2)
    (M_TRIM_THRESHOLD, 2**31 - 1),  # give memory back only when 2 GB lie free at the heap's top
    (M_TOP_PAD, 512 * 1024 * 1024),  # grow the heap in large steps (address space, touched lazily)
)

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds and top pad once per process; True when set. A no-op
    elsewhere (macOS, Windows, musl: their allocators keep freed blocks already or differ)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; setting M_MMAP_THRESHOLD also stops glibc's own adjusting
    _done = all([mallopt(param, value) == 1 for param, value in SETTINGS])
    return _done
