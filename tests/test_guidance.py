"""Teacher-guided GRPO episodes (emojikit/training/guidance.py): the teacher's answer opens an episode
in the sender's own tokens and logprobs, the sender plays the rest, and the group compares it
with the sender's own episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.ui.cli import cli
from emojikit.api.components import Message
from emojikit.play.game import GameSettings
from emojikit.play.teacher_sender import TeacherSender
from emojikit.training.grpo import GRPOSettings, play_groups
from emojikit.training.guidance import GuidedSender
from emojikit.api.policy import Sample, SamplingParams

from emojikit_retrieval.keywords import KeywordsJudge
from emojikit_retrieval.reward import SimilarityReward
from recipe_texts import GRPO_COMPONENTS

ROOT = Path(__file__).resolve().parents[1]


class ListTeacher:
    def __init__(self, answers):
        self.answers = answers

    def answer(self, messages):
        return [self.answers.get(m.text) for m in messages]


class CharPolicy:
    """Tokens are code points; the sender always answers 🎉🎉; an impossible token (🚫) scores -inf."""

    name = "chars"

    def __init__(self):
        self.sampled_prompts = []

    def encode_prompt(self, messages):
        return [ord(c) for m in messages for c in m["content"]] + [1]

    def encode_completion(self, text):
        return [ord(c) for c in text] + [2]

    def sample(self, prompts, n, params, decoder=None):
        self.sampled_prompts.extend(prompts)
        return [[Sample(self.encode_prompt(p), self.encode_completion("🎉🎉"), [-0.1] * 3, "🎉🎉")] * n for p in prompts]

    def compute_logprobs(self, datums, *, temperature=1.0, decoder=None, reference=False):
        return [[float("-inf") if t == ord("🚫") else -0.25 for t in d.target_tokens] for d in datums]


def test_guided_sender_answers_first_turns_with_the_teacher_and_later_turns_with_the_sender():
    game = GameSettings(max_turns=2)
    policy = CharPolicy()
    sender = GuidedSender(policy, TeacherSender(ListTeacher({"pizza tonight": "🍕🌙", "no entry": "🚫🚫"}), game))
    first = [[{"role": "user", "content": "pizza tonight"}], [{"role": "user", "content": "no entry"}]]
    later = [[{"role": "user", "content": "pizza tonight"}, {"role": "assistant", "content": "🍕🌙"}, {"role": "user", "content": "guess: x"}]]
    out = sender.sample(first + later, 1, SamplingParams(max_tokens=8, temperature=0.5))
    teacher, fallback, own = (samples[0] for samples in out)
    assert teacher.text == "🍕🌙" and teacher.tokens == [ord("🍕"), ord("🌙"), 2]
    assert teacher.prompt_tokens == policy.encode_prompt(first[0])
    assert teacher.logprobs == [-0.25, -0.25, -0.25]  # scored by the sender: the PPO ratio starts at 1
    assert fallback.text == own.text == "🎉🎉"  # the mask cannot produce 🚫: the sender plays it
    assert sender.fallbacks == 1
    assert policy.sampled_prompts == [first[1], later[0]]


def test_play_groups_puts_the_teacher_opened_episodes_last_in_each_group():
    game = GameSettings(max_turns=2)
    targets = [Message("Let's get pizza tonight"), Message("It is raining, take an umbrella")]
    teacher = TeacherSender(ListTeacher({"Let's get pizza tonight": "🍕🌙", "It is raining, take an umbrella": "🌧️☂️"}), game)
    guided = GuidedSender(CharPolicy(), teacher)
    judge = KeywordsJudge(["The dog ate my homework", "Coffee first, then we talk"])
    groups = play_groups(CharPolicy(), None, judge, SimilarityReward(), targets, game, SamplingParams(max_tokens=8), 3, guided, 1)
    assert [len(g.episodes) for g in groups] == [3, 3]
    for group, answer in zip(groups, ["🍕🌙", "🌧️☂️"]):
        assert [ep.turns[0].emoji for ep in group.episodes] == ["🎉🎉", "🎉🎉", answer]
        assert group.episodes[-1].success  # the keywords judge reads the teacher's answer
        assert all(ep.target == group.target.text for ep in group.episodes)


def test_teacher_episodes_must_leave_the_sender_episodes_in_each_group():
    with pytest.raises(ValueError, match="teacher_episodes .4. must be less than group_size .4."):
        GRPOSettings(group_size=4, teacher_episodes=4)


def test_teacher_episodes_without_a_teacher_table_is_a_one_line_error(tmp_path):
    recipe = (ROOT / "recipes/grpo.toml").read_text().replace("compare = true", "compare = true\nteacher_episodes = 1")
    (tmp_path / "g.toml").write_text(recipe.replace('"recipes/', f'"{ROOT}/recipes/'))
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "g.toml")])
    assert result.exit_code == 2
    assert "[grpo] teacher_episodes: needs a [teacher] table" in result.output and "Traceback" not in result.output


def test_a_guided_grpo_step_trains_on_the_teachers_answer_replayed_under_the_mask(tmp_path, tiny_model):
    components = (GRPO_COMPONENTS.replace('use = "local"', f"use = \"local\"\nmodel = {json.dumps(str(tiny_model))}")
                  .replace('use = "none"', 'use = "emoji-mask"').replace('use = "retrieval"', 'use = "retrieval"\ndistractors = 4'))
    recipe = f'''kind = "grpo"
name = "guided"
out = "{tmp_path / 'run'}"
{components}[teacher]
use = "lexicon"
[game]
max_turns = 2
[grpo]
start_from = "base"
steps = 1
batch_size = 2
group_size = 3
teacher_episodes = 1
eval_targets = 0
target_pool = 8
log_groups = 2
'''
    (tmp_path / "g.toml").write_text(recipe)
    result = CliRunner().invoke(cli, ["run", str(tmp_path / "g.toml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    row = json.loads((tmp_path / "run/metrics.jsonl").read_text().splitlines()[0])
    assert row["teacher_fallbacks"] == 0
    assert 0.0 <= row["guided_success_rate"] <= 1.0 and 0.0 <= row["own_success_rate"] <= 1.0
    assert row["ratio_max_deviation"] < 1e-3  # the teacher's tokens replay at the sender's own logprobs
    episodes = [json.loads(line) for line in (tmp_path / "run/episodes.jsonl").read_text().splitlines()]
    from emojikit.composition.assembly import build_component, context

    lexicon = build_component("teacher", "lexicon", None, context(seed=0, run_dir=tmp_path, recipe_path=tmp_path / "g.toml"), table="teacher")
    for group in (0, 1):
        members = [e for e in episodes if e["group"] == group]
        assert len(members) == 3
        assert members[-1]["turns"][0]["emoji"] == lexicon.answer([Message(members[-1]["target"])])[0]
