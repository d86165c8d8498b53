"""Does this machine multiply bfloat16 natively? What `dtype = "auto"` decides on.

Why it matters: the bf16 compute path (precision.py) is 2-4x faster than float32 only where the
hardware has bf16 matmul units (CPUs with AVX512-BF16 or AMX, GPUs with bf16 support). Elsewhere
torch emulates it: on an AVX2-only CPU a bf16 matmul of SmolLM2's shapes ran 7.6x slower than the
float32 one (6.2 vs 47 GFLOP/s, one thread, docs/performance.md), so an SFT step took minutes.
"""

from __future__ import annotations

import platform
import sys
from typing import Optional

from emojikit.support.cpu import cpu_features, has_bf16_units

_warned: set[tuple[str, str]] = set()


def bfloat16_matmul_problem(device: str, features: Optional[set[str]] = None) -> Optional[str]:
    """None when `device` (a resolved torch device string) multiplies bf16 natively; otherwise
    why not, as a clause for a message."""
    kind = device.split(":")[0]
    if kind == "cuda":
        import torch

        return None if torch.cuda.is_bf16_supported() else "this GPU has no bfloat16 support"
    if kind != "cpu":
        return f"bfloat16 matmul speed on {kind} is not known to emojikit"
    features = cpu_features() if features is None else features
    if features is None:
        return f"this CPU's features could not be read ({platform.machine() or 'unknown'} on {sys.platform})"
    if has_bf16_units(features):
        return None
    widest = next((f for f in ("avx512f", "avx2", "avx", "sse4_2", "asimd") if f in features), None)
    return f"this CPU has no bfloat16 matmul units (no avx512_bf16 or amx_bf16{', ' + widest + ' at most' if widest else ''})"


def compute_dtype(setting: str, device: str, features: Optional[set[str]] = None, key: str = "dtype") -> str:
    """The dtype the backend setting `key` (`dtype`, `base_matmul_dtype`) computes in on `device`:
    "auto" is bfloat16 where the device multiplies it natively, else float32. An explicit
    "bfloat16" where it does not is kept, with a warning (once per process): it is correct there,
    only several times slower."""
    if setting == "float32":
        return setting
    problem = bfloat16_matmul_problem(device, features)
    if setting == "auto":
        return "float32" if problem else "bfloat16"
    if problem and (key, problem) not in _warned:
        _warned.add((key, problem))
        print(f"emojikit: warning: backend {key} = \"bfloat16\" on {device}, but {problem}: bf16 is emulated there and runs several times slower than float32 (backend.dtype = \"auto\" picks float32 on such a machine)", file=sys.stderr, flush=True)
    return setting
