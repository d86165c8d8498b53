"""Messages people wrote: utterances of the Chit-Chat Challenge's human-human chats.

The `chitchat-dataset` package (MIT, BYU PCC lab) ships 258,145 utterances of 7,168 open-domain
chats in its wheel; nothing downloads at run time. Many utterances lean on the turn before
("yeah it helped a ton", "not even half actually") or talk about the chat itself ("nice talking
to you"): `self_contained` keeps the ones a reader understands alone and that carry content.
The rule, in order (`rejection` names the first one a text fails):

  words       4-20 words
  characters  letters are at least 60 % of the non-space characters; no links, no @handles
  opener      the first word does not lean on the turn before: a reply word (yeah, no, ok, oh,
              haha, lol, well, so, and, but, same, exactly, thanks, hi, ...) or a pronoun that
              points back (it, that, this, they, those, these, he, she, there, then)
  back        no phrase that answers or returns a question (me too, you too, what about you,
              how about you, and you, same here, i agree, good point, ...)
  meta        nothing about the chat itself (conversation, chatting, talking to you, nice to
              meet, my partner, this challenge, the prompt, ...)
  content     at least two content words (3+ letters, not a stopword)

Of the 258,145 utterances, 118,919 distinct texts (case and punctuation aside) pass; counted
by `python -m emojikit_text.chitchat --stats` and stated in docs/data.md.

Chats are split by conversation, never by utterance: a conversation whose keyed hash falls
below `heldout_percent` belongs to the held-out split, so no chat spans training and held-out
data. Within a split the order is a seeded shuffle; near-duplicates (MiniLM cosine >=
`near_duplicate` against an earlier message) are skipped as they are drawn, so a draw of n
messages costs n embeddings, which the lexicon teacher then reuses from the shared cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import random
import re
from pathlib import Path
from typing import Iterator, Literal, Optional

from pydantic import Field

from emojikit.api.components import BuildContext, Message
from emojikit.api.components import message_key as dedup_key  # repeats: case, spacing, punctuation left out
from emojikit.api.config import ConfigModel
from emojikit.api.errors import ModelUnavailableError

MIN_WORDS, MAX_WORDS = 4, 20
MIN_LETTER_SHARE = 0.6
MIN_CONTENT_WORDS = 2
NEAR_DUPLICATE = 0.9
ENCODE_CHUNK = 512

REPLY_OPENERS = frozenset(
    """yeah yea ya yah yes yep yup yeh no nope nah naw ok okay k kk oh ohh ooh ah ahh aw aww haha hahaha hah ha lol lmao
    hmm hm mm um uh well so and but or because cause cuz also too same exactly true right sure definitely totally
    agreed absolutely wow whoa nice cool awesome great thanks thank thx hi hello hey heyy bye goodbye yay welcome
    sorry indeed probably maybe perhaps anyway anyways though alright aight fair interesting gotcha wait ugh anytime
    hahah hehe omg""".split()
)
LAUGH = re.compile(r"^(?:(?:ha)+h?|(?:he)+|lo+l|x+d)$")
POINTING_OPENERS = frozenset("it its it's that that's thats this they they're theyre them those these he he's she she's there then".split())
BACK_REFERENCES = (
    "me too", "you too", "what about you", "how about you", "and you", "same here", "i agree", "good point",
    "you said", "you mentioned", "that's true", "thats true", "so do i", "neither do i", "me neither", "you as well",
)
META = (
    "conversation", "conversations", "chatting", "prompts", "chat with", "talking to you", "talk to you", "talking with you", "nice to meet",
    "meet you", "my partner", "this challenge", "the challenge", "the prompt", "this prompt", "messages", "this app",
)
STOPWORDS = frozenset(
    """the a an and or but if then than so to of in on at by for with from up down out over under about into onto off
    is am are was were be been being do does did done have has had having will would shall should can could may might
    must i me my mine myself you your yours yourself we us our ours he him his she her hers it its they them their
    theirs this that these those there here what which who whom whose when where why how all any both each few more
    most other some such no nor not only own same too very just also really pretty quite get got getting go going
    gone went like know think thing things stuff lot lots yeah yes okay ok oh well kind sort one ones much many
    dont don't im i'm its it's thats that's youre you're ive i've id i'd ill i'll cant can't wont won't didnt didn't
    doesnt doesn't isnt isn't wasnt wasn't arent aren't something anything everything nothing someone anyone""".split()
)
_WORD = re.compile(r"[a-z][a-z']*")


def _phrase_in(text: str, phrases: tuple[str, ...]) -> bool:
    padded = f" {' '.join(_WORD.findall(text))} "
    return any(f" {p} " in padded for p in phrases)


def rejection(text: str) -> Optional[str]:
    """The first rule of the module docstring that `text` fails, or None when it passes."""
    words = text.split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return "words"
    chars = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in chars)
    lowered = text.lower()
    if letters < MIN_LETTER_SHARE * len(chars) or "http" in lowered or "www." in lowered or "@" in text:
        return "characters"
    tokens = _WORD.findall(lowered)
    if not tokens:
        return "characters"
    first = tokens[0]
    if first in REPLY_OPENERS or first in POINTING_OPENERS or LAUGH.match(first):
        return "opener"
    if _phrase_in(lowered, BACK_REFERENCES):
        return "back"
    if _phrase_in(lowered, META):
        return "meta"
    if sum(1 for t in tokens if len(t) >= 3 and t not in STOPWORDS) < MIN_CONTENT_WORDS:
        return "content"
    return None


def self_contained(text: str) -> bool:
    return rejection(text) is None


def dataset_path() -> Path:
    """dataset.json inside the installed chitchat-dataset wheel (found without importing it)."""
    spec = importlib.util.find_spec("chitchat_dataset")
    if spec is None or spec.origin is None:
        raise ModelUnavailableError("the chitchat prompt source needs the chitchat-dataset package: pip install chitchat-dataset")
    path = Path(spec.origin).parent / "dataset.json"
    if not path.is_file():
        raise ModelUnavailableError(f"chitchat-dataset is installed but has no dataset.json at {path}; reinstall it")
    return path


@functools.lru_cache(maxsize=1)
def conversations() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(conversation id, its utterances in order) for every chat, sorted by id."""
    with open(dataset_path(), encoding="utf-8") as f:
        data = json.load(f)
    return tuple(
        (cid, tuple(" ".join(u["text"].split()) for turn in chat["messages"] for u in turn if isinstance(u.get("text"), str)))
        for cid, chat in sorted(data.items())
    )


@functools.lru_cache(maxsize=None)
def is_heldout(conversation_id: str, heldout_percent: int) -> bool:
    digest = hashlib.sha256(f"emojikit-chitchat:{conversation_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < heldout_percent


def category(text: str) -> str:
    return "chat-question" if text.rstrip().endswith("?") else "chat-statement"


@functools.lru_cache(maxsize=1)
def judged() -> tuple[tuple[str, str, Optional[str]], ...]:
    """(conversation id, text, the rule it fails or None) for every utterance."""
    return tuple((cid, text, rejection(text)) for cid, utterances in conversations() for text in utterances)


@functools.lru_cache(maxsize=8)
def passing(split: str, heldout_percent: int) -> tuple[tuple[str, str], ...]:
    """(conversation id, text) of every self-contained utterance of the split, exact duplicates
    dropped. A text also said in a held-out chat ("What is your dream car?") is held out: the
    training split never holds a held-out message."""
    heldout_keys = {dedup_key(text) for cid, text, _ in judged() if is_heldout(cid, heldout_percent)}
    seen: set[str] = set() if split == "heldout" else set(heldout_keys)
    out = []
    for cid, text, rule in judged():
        if rule is not None or is_heldout(cid, heldout_percent) != (split == "heldout"):
            continue
        key = dedup_key(text)
        if key not in seen:
            seen.add(key)
            out.append((cid, text))
    return tuple(out)


def heldout_conversation_ids(heldout_percent: int) -> set[str]:
    return {cid for cid, _ in conversations() if is_heldout(cid, heldout_percent)}


class ChitchatConfig(ConfigModel):
    split: Literal["train", "heldout"] = Field(
        "train", description="Conversations to read: 'train', or the 'heldout' ones (no chat is in both)."
    )
    heldout_percent: int = Field(10, ge=0, le=100, description="Share of conversations (in %) in the held-out split.")
    count: int = Field(25_000, ge=1, description="Messages yielded when the caller asks for all of them.")
    max_words: Optional[int] = Field(None, ge=MIN_WORDS, le=MAX_WORDS, description="Skip messages longer than this (None = the rule's 20).")
    near_duplicate: Optional[float] = Field(
        NEAR_DUPLICATE, gt=0.0, le=1.0,
        description="Skip a message whose MiniLM cosine to an earlier one reaches this (None = exact duplicates only).",
    )
    seed_offset: int = Field(0, description="Added to the recipe seed, for a different draw with the same recipe seed.")


class ChitchatSource:
    def __init__(self, config: ChitchatConfig, seed: int = 0):
        self.config = config
        self.seed = seed + config.seed_offset

    def _candidates(self) -> list[str]:
        texts = [t for _, t in passing(self.config.split, self.config.heldout_percent)]
        if self.config.max_words is not None:
            texts = [t for t in texts if len(t.split()) <= self.config.max_words]
        return texts

    def capacity(self) -> int:
        """Distinct self-contained messages of the split (near-duplicates may make a draw shorter)."""
        return len(self._candidates())

    def messages(self, n: Optional[int] = None) -> Iterator[Message]:
        """A seeded shuffle of the split's messages, near-duplicates of earlier ones skipped."""
        import numpy as np

        n = self.config.count if n is None else n
        texts = self._candidates()
        random.Random(f"emojikit-chitchat:{self.seed}").shuffle(texts)
        threshold = self.config.near_duplicate
        if threshold is None or threshold >= 1.0:
            for text in texts[:n]:
                yield Message(text, category(text))
            return
        from tqdm import tqdm

        from emojikit.play.embedding import get_minilm

        minilm = get_minilm()
        kept = np.zeros((0, minilm.dim), dtype=np.float32)
        yielded = 0
        with tqdm(total=min(n, len(texts)), desc="chitchat: near-duplicate check", unit="msg", disable=n < ENCODE_CHUNK) as bar:
            for start in range(0, len(texts), ENCODE_CHUNK):
                chunk = texts[start : start + ENCODE_CHUNK]
                emb = minilm.encode(chunk)
                earlier = (emb @ kept.T).max(axis=1) if len(kept) else np.full(len(chunk), -1.0)
                within = emb @ emb.T
                chosen: list[int] = []
                for i, text in enumerate(chunk):
                    if earlier[i] >= threshold or (chosen and within[i, chosen].max() >= threshold):
                        continue
                    chosen.append(i)
                    yield Message(text, category(text))
                    bar.update(1)
                    yielded += 1
                    if yielded >= n:
                        return
                kept = np.concatenate([kept, emb[chosen]])


def build(config: ChitchatConfig, ctx: BuildContext) -> ChitchatSource:
    return ChitchatSource(config, seed=ctx.seed)


def preflight(config: ChitchatConfig, ctx: BuildContext) -> None:
    dataset_path()  # a missing package is one line before any model loads


def stats(heldout_percent: int = 10) -> dict:
    """How many utterances each rule rejects, and how many pass, per split."""
    from collections import Counter

    reasons = Counter(rule or "passes" for _, _, rule in judged())
    return {
        "utterances": len(judged()),
        "conversations": len(conversations()),
        "by_first_failed_rule": dict(reasons.most_common()),
        "distinct_passing_train": len(passing("train", heldout_percent)),
        "distinct_passing_heldout": len(passing("heldout", heldout_percent)),
        "heldout_conversations": len(heldout_conversation_ids(heldout_percent)),
    }


def heldout_sample(n: int, max_words: int = 16, heldout_percent: int = 10, seed: int = 0) -> list[dict]:
    """One message per held-out conversation (seeded), then a second from each, and so on until
    n; near-duplicates skipped: the real held-out chat targets of recipes/targets/real-chats.jsonl."""
    by_chat: dict[str, list[str]] = {}
    for cid, text in passing("heldout", heldout_percent):
        if len(text.split()) <= max_words:
            by_chat.setdefault(cid, []).append(text)
    rng = random.Random(f"emojikit-chitchat-heldout:{seed}")
    chats = sorted(by_chat)
    rng.shuffle(chats)
    for cid in chats:
        rng.shuffle(by_chat[cid])
    rounds = max(len(texts) for texts in by_chat.values())
    picks = [(cid, by_chat[cid][r]) for r in range(rounds) for cid in chats if r < len(by_chat[cid])]
    from emojikit.play.embedding import get_minilm

    emb = get_minilm().encode([t for _, t in picks])
    rows, kept = [], []
    for i, (cid, text) in enumerate(picks):
        if kept and float((emb[kept] @ emb[i]).max()) >= NEAR_DUPLICATE:
            continue
        kept.append(i)
        rows.append({"text": text, "category": category(text), "source": "chitchat", "conversation": cid})
        if len(rows) >= n:
            break
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Counts of the self-contained rule, or a held-out sample as JSONL.")
    parser.add_argument("--heldout", type=int, help="print this many held-out messages as JSONL (one per conversation)")
    parser.add_argument("--max-words", type=int, default=16)
    args = parser.parse_args()
    if args.heldout:
        for row in heldout_sample(args.heldout, args.max_words):
            print(json.dumps(row, ensure_ascii=False))
    else:
        print(json.dumps(stats(), indent=2))
