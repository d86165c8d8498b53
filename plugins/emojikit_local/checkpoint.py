"""Checkpoint folders: a standard PEFT adapter (adapter_config.json, adapter_model.safetensors,
loadable with plain `PeftModel.from_pretrained`) plus trainer state for resuming:
trainer_state.json (step, model), optimizer.pt and rng.pt.

A folder is written under a temporary name and renamed into place (emojikit.support.io's
atomic_directory), so a reader never sees half a checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from emojikit.api.errors import InputFileError

ADAPTER_FILE = "adapter_model.safetensors"
STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"


_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust (safetensors) shows an errno


def save_torch(obj: Any, path: Path) -> None:
    """torch.save through a Python file, so a full disk is an OSError naming the file (given a
    path, torch's own writer reports it as a RuntimeError "unexpected pos ...", with no errno)."""
    import torch

    try:
        with open(path, "wb") as f:
            torch.save(obj, f)
    except OSError as exc:
        exc.filename = exc.filename or str(path)
        raise


def as_os_error(exc: BaseException, path: Path) -> BaseException:
    """An OSError naming `path` for a library error that carries an errno in its text (the
    SafetensorError of a full disk: "... No space left on device (os error 28)"); else exc."""
    match = None if isinstance(exc, OSError) else _OS_ERROR.search(str(exc))
    if match is None:
        return exc
    code = int(match.group(1))
    return OSError(code, os.strerror(code), str(path))


def check_checkpoint(ref: str, *, resuming: bool = False) -> Path:
    """The checkpoint directory, its files checked before torch reads them (empty or truncated
    weights, invalid JSON, and on resume a corrupt optimizer or RNG state name the file)."""
    from emojikit.composition.preflight import check_checkpoint_files

    path = Path(ref)
    if not (path / ADAPTER_FILE).exists() or not (path / "adapter_config.json").exists():
        raise InputFileError(f"{path}: not a checkpoint of the local backend (expected {ADAPTER_FILE} and adapter_config.json)")
    check_checkpoint_files(path, resuming=resuming)
    return path


def read_state(path: Path) -> dict:
    state_file = path / STATE_FILE
    if not state_file.exists():
        return {}
    try:
        return json.loads(state_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{state_file}: not valid JSON ({exc.msg})") from None
