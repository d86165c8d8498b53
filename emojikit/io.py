"""Small file helpers: atomic writes (temp file then rename) and checked JSONL reading."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from emojikit.errors import InputFileError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write text so a reader never sees a partial file, even after kill -9."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file normal permissions
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_jsonl(path: Path | str, rows: Iterable[dict]) -> int:
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def append_jsonl(path: Path | str, row: dict) -> None:
    """Append one complete line with a single write and fsync; readers skip a torn last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path | str, *, tolerate_torn_tail: bool = False) -> Iterator[dict[str, Any]]:
    """Yield JSON objects; a bad line raises InputFileError naming file:line.

    With tolerate_torn_tail, an unterminated last line (a write cut by kill -9) is skipped.
    """
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if tolerate_torn_tail and number == len(lines) and not line.endswith("\n"):
                return
            raise InputFileError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise InputFileError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        yield row
