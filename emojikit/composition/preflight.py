"""Checks a run needs before it trains, shared by the loops' `preflight(recipe)` functions
(called by `emojikit validate` and `emojikit run` before a run directory is made), and the
check of a named checkpoint's files (before torch reads them).

Nothing here loads a model: a tokenizer at most.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Optional

from emojikit.api.errors import InputFileError

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
TRAINER_STATE = "trainer_state.json"
TORCH_STATE_FILES = ("optimizer.pt", "rng.pt")  # read on --resume only


def token_budget_problem(recipe, budget: int, key: str) -> Optional[str]:
    """Why `budget` new tokens cannot hold a valid answer of the recipe's decoder under the
    backend's tokenizer (None when they can, or when there is no decoder mask to bind)."""
    if not recipe.has("decoder") or not recipe.has("backend"):
        return None
    model = getattr(recipe.components["backend"].config, "model", None)
    if not isinstance(model, str) or recipe.components["backend"].spec.name != "local":
        return None  # only the local backend's tokenizer is at hand before the run
    decoder = recipe.build("decoder")
    if not hasattr(decoder, "bind"):
        return None
    from emojikit.support.bundled import load_tokenizer

    constraint = decoder.bind(load_tokenizer(model))
    need = getattr(constraint, "min_tokens", None)
    if need is None or need <= budget:
        return None
    lo = getattr(decoder, "min_emoji", "?")
    return (
        f"{key}: {budget} tokens cannot hold the decoder's min_emoji={lo} emoji under the tokenizer of {model} "
        f"(the fewest is {need} tokens; every answer would be empty); raise {key.split('] ')[-1]} to at least {need}"
    )


# --- checkpoint files ---------------------------------------------------------------------


def _check_safetensors(path: Path) -> None:
    size = path.stat().st_size
    if size == 0:
        raise InputFileError(f"{path}: empty file (adapter weights cut short, e.g. by a full disk)")
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InputFileError(f"{path}: truncated ({size} bytes; not a safetensors file)")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > size - 8 or header_len > 100_000_000:
            raise InputFileError(f"{path}: truncated or not a safetensors file (header of {header_len} bytes in a {size}-byte file)")
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InputFileError(f"{path}: truncated or corrupt (its safetensors header does not parse)") from None
    if not isinstance(header, dict):
        raise InputFileError(f"{path}: corrupt safetensors header")
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
    need = 8 + header_len + max(ends, default=0)
    if need > size:
        raise InputFileError(f"{path}: truncated ({size} of {need} bytes)")


def _check_json(path: Path, required: tuple[str, ...] = ()) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a JSON object")
    missing = [k for k in required if k not in data]
    if missing:
        raise InputFileError(f"{path}: not an adapter config (no {', '.join(missing)})")


def _check_torch_zip(path: Path) -> None:
    if path.stat().st_size == 0:
        raise InputFileError(f"{path}: empty file")
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        raise InputFileError(f"{path}: corrupt (truncated or not a torch.save file)") from None
    if bad is not None:
        raise InputFileError(f"{path}: corrupt (entry {bad} fails its checksum)")


def check_checkpoint_files(path: Path | str, *, resuming: bool = False) -> Path:
    """Check the files of a checkpoint directory before anything reads them: adapter weights
    (not empty, not truncated), adapter_config.json and trainer_state.json (valid JSON), and,
    when resuming, optimizer.pt and rng.pt (intact torch archives). Raises InputFileError
    naming the file. A directory without adapter files is left to its backend to judge."""
    path = Path(path)
    if not path.is_dir():
        raise InputFileError(f"{path}: not a checkpoint directory")
    weights, config = path / ADAPTER_WEIGHTS, path / ADAPTER_CONFIG
    if weights.exists() or config.exists():
        if not config.exists():
            raise InputFileError(f"{config}: missing (the checkpoint is incomplete)")
        if not weights.exists():
            raise InputFileError(f"{weights}: missing (the checkpoint is incomplete)")
        _check_json(config, ("peft_type",))
        _check_safetensors(weights)
    if (path / TRAINER_STATE).exists():
        _check_json(path / TRAINER_STATE)
    if resuming:
        for name in TORCH_STATE_FILES:
            if (path / name).exists():
                _check_torch_zip(path / name)
    return path


def check_sender_checkpoints(checkpoints, where: str) -> None:
    """Every checkpoint directory of a list (e.g. [eval] checkpoints, already resolved) loads:
    its files are present and intact. Checked before the first game, not when its turn comes."""
    for checkpoint in checkpoints:
        if Path(str(checkpoint)).is_dir():
            try:
                check_checkpoint_files(checkpoint)
            except InputFileError as exc:
                raise InputFileError(f"{where}: {exc}") from None


def intact_checkpoint(paths: list[Path], *, resuming: bool = True) -> Optional[Path]:
    """The first of `paths` whose files pass the check."""
    for p in paths:
        try:
            check_checkpoint_files(p, resuming=resuming)
        except InputFileError:
            continue
        return p
    return None


def warn(message: str) -> None:
    """`emojikit: warning: <message>` on stderr: a problem the run can live with."""
    import sys

    print(f"emojikit: warning: {message}", file=sys.stderr, flush=True)


def check_resume(run_dir) -> None:
    """On --resume, before any model loads: the last checkpoint's files are intact, or one
    line naming the damaged file and the newest earlier checkpoint that is intact."""
    import re

    if not run_dir.checkpoints.is_dir():
        return
    steps = sorted(
        ((int(m.group(1)), p) for p in run_dir.checkpoints.iterdir() if (m := re.match(r"^step_(\d+)$", p.name)) and p.is_dir()),
        reverse=True,
    )
    if not steps:
        return
    (step, latest), earlier = steps[0], [p for _, p in steps[1:]]
    try:
        check_checkpoint_files(latest, resuming=True)
    except InputFileError as exc:
        intact = intact_checkpoint(earlier)
        if intact is None:
            what = "no earlier checkpoint is intact; start a new run with --set name=<new>"
        else:
            what = f"{intact} is intact: move {latest} out of {run_dir.checkpoints} to resume from it"
        raise InputFileError(f"{exc}; the last checkpoint ({latest.name}) is damaged, {what}") from None
