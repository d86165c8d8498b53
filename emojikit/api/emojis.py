"""The emoji inventory, from the `emoji` package (never downloaded).

Parsing is greedy longest-match over every sequence the package knows (fully-qualified,
minimally-qualified and unqualified forms, and components), so 👨‍👩‍👧 is one emoji, not three.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable, Optional

import emoji as _emoji

FULLY_QUALIFIED = _emoji.STATUS["fully_qualified"]
COMPONENT = _emoji.STATUS["component"]
ZWJ = "\u200d"
VS16 = "\ufe0f"
VS15 = "\ufe0e"
KEYCAP = "\u20e3"
SKIN_TONES = frozenset(chr(c) for c in range(0x1F3FB, 0x1F400))
REGIONAL_INDICATORS = frozenset(chr(c) for c in range(0x1F1E6, 0x1F200))
TAGS = frozenset(chr(c) for c in range(0xE0020, 0xE0080))


@dataclass(frozen=True)
class EmojiInfo:
    emoji: str
    name: str  # CLDR short name, e.g. "grinning face"
    aliases: tuple[str, ...]
    status: int


def _clean_name(raw: str) -> str:
    return raw.strip(":").replace("_", " ")


@functools.lru_cache(maxsize=1)
def _all() -> dict[str, EmojiInfo]:
    out = {}
    for seq, data in _emoji.EMOJI_DATA.items():
        aliases = tuple(_clean_name(a) for a in data.get("alias", []))
        out[seq] = EmojiInfo(seq, _clean_name(data["en"]), aliases, data["status"])
    return out


def is_flag(seq: str) -> bool:
    return seq[0] in REGIONAL_INDICATORS or (seq[0] == "\U0001F3F4" and any(c in TAGS for c in seq))


def has_skin_tone(seq: str) -> bool:
    return any(c in SKIN_TONES for c in seq)


def is_keycap(seq: str) -> bool:
    return KEYCAP in seq


@functools.lru_cache(maxsize=16)
def inventory(
    exclude_flags: bool = False,
    exclude_skin_tones: bool = False,
    exclude_keycaps: bool = False,
) -> tuple[str, ...]:
    """Fully-qualified RGI emoji sequences, sorted, optionally without some families."""
    seqs = []
    for seq, info in _all().items():
        if info.status != FULLY_QUALIFIED:
            continue
        if (exclude_flags and is_flag(seq)) or (exclude_skin_tones and has_skin_tone(seq)) or (exclude_keycaps and is_keycap(seq)):
            continue
        seqs.append(seq)
    return tuple(sorted(seqs))


def info(seq: str) -> Optional[EmojiInfo]:
    return _all().get(seq)


def name(seq: str) -> str:
    """CLDR name of a sequence ("" if unknown)."""
    found = _all().get(seq)
    return found.name if found else ""


def names_text(emoji_seqs: Iterable[str]) -> str:
    """The joined CLDR names of a list of emoji: the text literal similarity compares against."""
    return ", ".join(n for n in (name(s) for s in emoji_seqs) if n)


@functools.lru_cache(maxsize=1)
def _trie() -> dict:
    root: dict = {}
    for seq in _all():
        node = root
        for ch in seq:
            node = node.setdefault(ch, {})
        node[""] = seq  # end marker
    return root


def parse(text: str) -> tuple[list[str], str]:
    """Split text into emoji sequences (longest match); returns (emoji, leftover non-emoji text).

    Whitespace between emoji is skipped and not counted as leftover.
    """
    trie = _trie()
    found: list[str] = []
    rest: list[str] = []
    i, n = 0, len(text)
    while i < n:
        node, j, last = trie, i, None
        while j < n and text[j] in node:
            node = node[text[j]]
            j += 1
            if "" in node:
                last = (j, node[""])
        if last is not None:
            found.append(last[1])
            i = last[0]
        else:
            if not text[i].isspace():
                rest.append(text[i])
            i += 1
    return found, "".join(rest)


def split(text: str) -> list[str]:
    """The emoji sequences in text, in order (non-emoji characters are dropped)."""
    return parse(text)[0]


def count(text: str) -> int:
    return len(split(text))


def is_emoji_only(text: str, min_count: int = 1, max_count: Optional[int] = None) -> bool:
    """True if text is nothing but emoji (whitespace allowed between them) within the count range."""
    found, rest = parse(text)
    if rest or not found:
        return False
    return len(found) >= min_count and (max_count is None or len(found) <= max_count)


_MODIFIERS = re.compile("[\u200d\ufe0e\ufe0f\U0001F3FB-\U0001F3FF]")


def base(seq: str) -> str:
    """A sequence without variation selectors, ZWJ and skin tones (for repetition counting)."""
    return _MODIFIERS.sub("", seq)
