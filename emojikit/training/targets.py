"""What the start checkpoint of a GRPO or RFT run was trained on: the messages of its SFT run.

Their training targets skip them (emojikit.play.targets.split_targets, `seen`), so RL is
measured on messages imitation never labelled; RFT rehearses the same SFT file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def sft_train_file(start: Optional[str]) -> Optional[Path]:
    """The train_file of the SFT run that made the start checkpoint (runs/x/checkpoints/step_N ->
    runs/x/recipe.toml, kind = "sft"); None for base, a remote checkpoint or a run that is not an
    SFT run. A train_file that is gone is an error: what it held cannot be told any more."""
    from emojikit.api.errors import InputFileError
    from emojikit.composition.recipe import read_toml

    from emojikit.stages.runs import run_of_checkpoint

    run = run_of_checkpoint(start) if start is not None else None
    if run is None or not (recipe_toml := run / "recipe.toml").is_file():
        return None
    data = read_toml(recipe_toml)
    if data.get("kind") != "sft":
        return None
    from emojikit.training.sft import SFTSettings

    train_file = Path(data.get("sft", {}).get("train_file", SFTSettings.model_fields["train_file"].default))
    if not train_file.is_file():
        raise InputFileError(f"{recipe_toml}: [sft] train_file {train_file} is gone, so RL cannot tell which messages (and answers) the start "
                             "checkpoint was trained on; remake it (emojikit run recipes/data.toml) or start from another checkpoint")
    return train_file


def sft_seen(start: Optional[str]) -> frozenset[str]:
    """The messages whose teacher answers trained the start checkpoint: the user turns of its
    SFT run's train_file (sft_train_file). Empty when the start has none. GRPO's and RFT's
    training targets skip them, so RL is measured on messages imitation never labelled (the
    generated source's seed-0 stream is the one the data recipe labelled)."""
    from emojikit.support.io import read_jsonl

    train_file = sft_train_file(start)
    if train_file is None:
        return frozenset()
    seen = set()
    for row in read_jsonl(train_file):
        seen.update(m.get("content", "").strip() for m in row.get("messages", []) if m.get("role") == "user")
    return frozenset(seen - {""})
