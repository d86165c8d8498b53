"""A prompt source that mixes other prompt sources by weight.

    [prompts]
    use = "mix"
    [[prompts.sources]]
    use = "chitchat"        # any prompt source, with its own settings beside `use` and `weight`
    weight = 3
    [[prompts.sources]]
    use = "generated"
    weight = 1

Each next message comes from a source picked at random by weight (seeded), so a draw holds
about the weights' shares and its first k messages do not depend on how many are drawn; exact
duplicates across sources are skipped. Each source is built through the assembly seam, so its settings are validated like a table's
(`[prompts.sources[1]] key: problem`).
"""

from __future__ import annotations

import difflib
import random
from typing import Any, Iterator, Optional

from pydantic import Field, field_validator

from emojikit.api.components import BuildContext, Message, message_key
from emojikit.api.config import ConfigModel
from emojikit.composition.assembly import build_component, choose, context, preflight as preflight_choice


class MixConfig(ConfigModel):
    sources: list[dict[str, Any]] = Field(
        ..., min_length=1,
        description="Prompt sources to mix: each a table with `use` (a prompt source), `weight` (> 0, default 1) and that source's settings.",
    )
    count: int = Field(25_000, ge=1, description="Messages yielded when the caller asks for all of them.")

    @field_validator("sources")
    @classmethod
    def _each_names_a_source(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, entry in enumerate(value):
            if not isinstance(entry.get("use"), str) or not entry["use"]:
                raise ValueError(f"sources[{i}] needs `use = \"<prompt source>\"`")
            for key in entry:  # `wieght = 3` would reach the source as a setting of its own, unknown there
                close = difflib.get_close_matches(key, ("use", "weight"), n=1, cutoff=0.8)
                if close and key != close[0]:
                    raise ValueError(f"sources[{i}] {key}: unknown key (did you mean {close[0]!r}?)")
            weight = entry.get("weight", 1)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
                raise ValueError(f"sources[{i}] weight must be a number > 0, got {weight!r}")
        return value


def _split(entry: dict[str, Any]) -> tuple[str, float, dict[str, Any]]:
    settings = {k: v for k, v in entry.items() if k not in ("use", "weight")}
    return entry["use"], float(entry.get("weight", 1)), settings


class MixSource:
    def __init__(self, config: MixConfig, ctx: BuildContext):
        self.config = config
        self.seed = ctx.seed
        self.weights = []
        self.sources = []
        for i, entry in enumerate(config.sources):
            name, weight, settings = _split(entry)
            self.sources.append(build_component("prompt_source", name, settings, ctx, table=f"prompts.sources[{i}]"))
            self.weights.append(weight)

    def capacity(self) -> Optional[int]:
        """The largest draw in which every source can fill its share (None if a source cannot tell)."""
        limits = []
        for source, weight in zip(self.sources, self.weights):
            cap = source.capacity() if hasattr(source, "capacity") else None
            if cap is None:
                return None
            limits.append(int(cap * sum(self.weights) / weight))
        return min(limits)

    def messages(self, n: Optional[int] = None) -> Iterator[Message]:
        """Each next message from a source picked at random by weight (seeded), exact duplicates
        skipped. The first k messages are the same whatever n is, so a caller that takes its
        held-out targets first (GRPO, eval) gets the same ones however many it draws after them."""
        n = self.config.count if n is None else n
        rng = random.Random(f"emojikit-mix:{self.seed}")
        streams = [iter(source.messages(n)) for source in self.sources]  # lazy: only what is taken is drawn
        live = list(range(len(streams)))
        seen: set[str] = set()
        yielded = 0
        try:
            while yielded < n and live:
                i = rng.choices(live, weights=[self.weights[j] for j in live])[0]
                message = next(streams[i], None)
                if message is None:  # that source is used up
                    live.remove(i)
                    continue
                key = message_key(message.text)
                if key not in seen:
                    seen.add(key)
                    yield message
                    yielded += 1
        finally:
            for stream in streams:  # a source's own progress bar closes with its stream
                getattr(stream, "close", lambda: None)()


def preflight(config: MixConfig, ctx: BuildContext) -> None:
    """Each source's settings and its own preflight, before anything loads."""
    for i, entry in enumerate(config.sources):
        name, _, settings = _split(entry)
        preflight_choice(choose("prompt_source", name, settings, context(ctx), table=f"prompts.sources[{i}]"), context(ctx))


def build(config: MixConfig, ctx: BuildContext) -> MixSource:
    return MixSource(config, context(ctx))
