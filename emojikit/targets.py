"""The targets of a GRPO run: held-out ones for evaluation, the rest for training.

Shared by the loop (emojikit.grpo) and the end-of-run comparison (emojikit.comparison), so
neither imports the other for it.
"""

from __future__ import annotations

from pathlib import Path

from emojikit.components import Message


def split_targets(recipe, g, run_dir) -> tuple[list[Message], list[Message]]:
    """(held-out, training) targets; held-out ones never train, even when the prompt source repeats them."""
    from emojikit.errors import ConfigError, InputFileError

    source = recipe.build("prompts", run_dir.path)
    if g.heldout_file is not None:
        from emojikit.evaluate import read_targets

        if not Path(g.heldout_file).is_file():
            raise InputFileError(f"{recipe.path}: [grpo] heldout_file: {g.heldout_file} does not exist (make it with: emojikit run recipes/data.toml)")
        heldout = read_targets(g.heldout_file, g.eval_targets) if g.eval_targets else []
        held = {m.text for m in heldout}
        train = [m for m in source.messages(g.target_pool + len(held)) if m.text not in held][: g.target_pool]
    else:
        messages = list(source.messages(g.eval_targets + g.target_pool))
        heldout, train = messages[: g.eval_targets], messages[g.eval_targets :]
    if not train:
        raise ConfigError(f"{recipe.path}: [grpo] eval_targets: the prompt source gave no messages for training")
    return heldout, train
