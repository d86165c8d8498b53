"""Per-emoji credit (emojikit/training/credit.py) and how GRPO carries it into the datums."""

from __future__ import annotations

import pytest

from emojikit.support.bundled import SMOLLM2, load_tokenizer
from emojikit.api.components import Episode, EpisodeTurn, JudgeView, Message
from emojikit.training.credit import EmojiCredit, emoji_credits, token_emoji_index
from emojikit.api.errors import ConfigError
from emojikit.training.grpo import GRPOSettings, Group, emoji_credit, group_datums, require_beliefs
from emojikit.api.policy import Sample

from emojikit_retrieval.retrieval import RetrievalJudge

TARGETS = ["Let's get pizza tonight", "It is raining, take an umbrella", "Happy birthday, grandma!", "I missed the bus again"]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(SMOLLM2)


@pytest.fixture(scope="module")
def judge():
    return RetrievalJudge(TARGETS + ["The dog ate my homework", "See you at the beach on Sunday"])


def turn(text, judge, target, tokenizer, earlier=()):
    """A played turn: the sender's tokens for text (plus end of turn), the judge's belief."""
    tokens = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    (belief,) = judge.target_logprobs([JudgeView([*earlier, text])], [target])
    sample = Sample(prompt_tokens=[1, 2, 3], tokens=tokens, logprobs=[-0.5] * len(tokens), text=text)
    return EpisodeTurn(text, True, similarity=0.5, target_logprob=belief, sample=sample)


def test_every_token_maps_to_the_emoji_it_spells(tokenizer):
    text = "🍕❄️👨‍🍳 🌙"
    tokens = tokenizer.encode(text, add_special_tokens=False)
    index = token_emoji_index(tokens + [tokenizer.eos_token_id], tokenizer)
    assert index[-1] is None  # end of turn spells no emoji
    spelled = {}
    for tok, i in zip(tokens, index):
        if i is not None:
            spelled.setdefault(i, []).append(tok)
    assert [tokenizer.decode(spelled[i]).strip() for i in sorted(spelled)] == ["🍕", "❄️", "👨‍🍳", "🌙"]
    space = [i for tok, i in zip(tokens, index) if tokenizer.decode([tok]).isspace()]
    assert space == [None] * len(space)


def test_an_emoji_that_points_at_the_target_earns_credit_and_one_that_points_away_loses_it(judge, tokenizer):
    target = "Let's get pizza tonight"
    ep = Episode(target, turns=[turn("🍕🚌", judge, target, tokenizer)])
    pizza, bus = emoji_credits([ep], judge, floor=-8.0)[0][0]
    assert pizza > 0 > bus  # without the pizza the judge believes less; without the bus, more
    (without_bus,) = judge.target_logprobs([JudgeView(["🍕"])], [target])
    assert bus == pytest.approx(ep.turns[0].target_logprob - without_bus)
    blind = Episode(target, turns=[EpisodeTurn("🍕🚌", True)])  # a judge without beliefs
    assert emoji_credits([blind], judge, floor=-8.0) == [[[0.0, 0.0]]]


def test_a_later_turn_is_credited_in_the_context_of_the_earlier_ones(judge, tokenizer):
    target = "It is raining, take an umbrella"
    first = turn("🍕🌙", judge, target, tokenizer)
    first.guess = "Let's get pizza tonight"
    second_text = "☔🌧️"
    (belief,) = judge.target_logprobs([JudgeView(["🍕🌙", second_text], [first.guess])], [target])
    second = turn(second_text, judge, target, tokenizer, earlier=["🍕🌙"])
    second.target_logprob = belief
    credits = emoji_credits([Episode(target, turns=[first, second])], judge, floor=-8.0)[0][1]
    (without_umbrella,) = judge.target_logprobs([JudgeView(["🍕🌙", "🌧️"], [first.guess])], [target])
    assert credits[0] == pytest.approx(belief - without_umbrella) and credits[0] > 0


def test_credit_reaches_the_datums_even_in_a_group_whose_rewards_are_equal(judge, tokenizer):
    target = "Let's get pizza tonight"
    episodes = [Episode(target, turns=[turn(t, judge, target, tokenizer)], reward={"total": 1.0}) for t in ("🍕🚌", "🍕🌙")]
    group = Group(Message(target), episodes)
    plain = GRPOSettings(normalize_std=False)
    assert group_datums([group], plain, 24) == ([], 1)  # equal rewards, no credit: nothing to teach

    credited = GRPOSettings(normalize_std=False, emoji_credit=2.0, emoji_credit_baseline="none")
    (datums,), skipped = group_datums([group], credited, 24, EmojiCredit(judge, tokenizer))
    assert skipped == 0 and len(datums) == 2
    sample = episodes[0].turns[0].sample
    first = len(sample.prompt_tokens) - 1
    advantages = datums[0].advantages[first:]
    index = token_emoji_index(sample.tokens, tokenizer)
    pizza, bus = emoji_credits([episodes[0]], judge, floor=-8.0)[0][0]
    for a, i in zip(advantages, index):
        assert a == pytest.approx({0: 2.0 * pizza, 1: 2.0 * bus, None: 0.0}[i])
    assert datums[0].advantages[:first] == [0.0] * first  # the prompt carries nothing


def test_the_group_baseline_centres_the_credit_of_the_emoji_a_group_sent(judge, tokenizer):
    target = "Let's get pizza tonight"
    episodes = [Episode(target, turns=[turn(t, judge, target, tokenizer)]) for t in ("🍕🚌", "🍕🌙")]
    raw = [c for per_ep in emoji_credits(episodes, judge, floor=-8.0) for per_turn in per_ep for c in per_turn]
    mean = sum(raw) / len(raw)
    credit = EmojiCredit(judge, tokenizer)
    centred, uncentred = credit.token_bonus(episodes, 1.0, "group"), credit.token_bonus(episodes, 1.0, "none")
    for ep, c_ep, u_ep in zip(episodes, centred, uncentred):
        index = token_emoji_index(ep.turns[0].sample.tokens, tokenizer)
        assert c_ep[0] == pytest.approx([0.0 if i is None else u - mean for u, i in zip(u_ep[0], index)])


def test_emoji_credit_and_a_belief_reward_need_a_judge_with_beliefs(judge, tokenizer):
    from types import SimpleNamespace

    from emojikit_retrieval.reward import SimilarityConfig, SimilarityReward

    names = {"judge": "echo", "reward": "similarity"}
    recipe = SimpleNamespace(path="r.toml", components={k: SimpleNamespace(spec=SimpleNamespace(name=v)) for k, v in names.items()})
    policy = SimpleNamespace(tokenizer=tokenizer)
    plain, listening = SimilarityReward(), SimilarityReward(SimilarityConfig(listener_weight=1.0))

    class Blind:
        def guess(self, views):
            return ["" for _ in views]

    require_beliefs(recipe, GRPOSettings(), Blind(), plain)  # neither asks for beliefs: nothing needed
    assert emoji_credit(GRPOSettings(), Blind(), policy) is None
    with pytest.raises(ConfigError, match=r"r.toml: \[grpo\] emoji_credit: the judge `echo` reports no belief"):
        require_beliefs(recipe, GRPOSettings(emoji_credit=1.0), Blind(), plain)
    with pytest.raises(ConfigError, match=r"r.toml: \[reward\] similarity: it reads the judge's belief .* `echo` reports none"):
        require_beliefs(recipe, GRPOSettings(), Blind(), listening)
    require_beliefs(recipe, GRPOSettings(emoji_credit=1.0), judge, listening)  # a retrieval judge reports beliefs
    assert emoji_credit(GRPOSettings(emoji_credit=1.0), judge, policy).judge is judge
