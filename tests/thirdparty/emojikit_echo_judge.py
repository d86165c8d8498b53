"""A third-party plugin as a separate distribution would ship it: one judge, `echo`,
which guesses the CLDR names of the emoji it has seen."""

from pydantic import Field

from emojikit import Component, hookimpl
from emojikit.config import ConfigModel


class EchoConfig(ConfigModel):
    prefix: str = Field("", description="Text put before every guess.")


class EchoJudge:
    def __init__(self, prefix: str):
        self.prefix = prefix

    def guess(self, views):
        from emojikit import emojis

        return [self.prefix + emojis.names_text(e for turn in v.emoji_turns for e in emojis.split(turn)) for v in views]


@hookimpl
def register_judges():
    return [Component("echo", "Guesses the CLDR names of the emoji seen so far.", EchoConfig, lambda cfg, ctx: EchoJudge(cfg.prefix))]
