"""What the CPU can do, read from Linux's /proc/cpuinfo without importing torch: the torch
settings made before torch loads (torch_env) and the local backend's `dtype = "auto"` both
decide on it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

# x86: AVX512-BF16 (Cooper Lake, Zen 4 and later) or AMX (Sapphire Rapids and later); aarch64
# Linux names the Armv8.6 BF16 extension "bf16".
BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def _cpuinfo_fields(cpuinfo: Path) -> Optional[dict[str, str]]:
    """Each key of /proc/cpuinfo with its first value (the first CPU's), or None where it cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> Optional[set[str]]:
    """The first CPU's feature flags (x86 "flags", Arm "Features"), or None where they cannot be read."""
    fields = _cpuinfo_fields(cpuinfo) or {}
    flags = fields.get("flags", fields.get("Features"))
    return None if flags is None else set(flags.split())


def has_bf16_units(features: Optional[set[str]]) -> bool:
    """True when the flags name bf16 matmul units (where `dtype = "auto"` computes in bf16)."""
    return bool(features and features & BF16_FEATURES)


def cpu_kind(features: Optional[set[str]] = None) -> str:
    """The kind of CPU by its widest matmul units, the kinds the project's figures differ by:
    "AMX", "AVX512-BF16", "AVX512", "AVX2", "Arm BF16", "Arm" (or "unknown")."""
    features = cpu_features() if features is None else features
    if not features:
        return "unknown"
    for flag, kind in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2")):
        if flag in features:
            return kind
    if "asimd" in features:
        return "Arm BF16" if "bf16" in features else "Arm"
    return "unknown"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as Linux reports it (x86 "model name", with its "cpu family" and
    "model" numbers: a VM's name can be as bare as "AMD EPYC", which two generations share at
    twice each other's speed), else what platform knows."""
    import platform

    fields = _cpuinfo_fields(cpuinfo) or {}
    if name := fields.get("model name"):
        # no parentheses of its own: the lines that print it add "(`cpu_kind` ..., N cores)"
        numbers = " ".join(f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model")) if fields.get(key))
        return f"{name}, {numbers}" if numbers else name
    return platform.processor() or platform.machine() or "unknown"


def describe_machine() -> dict:
    """What a figure was measured on: the CPU model, its kind (the figures move with it) and cores."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # the ones this process may use
    return {"cpu": cpu_model(), "cpu_kind": cpu_kind(), "cores": cores}
