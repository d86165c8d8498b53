"""What bytes each token of a tokenizer produces when decoded.

Two vocabulary encodings cover the tokenizers emojikit meets:
- byte-level BPE (GPT-2, SmolLM2, Qwen): every byte is written as one printable character
  (the GPT-2 bytes<->unicode table), so a token is a byte string in disguise;
- SentencePiece (Llama, Gemma): tokens are text with '▁' for a space, and with byte
  fallback the tokens `<0x00>`..`<0xFF>` stand for single bytes.
Special tokens have no bytes (they are never part of an emoji answer); EOS is handled apart.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any, Optional

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
SPIECE_SPACE = "\u2581"  # '▁'


@functools.lru_cache(maxsize=1)
def gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte->printable-character table.

    Bytes that are already printable and not whitespace map to themselves; the remaining 68
    bytes are shifted, in order, to code points 256, 257, ... so that no token contains a
    control character or a space.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


def decoder_spec(spec_text: Optional[str]) -> Optional[dict]:
    """The "decoder" entry of a serialized fast tokenizer, parsed alone (the whole JSON with
    its merges takes ~0.3 s to parse)."""
    if spec_text is None:
        return None
    at = spec_text.find('"decoder":')
    if at < 0:
        return json.loads(spec_text).get("decoder")
    start = at + len('"decoder":')
    while spec_text[start].isspace():
        start += 1
    value, _ = json.JSONDecoder().raw_decode(spec_text, start)
    return value


def _component_types(spec: Any) -> set[str]:
    """Every "type" named in a tokenizers component spec (decoders nest in Sequence)."""
    found: set[str] = set()
    if isinstance(spec, dict):
        if isinstance(spec.get("type"), str):
            found.add(spec["type"])
        for value in spec.values():
            found |= _component_types(value)
    elif isinstance(spec, list):
        for value in spec:
            found |= _component_types(value)
    return found


def vocabulary_kind(tokenizer: Any, spec_text: Optional[str] = None) -> str:
    """"byte_level" or "sentencepiece", from the tokenizer's decoder (or its vocabulary)."""
    decoder = decoder_spec(spec_text if spec_text is not None else tokenizer_spec_text(tokenizer))
    if decoder is not None:
        types = _component_types(decoder)
        if "ByteLevel" in types:
            return "byte_level"
        if types & {"ByteFallback", "Metaspace", "Replace"}:
            return "sentencepiece"
    vocab = tokenizer.get_vocab()
    return "byte_level" if "\u0120" in vocab or "\u010a" in vocab else "sentencepiece"


def special_token_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False):
            ids.add(int(token_id))
    return ids


@functools.lru_cache(maxsize=1)
def _gpt2_decoding() -> tuple[re.Pattern, dict[int, int]]:
    """A pattern matching strings of byte-level characters, and a str.translate table
    turning each into the code point of its byte (then .encode("latin-1") gives the bytes)."""
    table = gpt2_unicode_to_byte()
    pattern = re.compile("[" + re.escape("".join(table)) + "]+")
    return pattern, {ord(ch): b for ch, b in table.items()}


def token_bytes(tokenizer: Any, spec_text: Optional[str] = None) -> list[Optional[bytes]]:
    """Bytes of every token id (index = id); None for special tokens and undecodable ones."""
    kind = vocabulary_kind(tokenizer, spec_text)
    specials = special_token_ids(tokenizer)
    added = {int(i): t.content for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()}
    vocab = tokenizer.get_vocab()
    size = max(len(tokenizer), max(vocab.values()) + 1)
    out: list[Optional[bytes]] = [None] * size
    pattern, translation = _gpt2_decoding()
    for token, token_id in vocab.items():
        if token_id in specials:
            continue
        if token_id in added:  # added tokens hold literal text in both encodings
            out[token_id] = added[token_id].encode("utf-8")
        elif kind == "byte_level":
            if pattern.fullmatch(token):
                out[token_id] = token.translate(translation).encode("latin-1")
        else:
            match = _BYTE_TOKEN.match(token)
            out[token_id] = bytes([int(match.group(1), 16)]) if match else token.replace(SPIECE_SPACE, " ").encode("utf-8")
    return out


def tokenizer_spec_text(tokenizer: Any) -> Optional[str]:
    """The fast tokenizer's serialized form (JSON), or None for a slow tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend.to_str() if backend is not None else None


def fingerprint(tokenizer: Any, spec_text: Optional[str] = None) -> str:
    """A digest of everything that decides token bytes: vocabulary, encoding, specials, EOS.

    Hashes the serialized tokenizer from "added_tokens" on: the fields before it (padding,
    truncation) change whenever a caller pads a batch and do not affect token bytes.
    """
    digest = hashlib.sha256()
    spec_text = spec_text if spec_text is not None else tokenizer_spec_text(tokenizer)
    if spec_text is not None:
        start = spec_text.find('"added_tokens"')
        digest.update(spec_text[max(start, 0):].encode())
    else:
        digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    digest.update(json.dumps([type(tokenizer).__name__, len(tokenizer), sorted(special_token_ids(tokenizer)), tokenizer.eos_token_id]).encode())
    return digest.hexdigest()[:24]
