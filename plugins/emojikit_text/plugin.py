"""Registers the text components. Module imports here stay light (no torch, no MiniLM)."""

from emojikit.api.components import Component
from emojikit.api.hookspecs import hookimpl
from emojikit_text import chitchat, generated, jsonl_source, mix


@hookimpl
def register_prompt_sources():
    return [
        Component(
            name="generated",
            summary="Offline: distinct natural messages in nine categories from compositional grammars, by seed",
            config=generated.GeneratedConfig,
            factory=generated.build,
        ),
        Component(
            name="jsonl",
            summary="Messages from a JSONL file (configurable text and category fields)",
            config=jsonl_source.JsonlConfig,
            factory=jsonl_source.build,
            preflight=jsonl_source.preflight,
        ),
        Component(
            name="chitchat",
            summary="Offline: self-contained messages people wrote in 7,168 human-human chats (chitchat-dataset), split by conversation",
            config=chitchat.ChitchatConfig,
            factory=chitchat.build,
            preflight=chitchat.preflight,
        ),
        Component(
            name="mix",
            summary="Other prompt sources mixed by weight ([[prompts.sources]] tables), exact duplicates dropped",
            config=mix.MixConfig,
            factory=mix.build,
            preflight=mix.preflight,
        ),
    ]


def _build_lexicon(config, ctx):
    from emojikit_text import lexicon  # numpy and MiniLM only when a lexicon teacher is built

    return lexicon.build(config, ctx)


def _lexicon_config():
    from emojikit_text.lexicon import LexiconConfig

    return LexiconConfig


@hookimpl
def register_teachers():
    return [
        Component(
            name="lexicon",
            summary="Offline: 2-8 emoji by MiniLM similarity to CLDR names, covering key phrases (MMR, no near-duplicates)",
            config=_lexicon_config(),
            factory=_build_lexicon,
        ),
        Component(
            name="lexicon-repair",
            summary="Offline: after a miss, emoji for the target's key phrases the wrong guess misses (the lexicon teacher's machinery; the repair benchmark's teacher)",
            config=_lexicon_config(),
            factory=_build_lexicon_repair,
        ),
    ]


def _build_lexicon_repair(config, ctx):
    from emojikit_text import repair

    return repair.build(config, ctx)
