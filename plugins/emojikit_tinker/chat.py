"""Chat-template helpers shared by the backend and the judge (a tokenizer is all they need)."""

from __future__ import annotations

from typing import Any

_MARKER = "\u2063emojikit-answer\u2063"  # text no real answer contains


def encode_prompt(tokenizer: Any, messages: list[dict], enable_thinking: bool = False) -> list[int]:
    """Prompt tokens under the tokenizer's chat template, with the assistant turn opened."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=enable_thinking)
    return list(tokenizer.encode(text, add_special_tokens=False))


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """The token(s) the chat template puts right after an assistant answer (e.g. <|im_end|>).

    Found by rendering a conversation, so it holds for any template; EOS when the template
    closes a turn with plain text.
    """
    special = sorted((t for t in tokenizer.all_special_tokens if t), key=len, reverse=True)
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARKER}], tokenize=False
        )
    except Exception:  # noqa: BLE001 - a tokenizer without a template: fall back to EOS
        text = ""
    after = text.split(_MARKER, 1)[1] if _MARKER in text else ""
    for token in special:
        if after.startswith(token):
            return [tokenizer.convert_tokens_to_ids(token)]
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Tokens that end a sampled answer: the end-of-turn token and EOS."""
    ids = list(end_of_turn_ids(tokenizer))
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids
