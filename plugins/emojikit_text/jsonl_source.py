"""A prompt source that reads messages from a JSONL file."""

from __future__ import annotations

from typing import Iterator, Optional

from pydantic import Field

from emojikit.api.components import BuildContext, Message
from emojikit.api.config import ConfigModel, ExistingFile
from emojikit.api.errors import InputFileError
from emojikit.support.io import read_jsonl_numbered


class JsonlConfig(ConfigModel):
    path: ExistingFile = Field(..., description="JSONL file, one JSON object per line.")
    field: str = Field("text", description="Key holding the message text.")
    category_field: Optional[str] = Field("category", description="Key holding the category (None = every message is 'unknown').")


def read_messages(config: JsonlConfig) -> list[Message]:
    """Every message of the file; a malformed line or a missing/empty text raises file:line."""
    messages = []
    for number, row in enumerate(_numbered(config), start=1):
        line, obj = row
        text = obj.get(config.field)
        if not isinstance(text, str) or not text.strip():
            raise InputFileError(f"{config.path}:{line}: expected a non-empty string in field {config.field!r}")
        category = obj.get(config.category_field) if config.category_field else None
        messages.append(Message(text.strip(), str(category) if category is not None else "unknown"))
    return messages


def _numbered(config: JsonlConfig):
    return read_jsonl_numbered(config.path)  # real line numbers; not UTF-8 or a huge line: file:line


class JsonlSource:
    def __init__(self, config: JsonlConfig):
        self.config = config

    def capacity(self) -> int:
        """The file's distinct messages (a repeated message counts once)."""
        return len({m.text for m in read_messages(self.config)})

    def messages(self, n: Optional[int] = None) -> Iterator[Message]:
        """The file's distinct messages in order (the file fixes the order; the seed does not
        change it); a message repeated later in the file is skipped."""
        seen: set[str] = set()
        for message in read_messages(self.config):
            if n is not None and len(seen) >= n:
                return
            if message.text not in seen:
                seen.add(message.text)
                yield message


def preflight(config: JsonlConfig, ctx: BuildContext) -> None:
    read_messages(config)  # a bad line is reported before any model loads


def build(config: JsonlConfig, ctx: BuildContext) -> JsonlSource:
    return JsonlSource(config)
