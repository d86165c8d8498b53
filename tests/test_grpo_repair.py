"""GRPO on cached repair states ([grpo] states = "repair", emojikit/training/grpo.py): the
advantage and datum phases on hand-made groups, the settings it refuses, the shipped recipe, and
a tiny run on the local backend that trains only turn-2 tokens, writes its states once and
reuses them on resume."""

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from emojikit.api.components import Episode, EpisodeTurn, Message
from emojikit.api.errors import ConfigError
from emojikit.api.policy import Sample
from emojikit.training.grpo import GRPOSettings, Group, draw_states, drop_failed, group_datums, repair_statistics
from cli_helpers import read_rows, run_cli

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes/grpo-repair.toml"
PROMPT = [1, 2, 3, 10, 11, 2, 4, 5]  # the turn-2 prompt: it holds turn 1 and the judge's guess


def repair_episode(answer_tokens: list[int], total: float, valid: bool = True, failed: bool = False) -> Episode:
    """A repair state's episode as sample_repairs makes it: turn 1 the cached miss (no sample),
    turn 2 the sampled answer."""
    turn1 = EpisodeTurn("🍕🎉", True, "pizza party", 0.3)
    turn2 = EpisodeTurn("🎂", valid, "birthday", 0.6, sample=Sample(PROMPT, answer_tokens, [-0.1] * len(answer_tokens), "🎂"))
    return Episode("a birthday cake", turns=[turn1, turn2], reward={} if failed else {"total": total}, failed=failed)


def hand_groups() -> list[Group]:
    target = Message("a birthday cake")
    return [
        Group(target, [repair_episode([12, 2], 1.0), repair_episode([13, 2], 0.0), repair_episode([14, 2], 0.5), repair_episode([15, 2], 0.5, valid=False)]),
        Group(target, [repair_episode([12, 2], 0.4), repair_episode([12, 2], 0.4)]),  # all alike: teaches nothing
        Group(target, [repair_episode([12, 2], 1.0), repair_episode([13, 2], 0.0, failed=True)]),  # the judge gave up on one
    ]


# --- the phases, by hand -----------------------------------------------------------------------


def test_repair_datums_are_turn_two_samples_with_group_relative_advantages():
    g = GRPOSettings(states="repair", group_size=4)
    kept = drop_failed(hand_groups())
    assert len(kept) == 2  # the group with an unjudged answer is dropped whole
    per_group, skipped = group_datums(kept, g, budget=6, max_turns=2)
    assert skipped == 1 and len(per_group) == 1
    (datums,) = per_group
    assert len(datums) == 4  # one datum per answer: turn 1 has no sample and never trains
    first = len(PROMPT) - 1
    for d, answer in zip(datums, ([12, 2], [13, 2], [14, 2], [15, 2])):
        assert d.model_input[: len(PROMPT)] == PROMPT and d.target_tokens[first:] == answer
        assert d.weights == [0.0] * first + [1.0, 1.0]  # only the answer's tokens carry loss
        assert d.advantages[:first] == [0.0] * first
    per_answer = [d.advantages[first] for d in datums]
    assert per_answer == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert sum(per_answer) == pytest.approx(0.0)

    normalised, _ = group_datums(kept, g.model_copy(update={"normalize_std": True}), budget=6)
    assert sum(d.advantages[first] for d in normalised[0]) == pytest.approx(0.0, abs=1e-6)
    assert normalised[0][0].advantages[first] == pytest.approx(0.5 / 0.35355, rel=1e-3)


def test_constant_normalization_divides_by_one_turn_for_repair_states():
    # 4 answers of 2 tokens: "constant" weighs each token N / (E x turns x budget) = 8 / (4 x 1 x 6).
    kept = drop_failed(hand_groups())
    repair, _ = group_datums(kept, GRPOSettings(states="repair", loss_normalization="constant"), budget=6, max_turns=2)
    assert all(w == pytest.approx(1 / 3) for d in repair[0] for w in d.weights if w)
    episodes, _ = group_datums(kept, GRPOSettings(loss_normalization="constant"), budget=6, max_turns=2)
    assert all(w == pytest.approx(1 / 6) for d in episodes[0] for w in d.weights if w)


def test_repair_statistics_are_about_the_turn_two_answers():
    groups = hand_groups()
    row = repair_statistics(groups, drop_failed(groups), play_seconds=2.0)
    assert row["format_violations"] == pytest.approx(1 / 6)  # one of the 6 kept answers, turn 1 not counted
    assert row["reward_mean"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.5 + 0.4 + 0.4) / 6)
    assert "mean_turns" not in row and "repair_rate" not in row and "first_turn_success" not in row
    assert row["sampled_tokens_per_s"] == pytest.approx(8 * 2 / 2.0)  # every sampled answer, the dropped group's too


def test_states_are_drawn_in_turn():
    states = list("abcdefg")
    first_epoch = [s for step in range(7) for s in draw_states(states, 1, step, seed=3)]
    assert sorted(first_epoch) == states
    assert draw_states(states, 3, 5, seed=3) == draw_states(states, 3, 5, seed=3)
    assert sorted(draw_states(states, 20, 0, seed=3)) == states  # never more than the pool


# --- settings and the shipped recipe --------------------------------------------------------------


@pytest.mark.parametrize("override, needle", [
    ("grpo.teacher_episodes=1", "teacher_episodes must be 0"),
    ("grpo.emoji_credit=0.5", "emoji_credit must be 0"),
    ('grpo.credit="turn"', 'credit must be "episode"'),
    ("grpo.group_size=1", "group_size"),
])
def test_refused_combinations_are_one_line(override, needle):
    from emojikit.composition.recipe import load_recipe

    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPE, [override])
    message = str(err.value)
    assert "grpo-repair.toml" in message and "[grpo]" in message and needle in message and "\n" not in message


def test_shipped_recipe_trains_repair_states_from_the_sft_recipe():
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.pipeline import plan

    g = load_recipe(RECIPE).settings["grpo"]
    assert g.states == "repair" and g.group_size >= 8 and g.start_from == "recipes/sft.toml"
    assert [stage.kind for stage in plan(RECIPE)][-2:] == ["sft", "grpo"]
    assert GRPOSettings().states == "episodes"  # the default is the game as before


# --- end to end on the local backend ----------------------------------------------------------------


def record_policy(monkeypatch) -> dict:
    """What the local policy sampled (prompt tokens -> the chat it was sampled on) and every
    RL batch it trained on."""
    from emojikit_local.policy import LocalPolicy

    seen: dict = {"prompts": {}, "batches": []}
    sample, forward_backward = LocalPolicy.sample, LocalPolicy.forward_backward

    def recording_sample(self, prompts, n, params, decoder=None):
        groups = sample(self, prompts, n, params, decoder)
        for messages, group in zip(prompts, groups):
            for s in group:
                seen["prompts"][tuple(s.prompt_tokens)] = messages
        return groups

    def recording_forward_backward(self, datums, loss, **kwargs):
        seen["batches"].append(list(datums))
        return forward_backward(self, datums, loss, **kwargs)

    monkeypatch.setattr(LocalPolicy, "sample", recording_sample)
    monkeypatch.setattr(LocalPolicy, "forward_backward", recording_forward_backward)
    return seen


def test_repair_grpo_end_to_end_trains_turn_two_only_and_reuses_its_states(tmp_path, tiny_model, monkeypatch):
    texts = [f"message number {i} about pizza and rain" for i in range(20)]
    (tmp_path / "source.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:6]), encoding="utf-8")
    out = tmp_path / "grpo-repair"
    # kl_coef = 0: the trained advantages are the group-relative ones, as sampled.
    common = ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", 'grpo.start_from="base"', "--set", "grpo.batch_size=2",
              "--set", "grpo.group_size=3", "--set", "grpo.kl_coef=0", "--set", "grpo.eval_targets=2", "--set", "grpo.save_every=1",
              "--set", "grpo.target_pool=8", "--set", "grpo.target_max_words=20", "--set", "game.max_new_tokens=6", "--set", "judge.distractors=8",
              "--set", f"prompts={{use = \"jsonl\", path = {json.dumps(str(tmp_path / 'source.jsonl'))}}}",
              "--set", f"grpo.heldout_file={json.dumps(str(tmp_path / 'heldout.jsonl'))}", "--set", f"out={json.dumps(str(out))}"]
    seen = record_policy(monkeypatch)
    output = run_cli("run", str(RECIPE), "--set", "grpo.steps=2", *common)
    assert "repair rate" in output and "before" in output and "after" in output

    states = read_rows(out / "train_states.jsonl")
    assert states[0]["repair_states"] == 1 and states[0]["targets"] == "training" and len(states) > 1
    assert not {s["target"] for s in states[1:]} & set(texts[:6])  # no held-out target makes a state
    metrics = read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2]
    for row in metrics:
        for key in ("reward_mean", "success_rate", "format_violations", "repeat_reward_mean", "datums", "step_seconds", "play_seconds"):
            assert key in row, key
        assert row["datums"] <= 2 * 3 and "mean_turns" not in row
    assert any(r["datums"] for r in metrics)
    for row in (r for r in metrics if r["datums"]):
        assert "kl" in row and math.isfinite(row["loss"]) and abs(row["ratio_max_deviation"]) < 1e-3  # the PPO ratio starts at 1
    assert [r["step"] for r in read_rows(out / "eval.jsonl")] == [0, 2]
    assert {"first_turn_success", "repair_rate"} <= set(read_rows(out / "eval.jsonl")[-1])
    episodes = read_rows(out / "episodes.jsonl")
    turn_ones = {(s["target"], s["turn1"]) for s in states[1:]}
    assert episodes and all(len(e["turns"]) == 2 and (e["target"], e["turns"][0]["emoji"]) in turn_ones for e in episodes)

    # Every trained datum is a turn-2 answer sampled on a state's turn-2 prompt; the prompt carries no loss.
    turn1_of = {s["target"]: s["turn1"] for s in states[1:]}
    assert seen["batches"]
    for batch in seen["batches"]:
        by_state = defaultdict(list)
        for d in batch:
            first = next(i for i, w in enumerate(d.weights) if w)
            assert all(d.weights[first:]) and not any(d.weights[:first])
            chat = seen["prompts"][tuple(d.model_input[: first + 1])]
            assert [m["role"] for m in chat if m["role"] != "system"] == ["user", "assistant", "user"]
            assert chat[-2]["content"] in turn1_of.values()
            by_state[tuple(d.model_input[: first + 1])].append(d.advantages[first])
        for advantages in by_state.values():
            assert len(advantages) % 3 == 0 and sum(advantages) == pytest.approx(0.0, abs=1e-5)  # a state drawn twice: two groups

    states_text = (out / "train_states.jsonl").read_text()
    run_cli("run", str(RECIPE), "--set", "grpo.steps=3", "--resume", *common)
    assert (out / "train_states.jsonl").read_text() == states_text  # made once, by the start
    assert [r["step"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3]
    assert [r["step"] for r in read_rows(out / "eval.jsonl")] == [0, 2, 3]
    assert (out / "checkpoints/step_3/adapter_config.json").exists()
