"""What the benchmarks share: the chat messages they prompt with, a machine description and the
command-line flags and header every script prints."""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

from emojikit.support.torch_env import WAIT_VARIABLES, prepare_torch_environment  # noqa: E402

prepare_torch_environment()  # the same torch settings as the `emojikit` command

MESSAGES = [
    "I just got the job I interviewed for!",
    "My cat knocked the plant off the shelf again.",
    "Let's get pizza and watch a movie tonight.",
    "The exam this morning was brutal.",
    "We're flying to Tokyo next week.",
    "It has been raining for three days straight.",
    "Happy birthday to my little sister!",
    "I lost my keys somewhere in the park.",
    "The team finally won the championship.",
    "I'm learning to bake sourdough bread.",
    "My phone battery died in the middle of the call.",
    "We adopted a puppy this weekend.",
    "The concert last night was incredible.",
    "I can't stop coughing, I think I have the flu.",
    "Our wedding is in June by the beach.",
    "The coffee machine at work is broken again.",
]


def machine() -> dict:
    from emojikit.support.cpu import cpu_kind, cpu_model

    model = cpu_model()

    # The kind (AMX, AVX512-BF16, AVX2, ...) is what a figure moves with: say it beside every figure;
    # so does how idle torch threads wait (1.5x on a bf16 step, emojikit/support/torch_env.py).
    wait = {key: os.environ[key] for key in WAIT_VARIABLES if key in os.environ} or "runtime default"
    described = {"nproc": os.cpu_count(), "cpu": model, "cpu_kind": cpu_kind(), "aten_isa": aten_isa(), "omp_wait": wait, "load_avg_1m": round(os.getloadavg()[0], 2)}
    # A capped instruction set makes one CPU stand in for a narrower kind (an AVX512 Xeon run as AVX2-only): say so.
    capped = {key: os.environ[key] for key in ISA_CAPS if key in os.environ}
    return described | ({"isa_caps": capped} if capped else {})


ISA_CAPS = ("MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # MKL's GEMMs, ATen's kernels, oneDNN's


def aten_isa() -> str:
    """The vector instruction set ATen's CPU kernels were dispatched to ("AVX512", "AVX2", ...)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def peak_rss_mb() -> float:
    kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kilobytes / 1024 / (1024 if sys.platform == "darwin" else 1)


def require_data(*paths: Path) -> None:
    """Stop with one line when a data run's file a benchmark reads is missing."""
    for path in paths:
        if not path.exists():
            raise SystemExit(f"{path}: not found (make it with: emojikit run recipes/data.toml)")


def parser(doc: str, *, threads: int) -> argparse.ArgumentParser:
    """A benchmark's argument parser with the flags every script takes: --threads, --seed, --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--threads", type=int, default=threads, help="torch threads (0: torch's default, as the main job runs; 1 on a busy machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return parser


def print_header(result: dict, as_json: bool) -> bool:
    """Print the whole result as JSON (returns True: nothing more to print), or the machine and
    config lines a table starts with."""
    if as_json:
        print(json.dumps(result))
        return True
    print(f"machine: {result['machine']}")
    print(f"config: {result['config']}")
    return False
