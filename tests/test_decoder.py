"""The emoji-mask and none decoders: exact masks for byte-level BPE and SentencePiece
byte-fallback tokenizers, count and budget rules, the validator, and the disk cache."""

from __future__ import annotations

import random

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emojikit.api import emojis
from emojikit.support.bundled import SMOLLM2, load_tokenizer
from emojikit.api.components import BuildContext, Decoder
from emojikit.api.policy import TokenConstraint
from emojikit.composition.registry import get_registry
from emojikit_emoji_mask.automaton import EmojiAutomaton
from emojikit_emoji_mask.decoder import EmojiMaskDecoder, NoConstraintDecoder
from emojikit_emoji_mask.tokens import token_bytes, vocabulary_kind
from emojikit_emoji_mask.union import union_token_ids

INVENTORY = emojis.inventory()
FAMILY = "\U0001F468\u200d\U0001F469\u200d\U0001F467"  # 👨‍👩‍👧
MAN = "\U0001F468"  # 👨
BUDGET = 10_000  # "unlimited"
WALKS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# --- tokenizers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer(SMOLLM2)


def _sentencepiece_byte_fallback():
    """A Gemma-style tokenizer: Unigram pieces, '▁' for space, <0xNN> byte fallback, with
    whole-emoji pieces, a piece spanning two emoji and a piece starting with a space."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)] + [(f"<0x{b:02X}>", -10.0) for b in range(256)]
    words = ["\u2581", "\u2581the", "hello", "😀", "😀😀", MAN, "\u200d", "👩", "👧", "❤️", "🇺🇸", "\u2581😀", "\ufe0f", "🏻", "a", "b"]
    pieces += [(w, -1.0 - 0.1 * i) for i, w in enumerate(words)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def spiece():
    return _sentencepiece_byte_fallback()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("masks")


@pytest.fixture(scope="module")
def decoder(cache):
    return EmojiMaskDecoder(2, 8, cache_dir=cache)


@pytest.fixture(scope="module")
def tokenizers(smollm2, spiece):
    return {"smollm2": smollm2, "spiece": spiece}


@pytest.fixture(scope="module")
def decoders(cache):
    """One decoder per setting for the whole module, so masks stay cached across examples."""
    made: dict = {}

    def get(min_emoji: int, max_emoji: int, separator: str = "") -> EmojiMaskDecoder:
        key = (min_emoji, max_emoji, separator)
        if key not in made:
            made[key] = EmojiMaskDecoder(min_emoji, max_emoji, separator=separator, cache_dir=cache)
        return made[key]

    return get


def _walk(constraint, token_ids, budget=BUDGET):
    """Advance through token_ids, asserting each one is allowed; returns the final state."""
    state = constraint.start()
    for i, token in enumerate(token_ids):
        allowed = constraint.allowed_ids(state, budget - i)
        assert token in set(allowed.tolist()), f"token {token} not allowed at step {i}"
        state = constraint.advance(state, token)
    return state


# --- the inventory and the automaton ---------------------------------------------------


def test_inventory_is_uniquely_decodable_and_parses_as_built():
    """No sequence the parser knows is an allowed emoji followed by the start of allowed
    emoji, so a concatenation of allowed emoji parses back into exactly those emoji."""
    allowed = set(INVENTORY)
    prefixes = {seq[:i] for seq in INVENTORY for i in range(1, len(seq) + 1)}

    def starts_concatenation(rest: str) -> bool:
        return rest in prefixes or any(rest[:k] in allowed and starts_concatenation(rest[k:]) for k in range(1, len(rest)))

    clashes = [s for s in emojis._all() for k in range(1, len(s)) if s[:k] in allowed and starts_concatenation(s[k:])]
    assert clashes == []
    rng = random.Random(0)
    for _ in range(300):
        picked = rng.choices(INVENTORY, k=rng.randint(1, 8))
        assert emojis.split("".join(picked)) == picked


def test_automaton_counts_exact_emoji_sequences():
    auto = EmojiAutomaton(INVENTORY)
    assert auto.count("😀") == 1
    assert auto.count(MAN + FAMILY + MAN) == 3
    assert auto.count("😀 😀") is None  # no separator configured
    assert auto.count("😀a") is None
    assert auto.count("\U0001F468\u200d") is None  # cut mid-sequence
    spaced = EmojiAutomaton(INVENTORY, " ")
    assert spaced.count("😀 😀") == 2
    assert spaced.count("😀😀") is None and spaced.count("😀 ") is None


# --- token bytes -----------------------------------------------------------------------


def test_token_bytes_match_decoding(smollm2, spiece):
    assert vocabulary_kind(smollm2) == "byte_level" and vocabulary_kind(spiece) == "sentencepiece"
    for tokenizer in (smollm2, spiece):
        table = token_bytes(tokenizer)
        assert all(table[i] is None for i in tokenizer.all_special_ids)
        ids = [i for i, b in enumerate(table) if b is not None]
        for i in random.Random(1).sample(ids, min(2000, len(ids))):
            assert table[i].decode("utf-8", "replace") == tokenizer.decode([i])
    spiece_bytes = token_bytes(spiece)
    assert spiece_bytes[spiece.convert_tokens_to_ids("<0xF0>")] == b"\xf0"
    assert spiece_bytes[spiece.convert_tokens_to_ids("\u2581😀")] == " 😀".encode()


# --- property tests: random walks -------------------------------------------------------


def _random_walk(constraint, tokenizer, data, budget):
    state, tokens = constraint.start(), []
    for step in range(budget):
        allowed = constraint.allowed_ids(state, budget - step).tolist()
        assert allowed, "the mask is never empty"
        # Never stuck: something other than a forced-invalid EOS is possible.
        assert allowed != [constraint.eos_token_id] or constraint.accepting(state)
        token = allowed[data.draw(st.integers(0, len(allowed) - 1), label="choice")]
        if token == constraint.eos_token_id:
            break
        tokens.append(token)
        state = constraint.advance(state, token)
    return tokenizer.decode(tokens, skip_special_tokens=True), state


@WALKS
@given(data=st.data(), name=st.sampled_from(["smollm2", "spiece"]), limits=st.sampled_from([(2, 8), (1, 3), (3, 3)]), budget=st.integers(1, 40))
def test_random_walks_decode_to_valid_answers(tokenizers, decoders, data, name, limits, budget):
    decoder = decoders(*limits)
    constraint = decoder.bind(tokenizers[name])
    if budget < constraint.min_tokens:
        # Too small a budget for min_emoji: only EOS, and the empty answer is invalid.
        assert constraint.allowed_ids(constraint.start(), budget).tolist() == [constraint.eos_token_id]
        return
    text, state = _random_walk(constraint, tokenizers[name], data, budget)
    assert emojis.is_emoji_only(text, limits[0], limits[1]), text
    assert decoder.check(text).valid and constraint.accepting(state)


@WALKS
@given(data=st.data(), budget=st.integers(4, 30))
def test_random_walks_with_a_space_separator(smollm2, decoders, data, budget):
    decoder = decoders(2, 4, " ")
    text, _ = _random_walk(decoder.bind(smollm2), smollm2, data, budget)
    assert emojis.is_emoji_only(text, 2, 4) and decoder.check(text).valid
    assert text.count(" ") == emojis.count(text) - 1


# --- every allowed emoji is reachable through its canonical tokenization ----------------


@pytest.mark.parametrize("name", ["smollm2", "spiece"])
def test_every_emoji_is_produced_by_its_canonical_tokenization(tokenizers, decoder, name):
    tokenizer = tokenizers[name]
    constraint = decoder.bind(tokenizer)
    for seq in INVENTORY:
        ids = tokenizer.encode(seq, add_special_tokens=False)
        state = _walk(constraint, ids + ids, budget=2 * len(ids))  # ends exactly at the budget
        assert constraint.accepting(state) and constraint.emoji_count(state) == 2, seq
        assert tokenizer.decode(ids + ids) == seq + seq


def test_tokens_spanning_several_emoji(spiece, decoder):
    constraint = decoder.bind(spiece)
    double = spiece.convert_tokens_to_ids("😀😀")
    state = _walk(constraint, [double])
    assert constraint.emoji_count(state) == 2
    # With one emoji out and room for one more only, the two-emoji token would overshoot.
    one_more = EmojiMaskDecoder(1, 2, cache_dir=decoder.cache_dir).bind(spiece)
    state = _walk(one_more, [spiece.convert_tokens_to_ids("😀")])
    assert double not in one_more.allowed_ids(state, BUDGET).tolist()
    # '▁😀' is " 😀": not allowed without a separator, allowed with a space separator.
    spaced = EmojiMaskDecoder(2, 8, separator=" ", cache_dir=decoder.cache_dir).bind(spiece)
    space_smile = spiece.convert_tokens_to_ids("\u2581😀")
    assert space_smile not in constraint.allowed_ids(state, BUDGET).tolist()
    after = _walk(spaced, [spiece.convert_tokens_to_ids("😀"), space_smile])
    assert spaced.emoji_count(after) == 2


# --- EOS, min and max -------------------------------------------------------------------


def test_eos_only_at_boundaries_between_min_and_max(smollm2, decoder):
    constraint = decoder.bind(smollm2)
    eos = constraint.eos_token_id
    smile = smollm2.encode("😀", add_special_tokens=False)
    state = constraint.start()
    assert eos not in constraint.allowed_ids(state, BUDGET).tolist()
    for n in range(1, 9):
        for i, token in enumerate(smile):
            state = constraint.advance(state, token)
            mid = i < len(smile) - 1
            allowed = constraint.allowed_ids(state, BUDGET).tolist()
            if mid:
                assert eos not in allowed  # never mid-emoji
        assert (eos in allowed) == (n >= 2)
        assert constraint.emoji_count(state) == (n if n >= 2 else None)
    assert constraint.allowed_ids(state, BUDGET).tolist() == [eos]  # forced after max_emoji


def test_prefix_emoji_and_longer_sequence_both_reachable(smollm2, cache):
    constraint = EmojiMaskDecoder(1, 8, cache_dir=cache).bind(smollm2)
    man = smollm2.encode(MAN, add_special_tokens=False)
    family = smollm2.encode(FAMILY, add_special_tokens=False)
    assert family[: len(man)] == man
    state = _walk(constraint, man)
    allowed = constraint.allowed_ids(state, BUDGET).tolist()
    assert constraint.eos_token_id in allowed and family[len(man)] in allowed
    assert constraint.emoji_count(_walk(constraint, family)) == 1
    assert constraint.emoji_count(_walk(constraint, man + family + man)) == 3


# --- budgets ----------------------------------------------------------------------------


def test_budget_never_cuts_an_emoji(smollm2, decoder):
    constraint = decoder.bind(smollm2)
    two = smollm2.encode("😀😀", add_special_tokens=False)
    state = _walk(constraint, two)
    for left in (1, 2, 3):
        for token in constraint.allowed_ids(state, left).tolist():
            if token == constraint.eos_token_id:
                continue
            nxt = constraint.advance(state, token)
            # what follows must be able to finish within the remaining budget
            reachable = {nxt}
            for _ in range(left - 1):
                reachable |= {constraint.advance(s, t) for s in reachable for t in constraint.allowed_ids(s, BUDGET).tolist() if t != constraint.eos_token_id}
            assert any(constraint.accepting(s) for s in reachable), (left, token)
    # one token left: only tokens that complete an emoji by themselves, or EOS
    for token in constraint.allowed_ids(state, 1).tolist():
        assert token == constraint.eos_token_id or constraint.accepting(constraint.advance(state, token))
    # a sample may end exactly at its budget in an accepting state
    assert constraint.accepting(_walk(constraint, two, budget=len(two)))


# --- the original union mask, to show why emojikit does not use it ----------------------


def test_union_of_token_ids_mask_produces_non_emoji(smollm2, decoder):
    union = union_token_ids(smollm2, INVENTORY)
    table = token_bytes(smollm2)
    starts = {seq[0] for seq in INVENTORY}
    strays = []
    for a in union:
        for b in union:
            try:
                text = (table[a] + table[b]).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(text) == 1 and text not in starts and not emojis.is_emoji_only(text):
                strays.append((a, b, text))
    # e.g. '“' from the bytes of ZWJ sequences: a real character that is no emoji
    assert len({t for _, _, t in strays}) >= 3
    constraint = decoder.bind(smollm2)
    start = constraint.start()
    for a, b, _ in strays:
        first = constraint.allowed_ids(start, BUDGET).tolist()
        assert a not in first or b not in constraint.allowed_ids(constraint.advance(start, a), BUDGET).tolist()
    # Random walks through the union mask are mostly not valid answers.
    rng = random.Random(0)
    pool = union + [smollm2.eos_token_id]
    invalid = 0
    for _ in range(200):
        tokens = []
        for _ in range(24):
            token = rng.choice(pool)
            if token == smollm2.eos_token_id:
                break
            tokens.append(token)
        invalid += not decoder.check(smollm2.decode(tokens)).valid
    assert invalid > 150


# --- the validator ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, valid, n, reason",
    [
        ("😀🎉", True, 2, ""),
        (MAN + FAMILY, True, 2, ""),
        ("🇺🇸🇫🇷🇯🇵", True, 3, ""),
        ("😀", False, 1, "fewer than min_emoji"),
        ("😀" * 9, False, 9, "more than max_emoji"),
        ("😀 🎉", False, 2, "separator"),
        ("😀 hi 🎉", False, 2, "non-emoji text 'hi'"),
        ("", False, 0, "empty"),
        ("😀\u2764", False, 2, "outside the allowed inventory"),  # unqualified heart
        ("😀" + MAN + "\u200d", False, 2, "non-emoji text"),
    ],
)
def test_check(decoder, text, valid, n, reason):
    result = decoder.check(text)
    assert (result.valid, result.n_emoji) == (valid, n)
    assert reason in result.reason


def test_check_with_separator_and_excluded_families():
    spaced = EmojiMaskDecoder(2, 8, separator=" ", exclude_flags=True, exclude_skin_tones=True, exclude_keycaps=True)
    assert spaced.check("😀 🎉").valid
    assert not spaced.check("😀🎉").valid
    assert "outside the allowed inventory" in spaced.check("😀 🇺🇸").reason
    assert not spaced.check("👋🏽 😀").valid and not spaced.check("#️⃣ 😀").valid
    assert "ends inside" in spaced.check("😀 ").reason


def test_none_decoder_checks_format_but_masks_nothing(smollm2):
    none = NoConstraintDecoder(2, 3)
    assert none.bind(smollm2) is None
    assert none.check("😀 🎉").valid and none.check("😀\u2764").valid  # lenient: any emoji, spaces
    assert not none.check("😀").valid and not none.check("😀🎉🎉🎉").valid and not none.check("😀 ok 🎉").valid


# --- plugin, protocols, cache, processor, CLI -------------------------------------------


def test_registered_components_and_configs(smollm2):
    registry = get_registry()
    mask = registry.get("decoder", "emoji-mask")
    built = mask.factory(mask.config(), BuildContext())
    assert isinstance(built, Decoder) and (built.min_emoji, built.max_emoji) == (2, 8)
    assert isinstance(built.bind(smollm2), TokenConstraint)
    none = registry.get("decoder", "none")
    assert none.factory(none.config(min_emoji=1, max_emoji=2), BuildContext()).bind(smollm2) is None
    with pytest.raises(ValueError, match="whitespace"):
        mask.config(separator=",")
    with pytest.raises(ValueError, match="larger than max_emoji"):
        mask.config(min_emoji=5, max_emoji=3)
    with pytest.raises(ValueError):
        mask.config(min_emojis=2)  # typo: extra keys are rejected


def test_binding_is_cached_on_disk_per_tokenizer(smollm2, spiece, tmp_path):
    first = EmojiMaskDecoder(cache_dir=tmp_path).bind(smollm2)
    assert not first.graph.from_cache
    files = sorted(tmp_path.glob("emoji-mask-*.npz"))
    assert len(files) == 1
    again = EmojiMaskDecoder(cache_dir=tmp_path).bind(smollm2)
    assert again.graph.from_cache
    assert np.array_equal(first.graph.edge_token, again.graph.edge_token) and np.array_equal(first.graph.edge_dst, again.graph.edge_dst)
    start = first.start()
    assert first.allowed_ids(start, 5).tolist() == again.allowed_ids(again.start(), 5).tolist()
    EmojiMaskDecoder(cache_dir=tmp_path).bind(spiece)  # another tokenizer: another file
    EmojiMaskDecoder(cache_dir=tmp_path, separator=" ").bind(smollm2)  # another automaton: another file
    assert len(list(tmp_path.glob("emoji-mask-*.npz"))) == 3
    files[0].write_bytes(b"torn")  # a corrupt cache is rebuilt, not trusted
    rebuilt = EmojiMaskDecoder(cache_dir=tmp_path).bind(smollm2)
    assert not rebuilt.graph.from_cache and EmojiMaskDecoder(cache_dir=tmp_path).bind(smollm2).graph.from_cache


def test_allowed_batch_matches_allowed(smollm2, decoder):
    constraint = decoder.bind(smollm2)
    states = [constraint.start(), _walk(constraint, smollm2.encode("😀", add_special_tokens=False)), constraint.dead]
    lefts = [3, 1, 5]
    batch = constraint.allowed_batch(states, lefts, width=constraint.vocab_size + 64)
    assert batch.shape == (3, constraint.vocab_size + 64) and not batch[:, constraint.vocab_size :].any()
    for row, (s, left) in enumerate(zip(states, lefts)):
        assert batch[row, : constraint.vocab_size].equal(constraint.allowed(s, left))


def test_logits_processor_masks_a_sampling_loop(smollm2, decoder):
    import torch

    from emojikit_emoji_mask.processor import EmojiLogitsProcessor

    constraint = decoder.bind(smollm2)
    processor = EmojiLogitsProcessor(constraint, max_new_tokens=12)
    generator = torch.Generator().manual_seed(0)
    input_ids_B_T = torch.full((8, 5), 7)
    finished = torch.zeros(8, dtype=torch.bool)
    for _ in range(12):
        scores_B_V = torch.randn(8, constraint.vocab_size, generator=generator) * 5
        masked_B_V = processor(input_ids_B_T, scores_B_V)
        nxt_B = torch.multinomial(torch.softmax(masked_B_V, -1), 1, generator=generator).squeeze(-1)
        nxt_B = torch.where(finished, torch.full_like(nxt_B, constraint.eos_token_id), nxt_B)
        finished |= nxt_B == constraint.eos_token_id
        input_ids_B_T = torch.cat([input_ids_B_T, nxt_B[:, None]], dim=1)
    for row in input_ids_B_T[:, 5:].tolist():
        text = smollm2.decode(row, skip_special_tokens=True)
        assert decoder.check(text).valid, text


def test_mask_command_prints_sizes_and_exports(tmp_path, monkeypatch):
    from emojikit.ui.cli import cli

    monkeypatch.setenv("EMOJIKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "masks.npz"
    result = CliRunner().invoke(cli, ["mask", "--export", str(out), "--set", "max_emoji=2", "--set", "exclude_skin_tones=true"])
    assert result.exit_code == 0, result.output
    for label in ("vocabulary size", "usable tokens", "automaton states", "build time, first", "build time, cached"):
        assert label in result.output
    assert "49152" in result.output
    with np.load(out) as data:
        ptr, token, accepting = data["allowed_ptr"], data["token"], data["accepting"]
        assert not accepting[0] and accepting.any() and len(ptr) == len(accepting) + 1
        assert (token[ptr[0] : ptr[1]] != 2).all()  # EOS is not allowed at the start
    bad = CliRunner().invoke(cli, ["mask", "--set", "separator=,"])
    assert bad.exit_code == 2 and "separator" in bad.output


# --- with the real model (slow) ---------------------------------------------------------


@pytest.mark.slow
def test_smollm2_at_temperature_1_5_never_produces_invalid_answers(decoder):
    import torch

    from emojikit_emoji_mask.processor import EmojiLogitsProcessor

    from emojikit.support.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(SMOLLM2, device="cpu")  # a pad token included
    constraint = decoder.bind(tokenizer)
    tokenizer.padding_side = "left"
    prompts = ["I just got the job!", "My cat knocked over the plant again.", "Let's get pizza tonight.", "The exam was brutal."] * 4
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            **batch, do_sample=True, temperature=1.5, top_k=0, top_p=1.0, max_new_tokens=12,
            logits_processor=[EmojiLogitsProcessor(constraint, 12)], pad_token_id=tokenizer.pad_token_id, eos_token_id=constraint.eos_token_id,
        )
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert [t for t in texts if not decoder.check(t).valid] == []
