"""The turns apart in evaluation: first-turn success and the repair rate in eval's JSON and
markdown, the repair benchmark (states made once, turn 2 only, baselines, paired statistics),
the lexicon repair teacher and the retrieval judge's repeat_guesses setting."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from emojikit.api.components import Episode, EpisodeTurn, JudgeView
from emojikit.evaluation.metrics import summarize
from emojikit.evaluation.repair import mcnemar_exact, paired_comparison, read_states
from emojikit.ui.cli import cli

TEXTS = ["Let's get pizza tonight", "It is raining, take an umbrella", "Happy birthday, grandma!", "I missed the bus again",
         "The cat is sleeping on my keyboard", "My flight got cancelled", "We won the football match", "I burned the toast",
         "The baby finally fell asleep", "Coffee first, then emails"]


def played(sims: list[float], threshold: float = 0.85, failed: bool = False) -> Episode:
    return Episode(target="t", turns=[EpisodeTurn(emoji="🍕🎉", valid=True, similarity=s) for s in sims], success=sims[-1] >= threshold, failed=failed)


def test_summarize_reports_first_turn_success_and_the_repair_rate_with_both_counts():
    episodes = [played([1.0]), played([0.9]), played([0.3, 0.9]), played([0.2, 0.4]), played([0.1, 0.95]), played([0.5], failed=True)]
    m = summarize(episodes)
    assert m["first_turn_success"] == pytest.approx(2 / 6)
    assert (m["repair_wins"], m["first_turn_misses"]) == (2, 3)  # the episode the judge gave up on is no miss
    assert m["repair_rate"] == pytest.approx(2 / 3)
    assert m["success_rate"] == pytest.approx(4 / 6)
    assert m["first_turn_similarity"] == pytest.approx((1.0 + 0.9 + 0.3 + 0.2 + 0.1 + 0.5) / 6)


def test_mcnemar_exact_and_the_paired_interval():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # two-sided: 2 x (1/2)^5
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(12, 2) == pytest.approx(2 * sum(__import__("math").comb(14, k) for k in range(3)) / 2**14)
    a = [True] * 30 + [False] * 70
    b = [True] * 10 + [False] * 90
    row = paired_comparison(a, b)
    assert (row["a_only"], row["b_only"]) == (20, 0) and row["difference"] == pytest.approx(0.2)
    assert row["ci95"][0] > 0 and row["ci95"][0] <= 0.2 <= row["ci95"][1] and row["mcnemar_p"] < 1e-5
    same = paired_comparison(a, a)
    assert same["ci95"] == [0.0, 0.0] and same["mcnemar_p"] == 1.0


def test_retrieval_judge_repeat_guesses_setting_lets_it_guess_a_wrong_message_again():
    from emojikit_retrieval.retrieval import RetrievalConfig, RetrievalJudge

    assert RetrievalConfig().repeat_guesses is False  # today's rule stays the default
    pool = ["pizza party tonight", "rainy day umbrella", "birthday cake"]
    view = JudgeView(emoji_turns=["🍕🎉", "🍕🎉"], guesses=["pizza party tonight"])
    assert RetrievalJudge(pool).guess([view]) != ["pizza party tonight"]
    assert RetrievalJudge(pool, repeat_guesses=True).guess([view]) == ["pizza party tonight"]


def test_lexicon_repair_teacher_covers_the_words_the_wrong_guess_missed():
    from emojikit.api import emojis
    from emojikit_text.lexicon import LexiconConfig
    from emojikit_text.repair import LexiconRepairTeacher, missed_phrases

    assert missed_phrases("my cat knocked the coffee off the table", "a dog knocked over the vase") == ["cat", "coffee", "table"]
    assert missed_phrases("pizza tonight", "pizza tonight") == ["pizza"]  # nothing missed: every phrase
    teacher = LexiconRepairTeacher(LexiconConfig())
    [answer] = teacher.repair(["my cat knocked the coffee off the table"], ["a dog knocked over the vase"], ["🐈☕"])
    sent = emojis.split(answer)
    assert 2 <= len(sent) <= 8 and "☕" not in sent and "🐈" not in sent
    assert any("table" in emojis.name(e) or "chair" in emojis.name(e) or "cat" in emojis.name(e) for e in sent)


def model_settings(tiny_model) -> list[str]:
    return ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "game.max_new_tokens=8", "--set", "judge.distractors=32"]


def make_states(tmp_path, tiny_model):
    targets = tmp_path / "targets.jsonl"
    targets.write_text("".join(json.dumps({"text": t, "category": "c"}) + "\n" for t in TEXTS))
    states = tmp_path / "states.jsonl"
    # An untrained model's emoji (under the mask) miss most first turns: those are the states.
    result = CliRunner().invoke(cli, ["repair-states", "--checkpoint", "base", "--targets", str(targets), "--judge", "keywords",
                                      "--out", str(states), *model_settings(tiny_model)])
    return result, states


def test_repair_states_are_made_once_and_eval_plays_turn_2_only_with_the_baselines(tmp_path, tiny_model):
    result, states = make_states(tmp_path, tiny_model)
    assert result.exit_code == 0, result.output
    header, rows = read_states(states)
    assert header["judge"] == "keywords" and header["sender"] == "base" and header["played"] == len(TEXTS)
    assert header["states"] == len(rows) == len(TEXTS) - header["first_turn_wins"] and rows
    assert sorted(header["pool"]) == sorted(TEXTS)
    assert all(r.guess != r.target for r in rows)  # every state is a miss, with the judge's wrong guess
    again, _ = make_states(tmp_path, tiny_model)
    assert again.exit_code == 2 and "already exists" in again.output  # made once: never written over
    assert read_states(states) == (header, rows)

    out = tmp_path / "repair"
    result = CliRunner().invoke(cli, ["eval", "--repair-states", str(states), "--checkpoint", "base", "--checkpoint", "teacher:lexicon",
                                      "--judge", "keywords", "--out", str(out), *model_settings(tiny_model)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "repair.json").read_text())
    assert list(report["senders"]) == ["own", "repeat", "teacher:lexicon-repair", "base", "teacher:lexicon"]
    for name, entry in report["senders"].items():
        assert entry["states"] == len(rows) and len(entry["per_state"]) == len(rows)
        assert entry["repair_rate"] == pytest.approx(entry["repair_wins"] / len(rows))
    # `own` replays the turn 2 recorded when the states were made: the same wins, and the same
    # answers as the same sender sampling turn 2 again with the game's turn-2 seed.
    assert report["senders"]["own"]["repair_wins"] == header["own_repair_wins"]
    emoji = lambda name: [r["emoji"] for r in report["senders"][name]["per_state"]]
    assert emoji("own") == emoji("base") and emoji("repeat") == [r.turn1 for r in rows]
    assert report["senders"]["teacher:lexicon-repair"]["format_violations"] == 0
    assert len(report["paired"]) == 10
    same = next(p for p in report["paired"] if (p["a"], p["b"]) == ("own", "base"))
    assert same["difference"] == 0 and same["mcnemar_p"] == 1.0
    table = (out / "repair.md").read_text()
    assert "| teacher:lexicon-repair |" in table and "McNemar p" in table


def test_repair_eval_refuses_states_of_another_judge_and_a_file_that_is_no_states(tmp_path, tiny_model):
    result, states = make_states(tmp_path, tiny_model)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["eval", "--repair-states", str(states), "--judge", "retrieval", "--out", str(tmp_path / "r"), *model_settings(tiny_model)])
    assert result.exit_code == 2 and "made with judge `keywords`" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["eval", "--repair-states", str(states), "--judge", "keywords", "--checkpoint", str(tmp_path / "nowhere"),
                                      "--out", str(tmp_path / "r1"), *model_settings(tiny_model)])
    assert result.exit_code == 2 and "nowhere" in result.output and "Traceback" not in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hello"}\n')
    result = CliRunner().invoke(cli, ["eval", "--repair-states", str(bad), "--out", str(tmp_path / "r2")])
    assert result.exit_code == 2 and "bad.jsonl:1: not a repair states file" in result.output


def test_eval_json_carries_first_turn_success_and_repair_rate(tmp_path):
    targets = tmp_path / "targets.jsonl"
    targets.write_text("".join(json.dumps({"text": t, "category": "c"}) + "\n" for t in TEXTS))
    out = tmp_path / "eval"
    result = CliRunner().invoke(cli, ["eval", "--targets", str(targets), "--checkpoint", "teacher:lexicon", "--judge", "keywords",
                                      "--set", "game.max_turns=2", "--set", "eval.unmasked=false", "--set", "judge.distractors=32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    entry = json.loads((out / "eval.json").read_text())["checkpoints"]["teacher:lexicon"]
    m = entry["masked"]
    assert {"first_turn_success", "repair_rate", "repair_wins", "first_turn_misses", "success_rate", "similarity"} <= set(m)
    assert m["success_rate"] == pytest.approx(m["first_turn_success"] + m["repair_wins"] / len(TEXTS))
    assert all("turns" in ep and ep["turns"][0]["emoji"] for ep in entry["per_target"])  # every turn kept
    assert "repair rate (turn-2 wins / first-turn misses)" in (out / "eval.md").read_text()
