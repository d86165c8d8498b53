"""Issue 5, offline half: the generated and JSONL prompt sources, the lexicon teacher and
the `kind = "data"` pipeline (recipes/data.toml)."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.api import emojis
from emojikit.ui.cli import cli
from emojikit.api.components import BuildContext, Message
from emojikit.evaluation.metrics import distinct_per_100, literal_similarity
from emojikit_text import grammar
from emojikit_text.generated import GeneratedConfig, GeneratedSource, dedup_key

ROOT = Path(__file__).resolve().parents[1]


# --- generated prompt source -----------------------------------------------------------


@pytest.fixture(scope="module")
def generated_25k():
    return list(GeneratedSource(GeneratedConfig(), seed=0).messages(25_000))


def test_generated_templates_name_known_slots():
    grammar.check_templates()


def test_generated_is_deterministic_by_seed():
    first = [m.text for m in GeneratedSource(GeneratedConfig(), seed=3).messages(500)]
    again = [m.text for m in GeneratedSource(GeneratedConfig(), seed=3).messages(500)]
    other = [m.text for m in GeneratedSource(GeneratedConfig(), seed=4).messages(500)]
    offset = [m.text for m in GeneratedSource(GeneratedConfig(seed_offset=1), seed=3).messages(500)]
    assert first == again
    assert first != other and first != offset


def test_generated_25k_distinct_messages_in_every_category(generated_25k):
    assert len(generated_25k) == 25_000
    assert len({dedup_key(m.text) for m in generated_25k}) == 25_000
    counts = Counter(m.category for m in generated_25k)
    assert set(counts) == set(grammar.CATEGORIES)
    assert all(n >= 400 for n in counts.values()), counts
    assert max(counts.values()) < 0.3 * 25_000, counts  # no category dominates


def test_generated_messages_read_naturally(generated_25k):
    for m in generated_25k:
        text = m.text
        assert "{" not in text and "[" not in text and "|" not in text, text  # no template leftovers
        assert "  " not in text and text == text.strip(), text
        assert text[0].isupper() or not text[0].isalpha(), text
        assert not re.search(r"\ba [aeiou]", text), text  # "an owl", never "a owl"
        assert not re.search(r"\b(\w+) \1\b", text.lower().replace("ok ok", "")), text  # "in in"
    words = Counter(len(m.text.split()) for m in generated_25k)
    assert words[1] > 0 and max(words) <= 40  # one-word edge cases and long multi-part messages
    short = sum(n for w, n in words.items() if w <= 12)
    assert short > 5_000  # enough short messages for RL targets


def test_generated_subset_and_max_words():
    config = GeneratedConfig(categories=["question", "edge"], max_words=6, count=300)
    got = list(GeneratedSource(config, seed=0).messages())
    assert len(got) == 300
    assert {m.category for m in got} == {"question", "edge"}
    assert all(len(m.text.split()) <= 6 for m in got)
    with pytest.raises(ValueError, match="unknown categories"):
        GeneratedConfig(categories=["poems"])


# --- jsonl prompt source ---------------------------------------------------------------


def _data_recipe(tmp_path: Path, prompts: str, data: str = "count = 20\nrl_count = 4") -> Path:
    path = tmp_path / "data.toml"
    path.write_text(
        f'kind = "data"\nout = "{tmp_path / "run"}"\n\n[prompts]\n{prompts}\n\n[teacher]\nuse = "lexicon"\n\n[data]\n{data}\n',
        encoding="utf-8",
    )
    return path


def test_jsonl_source_reads_fields(tmp_path):
    from emojikit_text.jsonl_source import JsonlConfig, JsonlSource

    f = tmp_path / "m.jsonl"
    f.write_text('{"msg": "Pizza night!", "kind": "social"}\n\n{"msg": "Snow again"}\n', encoding="utf-8")
    got = list(JsonlSource(JsonlConfig(path=f, field="msg", category_field="kind")).messages())
    assert got == [Message("Pizza night!", "social"), Message("Snow again", "unknown")]


def test_jsonl_bad_line_fails_with_file_and_line_before_any_model(tmp_path, monkeypatch):
    import emojikit.play.embedding

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the input file was checked")

    monkeypatch.setattr(emojikit.play.embedding, "MiniLM", no_model)
    f = tmp_path / "m.jsonl"
    f.write_text('{"text": "hello"}\n{"text": "fine"}\n{"text": oops}\n', encoding="utf-8")
    recipe = _data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"')
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 2, result.output
    lines = [l for l in result.output.strip().splitlines() if l]
    assert len(lines) == 1 and f"{f}:3" in lines[0], result.output
    assert not (tmp_path / "run").exists()


def test_jsonl_missing_text_field_names_line(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"text": "hello"}\n{"body": "no text"}\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", str(_data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"'))])
    assert result.exit_code == 2 and f"{f}:2" in result.output and "'text'" in result.output


# --- lexicon teacher -------------------------------------------------------------------


@pytest.fixture(scope="module")
def teacher():
    from emojikit_text.lexicon import LexiconConfig, LexiconTeacher

    return LexiconTeacher(LexiconConfig())


def test_key_phrases_split_on_stopwords_and_punctuation():
    from emojikit_text.lexicon import key_phrases

    assert key_phrases("I got promoted and can't stop smiling") == ["promoted", "stop smiling"]
    assert key_phrases("Pizza!") == ["pizza"]
    assert key_phrases("ok") == []


def test_lexicon_answers_are_2_to_8_distinct_emoji_and_deterministic(teacher):
    messages = list(GeneratedSource(GeneratedConfig(), seed=11).messages(60)) + [Message("Ugh."), Message("ok")]
    answers = teacher.answer(messages)
    assert answers == teacher.answer(messages)
    for message, answer in zip(messages, answers):
        assert answer is not None, message
        found = emojis.split(answer)
        assert emojis.is_emoji_only(answer, 2, 8), (message, answer)
        assert len(set(found)) == len(found), answer
        assert not any(emojis.has_skin_tone(e) for e in found)
        for flag in filter(emojis.is_flag, found):  # only for a country the message names
            assert emojis.name(flag).lower() in message.text.lower(), (message, answer)


def test_lexicon_promoted_is_not_four_smiling_faces(teacher):
    (answer,) = teacher.answer([Message("I got promoted and can't stop smiling")])
    names = [emojis.name(e) for e in emojis.split(answer)]
    faces = [n for n in names if "face" in n]
    assert len(faces) <= 2, names
    assert any("face" not in n for n in names), names  # the promotion is carried too


def test_lexicon_flags_only_for_named_countries(teacher):
    named, unnamed = teacher.answer([Message("We're flying to Japan next week!"), Message("We're flying somewhere warm next week!")])
    assert "🇯🇵" in emojis.split(named)
    assert not any(emojis.is_flag(e) for e in emojis.split(unnamed))


def test_lexicon_covers_different_phrases(teacher):
    (answer,) = teacher.answer([Message("I baked pizza, walked the dog in the rain and played guitar")])
    names = " ".join(emojis.name(e) for e in emojis.split(answer))
    hits = [w for w in ("pizza", "dog", "rain", "guitar") if w in names]
    assert len(hits) >= 3, names


def test_lexicon_answers_follow_the_message_order(teacher):
    from emojikit_text.lexicon import LexiconConfig, LexiconTeacher

    message = Message("I baked pizza, walked the dog in the rain and played guitar")
    (in_order,) = teacher.answer([message])
    by_relevance = LexiconTeacher(LexiconConfig(order="relevance"), embedder=teacher.embedder)
    (picked,) = by_relevance.answer([message])
    assert sorted(emojis.split(in_order)) == sorted(emojis.split(picked))  # same emoji, maybe reordered
    names = [emojis.name(e) for e in emojis.split(in_order)]
    first = {w: next(i for i, n in enumerate(names) if w in n) for w in ("pizza", "dog", "guitar") if any(w in n for n in names)}
    assert len(first) >= 2, names
    assert list(first.values()) == sorted(first.values()), names  # pizza before dog before guitar


# --- metrics ---------------------------------------------------------------------------


def test_literal_similarity_and_distinct_per_100():
    scores = literal_similarity(["pizza and beer", "pizza and beer", "pizza and beer"], ["🍕🍺", "🚀🌋", "pizza 🍕"])
    assert scores[0] > scores[1] > 0 and scores[2] == 0.0
    assert distinct_per_100(["🍕🍺"] * 100 + ["🚀🌋"] * 100) == 2.0
    assert distinct_per_100(["🍕🍺", "🍕🚀"]) == 150.0


# --- the data recipe -------------------------------------------------------------------


def test_data_recipe_small_count_produces_valid_files(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        ["run", str(ROOT / "recipes" / "data.toml"), "--set", "data.count=200", "--set", "data.rl_count=40",
         "--set", "data.test_fraction=0.1", "--set", f"out={out}"],
    )
    assert result.exit_code == 0, result.output
    train = [json.loads(l) for l in (out / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()]
    test = [json.loads(l) for l in (out / "sft_test.jsonl").read_text(encoding="utf-8").splitlines()]
    stats = json.loads((out / "data_stats.json").read_text(encoding="utf-8"))
    assert len(train) + len(test) + stats["dropped_no_answer"] + stats["dropped_invalid"] == 200
    assert len(test) == stats["sft_test"] == 20
    users = []
    for row in train + test:
        roles = [m["role"] for m in row["messages"]]
        # the default recipe mixes messages people wrote (chitchat) with the grammar's
        assert roles == ["system", "user", "assistant"] and row["category"] in (*grammar.CATEGORIES, "chat-question", "chat-statement")
        assert emojis.is_emoji_only(row["messages"][2]["content"], 2, 8), row
        users.append(row["messages"][1]["content"])
    assert len(users) == len(set(users))  # deduplicated, and no message in both splits
    assert sum(row["category"].startswith("chat-") for row in train + test) > 100  # 3 of every 4 are people's

    rl = [json.loads(l) for l in (out / "rl_prompts.jsonl").read_text(encoding="utf-8").splitlines()]
    held = [json.loads(l) for l in (out / "rl_heldout.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(held) == 4 and len(rl) == 36
    rl_texts, held_texts = {r["text"] for r in rl}, {r["text"] for r in held}
    assert not rl_texts & held_texts
    assert not held_texts & set(users)  # held-out RL targets never appear in SFT data
    assert not rl_texts & {r["messages"][1]["content"] for r in test}
    assert all(len(t.split()) <= 12 for t in rl_texts | held_texts)
    assert 0 < stats["test_literal_similarity"] < 1 and stats["test_distinct_emoji_per_100"] > 0


def test_messages_of_the_exclude_files_never_become_pairs_or_rl_targets(tmp_path):
    """[data] exclude_files: the held-out sets later runs measure on. The generated source's own
    first messages, named there, are replaced by the next ones; the run still makes `count` pairs."""
    from emojikit_text.generated import GeneratedConfig, GeneratedSource

    first = [m.text for m in itertools.islice(GeneratedSource(GeneratedConfig(), seed=0).messages(60), 60)]
    held = tmp_path / "held.txt"
    held.write_text("\n".join(text.upper() for text in first[::2]) + "\n", encoding="utf-8")  # every other one of the first 60, in capitals
    recipe = _data_recipe(tmp_path, 'use = "generated"', f'count = 40\nrl_count = 10\nexclude_files = ["{held}"]')
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    pairs = [json.loads(line)["messages"][1]["content"] for name in ("sft_train.jsonl", "sft_test.jsonl") for line in (run / name).read_text(encoding="utf-8").splitlines()]
    targets = [json.loads(line)["text"] for name in ("rl_prompts.jsonl", "rl_heldout.jsonl") for line in (run / name).read_text(encoding="utf-8").splitlines()]
    stats = json.loads((run / "data_stats.json").read_text(encoding="utf-8"))
    assert len(pairs) + stats["dropped_no_answer"] + stats["dropped_invalid"] == 40
    assert not set(first[::2]) & set(pairs + targets)
    assert set(first[1::2]) & set(pairs)  # their neighbours in the draw still train
    assert stats["excluded_messages"] >= 20
    held.write_bytes(b"a line\ncaf\xe9\n")  # line 2: Latin-1, not UTF-8
    checked = CliRunner().invoke(cli, ["validate", str(recipe)])
    assert checked.exit_code == 2 and f"[data] exclude_files: {held}:2: not UTF-8" in checked.output, checked.output


def test_a_count_over_a_small_sources_size_uses_every_message_with_a_note(tmp_path):
    """[data] count (25,000 by default) over a 3-message file is no error: the run makes 3 pairs and says so."""
    f = tmp_path / "mine.jsonl"
    texts = ["Running late, the bus broke down again", "We got the keys to our new flat!", "Happy birthday, have the best day"]
    f.write_text("".join(json.dumps({"text": t}) + "\n" for t in [*texts, texts[0]]), encoding="utf-8")  # a repeated line is one message
    recipe = _data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"', "test_fraction = 0.0")
    note = "data: the jsonl prompt source has 3 messages; making 3 pairs, not 25,000"
    checked = CliRunner().invoke(cli, ["validate", str(recipe)])
    assert checked.exit_code == 0 and note in checked.output.splitlines(), checked.output
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    assert result.output.count(note) == 1, result.output
    train = [json.loads(l) for l in (tmp_path / "run" / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(row["messages"][1]["content"] for row in train) == sorted(texts)
    assert all(emojis.is_emoji_only(row["messages"][2]["content"], 2, 8) for row in train)
    stats = json.loads((tmp_path / "run" / "data_stats.json").read_text(encoding="utf-8"))
    assert stats["sft_messages"] == 3 and stats["sft_train"] == 3 and stats["rl_heldout"] == 0

    # One of them in a held-out set: the note says so, and the run counts the pairs it makes.
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"text": texts[1].upper()}) + "\n", encoding="utf-8")
    recipe = _data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"', f'test_fraction = 0.0\nexclude_files = ["{held}"]')
    result = CliRunner().invoke(cli, ["run", str(recipe), "--set", f"out={tmp_path / 'run2'}"])
    assert result.exit_code == 0, result.output
    assert "making 3 pairs, fewer by its messages in [data] exclude_files, not 25,000" in result.output, result.output
    assert "data: 1 of the jsonl prompt source's messages are in [data] exclude_files; making 2 pairs" in result.output
    stats = json.loads((tmp_path / "run2" / "data_stats.json").read_text(encoding="utf-8"))
    assert stats["sft_messages"] == 2 and stats["excluded_messages"] == 1


def test_a_small_source_holds_out_its_share_of_rl_targets():
    from emojikit.training.data import DataSettings, shrunk_counts

    assert shrunk_counts(DataSettings(), 3) == (3, 0)
    assert shrunk_counts(DataSettings(), 500) == (450, 50)  # rl_heldout_fraction of the messages
    assert shrunk_counts(DataSettings(), 20_000) == (19_800, 200)  # at most rl_count x rl_heldout_fraction
    assert shrunk_counts(DataSettings(rl_count=0), 500) == (500, 0)


def test_score_answers_reads_each_teacher_answer_against_every_training_message(tmp_path):
    """[data] score_answers: each training row gets the judge's log-belief in its own message
    among all of them, from the answer alone; a fitting answer reads better than one for
    another message."""
    from emojikit.training.data import answer_reader, read_answers
    from emojikit.composition.recipe import load_recipe

    f = tmp_path / "mine.jsonl"
    texts = ["My dog chased a ball in the park", "We baked a birthday cake for grandma", "The flight to Paris got cancelled",
             "I failed my maths exam today", "It is raining and I forgot my umbrella", "The pizza at the new place is great"]
    f.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    recipe = _data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"', "test_fraction = 0.0\nrl_count = 0\nscore_answers = true")
    recipe.write_text(recipe.read_text(encoding="utf-8") + '\n[judge]\nuse = "retrieval"\ndistractors = 0\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(l) for l in (tmp_path / "run" / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 6 and all(isinstance(r["reading"], float) and r["reading"] <= 0 for r in rows)
    stats = json.loads((tmp_path / "run" / "data_stats.json").read_text(encoding="utf-8"))
    assert stats["reading_uniform"] == pytest.approx(-math.log(6), abs=1e-4) and stats["reading_seconds"] >= 0
    assert stats["reading_median"] > stats["reading_uniform"]  # the teacher's answers say something about their messages

    loaded = load_recipe(recipe)
    run_dir = type("RunDir", (), {"path": tmp_path / "scratch"})()
    fitting = [(Message("My dog chased a ball in the park", "x"), "🐶⚾🌳"), (Message("The pizza at the new place is great", "x"), "🍕👍")]
    swapped = [(fitting[0][0], fitting[1][1]), (fitting[1][0], fitting[0][1])]
    good, bad = read_answers(answer_reader(loaded, run_dir), fitting), read_answers(answer_reader(loaded, run_dir), swapped)
    assert all(g > b for g, b in zip(good, bad))


def test_teacher_variants_keep_each_messages_best_read_answer(tmp_path):
    """[data] teacher_variants: every training message is answered once more per table of teacher
    settings, and keeps whichever answer the judge reads best, with that reading."""
    from emojikit.api.components import Message
    from emojikit_text.lexicon import LexiconConfig, LexiconTeacher

    f = tmp_path / "mine.jsonl"
    texts = ["My dog chased a ball in the park and then fell asleep", "We baked a birthday cake for grandma", "The flight to Paris got cancelled",
             "I failed my maths exam today, so sad", "It is raining and I forgot my umbrella at the office", "The pizza at the new place is great",
             "Our team won the football final last night", "My phone fell in the lake while fishing"]
    f.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    variants = [{"message_weight": 0.8}, {"mmr_lambda": 0.9}]

    def run(name: str, extra: str) -> tuple[dict, dict]:
        recipe = _data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"', "test_fraction = 0.0\nrl_count = 0\nscore_answers = true" + extra)
        recipe.write_text(recipe.read_text(encoding="utf-8").replace(f'out = "{tmp_path / "run"}"', f'out = "{tmp_path / name}"')
                          + '\n[judge]\nuse = "retrieval"\ndistractors = 0\n', encoding="utf-8")
        result = CliRunner().invoke(cli, ["run", str(recipe)])
        assert result.exit_code == 0, result.output
        rows = [json.loads(l) for l in (tmp_path / name / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()]
        stats = json.loads((tmp_path / name / "data_stats.json").read_text(encoding="utf-8"))
        return {r["messages"][1]["content"]: r for r in rows}, stats

    plain, _ = run("plain", "")
    best, stats = run("best", "\nteacher_variants = [{ message_weight = 0.8 }, { mmr_lambda = 0.9 }]")
    assert set(best) == set(plain) == set(texts)
    said = [dict(zip(texts, LexiconTeacher(LexiconConfig(**v)).answer([Message(t) for t in texts]))) for v in [{}, *variants]]
    for text in texts:
        assert best[text]["messages"][2]["content"] in {answers[text] for answers in said}  # one of the three settings' answers
        assert best[text]["reading"] >= plain[text]["reading"]  # never read worse than the teacher's own
    assert sum(stats["answers_kept_from"].values()) == len(texts) and stats["teacher_variants_seconds"] > 0
    assert set(stats["answers_kept_from"]) <= {"teacher", "teacher_variants[1]", "teacher_variants[2]"}
    assert sum(best[t]["reading"] > plain[t]["reading"] for t in texts) == len(texts) - stats["answers_kept_from"].get("teacher", 0)
    assert (tmp_path / "best" / "teacher_variant2_progress.jsonl").exists()  # resumable like the first labelling


def test_repair_turns_write_the_teachers_second_turn_where_the_judge_misses(tmp_path):
    """[data] repair_turns: every training pair whose answer the judge takes for another message
    gets a two-turn row: the answer, the game's follow-up with that wrong guess, the repair
    teacher's second turn, read over both turns with the guess excluded."""
    from emojikit.api.components import JudgeView, Message
    from emojikit.api.format import DEFAULT_FORMAT
    from emojikit.composition.recipe import load_recipe
    from emojikit.training.data import answer_reader, repair_turns
    from emojikit_text.lexicon import LexiconConfig
    from emojikit_text.repair import LexiconRepairTeacher

    f = tmp_path / "mine.jsonl"
    # Messages that share their words, so one answer reads as another message.
    texts = ["I love my dog", "I love my puppy", "My dog loves me", "We love dogs", "I really love my dog so much",
             "The flight to Paris got cancelled", "The train to Paris got cancelled", "Our Paris trip got cancelled",
             "I am so happy today", "Today I am very happy", "Happy happy day"]
    f.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    recipe = _data_recipe(tmp_path, f'use = "jsonl"\npath = "{f}"', "test_fraction = 0.0\nrl_count = 0\nscore_answers = true\nrepair_turns = true\nrepair_turns_share = 1")
    recipe.write_text(recipe.read_text(encoding="utf-8").replace('use = "lexicon"', 'use = "lexicon-repair"')
                      + '\n[judge]\nuse = "retrieval"\ndistractors = 0\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(l) for l in (tmp_path / "run" / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()]
    first, repairs = [r for r in rows if "repair" not in r], [r for r in rows if r.get("repair") is True]
    assert sorted(r["messages"][1]["content"] for r in first) == sorted(texts)  # the one-turn rows as without repair_turns
    stats = json.loads((tmp_path / "run" / "data_stats.json").read_text(encoding="utf-8"))
    assert 0 < len(repairs) == stats["repair_turns"] <= stats["repair_turns_misses"] and stats["repair_turns_seconds"] >= 0

    judge = answer_reader(load_recipe(recipe), type("RunDir", (), {"path": tmp_path / "scratch"})())
    judge.add_candidates(texts)
    answer = {r["messages"][1]["content"]: r["messages"][2]["content"] for r in first}
    guesses = dict(zip(texts, judge.guess([JudgeView(emoji_turns=[answer[t]]) for t in texts])))
    missed = [t for t in texts if guesses[t] != t]
    assert sorted(r["messages"][1]["content"] for r in repairs) == sorted(missed)  # a row for every miss, none for a hit
    teacher = LexiconRepairTeacher(LexiconConfig())
    for row in repairs:
        system, user, turn1, follow, turn2 = row["messages"]
        target = user["content"]
        assert turn1["content"] == answer[target]
        assert follow == {"role": "user", "content": DEFAULT_FORMAT.follow_up.format(guess=guesses[target], target=target)}
        assert turn2["content"] == teacher.repair([target], [guesses[target]], [answer[target]])[0]
        belief = judge.target_logprobs([JudgeView(emoji_turns=[turn1["content"], turn2["content"]], guesses=[guesses[target]])], [target])[0]
        assert row["reading"] == pytest.approx(belief, abs=1e-4)

    # repair_turns_share: only the misses whose first turn reads best get a second turn.
    reading = {r["messages"][1]["content"]: r["reading"] for r in first}
    pairs = [(Message(t), answer[t]) for t in texts]
    half, misses = repair_turns(judge, teacher, pairs, [reading[t] for t in texts], share=0.5)
    assert misses == len(missed)
    best_half = sorted(missed, key=lambda t: -reading[t])[: math.ceil(len(missed) / 2)]
    assert sorted(m.text for m, *_ in half) == sorted(best_half)


@pytest.mark.parametrize("teacher, data, says", [
    ("lexicon-repair", "count = 10\nrepair_turns = true", "[data] repair_turns: the repair turns are made where the [judge] misses"),
    ("lexicon", "count = 10\nscore_answers = true\nrepair_turns = true", "[data] repair_turns: the lexicon teacher does not answer a second turn"),
])
def test_repair_turns_without_readings_or_a_repairing_teacher_is_one_line_before_any_work(tmp_path, teacher, data, says):
    recipe = _data_recipe(tmp_path, 'use = "generated"', data)
    recipe.write_text(recipe.read_text(encoding="utf-8").replace('use = "lexicon"', f'use = "{teacher}"')
                      + '\n[judge]\nuse = "retrieval"\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 2, result.output
    line = next(l for l in result.output.splitlines() if says in l)
    assert str(recipe) in line and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("data, says", [
    ("count = 10\nscore_answers = true\nteacher_variants = [{ mmr_lambda = 0.9 }, { no_such_setting = 1 }]", "[data.teacher_variants[2]] no_such_setting"),
    ("count = 10\nscore_answers = true\nteacher_variants = [{ mmr_lambda = 7 }]", "[data.teacher_variants[1]] mmr_lambda"),
    ("count = 10\nteacher_variants = [{ mmr_lambda = 0.9 }]", "[data] teacher_variants"),
])
def test_a_bad_teacher_variant_is_one_line_naming_its_table_before_any_work(tmp_path, data, says):
    recipe = _data_recipe(tmp_path, 'use = "generated"', data)
    recipe.write_text(recipe.read_text(encoding="utf-8") + '\n[judge]\nuse = "retrieval"\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 2, result.output
    line = next(l for l in result.output.splitlines() if says in l)
    assert str(recipe) in line and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_score_answers_without_a_judge_is_a_clear_config_error(tmp_path):
    recipe = _data_recipe(tmp_path, 'use = "generated"', "count = 10\nscore_answers = true")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 2, result.output
    line = next(l for l in result.output.splitlines() if "score_answers" in l)
    assert "[data] score_answers" in line and "[judge]" in line and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_filter_without_game_tables_is_a_clear_config_error(tmp_path):
    recipe = _data_recipe(tmp_path, 'use = "generated"', "count = 10\nfilter_threshold = 0.5")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 2
    assert "filter_threshold" in result.output and "[judge]" in result.output and "[backend]" in result.output


def test_score_answers_with_a_judge_that_cannot_read_fails_before_the_teacher_works(tmp_path, monkeypatch):
    """A judge without a pool (a guesser, say) cannot tell its belief in a message: the data
    stage says so in one line before any message reaches the teacher."""
    from emojikit import Component, hookimpl
    from emojikit.api.config import ConfigModel
    from emojikit.composition import registry as registry_mod
    from emojikit.composition.registry import Registry

    class Guesser:
        def guess(self, views):
            return ["a guess" for _ in views]

    class Plugin:
        @hookimpl
        def register_judges(self):
            return [Component("guesser", "Guesses without a pool.", ConfigModel, lambda cfg, ctx: Guesser())]

    reg = Registry()
    reg.register(Plugin(), "guesser")
    monkeypatch.setattr(registry_mod, "_default", reg)
    recipe = _data_recipe(tmp_path, 'use = "generated"', "count = 10\nscore_answers = true")
    recipe.write_text(recipe.read_text(encoding="utf-8") + '\n[judge]\nuse = "guesser"\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(recipe)])
    assert result.exit_code == 2, result.output
    line = next(l for l in result.output.splitlines() if "[data] score_answers" in l)
    assert "guesser judge does not hold a pool" in line and "Traceback" not in result.output
    assert not (tmp_path / "run" / "teacher_progress.jsonl").exists() and not (tmp_path / "run" / "sft_train.jsonl").exists()
