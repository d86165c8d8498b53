"""The targets of a GRPO run: held-out ones for evaluation, the rest for training.

Shared by the loop (emojikit.training.grpo) and the end-of-run comparison (emojikit.evaluation.comparison), so
neither imports the other for it.
"""

from __future__ import annotations

from pathlib import Path

from emojikit.api.components import Message


def split_targets(recipe, g, run_dir) -> tuple[list[Message], list[Message]]:
    """(held-out, training) targets; held-out ones never train, even when the prompt source repeats them.
    With a heldout_file, none of its rows trains, also those past the eval_targets played."""
    from emojikit.api.errors import ConfigError, InputFileError

    source = recipe.build("prompts", run_dir.path)
    if g.heldout_file is not None:
        from emojikit.evaluation.evaluate import read_targets

        if not Path(g.heldout_file).is_file():
            raise InputFileError(f"{recipe.path}: [grpo] heldout_file: {g.heldout_file} does not exist (make it with: emojikit run recipes/data.toml)")
        whole_file = read_targets(g.heldout_file)
        heldout = whole_file[: g.eval_targets]
        held = {m.text for m in whole_file}  # the whole file, also the rows past eval_targets, never trains
        train = [m for m in source.messages(draw_count(g, len(held))) if m.text not in held and short_enough(m, g)][: g.target_pool]
    else:
        messages = list(source.messages(g.eval_targets + g.target_pool))
        heldout, train = messages[: g.eval_targets], [m for m in messages[g.eval_targets :] if short_enough(m, g)]
    if not train:
        raise ConfigError(f"{recipe.path}: [grpo] eval_targets: the prompt source gave no messages for training")
    return heldout, train


def short_enough(message: Message, g) -> bool:
    """Training targets as long as the held-out ones: the data recipe's RL targets have at most
    rl_max_words words, and a sender trained on long messages learns another game."""
    return g.target_max_words is None or len(message.text.split()) <= g.target_max_words


def draw_count(g, n_heldout: int) -> int:
    """How many messages to draw so that, after dropping held-out and long ones, about
    target_pool remain (a generated message has at most 12 words about half the time)."""
    return (g.target_pool + n_heldout) * (3 if g.target_max_words is not None else 1)
