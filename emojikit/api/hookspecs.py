"""One hook per component kind. Each returns a list of `emojikit.Component` specs."""

import pluggy

hookspec = pluggy.HookspecMarker("emojikit")
hookimpl = pluggy.HookimplMarker("emojikit")

# Maps a component kind to the hook that provides it.
KIND_HOOKS = {
    "prompt_source": "register_prompt_sources",
    "teacher": "register_teachers",
    "judge": "register_judges",
    "reward": "register_rewards",
    "decoder": "register_decoders",
    "backend": "register_backends",
    "tracker": "register_trackers",
}


@hookspec
def register_prompt_sources():
    """Prompt sources: yield natural-language messages, each with a category."""


@hookspec
def register_teachers():
    """Teachers: turn messages into emoji answers for SFT data."""


@hookspec
def register_judges():
    """Judges: reconstruct a message from the emoji (and own guesses) seen so far."""


@hookspec
def register_rewards():
    """Rewards: score finished game episodes with a per-episode breakdown."""


@hookspec
def register_decoders():
    """Decoders: constrain sampling to valid output and validate whole samples."""


@hookspec
def register_backends():
    """Backends: build a trainable Policy (the sender)."""


@hookspec
def register_trackers():
    """Trackers: send a run's config, per-step metrics and tables to an experiment tracker."""
