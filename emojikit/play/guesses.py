"""The one cleaner of a judge model's answer into a guess (every chat-model judge uses it).

Models wrap the message they reconstruct: a thinking block, a "Guess:" label, quotes,
markdown, a list marker, a copy of the prompt's "Emoji:" line, or emoji echoed back. The
guess is the first line that still has words once those are taken away, cut to a length.
"""

from __future__ import annotations

import re
from typing import Optional

import emoji as emoji_pkg

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
# "Guess:", "The message is -", "Final guess:", "Reconstructed message:", "It says:" ...
_LABEL = re.compile(
    r"^(?:(?:the |my |final )?(?:original |reconstructed |decoded )?(?:guess|message|answer|translation|sentence)(?: is)?|it says)\s*[:\-]\s*",
    re.IGNORECASE,
)
# Lines a model copies from the judge prompt instead of answering.
_ECHO = re.compile(r"^(emoji( \d+)?( meaning)?|wrong guesses so far)\s*:", re.IGNORECASE)
_MARKERS = "-#> "  # a list item, a heading, a block quote
_WRAPPERS = "\"'`*_\u201c\u201d\u2018\u2019 "  # quotes and markdown emphasis


def clean_guess(text: str, *, max_chars: Optional[int] = None, max_words: Optional[int] = None, drop_emoji: bool = False) -> str:
    """The guess in a model's answer: "" when no line has words.

    A closed <think> block is removed and an unclosed one ends the answer. Lines are read in
    order; a copied prompt line ("Emoji 2: ...") is skipped; a list marker, a label, brackets
    and wrapping quotes or emphasis go; the first line left with text is the guess, its
    whitespace collapsed, cut to max_words words and then to max_chars characters at a word
    boundary. With drop_emoji, emoji (and U+FFFD, an emoji cut by the token limit) are removed
    first, for small models that echo the emoji instead of answering.
    """
    text = _THINK.sub("", text)
    if "<think>" in text.lower():  # an unclosed thinking block: nothing after it is the answer
        text = text[: text.lower().index("<think>")]
    for line in text.splitlines():
        if drop_emoji:
            line = emoji_pkg.replace_emoji(line, "").replace("\ufffd", "")
        line = line.strip()
        if _ECHO.match(line):
            continue
        line = line.lstrip(_MARKERS).strip(_WRAPPERS)
        line = _LABEL.sub("", line).replace("(", "").replace(")", "")
        line = " ".join(line.strip(_WRAPPERS).split())
        if line:
            return _cut(line, max_chars, max_words)
    return ""


def _cut(line: str, max_chars: Optional[int], max_words: Optional[int]) -> str:
    if max_words is not None:
        line = " ".join(line.split()[:max_words])
    if max_chars is not None and len(line) > max_chars:
        cut = line[:max_chars]
        line = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return line
