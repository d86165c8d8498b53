"""Fingerprints: what a run was made from, so a finished run is reused only for the same thing.

A stage's fingerprint is the sha256 of one canonical JSON payload:
  recipe    the resolved recipe (TOML after --set), secrets redacted, without `out` (where a
            run lives does not change what it computes)
  inputs    every file or directory the recipe reads that no upstream stage makes: a path
            string anywhere in the recipe that exists, plus the defaults a loop reads (see
            pipeline.declared_inputs); files by content (sha256), files over 64 MiB by size and
            mtime (a model directory should not cost minutes to fingerprint)
  upstream  the fingerprint of each stage whose output this one reads: a changed SFT recipe
            changes the SFT fingerprint and therefore every fingerprint after it
emojikit's own code is not part of it: after changing the code, run into a new directory
(--set out=...) to compare.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

CONTENT_HASH_LIMIT = 64 * 2**20
SHORT = 8  # hex digits of a fingerprint in directory names and messages


def file_digest(path: Path) -> str:
    stat = path.stat()
    if stat.st_size > CONTENT_HASH_LIMIT:
        return f"size={stat.st_size},mtime_ns={stat.st_mtime_ns}"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return "sha256=" + digest.hexdigest()


def path_digest(path: Path) -> str:
    """A file's digest, or for a directory one digest over its files (names and digests);
    hidden files (locks, temporary files) are left out."""
    if path.is_file():
        return file_digest(path)
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            child = Path(root) / name
            digest.update(f"{child.relative_to(path)}\0{file_digest(child)}\n".encode())
    return "dir-sha256=" + digest.hexdigest()


def path_strings(data: Any, skip: frozenset[tuple[str, ...]] = frozenset(), prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Every string in a nested recipe dict that names an existing file or directory
    (keys listed in `skip`, as (table, key) tuples, are left out)."""
    if prefix in skip:
        return
    if isinstance(data, dict):
        for key, value in data.items():
            yield from path_strings(value, skip, prefix + (str(key),))
    elif isinstance(data, list):
        for value in data:
            yield from path_strings(value, skip, prefix)
    elif isinstance(data, str) and data.strip() not in ("", ".") and "\n" not in data:
        try:
            if Path(data).exists():
                yield data
        except OSError:  # a long prompt template is not a path
            return


def input_digests(paths: Iterable[str | Path]) -> dict[str, str]:
    return {str(p): path_digest(Path(p)) for p in sorted({str(p) for p in paths})}


def fingerprint(payload: dict) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def changed_keys(old: dict, new: dict) -> list[str]:
    """What differs between two payloads, as readable names: `sft.steps`, `input runs/x.jsonl`,
    `upstream sft.data`."""
    names = []
    for section, label in (("recipe", ""), ("inputs", "input "), ("upstream", "upstream ")):
        a, b = _flatten(old.get(section, {})), _flatten(new.get(section, {}))
        if section == "inputs":  # paths contain dots: keep them whole
            a, b = old.get(section, {}), new.get(section, {})
        names += [f"{label}{key}" for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    return names
