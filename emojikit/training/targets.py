"""The targets of a GRPO run: held-out ones for evaluation, the rest for training.

Shared by the loop (emojikit.training.grpo) and the end-of-run comparison (emojikit.evaluation.comparison), so
neither imports the other for it.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Optional

from emojikit.api.components import Message


def split_targets(recipe, g, run_dir, seen: frozenset[str] = frozenset()) -> tuple[list[Message], list[Message]]:
    """(held-out, training) targets; held-out ones never train, even when the prompt source repeats them.
    With a heldout_file, none of its rows trains, also those past the eval_targets played. No
    message in `seen` (those whose teacher answers the start's SFT trained on: `sft_seen`) trains
    either; the source is drawn past them, so the pool keeps its size. The held-out targets do
    not depend on `seen` (the comparison draws them without it)."""
    from emojikit.api.errors import ConfigError, InputFileError

    source = recipe.build("prompts", run_dir.path)
    seen = seen | excluded_texts(recipe, g)  # the other held-out sets never train either
    if g.heldout_file is not None:
        from emojikit.evaluation.evaluate import read_targets

        if not Path(g.heldout_file).is_file():
            raise InputFileError(f"{recipe.path}: [{table_of(g)}] heldout_file: {g.heldout_file} does not exist (make it with: emojikit run recipes/data.toml)")
        whole_file = read_targets(g.heldout_file)
        heldout = whole_file[: g.eval_targets]
        held = {m.text for m in whole_file}  # the whole file, also the rows past eval_targets, never trains
        drawn = source.messages(draw_count(g, len(held)) + len(seen))
        train = list(itertools.islice((m for m in drawn if m.text not in held and m.text not in seen and short_enough(m, g)), g.target_pool))
    else:
        drawn = iter(source.messages(g.eval_targets + g.target_pool + len(seen)))
        heldout = list(itertools.islice(drawn, g.eval_targets))
        held = {m.text for m in heldout}
        train = list(itertools.islice((m for m in drawn if m.text not in held and m.text not in seen and short_enough(m, g)), g.target_pool))
    if not train:
        raise ConfigError(f"{recipe.path}: [{table_of(g)}] eval_targets: the prompt source gave no messages for training")
    return heldout, train


def table_of(g) -> str:
    """The recipe table of the settings `g` (GRPO's or RFT's), for error lines."""
    return getattr(g, "table_name", "grpo")


def excluded_texts(recipe, g) -> frozenset[str]:
    """Every row of the held-out sets besides heldout_file: [grpo] compare_files (the comparison
    plays them) and exclude_files (sets another command plays, e.g. `emojikit eval --targets`)."""
    from emojikit.api.errors import InputFileError
    from emojikit.evaluation.evaluate import read_targets

    texts: set[str] = set()
    for key in ("compare_files", "exclude_files"):
        for path in getattr(g, key, []):
            if not Path(path).is_file():
                raise InputFileError(f"{recipe.path}: [{table_of(g)}] {key}: {path} does not exist")
            texts.update(m.text for m in read_targets(Path(path)))
    return frozenset(texts)


def short_enough(message: Message, g) -> bool:
    """Training targets as long as the held-out ones: the data recipe's RL targets have at most
    rl_max_words words, and a sender trained on long messages learns another game."""
    return g.target_max_words is None or len(message.text.split()) <= g.target_max_words


def draw_count(g, n_heldout: int) -> int:
    """How many messages to draw so that, after dropping held-out and long ones, about
    target_pool remain (a generated message has at most 12 words about half the time)."""
    return (g.target_pool + n_heldout) * (3 if g.target_max_words is not None else 1)


def sft_train_file(start: Optional[str]) -> Optional[Path]:
    """The train_file of the SFT run that made the start checkpoint (runs/x/checkpoints/step_N ->
    runs/x/recipe.toml, kind = "sft"); None for base, a remote checkpoint or a run that is not an
    SFT run. A train_file that is gone is an error: what it held cannot be told any more."""
    from emojikit.api.errors import InputFileError
    from emojikit.composition.recipe import read_toml

    if start is None or "://" in start:
        return None
    recipe_toml = Path(start).parent.parent / "recipe.toml"
    if not recipe_toml.is_file():
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
