"""Settings torch reads once, when it first allocates: they must be in the environment before
`import torch`, so the `emojikit` command (and the benchmarks) call this first.

THP_MEM_ALLOC_ENABLE=1: torch's CPU allocator backs every tensor of 2 MB or more with
transparent huge pages (madvise), so the large activations of a step (an [N, 49152] logit block,
the MLP's [B, T, 1536] intermediates) are not walked 4 KB page by page through the TLB. On the
development machine an elementwise pass over a 37 MB tensor ran 3.9x faster, an SFT step of 16
on two threads 1.10x (docs/performance.md, change 10). Linux only; where the kernel has THP off,
torch's madvise is a no-op. A value already in the environment wins (0 turns it off).
"""

from __future__ import annotations

import os


def prepare_torch_environment() -> None:
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
