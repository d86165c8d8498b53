"""The code a run ran: code.json in every run directory, written when the run starts.

A stage's fingerprint leaves emojikit's own code out (emojikit.stages.fingerprint), so two runs
of one recipe at different commits look alike there; code.json tells them apart:

  emojikit   the installed version
  git        the checkout emojikit was imported from: commit, whether tracked files differ
             from it (dirty) and the sha256 of that diff (`git diff HEAD`), so two dirty runs
             can be told apart; null outside a git checkout (an installed wheel)
  plugins    every registered plugin with its distribution and version
  python     the interpreter version

A resumed run keeps the record of its start; a resume with other code adds its record to
`resumed_with`, so a run finished by later code says so.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path
from typing import Optional

CODE_FILE = "code.json"
GIT_TIMEOUT_S = 10


def _git(root: Path, *args: str) -> Optional[bytes]:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this machine, or a stuck one: the record says null
    return done.stdout if done.returncode == 0 else None


def git_state(root: Path) -> Optional[dict]:
    """{commit, dirty, diff_sha256} of the git checkout at root, or None when it is not one."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.decode().strip()).resolve() != root.resolve():
        return None  # emojikit installed inside some other repository is not that repository's code
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None
    diff = _git(root, "diff", "HEAD", "--binary") or b""
    return {
        "commit": commit.decode().strip(),
        "dirty": bool(diff),
        "diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
    }


def code_record(registry=None) -> dict:
    import emojikit
    from emojikit.composition.registry import get_registry

    registry = registry or get_registry()
    root = Path(emojikit.__file__).resolve().parents[1]
    return {
        "emojikit": emojikit.__version__,
        "git": git_state(root),
        "plugins": [{"plugin": p, "distribution": d, "version": v} for p, d, v in registry.plugins()],
        "python": platform.python_version(),
    }


def write_code_record(run_dir: Path, registry=None) -> dict:
    """Write code.json at a run's start (a resume with other code appends to resumed_with);
    returns the record of this process."""
    from emojikit.support.io import atomic_write_text

    path = Path(run_dir) / CODE_FILE
    record = code_record(registry)
    try:
        existing = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        existing = None
    if isinstance(existing, dict):
        started = {k: v for k, v in existing.items() if k != "resumed_with"}
        later = existing.get("resumed_with") if isinstance(existing.get("resumed_with"), list) else []
        if record == started or (later and record == later[-1]):
            return record
        existing["resumed_with"] = [*later, record]
        atomic_write_text(path, json.dumps(existing, indent=2) + "\n")
        return record
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return record


def read_code_record(run_dir: Path) -> Optional[dict]:
    try:
        record = json.loads((Path(run_dir) / CODE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def describe_code(record: dict) -> str:
    """One line: `emojikit 0.1.0, git 1a2b3c4d (dirty, diff 5e6f7a8b), plugins: emojikit 0.1.0 (text, local, ...)`."""
    git = record.get("git")
    if isinstance(git, dict) and git.get("commit"):
        where = f"git {str(git['commit'])[:8]}" + (f" (dirty, diff {str(git.get('diff_sha256'))[:8]})" if git.get("dirty") else " (clean)")
    else:
        where = "not a git checkout"
    by_dist: dict[str, list[str]] = {}
    for p in record.get("plugins", []) if isinstance(record.get("plugins"), list) else []:
        if isinstance(p, dict):
            by_dist.setdefault(f"{p.get('distribution') or 'no distribution'} {p.get('version') or ''}".strip(), []).append(str(p.get("plugin")))
    plugins = "; ".join(f"{dist} ({', '.join(names)})" for dist, names in sorted(by_dist.items()))
    line = f"emojikit {record.get('emojikit', '?')}, {where}" + (f", plugins: {plugins}" if plugins else "")
    resumed = record.get("resumed_with")
    if isinstance(resumed, list) and resumed:
        line += f"; resumed {len(resumed)} time(s) with other code, last: " + describe_code({k: v for k, v in resumed[-1].items() if k != "plugins"})
    return line
