"""The multi-turn game, the offline judges and the similarity reward.

The sender is a scripted Policy (the game's boundary) except in one real run with the
bundled model; judges and reward are the real components over the real MiniLM.
"""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from emojikit.api.components import Episode, EpisodeTurn, JudgeView, Message
from emojikit.api.errors import ConfigError, InputFileError
from emojikit.play.game import GameSettings, episode_to_json, judge_view, play, sender_prompt
from emojikit.api.policy import Sample, SamplingParams

from emojikit_retrieval.retrieval import RetrievalConfig, RetrievalJudge, read_pool_file
from emojikit_retrieval.reward import SimilarityConfig, SimilarityReward, repeated_share

MESSAGES = {
    "Let's get pizza tonight": "🍕🌙",
    "It is raining, take an umbrella": "🌧️☂️",
    "Happy birthday, grandma!": "🎂👵",
    "I missed the bus again": "🚌😩",
    "The cat is sleeping on my keyboard": "🐈😴⌨️",
    "Good luck on your exam tomorrow": "🍀📝",
}
DISTRACTORS = [
    "The dog ate my homework",
    "See you at the beach on Sunday",
    "Coffee first, then we talk",
    "My phone battery died",
    "Let's go hiking this weekend",
    "I love this song",
]


class ScriptedPolicy:
    """A Policy at the game's boundary: answers each prompt with a script, records every call."""

    name = "scripted"

    def __init__(self, answer=None):
        self.calls: list[list[list[dict]]] = []
        self.answer = answer or self.emoji_for

    @staticmethod
    def emoji_for(prompt: list[dict]) -> str:
        first_user = next(m["content"] for m in prompt if m["role"] == "user")
        target = first_user.split("\n")[0].removeprefix("Message: ")
        return MESSAGES.get(target, "❓❓")

    def sample(self, prompts, n, params, decoder=None):
        assert n == 1
        self.calls.append([list(p) for p in prompts])
        out = []
        for p in prompts:
            text = self.answer(p)
            tokens = list(text.encode("utf-8"))[: params.max_tokens]
            out.append([Sample(prompt_tokens=[1, 2, 3], tokens=tokens, logprobs=[-0.5] * len(tokens), text=text)])
        return out


class CountingJudge:
    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def add_candidates(self, texts):
        self.inner.add_candidates(texts)

    def guess(self, views):
        self.calls.append(len(views))
        return self.inner.guess(views)


class CountingReward:
    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.success_threshold = inner.success_threshold

    def similarity(self, targets, guesses):
        self.calls.append(len(targets))
        return self.inner.similarity(targets, guesses)

    def score(self, episodes):
        return self.inner.score(episodes)


@pytest.fixture(scope="module")
def reward():
    return SimilarityReward(SimilarityConfig())


@pytest.fixture()
def retrieval_judge():
    return RetrievalJudge(DISTRACTORS)


def targets(n=None):
    return [Message(t, "test") for t in list(MESSAGES)[:n]]


# --- settings and prompts -----------------------------------------------------------------


def test_templates_are_validated():
    assert GameSettings(follow_up="Guess: {guess}. Target: {target}. Turn {turn}, {turns_left} left.")
    with pytest.raises(ValidationError, match="missing placeholder.*guess"):
        GameSettings(follow_up="The message is still {target}")
    with pytest.raises(ValidationError, match=r"unknown placeholder.*\{tgt\}"):
        GameSettings(first_turn="Message: {tgt}")
    with pytest.raises(ValidationError, match="not a valid template"):
        GameSettings(first_turn="Message: {target")
    with pytest.raises(ValidationError, match="extra"):
        GameSettings(max_turn=3)


def test_follow_up_prompt_has_the_guess_the_target_and_earlier_emoji(retrieval_judge, reward):
    policy = ScriptedPolicy(answer=lambda p: "🤷🤷")  # unreadable: never retrieved right
    play(policy, None, retrieval_judge, reward, targets(2), settings=GameSettings(max_turns=2))
    first, second = policy.calls
    assert [m["role"] for m in first[0]] == ["system", "user"]
    assert "Let's get pizza tonight" in first[0][1]["content"]
    roles = [m["role"] for m in second[0]]
    assert roles == ["system", "user", "assistant", "user"]
    assert second[0][2]["content"] == "🤷🤷"
    follow = second[0][3]["content"]
    assert "Let's get pizza tonight" in follow
    # The guess the judge made on turn 1 is quoted to the sender.
    assert any(f'"{g}"' in follow for g in DISTRACTORS + list(MESSAGES))


def test_sender_prompt_without_system_prompt():
    settings = GameSettings(system_prompt="")
    turns = [EpisodeTurn("🍕", True, guess="pizza party")]
    prompt = sender_prompt(settings, "pizza tonight", turns)
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert "pizza party" in prompt[2]["content"] and "pizza tonight" in prompt[2]["content"]


# --- termination and batching ---------------------------------------------------------------


def test_success_ends_an_episode_early_and_max_turns_caps_the_rest(reward):
    win_on = {"Let's get pizza tonight": 1, "It is raining, take an umbrella": 2}

    class Judge:
        def guess(self, views):
            out = []
            for v in views:
                target = self.target_of[v.emoji_turns[0]]
                turn = len(v.emoji_turns)
                out.append(target if win_on.get(target) == turn else f"wrong guess {turn}")
            return out

    judge = Judge()
    judge.target_of = {e: t for t, e in MESSAGES.items()}
    episodes = play(ScriptedPolicy(), None, judge, reward, targets(3), settings=GameSettings(max_turns=4))
    by_target = {ep.target: ep for ep in episodes}
    assert len(by_target["Let's get pizza tonight"].turns) == 1 and by_target["Let's get pizza tonight"].success
    assert len(by_target["It is raining, take an umbrella"].turns) == 2 and by_target["It is raining, take an umbrella"].success
    capped = by_target["Happy birthday, grandma!"]
    assert len(capped.turns) == 4 and not capped.success
    assert all(t.similarity < reward.success_threshold for t in capped.turns)
    assert by_target["Let's get pizza tonight"].turns[0].similarity == 1.0
    assert {ep.reward["turns"] for ep in episodes} == {1.0, 2.0, 4.0}


def test_one_sample_judge_and_similarity_call_per_turn(reward):
    from emojikit.play.embedding import get_minilm

    inner = RetrievalJudge(DISTRACTORS)
    judge, counted = CountingJudge(inner), CountingReward(reward)
    # Half the targets get readable emoji and are found on turn 1; the rest keep missing.
    readable = set(list(MESSAGES)[:3])
    policy = ScriptedPolicy(answer=lambda p: ScriptedPolicy.emoji_for(p) if p[1]["content"].split("\n")[0].removeprefix("Message: ") in readable else "🤷🤷")
    inner.add_candidates(list(MESSAGES))
    inner.guess([JudgeView(["🍕"])])  # embed the pool before counting encode batches
    encodes_before = get_minilm().calls

    episodes = play(policy, None, judge, counted, targets(), settings=GameSettings(max_turns=3), group_size=2)

    assert len(episodes) == 12
    assert [ep.target for ep in episodes[:4]] == [list(MESSAGES)[0]] * 2 + [list(MESSAGES)[1]] * 2
    live_per_turn = [len(c) for c in policy.calls]
    assert len(policy.calls) == 3 and live_per_turn[0] == 12
    assert judge.calls == live_per_turn and counted.calls == live_per_turn
    assert live_per_turn[1] == live_per_turn[2] == 12 - sum(ep.success and len(ep.turns) == 1 for ep in episodes)
    assert sum(ep.success for ep in episodes) >= 4
    # At most two encode batches per turn: the judge's query texts and the similarity pairs.
    assert get_minilm().calls - encodes_before <= 2 * 3
    assert all(t.sample is not None and t.sample.tokens for ep in episodes for t in ep.turns)


def test_minilm_by_rows_embeds_each_text_as_the_split_products_do():
    """Each worker thread embeds its own batches; every text's row must still be its own text's
    embedding (the batches are cut by length, out of the callers' order)."""
    import numpy as np
    import torch

    from emojikit.play.embedding import ROW_BATCH, MiniLM

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        by_rows, by_ops = MiniLM(parallel="rows"), MiniLM(parallel="ops")
    finally:
        torch.set_num_threads(threads)
    assert by_rows.row_workers is not None and by_rows.row_workers.threads == 2 and by_ops.row_workers is None
    # Lengths from one word to a long sentence, in no order: several batches per worker.
    texts = [" ".join(list(MESSAGES)[i % len(MESSAGES)].split()[: 1 + i % 7]) + f" {i}" for i in range(5 * ROW_BATCH + 3)]
    rows_emb, ops_emb = by_rows.encode(texts, cache=False), by_ops.encode(texts, cache=False)
    assert rows_emb.shape == ops_emb.shape == (len(texts), by_rows.dim)
    assert np.abs(rows_emb - ops_emb).max() < 1e-5
    assert np.allclose(np.linalg.norm(rows_emb, axis=1), 1.0, atol=1e-5)
    # A call within one batch takes the plain path; both paths fill the same cache.
    assert np.abs(by_rows.encode(texts[:3]) - ops_emb[:3]).max() < 1e-5
    assert np.abs(by_rows.encode(texts[:3] + texts[-40:]) - np.vstack([ops_emb[:3], ops_emb[-40:]])).max() < 1e-5


def test_a_batch_that_fills_the_cache_keeps_the_rows_it_already_had(monkeypatch):
    """A batch of cached and new texts that overflows the cache: the cache is cleared for the new
    ones, and the batch's cached rows still come back (they were read before the clear)."""
    import numpy as np

    from emojikit.play import embedding

    model = embedding.get_minilm()
    monkeypatch.setattr(model, "_cache", {})
    monkeypatch.setattr(embedding, "CACHE_LIMIT", 3)
    first = model.encode(["a cat", "a dog"])
    both = model.encode(["a cat", "a dog", "the sea", "a song"])  # 2 cached + 2 new > 3: cleared, then the new kept
    assert np.allclose(both[:2], first, atol=1e-6) and both.shape == (4, model.dim)
    assert set(model._cache) == {"the sea", "a song"}


def test_play_passes_the_decoder_and_max_new_tokens_and_checks_format(reward, retrieval_judge):
    class Decoder:
        min_emoji, max_emoji = 2, 8

        def check(self, text):
            from emojikit.api.components import FormatCheck
            from emojikit.api.emojis import is_emoji_only

            return FormatCheck(is_emoji_only(text, 2, 8), 0)

    seen = {}

    class Policy(ScriptedPolicy):
        def sample(self, prompts, n, params, decoder=None):
            seen["params"], seen["decoder"] = params, decoder
            return super().sample(prompts, n, params, decoder)

    decoder = Decoder()
    policy = Policy(answer=lambda p: "pizza 🍕")
    episodes = play(policy, decoder, retrieval_judge, reward, targets(1), settings=GameSettings(max_turns=1, max_new_tokens=7), sampling=SamplingParams(temperature=0.7, seed=3))
    assert seen["decoder"] is decoder and seen["params"].max_tokens == 7 and seen["params"].temperature == 0.7
    assert episodes[0].turns[0].valid is False and episodes[0].reward["format_penalty"] == 0.5
    # The judge never sees the words of an invalid turn.
    assert judge_view(episodes[0]).emoji_turns == ["🍕"]


def test_episode_to_json_leaves_the_samples_out(reward, retrieval_judge):
    episodes = play(ScriptedPolicy(), None, retrieval_judge, reward, targets(2), settings=GameSettings(max_turns=2))
    row = episode_to_json(episodes[0])
    text = json.dumps(row, ensure_ascii=False)
    assert "logprobs" not in text and "prompt_tokens" not in text
    assert row["target"] == "Let's get pizza tonight" and row["turns"][0]["emoji"] == "🍕🌙"
    assert row["reward"]["total"] == pytest.approx(episodes[0].reward["total"], abs=1e-4)


# --- the retrieval judge --------------------------------------------------------------------


def test_retrieval_reads_emoji_names_and_never_repeats_a_guess():
    judge = RetrievalJudge(DISTRACTORS + list(MESSAGES))
    assert judge.guess([JudgeView(["🍕🌙"])]) == ["Let's get pizza tonight"]
    # The same emoji every turn: each turn must bring a new guess until the pool runs out.
    view = JudgeView([])
    pool = len(judge.candidates)
    for _ in range(pool):
        view.emoji_turns.append("🍕🌙")
        (g,) = judge.guess([view])
        assert g and g not in view.guesses
        view.guesses.append(g)
    assert sorted(view.guesses) == sorted(judge.candidates)
    view.emoji_turns.append("🍕🌙")
    assert judge.guess([view]) == [""]  # exhausted: no repeat
    assert judge.guess([JudgeView(["no emoji here"])]) == [""]


def test_retrieval_weighs_later_turns_more():
    judge = RetrievalJudge(list(MESSAGES), later_turn_weight=3.0)
    assert judge.guess([JudgeView(["🎂👵", "🍕🌙"])]) == ["Let's get pizza tonight"]
    flat = RetrievalJudge(list(MESSAGES), later_turn_weight=1 / 3)
    assert flat.guess([JudgeView(["🎂👵", "🍕🌙"])]) == ["Happy birthday, grandma!"]


def test_retrieval_pool_file_and_its_errors(tmp_path):
    from emojikit.api.components import BuildContext
    from emojikit_retrieval.retrieval import build

    good = tmp_path / "pool.jsonl"
    good.write_text('{"text": "one"}\n\n{"text": "two", "category": "x"}\n{"text": "three"}\n')
    assert read_pool_file(good) == ["one", "two", "three"]
    judge = build(RetrievalConfig(pool_file=good, distractors=2), BuildContext(seed=1))
    assert len(judge.candidates) == 2 and set(judge.candidates) <= {"one", "two", "three"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "one"}\n\n{"message": "two"}\n')
    with pytest.raises(InputFileError, match=r"bad.jsonl:3: .*text"):
        read_pool_file(bad)
    with pytest.raises(ValidationError, match="file not found"):
        RetrievalConfig(pool_file=tmp_path / "missing.jsonl")


def test_retrieval_without_a_distractor_source_fails_in_preflight():
    from emojikit.api.components import BuildContext
    from emojikit.composition.registry import Registry
    from emojikit_retrieval import retrieval

    # The context carries the registry: one without the text plugin has no `generated` source.
    empty = BuildContext(registry=Registry(load_entrypoints=False))
    with pytest.raises(ConfigError, match=r"judge.distractor_source\] use: no prompt_source named 'generated'.*set pool_file"):
        retrieval.preflight(RetrievalConfig(), empty)
    retrieval.preflight(RetrievalConfig(distractors=0), empty)
    retrieval.preflight(RetrievalConfig(), BuildContext())  # the default registry has it
    with pytest.raises(ConfigError, match="no prompt_source named 'nope'; installed: .*chitchat"):
        retrieval.preflight(RetrievalConfig(distractor_source={"use": "nope"}), BuildContext())
    with pytest.raises(ValidationError, match="needs `use"):
        RetrievalConfig(distractor_source={"split": "heldout"})
    # The source's own settings are checked before anything loads, under the judge's table name.
    with pytest.raises(ConfigError, match=r"judge.distractor_source.*split"):
        retrieval.preflight(RetrievalConfig(distractor_source={"use": "chitchat", "split": "tset"}), BuildContext())


def test_distractors_from_another_prompt_source_with_its_settings():
    """Messages people wrote as distractors: the chitchat source's held-out conversations, none of
    which its training split (the RL targets' source) holds."""
    from emojikit.api.components import BuildContext
    from emojikit_retrieval.retrieval import draw_distractors
    from emojikit_text.chitchat import ChitchatConfig, ChitchatSource, passing

    cfg = RetrievalConfig(distractors=40, distractor_source={"use": "chitchat", "split": "heldout", "near_duplicate": None})
    drawn = draw_distractors(cfg, BuildContext(seed=3))
    assert len(drawn) == 40 and len(set(drawn)) == 40
    assert drawn == draw_distractors(cfg, BuildContext(seed=3))  # seeded
    assert drawn != draw_distractors(cfg, BuildContext(seed=4))
    heldout = {m.text for m in ChitchatSource(ChitchatConfig(split="heldout", near_duplicate=None)).messages()}
    train = {text for _, text in passing("train", ChitchatConfig().heldout_percent)}
    assert set(drawn) <= heldout and not set(drawn) & train
    generated = draw_distractors(RetrievalConfig(distractors=40), BuildContext(seed=3))
    assert not set(generated) & set(drawn)


# --- the reward -----------------------------------------------------------------------------


def test_repeated_share_ignores_modifiers():
    assert repeated_share("🍕🍕🍕🎉") == 0.5
    assert repeated_share("👍👍🏽") == 0.5  # skin tone
    assert repeated_share("❤️❤") == 0.5  # variation selector
    assert repeated_share("🍕🎉") == 0.0 and repeated_share("") == 0.0


def test_reward_breakdown_matches_hand_computed_values():
    cfg = SimilarityConfig(success_threshold=0.8, success_bonus=1.0, success_decay=0.5, turn_penalty=0.1, format_penalty=0.25, repetition_penalty=0.4)
    r = SimilarityReward(cfg)
    won = Episode("t", turns=[EpisodeTurn("🍕🍕", True, similarity=0.3), EpisodeTurn("🍕🎉", False, similarity=0.9)])
    lost = Episode("t", turns=[EpisodeTurn("🍕🎉", True, similarity=0.2)] * 3)
    first = Episode("t", turns=[EpisodeTurn("👍👍🏽🎉🎉", True, similarity=1.0)])
    a, b, c = r.score([won, lost, first])
    # won on turn 2: bonus 1.0*0.5; 2 turns; 1 invalid; repetition mean(0.5, 0) = 0.25
    assert a == pytest.approx({"similarity": 0.9, "listener": 0.0, "success": 1.0, "turns": 2.0, "success_bonus": 0.5, "turn_penalty": 0.2, "format_penalty": 0.25, "repetition_penalty": 0.1, "total": 0.9 + 0.5 - 0.2 - 0.25 - 0.1})
    assert b == pytest.approx({"similarity": 0.2, "listener": 0.0, "success": 0.0, "turns": 3.0, "success_bonus": 0.0, "turn_penalty": 0.3, "format_penalty": 0.0, "repetition_penalty": 0.0, "total": 0.2 - 0.3})
    # first-turn success, 2 of 4 emoji repeated
    assert c["success_bonus"] == 1.0 and c["repetition_penalty"] == pytest.approx(0.2)
    assert c["total"] == pytest.approx(1.0 + 1.0 - 0.1 - 0.2)


def test_listener_term_is_the_judges_floored_log_belief():
    r = SimilarityReward(SimilarityConfig(listener_weight=2.0, listener_floor=-8.0))
    sure = Episode("t", turns=[EpisodeTurn("🍕🎉", True, similarity=1.0, target_logprob=0.0)])
    near = Episode("t", turns=[EpisodeTurn("🍕🎉", True, similarity=0.2, target_logprob=-9.0), EpisodeTurn("🍕🎉", True, similarity=0.3, target_logprob=-2.0)])
    lost = Episode("t", turns=[EpisodeTurn("🍕🎉", True, similarity=0.2, target_logprob=-30.0)])
    blind = Episode("t", turns=[EpisodeTurn("🍕🎉", True, similarity=0.2)])  # a judge without beliefs
    a, b, c, d = r.score([sure, near, lost, blind])
    assert a["listener"] == 1.0 and b["listener"] == pytest.approx(0.75)  # the last turn's belief: 1 - 2/8
    assert c["listener"] == 0.0 and d["listener"] == 0.0
    assert b["total"] == pytest.approx(0.3 + 2.0 * 0.75 - 0.1)
    assert SimilarityReward(SimilarityConfig()).score([near])[0]["total"] == pytest.approx(0.3 - 0.1)  # weight 0: left out


def test_retrieval_belief_is_a_softmax_over_the_pool_without_earlier_guesses():
    judge = RetrievalJudge(DISTRACTORS + list(MESSAGES), belief_temperature=0.05)
    pizza, view = "Let's get pizza tonight", JudgeView(["🍕🌙"])
    beliefs = judge.target_logprobs([view] * len(judge.candidates), judge.candidates)
    assert sum(math.exp(b) for b in beliefs) == pytest.approx(1.0, abs=1e-5)
    assert max(beliefs) == beliefs[judge.candidates.index(pizza)]  # the guess is the likeliest
    (sharper,) = RetrievalJudge(DISTRACTORS + list(MESSAGES), belief_temperature=0.01).target_logprobs([view], [pizza])
    assert beliefs[judge.candidates.index(pizza)] < sharper <= 0
    # an excluded earlier guess and a text outside the pool: no belief; nothing to read: uniform
    other = DISTRACTORS[0]
    assert judge.target_logprobs([JudgeView(["🍕🌙"], [pizza]), view], [pizza, "not in the pool"]) == [None, None]
    after = judge.target_logprobs([JudgeView(["🍕🌙"], [pizza])], [other])[0]
    assert after > beliefs[judge.candidates.index(other)]  # the excluded guess's mass moved to the rest
    assert judge.target_logprobs([JudgeView(["words"])], [other])[0] == pytest.approx(-math.log(len(judge.candidates)))


def test_the_game_records_the_judges_belief_before_its_guess_is_excluded(reward):
    episodes = play(ScriptedPolicy(lambda p: "🍕🌙"), None, RetrievalJudge(DISTRACTORS), reward, targets(2), settings=GameSettings(max_turns=2))
    won, lost = episodes  # pizza wins turn 1; the rain message misses it with the same emoji
    assert won.success and len(won.turns) == 1 and won.turns[0].target_logprob > math.log(0.5)
    assert len(lost.turns) == 2
    first, second = (t.target_logprob for t in lost.turns)
    assert first < 0 and second > first  # the first guess left the pool: the rest gained belief
    assert "target_logprob" in episode_to_json(lost)["turns"][0]
    blind = play(ScriptedPolicy(), None, CountingJudge(RetrievalJudge(DISTRACTORS)), reward, targets(2), settings=GameSettings(max_turns=1))
    assert [t.target_logprob for ep in blind for t in ep.turns] == [None, None]  # a judge without TargetBelief


def test_similarity_is_batched_and_bounded(reward):
    sims = reward.similarity(["Let's get pizza tonight", "Let's get pizza tonight", "Happy birthday, grandma!"], ["Let's get pizza tonight", "", "We should order pizza this evening"])
    assert sims[0] == 1.0 and sims[1] == 0.0 and -1.0 <= sims[2] < 0.8
    assert not math.isnan(sims[2])


# --- real models ----------------------------------------------------------------------------


@pytest.fixture()
def one_thread():
    # Two cores shared by several processes: torch's thread pool thrashes, one thread is ~10x faster.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_local_lm_judge_gives_short_one_line_guesses(one_thread):
    from emojikit_retrieval.local_lm import LocalLMConfig, build

    judge = build(LocalLMConfig(max_new_tokens=16, max_words=12), None)
    guesses = judge.guess([JudgeView(["🍕🌙"]), JudgeView(["🌧️☂️", "🏠"], ["It is sunny"]), JudgeView(["words only"])])
    assert len(guesses) == 3 and guesses[2] == ""
    for g in guesses[:2]:
        assert g and "\n" not in g and len(g.split()) <= 12


def test_a_real_game_with_the_bundled_sender(one_thread, reward):
    from emojikit.api.components import BuildContext
    from emojikit.composition.registry import get_registry

    registry = get_registry()
    backend = registry.get("backend", "local")
    mask = registry.get("decoder", "emoji-mask")
    policy = backend.factory(backend.config(), BuildContext(seed=0))
    decoder = mask.factory(mask.config(), BuildContext(seed=0))
    judge = RetrievalJudge(DISTRACTORS)
    episodes = play(policy, decoder, judge, reward, targets(2), settings=GameSettings(max_turns=2, max_new_tokens=12), sampling=SamplingParams(temperature=1.0, seed=0))
    assert len(episodes) == 2
    for ep in episodes:
        assert 1 <= len(ep.turns) <= 2 and "total" in ep.reward
        for t in ep.turns:
            assert t.valid, t.emoji  # the mask guarantees the format
            assert t.guess in judge.candidates
            assert len(t.sample.logprobs) == len(t.sample.tokens) > 0
