"""Settings torch reads once, when it first allocates or first runs a parallel region: they must be
in the environment before `import torch`, so the `emojikit` command (and the benchmarks) call
this first. A value already in the environment wins.

THP_MEM_ALLOC_ENABLE=1: torch's CPU allocator backs every tensor of 2 MB or more with
transparent huge pages (madvise), so the large activations of a step (an [N, 49152] logit block,
the MLP's [B, T, 1536] intermediates) are not walked 4 KB page by page through the TLB. On the
development machine an elementwise pass over a 37 MB tensor ran 3.9x faster, an SFT step of 16
on two threads 1.10x (docs/performance.md, change 10). Linux only; where the kernel has THP off,
torch's madvise is a no-op. 0 turns it off.

OMP_WAIT_POLICY=PASSIVE: a torch thread that waits for its sibling sleeps at once instead of
spinning. A user's machine runs something else: beside two two-thread processes of small
products, an SFT step of 16 on two threads took 7.6x its idle time under the runtime's default
(spin, then sleep; slowest step 14x) and 3.4x under PASSIVE, where a fair share is 3x; alone,
PASSIVE cost nothing measurable on an AVX2 CPU (bench/under_load.py, docs/performance.md). Set
OMP_WAIT_POLICY=ACTIVE (or GOMP_SPINCOUNT) to choose otherwise, e.g. on a dedicated machine.
"""

from __future__ import annotations

import os

DEFAULT_WAIT_POLICY = "PASSIVE"


def prepare_torch_environment() -> None:
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    # GOMP_SPINCOUNT is the finer form of the same choice: leave both to a user who set either.
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = DEFAULT_WAIT_POLICY
