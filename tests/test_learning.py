"""What issue 17 added to make learning measurable: the GRPO step's phases (groups,
per-episode and per-turn credit, minibatches), the `keywords` judge, the learning probe's
reward, the teacher played as a sender, and eval targets read whole."""

from __future__ import annotations

import json
import statistics

import pytest
from click.testing import CliRunner

from emojikit.ui.cli import cli
from emojikit.api.components import Episode, EpisodeTurn, JudgeView, Message
from emojikit.api.errors import InputFileError
from emojikit.play.game import GameSettings, play, sender_prompt
from emojikit.play.targets import read_targets
from emojikit.play.teacher_sender import TeacherSender
from emojikit.training.grpo import GRPOSettings, Group, drop_failed, group_advantages, group_datums, split_groups, turn_advantages
from emojikit.api.policy import Sample

from emojikit_retrieval.keywords import KeywordsJudge, keywords
from emojikit_retrieval.probe import KeywordShareReward
from emojikit_retrieval.reward import SimilarityReward


def turn(sim: float, tokens=(5, 6)) -> EpisodeTurn:
    return EpisodeTurn(emoji="🍕🎉", valid=True, similarity=sim, sample=Sample(prompt_tokens=[1, 2, 3], tokens=list(tokens), logprobs=[-0.5] * len(tokens), text="🍕🎉"))


def episode(total: float, sims: list[float], failed: bool = False) -> Episode:
    return Episode(target="t", turns=[turn(s) for s in sims], reward={"total": total}, failed=failed)


# --- the phases of a GRPO step -------------------------------------------------------------


def test_episode_credit_gives_every_turn_the_group_relative_advantage():
    group = Group(Message("t"), [episode(1.9, [1.0]), episode(0.4, [0.3, 0.5]), episode(1.4, [0.2, 1.0]), episode(0.3, [0.1, 0.4])])
    per_turn = turn_advantages(group, normalize_std=True, credit="episode")
    expected = group_advantages(group.rewards, normalize_std=True)
    assert [len(row) for row in per_turn] == [1, 2, 2, 2]
    for row, adv in zip(per_turn, expected):
        assert row == pytest.approx([adv] * len(row))
    assert sum(row[0] for row in per_turn) == pytest.approx(0.0, abs=1e-6)


def test_turn_credit_charges_a_turn_only_with_what_came_after_the_similarity_it_started_from():
    # Episodes 2-4 reached turn 2; turn 2's return is the total minus the turn-1 similarity.
    group = Group(Message("t"), [episode(1.9, [1.0]), episode(0.4, [0.3, 0.5]), episode(1.4, [0.2, 1.0]), episode(0.3, [0.1, 0.4])])
    per_turn = turn_advantages(group, normalize_std=False, credit="turn")
    mean_total = statistics.fmean(group.rewards)
    assert [row[0] for row in per_turn] == pytest.approx([r - mean_total for r in group.rewards])  # turn 1: the episode's own
    returns2 = [0.4 - 0.3, 1.4 - 0.2, 0.3 - 0.1]
    assert [row[1] for row in per_turn[1:]] == pytest.approx([r - statistics.fmean(returns2) for r in returns2])
    # The turn that fixed a miss (episode 3) earns the most; a turn that barely helped, the least.
    assert per_turn[2][1] > 0 > per_turn[3][1]


def test_turn_credit_keeps_a_lone_turns_own_improvement_when_one_episode_reached_a_turn():
    group = Group(Message("t"), [episode(1.9, [1.0]), episode(0.4, [0.3, 0.5])])
    per_turn = turn_advantages(group, normalize_std=False, credit="turn")
    assert per_turn[1] == pytest.approx([0.4 - 1.15, 0.4 - 0.3])  # turn 2: no peer, baseline 0


def test_drop_failed_drops_whole_groups_and_equal_rewards_teach_nothing():
    ok = Group(Message("a"), [episode(1.0, [1.0]), episode(0.2, [0.2])])
    failed = Group(Message("b"), [episode(1.0, [1.0]), episode(0.0, [0.0], failed=True)])
    flat = Group(Message("c"), [episode(0.5, [0.5]), episode(0.5, [0.5])])
    kept = drop_failed([ok, failed, flat])
    assert kept == [ok, flat]
    per_group, skipped = group_datums(kept, GRPOSettings(normalize_std=True), budget=24)
    assert skipped == 1 and len(per_group) == 1
    datums = per_group[0]
    assert len(datums) == 2  # one per turn
    assert [d.advantages[-1] for d in datums] == pytest.approx([1.0, -1.0], abs=1e-4)  # normalised by the std
    assert all(a == 0 for d in datums for a, w in zip(d.advantages, d.weights) if not w)  # prompt tokens carry nothing


def test_negative_weight_scales_only_the_advantages_below_the_group_mean():
    group = Group(Message("a"), [episode(1.0, [1.0]), episode(0.2, [0.2]), episode(0.0, [0.0])])
    full = group_datums([group], GRPOSettings(normalize_std=False), budget=24)[0][0]
    positive_only = group_datums([group], GRPOSettings(normalize_std=False, negative_weight=0.0), budget=24)[0][0]
    half = group_datums([group], GRPOSettings(normalize_std=False, negative_weight=0.5), budget=24)[0][0]
    assert [d.advantages[-1] for d in full] == pytest.approx([0.6, -0.2, -0.4])
    assert [d.advantages[-1] for d in positive_only] == pytest.approx([0.6, 0.0, 0.0])
    assert [d.advantages[-1] for d in half] == pytest.approx([0.6, -0.1, -0.2])


def test_the_runs_held_out_game_pools_held_out_targets_and_distractors_only(tmp_path):
    from pathlib import Path

    from emojikit.training.grpo import held_out_judge
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.runs import RunDir

    root = Path(__file__).resolve().parents[1]
    recipe = load_recipe(root / "recipes/grpo.toml", ['grpo.start_from="base"', "judge.distractors=3"])
    training_judge = recipe.build("judge", tmp_path)
    training_judge.add_candidates(["a training target", "a held-out target"])
    held = held_out_judge(recipe, RunDir(tmp_path / "run"), training_judge, [Message("a held-out target")])
    assert held is not training_judge
    assert "a held-out target" in held.candidates and "a training target" not in held.candidates
    assert len(held.candidates) == 4  # 3 distractors + the held-out target


def test_minibatches_hold_whole_groups():
    per_group = [[f"g{i}d{j}" for j in range(3)] for i in range(5)]
    parts = split_groups(per_group, 2)
    assert len(parts) == 2 and sorted(d for p in parts for d in p) == sorted(d for g in per_group for d in g)
    for part in parts:
        groups = {d.split("d")[0] for d in part}
        assert all(sum(d.startswith(g + "d") for d in part) == 3 for g in groups)
    assert len(split_groups(per_group, 9)) == 5  # never an empty minibatch


# --- the keywords judge and the probe's reward ----------------------------------------------


def test_keywords_read_emojilib_lists_ignoring_variation_selectors_and_skin_tones():
    assert "pizza" in keywords("🍕") and "food" in keywords("🍕")
    assert keywords("🏃🏽") == keywords("🏃") and "runner" in keywords("🏃")
    assert keywords("🏃‍♀️‍➡️")  # a ZWJ sequence emojilib has
    assert keywords("☂️") == keywords("☂")


def test_keywords_judge_retrieves_by_keywords_and_never_repeats_a_guess():
    judge = KeywordsJudge(["I love pizza with friends", "It is raining again", "My dog ran away"])
    assert "pizza" in judge.turn_names("🍕") and "italy" in judge.turn_names("🍕")
    guesses = judge.guess([JudgeView(["🍕👫"], []), JudgeView(["🌧️☔"], []), JudgeView(["🐕🏃"], ["My dog ran away"])])
    assert guesses[:2] == ["I love pizza with friends", "It is raining again"]
    assert guesses[2] != "My dog ran away"


def test_keyword_share_reward_counts_animal_emoji():
    reward = KeywordShareReward("animal")
    assert reward.share("🐶🐱🍕🎉") == pytest.approx(0.5)
    assert reward.share("no emoji") == 0.0
    ep = Episode(target="t", turns=[EpisodeTurn("🐶🐱", True), EpisodeTurn("🍕🐶", True)])
    assert reward.score([ep])[0]["total"] == pytest.approx(0.75)
    assert reward.similarity(["a"], ["a"]) == [0.0]


# --- the teacher as a sender, and eval targets ------------------------------------------------


class ListTeacher:
    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def answer(self, messages):
        self.asked.extend(m.text for m in messages)
        return [self.answers.get(m.text) for m in messages]


def test_teacher_sender_plays_the_teachers_answer_in_the_game():
    settings = GameSettings(max_turns=2, first_turn="Message: {target}")
    teacher = ListTeacher({"Let's get pizza tonight": "🍕🌙", "It is raining, take an umbrella": "🌧️☂️"})
    sender = TeacherSender(teacher, settings)
    judge = KeywordsJudge(["The dog ate my homework", "Coffee first, then we talk"])
    targets = [Message("Let's get pizza tonight"), Message("It is raining, take an umbrella")]
    episodes = play(sender, None, judge, SimilarityReward(), targets, settings=settings)
    assert [ep.turns[0].emoji for ep in episodes] == ["🍕🌙", "🌧️☂️"]
    assert all(ep.success and len(ep.turns) == 1 for ep in episodes)
    assert sorted(teacher.asked) == sorted(t.text for t in targets)  # asked once per target
    assert sender._target(sender_prompt(settings, "a {b} message", [])) == "a {b} message"


def test_read_targets_reads_categories_from_jsonl_and_csv(tmp_path):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"text": f"message {i}", "category": "scene"}) + "\n" for i in range(200)))
    assert len(read_targets(jsonl)) == 200  # every target unless told
    assert read_targets(jsonl, 3)[2] == Message("message 2", "scene")
    csv = tmp_path / "t.csv"
    csv.write_text("text,category\nhello there,social\n\"a, b\",opinion\n")
    assert read_targets(csv) == [Message("hello there", "social"), Message("a, b", "opinion")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("message\tcategory\nhi\tsocial\n")
    result = CliRunner().invoke(cli, ["eval", "--targets", str(bad), "--checkpoint", "teacher:lexicon", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "bad.tsv:1: expected a header with a text column" in result.output


def test_a_csv_row_with_an_unquoted_comma_or_an_open_quote_is_an_error_naming_its_line(tmp_path):
    # Read leniently, the first would cut a text at its comma and the second merge the rest of the file into one text.
    extra = tmp_path / "extra.csv"
    extra.write_text("text,category\nfine,social\nhello, world,greeting\n")
    with pytest.raises(InputFileError, match=r"extra.csv:3: 3 fields, the header has 2: quote a text that holds a comma"):
        read_targets(extra)
    left_open = tmp_path / "open.tsv"
    left_open.write_text('text\tcategory\nfine\tsocial\n"never closed\tx\nmore\tx\n')
    result = CliRunner().invoke(cli, ["eval", "--targets", str(left_open), "--checkpoint", "teacher:lexicon", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "open.tsv:3: unexpected end of data" in result.output and "Traceback" not in result.output
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('text\n"she said ""hi"", twice"\n\nlast one\n')
    assert read_targets(quoted) == [Message('she said "hi", twice'), Message("last one")]


def test_a_byte_order_mark_and_crlf_lines_read_as_text_and_a_repeated_target_is_dropped_once(tmp_path, capsys):
    # Files from Windows editors and spreadsheets; a target twice in one pool can never be told apart.
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_bytes(b'\xef\xbb\xbf{"text": "hello there"}\r\n\r\n{"text": "I love pizza"}\r\n{"text": "hello there"}\r\n')
    assert read_targets(jsonl) == [Message("hello there"), Message("I love pizza")]
    assert read_targets(jsonl, 2) == [Message("hello there"), Message("I love pizza")]  # -n counts distinct targets
    assert capsys.readouterr().err.count("t.jsonl: 1 repeated target(s) dropped") == 1  # said once per file
    text = tmp_path / "t.txt"
    text.write_bytes(b"\xef\xbb\xbfa message\r\nanother\r\n")
    assert read_targets(text) == [Message("a message"), Message("another")]


@pytest.mark.slow
def test_eval_plays_the_teacher_and_every_target_with_the_keywords_judge(tmp_path):
    targets = tmp_path / "targets.jsonl"
    texts = ["Let's get pizza tonight", "It is raining, take an umbrella", "Happy birthday, grandma!", "I missed the bus again", "The cat is sleeping on my keyboard"]
    targets.write_text("".join(json.dumps({"text": t, "category": c}) + "\n" for t, c in zip(texts, "aabbb")))
    out = tmp_path / "eval"
    result = CliRunner().invoke(cli, ["eval", "--targets", str(targets), "--checkpoint", "teacher:lexicon", "--judge", "keywords",
                                      "--set", "game.max_turns=1", "--set", "eval.unmasked=false", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    entry = report["checkpoints"]["teacher:lexicon"]
    assert report["targets"] == 5 and report["judge"] == "keywords"
    assert sorted(entry["categories"]) == ["a", "b"] and len(entry["per_target_success"]) == 5
    assert entry["masked"]["success_rate"] >= 0.4 and entry["masked"]["format_violations"] == 0


# --- seeds: the sweep and its statistics -------------------------------------------------------


def test_bootstrap_interval_holds_the_mean_and_is_degenerate_for_constants():
    from emojikit.evaluation.sweep import bootstrap_interval, describe_runs, parse_seeds

    constant = [[1.0] * 10, [1.0] * 10]
    assert bootstrap_interval(constant) == (1.0, 1.0)
    values = [[float(i % 2) for i in range(40)], [float(i % 3 == 0) for i in range(40)]]
    summary = describe_runs(values)
    assert summary["ci95"][0] <= summary["mean"] <= summary["ci95"][1]
    assert summary["per_seed"] == pytest.approx([0.5, 14 / 40])
    assert summary["std_between_seeds"] == pytest.approx(statistics.pstdev([0.5, 14 / 40]))
    assert parse_seeds("0, 1,2") == [0, 1, 2]
    for bad in ("", "a", "1,1", "-1"):
        with pytest.raises(Exception, match="--seeds"):
            parse_seeds(bad)


def test_sweep_runs_every_seed_and_compares_start_and_final_over_seeds(tmp_path, tiny_model):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("".join(json.dumps({"text": t, "category": "c"}) + "\n" for t in ["Let's get pizza tonight", "It is raining today", "Happy birthday, grandma!"]))
    out = tmp_path / "sweep"
    args = ["sweep", str(root / "recipes/grpo.toml"), "--seeds", "3,4", "--out", str(out), "--judge", "retrieval", "--judge", "keywords",
            "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1", "--set", "grpo.steps=1", "--set", "grpo.batch_size=2",
            "--set", "grpo.group_size=2", "--set", "grpo.start_from=\"base\"", "--set", f"grpo.heldout_file={json.dumps(str(heldout))}",
            "--set", "grpo.eval_targets=3", "--set", "grpo.eval_every=0", "--set", "grpo.target_pool=8", "--set", "game.max_new_tokens=6",
            "--set", "judge.distractors=4"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "comparison.json").read_text())
    assert report["seeds"] == [3, 4] and sorted(report["judges"]) == ["keywords", "retrieval"]
    for judge in ("retrieval", "keywords"):
        summary = report["judges"][judge]
        assert summary["start"]["checkpoints"] == ["base", "base"]
        assert [Path(c).name for c in summary["grpo"]["checkpoints"]] == ["step_1", "step_1"]
        assert summary["teacher"]["checkpoints"] == ["teacher:lexicon"]
        for label in ("start", "grpo", "gain"):
            s = summary[label]["success"]
            assert len(s["per_seed"]) == 2 and s["ci95"][0] <= s["mean"] <= s["ci95"][1]
    assert "gain, GRPO - start (paired)" in (out / "comparison.md").read_text()
    assert (out / "curves.png").stat().st_size > 0
    assert "seed = 3" in (out / "seed3" / "recipe.toml").read_text()


# --- the learning probe: the loop learns a trivially learnable reward ---------------------------


@pytest.mark.slow
def test_learning_probe_climbs_from_the_base_model(tmp_path):
    """GRPO on the bundled model against the animal-share reward, from the base model: 6 steps
    of 4 targets x 4 episodes at lr 3e-3. Measured: 0.00, 0.04, 0.02, 0.16, 0.63, 0.93."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "probe"
    result = CliRunner().invoke(cli, ["run", str(root / "recipes/learning-probe.toml"), "--set", f"out={json.dumps(str(out))}",
                                      "--set", "grpo.steps=6", "--set", "grpo.batch_size=4", "--set", "grpo.learning_rate=3e-3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rewards = [json.loads(line)["reward_mean"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rewards) == 6
    assert rewards[0] < 0.15  # the base model sends animals rarely (127 of ~1,900 emoji)
    assert max(rewards[-2:]) >= 0.5 and max(rewards[-2:]) - rewards[0] >= 0.4
