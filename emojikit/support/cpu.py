"""What the CPU can do, read from Linux's /proc/cpuinfo without importing torch: the torch
settings made before torch loads (torch_env) and the local backend's `dtype = "auto"` both
decide on it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

# x86: AVX512-BF16 (Cooper Lake, Zen 4 and later) or AMX (Sapphire Rapids and later); aarch64
# Linux names the Armv8.6 BF16 extension "bf16".
BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> Optional[set[str]]:
    """The first CPU's feature flags (x86 "flags", Arm "Features"), or None where they cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


def has_bf16_units(features: Optional[set[str]]) -> bool:
    """True when the flags name bf16 matmul units (where `dtype = "auto"` computes in bf16)."""
    return bool(features and features & BF16_FEATURES)
