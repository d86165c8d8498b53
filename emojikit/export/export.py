"""`emojikit export CHECKPOINT OUT [--merged | --adapter] [--push REPO_ID]`.

Order: every check a user can fail (the checkpoint, OUT, the push's repository id and token)
runs before a model loads; the folder is filled under a temporary name beside OUT and renamed
to OUT only when complete (io.atomic_directory), so OUT never holds half an export; the push
comes last, so a failed upload leaves a complete export to push again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Optional

from emojikit.api.errors import ConfigError, OutputError
from emojikit.api.policy import WeightsExport
from emojikit.export import card, hub, senders
from emojikit.support.io import atomic_directory, os_problem

# Weights of the bundled 135M model in float32 are ~540 MB; a merged export of a larger base
# needs more, which the backend's own write reports if it runs out.
MIN_FREE_BYTES = 600 * 2**20


def check_out(out: Path, *, merged: bool) -> None:
    """OUT must be new or an empty directory, in a writable place with room for the weights."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: is a file; OUT must be a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        raise OutputError(f"{out}: is not empty; export into a new or empty directory (nothing was written)")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{parent}: is a file, expected a directory for {out}")
    try:
        free = shutil.disk_usage(parent).free
    except OSError as exc:
        raise OutputError(f"{parent}: {os_problem(exc) or exc.strerror}") from None
    if merged and free < MIN_FREE_BYTES:
        raise OutputError(f"{out}: no space left on device ({free / 2**20:.0f} MiB free, a merged export needs about {MIN_FREE_BYTES / 2**20:.0f} MiB)")


def export(ref: str, out: Path, *, merged: bool = True, push_to: Optional[str] = None, public: bool = False, echo: Callable[[str], None] = print) -> Path:
    """Export the sender `ref` names into `out`; returns `out`."""
    out = Path(out)
    sender = senders.resolve(ref)
    check_out(out, merged=merged)
    if push_to is not None:
        hub.check(push_to)
    use = sender.backend.get("use", "local")
    # Merging happens in float32: a bfloat16 base (base_matmul_dtype, a training speed-up)
    # would round the merged weights.
    settings = {"backend": {"dtype": "float32", "base_matmul_dtype": "float32", "device": "cpu"}} if use == "local" else {}
    echo(f"loading {sender.checkpoint} ({use} backend)")
    policy = senders.build(sender, settings=settings, tables=("backend",))["backend"]
    if not isinstance(policy, WeightsExport):
        raise ConfigError(f"[backend] {use}: this backend cannot export weights (it has no export_weights)")
    try:
        with atomic_directory(out, replace=False) as tmp:
            info = policy.export_weights(str(tmp), merged=merged, system_prompt=sender.system_prompt)
            (tmp / "README.md").write_text(card.model_card(sender, info, merged=merged, repo_id=push_to, out=out), encoding="utf-8")
    except OSError as exc:
        if (problem := os_problem(exc)) is None:
            raise
        failed = Path(exc.filename) if exc.filename else out
        shown = out / failed.name if failed.parent.name.startswith(f".{out.name}.") else failed  # named as it would be in OUT
        raise OutputError(f"{shown}: {problem} while exporting; nothing was left at {out}") from None
    echo(f"wrote {out}: {'merged model' if merged else 'PEFT adapter'} ({info.get('dtype')}), base {info['base_model']}, model card README.md")
    if push_to is not None:
        url = hub.push(out, push_to, private=not public)
        echo(f"pushed {out} to {url} ({'public' if public else 'private'})")
    return out
