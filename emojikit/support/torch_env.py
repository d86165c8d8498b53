"""Settings torch reads once, when it first allocates or first runs a parallel region: they must be
in the environment before `import torch`, so the `emojikit` command (and the benchmarks) call
this first. A value already in the environment wins.

THP_MEM_ALLOC_ENABLE=1: torch's CPU allocator backs every tensor of 2 MB or more with
transparent huge pages (madvise), so the large activations of a step (an [N, 49152] logit block,
the MLP's [B, T, 1536] intermediates) are not walked 4 KB page by page through the TLB. On the
development machine an elementwise pass over a 37 MB tensor ran 3.9x faster, an SFT step of 16
on two threads 1.10x (docs/performance.md, change 10). Linux only; where the kernel has THP off,
torch's madvise is a no-op. 0 turns it off.

How a torch thread waits for its sibling, by CPU kind (bench/under_load.py, bench/flops.py;
docs/errors.md). A user's machine runs something else, and a waiting thread that spins holds its
core while its sibling, descheduled, cannot finish: beside two two-thread processes of small
products an SFT step of 16 took 7.6x its idle time under the runtime's default (spin ~3 ms, then
sleep) on an AVX2 CPU.
- AVX2-only (float32 compute, long ops): OMP_WAIT_POLICY=PASSIVE, sleep at once: 3.4x loaded,
  and no cost alone there (AMD EPYC).
- Anything wider (AVX512, with or without bf16 units: shorter ops, thousands of parallel regions
  a step): sleeping at once made an idle step 1.5x slower, the wake-ups being the step
  (AVX512-BF16, bf16: SFT step 1.37-1.43 s against 0.85-0.91 s; an Intel AVX512 Xeon without
  bf16 units, float32: 2.86 s against 1.87 s). GOMP_SPINCOUNT=10000 (libgomp, torch's OpenMP on
  Linux: ~0.1 ms of spinning) ran alone as fast as spinning and loaded no slower than PASSIVE
  (AVX512-BF16: 3.72-4.36 s against 4.00-4.36 s, three runs; AVX512: 10.2 s against 10.4 s).
Set OMP_WAIT_POLICY or GOMP_SPINCOUNT yourself to choose otherwise (ACTIVE on a dedicated machine).
"""

from __future__ import annotations

import os
from typing import Optional

from emojikit.support.cpu import cpu_features, has_bf16_units

SPIN_COUNT = "10000"  # ~0.1 ms: where ops are short (AVX512 and bf16 units)
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # what libgomp reads for how threads wait


def wait_policy_environment(features: Optional[set[str]]) -> dict[str, str]:
    """The OpenMP wait setting for a CPU with these feature flags (module docstring)."""
    if has_bf16_units(features) or (features and "avx512f" in features):
        return {"GOMP_SPINCOUNT": SPIN_COUNT}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


def prepare_torch_environment() -> None:
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    # GOMP_SPINCOUNT is the finer form of the same choice: leave both to a user who set either.
    if not any(key in os.environ for key in WAIT_VARIABLES):
        os.environ.update(wait_policy_environment(cpu_features()))
