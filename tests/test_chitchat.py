"""Messages people wrote: the chitchat prompt source, the mix source and the real held-out set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emojikit import BuildContext, ConfigError, build_component
from emojikit_text import chitchat

REPO = Path(__file__).resolve().parents[1]
REAL_CHATS = REPO / "recipes/targets/real-chats.jsonl"
REAL_TEXTS = REPO / "recipes/targets/real-texts.jsonl"


@pytest.mark.parametrize(
    "text, rule",
    [
        ("Homemade ice cream is amazing.", None),
        ("What kind of music do you listen to?", None),
        ("I would deeply enjoy creating a hot pot.", None),
        ("yeah it helped a ton", "opener"),
        ("not even half", "words"),  # three words
        ("Haha, that's awesome and so funny!", "opener"),
        ("That sounds like a great plan for sure", "opener"),
        ("Well I have to agree with that one", "opener"),
        ("I love pizza, what about you?", "back"),
        ("It was really nice talking to you today", "opener"),
        ("I have really enjoyed this conversation so much", "meta"),
        ("I am not sure if it is", "content"),
        ("check out https://example.com for the full list", "characters"),
        (" ".join(["word"] * 21), "words"),
    ],
)
def test_the_self_contained_rule_names_the_first_rule_a_text_fails(text, rule):
    assert chitchat.rejection(text) == rule


def test_no_conversation_spans_training_and_heldout():
    train = {cid for cid, _ in chitchat.passing("train", 10)}
    heldout = {cid for cid, _ in chitchat.passing("heldout", 10)}
    assert train and heldout and not train & heldout
    assert heldout <= chitchat.heldout_conversation_ids(10)
    counts = chitchat.stats()
    assert counts["utterances"] == 258_145 and counts["conversations"] == 7_168
    assert counts["distinct_passing_train"] > 70_000 and counts["distinct_passing_heldout"] > 6_000


def test_the_real_heldout_sets_come_from_heldout_chats_and_no_training_message():
    chats = [json.loads(line) for line in REAL_CHATS.read_text(encoding="utf-8").splitlines()]
    texts = [json.loads(line) for line in REAL_TEXTS.read_text(encoding="utf-8").splitlines()]
    assert len(chats) >= 500 and {r["source"] for r in chats} == {"chitchat"}
    assert len(texts) >= 300 and {r["source"] for r in texts} == {"written"}
    rows = chats + texts
    assert len({chitchat.dedup_key(r["text"]) for r in rows}) == len(rows)
    assert {r["conversation"] for r in chats} <= chitchat.heldout_conversation_ids(10)
    train_keys = {chitchat.dedup_key(t) for _, t in chitchat.passing("train", 10)}
    assert not [r["text"] for r in rows if chitchat.dedup_key(r["text"]) in train_keys]
    said_in_any_chat = {chitchat.dedup_key(t) for _, utterances in chitchat.conversations() for t in utterances}
    assert not [r["text"] for r in texts if chitchat.dedup_key(r["text"]) in said_in_any_chat]


def test_a_draw_is_seeded_distinct_and_skips_near_duplicates(monkeypatch):
    texts = ["I adopted a small grey kitten today", "I adopted a small grey kitten today!!", "I adopted a little grey kitten today",
             "The train to Lisbon was three hours late", "Baking sourdough bread every single weekend now"]
    monkeypatch.setattr(chitchat, "passing", lambda split, pct: tuple(("c", t) for t in texts))
    source = build_component("prompt_source", "chitchat", {"near_duplicate": 0.9}, BuildContext(seed=3))
    drawn = [m.text for m in source.messages(10)]
    assert len(drawn) == 3 and sum("kitten" in t for t in drawn) == 1  # near-duplicates skipped, whatever comes first
    assert drawn == [m.text for m in build_component("prompt_source", "chitchat", {}, BuildContext(seed=3)).messages(10)]
    exact_only = build_component("prompt_source", "chitchat", {"near_duplicate": None}, BuildContext(seed=3))
    assert len(list(exact_only.messages(10))) == 5


def test_mix_takes_each_sources_share_and_validates_each_table():
    mix = build_component("prompt_source", "mix", {"sources": [{"use": "chitchat", "weight": 3, "near_duplicate": None},
                                                                {"use": "generated", "weight": 1}]}, BuildContext(seed=0))
    messages = list(mix.messages(200))
    assert len(messages) == len({m.text for m in messages}) == 200
    assert 120 <= sum(m.category.startswith("chat-") for m in messages) <= 180  # about 3 in 4
    assert [m.text for m in mix.messages(20)] == [m.text for m in messages[:20]]  # held-out first k do not move with n
    with pytest.raises(ConfigError, match=r"\[prompts.sources\[1\]\] colour: unknown key"):
        build_component("prompt_source", "mix", {"sources": [{"use": "chitchat"}, {"use": "generated", "colour": 1}]}, BuildContext())
    with pytest.raises(ConfigError, match="sources.0 weight must be a number > 0|sources\\[0\\] weight"):
        build_component("prompt_source", "mix", {"sources": [{"use": "chitchat", "weight": 0}]}, BuildContext())
