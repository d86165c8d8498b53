"""SFT and GRPO loops end to end on the local backend, with a tiny random model so the
loops, checkpoints and resume are exercised in seconds."""

import json
from pathlib import Path

import pytest

from emojikit.api.components import Episode, EpisodeTurn
from emojikit.training.grpo import episode_datums, group_advantages
from emojikit.api.policy import Sample
from emojikit.training.sft import batch_indices, learning_rate, length_grouped_batch_indices, repeated_step, SFTSettings
from cli_helpers import read_rows, run_cli

ROOT = Path(__file__).resolve().parents[1]


# --- SFT ------------------------------------------------------------------------------


def test_batches_are_a_pure_function_of_seed_and_step():
    first = [batch_indices(10, 4, step, seed=3) for step in range(6)]
    assert first == [batch_indices(10, 4, step, seed=3) for step in range(6)]
    # Epochs are permutations: the first 10 draws cover every example once.
    flat = [i for b in first for i in b]
    assert sorted(flat[:10]) == list(range(10))
    assert first != [batch_indices(10, 4, step, seed=4) for step in range(6)]


def test_length_grouped_batches_keep_the_epoch_and_pad_less():
    import random

    rng = random.Random(0)
    lengths = [rng.randint(5, 60) for _ in range(64)]
    grouped = [length_grouped_batch_indices(lengths, 4, step, seed=1, group_batches=4) for step in range(16)]
    plain = [batch_indices(64, 4, step, seed=1) for step in range(16)]
    assert grouped == [length_grouped_batch_indices(lengths, 4, step, seed=1, group_batches=4) for step in range(16)]
    assert sorted(i for b in grouped for i in b) == list(range(64))  # one epoch: every example once
    for w in range(4):  # each example trains within the run of 4 batches batch_indices puts it in
        assert sorted(i for b in grouped[4 * w : 4 * w + 4] for i in b) == sorted(i for b in plain[4 * w : 4 * w + 4] for i in b)

    def padding(batches):  # pad tokens a batch adds: each row padded to the batch's longest
        return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)

    assert padding(grouped) < padding(plain) / 2
    assert grouped != [length_grouped_batch_indices(lengths, 4, step, seed=2, group_batches=4) for step in range(16)]


def test_repeated_batches_are_the_first_pass_in_a_new_order_each_pass():
    passes = [[repeated_step(step, 5, seed=3) for step in range(5 * k, 5 * k + 5)] for k in range(4)]
    assert passes[0] == list(range(5))
    assert all(sorted(p) == list(range(5)) for p in passes)  # each later pass: every first-pass batch once
    assert len({tuple(p) for p in passes[1:]}) > 1  # a new order each pass
    assert passes == [[repeated_step(step, 5, seed=3) for step in range(5 * k, 5 * k + 5)] for k in range(4)]
    assert passes[1:] != [[repeated_step(step, 5, seed=4) for step in range(5 * k, 5 * k + 5)] for k in range(1, 4)]


def test_learning_rate_schedules(tmp_path):
    data = tmp_path / "d.jsonl"
    write_chats(data, 1)
    s = SFTSettings(train_file=data, test_file=data, learning_rate=1.0, warmup_steps=2, lr_schedule="cosine")
    assert learning_rate(s, 0, 10) == pytest.approx(0.5)
    assert learning_rate(s, 2, 10) == pytest.approx(1.0)
    assert learning_rate(s, 10, 10) == pytest.approx(0.0)
    linear = s.model_copy(update={"lr_schedule": "linear", "warmup_steps": 0})
    assert learning_rate(linear, 5, 10) == pytest.approx(0.5)


def test_keep_best_read_trains_the_best_read_share_in_file_order(tmp_path):
    from emojikit.api.errors import InputFileError
    from emojikit.training.sft import best_read, load_chats

    data = tmp_path / "read.jsonl"
    write_chats(data, 6)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for row, reading in zip(rows, [-3.0, -0.1, -7.5, -0.2, -1.0, -9.0]):
        row["reading"] = reading
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    chats = load_chats(data)
    users = lambda kept: [c[1]["content"] for c in kept]
    assert users(best_read(data, chats, 0.5)) == ["message number 1", "message number 3", "message number 4"]
    assert users(best_read(data, chats, 0.1)) == ["message number 1"]  # at least one
    assert best_read(data, chats, 1.0) is chats
    assert users(best_read(data, chats[:4], 0.5)) == ["message number 1", "message number 3"]  # max_train_examples first

    unread = tmp_path / "unread.jsonl"
    write_chats(unread, 3)
    with pytest.raises(InputFileError, match=r"unread.jsonl:1: no number in \"reading\"; \[sft\] keep_best_read needs"):
        best_read(unread, load_chats(unread), 0.5)


def test_repair_share_replaces_that_share_of_the_kept_chats_with_the_best_read_repair_rows(tmp_path):
    """Rows marked "repair" (a data run's [data] repair_turns) train only through [sft] repair_share:
    the kept count stays keep_best_read's, the best-read repair rows in place of as many others."""
    from emojikit.api.errors import InputFileError
    from emojikit.training.sft import best_read, load_chats

    data = tmp_path / "read.jsonl"
    write_chats(data, 6)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for row, reading in zip(rows, [-3.0, -0.1, -7.5, -0.2, -1.0, -9.0]):
        row["reading"] = reading
    for reading in [-2.0, -0.5, -4.0]:
        follow = {"role": "user", "content": "The guesser read your emoji as: \"x\""}
        rows.append({"messages": [*rows[0]["messages"][:3], follow, {"role": "assistant", "content": "🍕🍕"}],
                     "reading": reading, "repair": True})
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    chats = load_chats(data)
    assert len(best_read(data, chats, 1.0)) == 6 and all(len(c) == 3 for c in best_read(data, chats, 1.0))  # repair rows only by repair_share
    kept = best_read(data, chats, 0.5, repair_share=1 / 3)  # 3 chats: the best 2 one-turn rows and the best repair row
    assert [c[1]["content"] for c in kept if len(c) == 3] == ["message number 1", "message number 3"]
    assert [c for c in kept if len(c) == 5] == [chats[7]]  # reading -0.5
    assert len(best_read(data, chats, 1.0, repair_share=0.5)) == 6  # 3 one-turn rows, all 3 repair rows
    with pytest.raises(InputFileError, match=r"read.jsonl: \[sft\] repair_share = 0.9 takes 5 repair rows, the file has 3; make the data with \[data\] repair_turns = true"):
        best_read(data, chats, 1.0, repair_share=0.9)


@pytest.mark.parametrize("sets, key, says", [
    (["sft.keep_best_read=0.5"], "keep_best_read", ['[sft] keep_best_read: {data}:1 has no "reading"', "score_answers = true"]),
    (["sft.keep_best_read=1", "sft.repair_share=0.2"], "repair_share",
     ["recipes/sft.toml: {data}: [sft] repair_share = 0.2 takes 2 repair rows, the file has 0", "repair_turns = true"]),
])
def test_data_the_sft_selection_cannot_use_is_one_line_before_any_run(tmp_path, sets, key, says):
    """keep_best_read < 1 on rows without a reading, repair_share on data without repair rows."""
    from click.testing import CliRunner

    from emojikit.ui.cli import cli

    data = tmp_path / "plain.jsonl"
    write_chats(data, 10)
    out = tmp_path / "never"
    result = CliRunner().invoke(cli, ["run", str(ROOT / "recipes/sft.toml"), "--set", f"sft.train_file={json.dumps(str(data))}",
                                      "--set", f"sft.test_file={json.dumps(str(data))}", *[a for v in sets for a in ("--set", v)],
                                      "--set", f"out={json.dumps(str(out))}"])
    assert result.exit_code == 2, result.output
    line = next(l for l in result.output.splitlines() if key in l)
    assert all(fragment.format(data=data) in line for fragment in says), line
    assert "Traceback" not in result.output and not out.exists()


def write_chats(path: Path, n: int) -> None:
    emoji = ["🍕🎉", "☔😞", "🐶🏃", "🎸🔥🎶", "✈️🗼", "🌞🏖️"]
    rows = [{"messages": [{"role": "system", "content": "Reply with 2-8 emoji."}, {"role": "user", "content": f"message number {i}"},
                          {"role": "assistant", "content": emoji[i % len(emoji)]}]} for i in range(n)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def test_sft_end_to_end_and_resume(tmp_path, tiny_model):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_chats(train, 24)
    write_chats(test, 6)
    out = tmp_path / "sft"
    # the recipe adapts the last 10 of SmolLM2's 30 layers; the tiny model has 2
    common = ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1", "--set", f"sft.train_file={json.dumps(str(train))}",
              "--set", f"sft.test_file={json.dumps(str(test))}", "--set", "sft.batch_size=4", "--set", "sft.group_by_length=2", "--set", "sft.save_every=2", "--set", "sft.keep_best_read=1",
              "--set", "sft.eval_every=2", "--set", "sft.sample_every=2", "--set", "sft.report_examples=4",
              "--set", "sft.max_new_tokens=6", "--set", f"out={json.dumps(str(out))}"]
    output = run_cli("run", str(ROOT / "recipes/sft.toml"), "--set", "sft.steps=4", *common)
    assert f"final adapter: {out}/checkpoints/step_4" in output
    metrics = read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    assert all("loss" in r for r in metrics) and "test_nll" in metrics[1]
    assert (out / "checkpoints/step_2/adapter_config.json").exists() and (out / "checkpoints/step_4/adapter_config.json").exists()
    report = json.loads((out / "eval_sft.json").read_text())
    assert report["unmasked"]["n"] == 4 and report["masked"]["emoji_only_rate"] == 1.0
    assert (out / "eval_sft.md").read_text().startswith("# SFT format report")
    assert len(read_rows(out / "samples.jsonl")) == 2 * 4  # 4 prompts sampled at steps 2 and 4

    # Simulate a crash after step 4's metrics were written but before a step-6 checkpoint: resume
    # continues at step 5 from the last checkpoint, with no duplicated or missing rows.
    run_cli("run", str(ROOT / "recipes/sft.toml"), "--set", "sft.steps=6", "--resume", *common)
    assert [r["step"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert (out / "checkpoints/step_6").exists()

    # The same steps with the loss over a constant of the data (every chat here has 2 emoji,
    # so it differs from the batch mean only where the answers' token counts do).
    other = tmp_path / "sft-dataset"
    common[-1] = f"out={json.dumps(str(other))}"
    run_cli("run", str(ROOT / "recipes/sft.toml"), "--set", "sft.steps=2", "--set", 'sft.loss_normalization="dataset"', *common)
    assert [r["step"] for r in read_rows(other / "metrics.jsonl")] == [1, 2]


def test_answer_tokens_only_scores_an_answer_over_the_tokens_the_answers_are_spelled_with(tiny_model):
    """An answer spelled with the vocabulary is scored by the log-softmax over those tokens
    alone (never below the whole vocabulary's; the same logits, fewer to share with); one with
    a token outside keeps the whole vocabulary, rather than an infinite loss."""
    import math

    import torch

    from emojikit.api.policy import AdamParams
    from emojikit.training.sft import AnswerTokens, chat_datum
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    model, tokenizer = load_model_and_tokenizer(str(tiny_model))
    policy = LocalPolicy(model, tokenizer, LocalConfig(lora_layers=1), seed=0)
    chats = [[{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
             for text, answer in [("pizza night", "🍕🎉"), ("gig tonight", "🎸🔥🎶"), ("plain words", "not emoji")]]
    vocabulary = AnswerTokens.of(policy, chats[:2])
    assert vocabulary.token_ids == {t for chat in chats[:2] for t in policy.encode_completion(chat[-1]["content"])}
    plain = [chat_datum(policy, chat) for chat in chats]
    narrow = [chat_datum(policy, chat, vocabulary) for chat in chats]
    first_answer = len(policy.encode_prompt(chats[0][:1])) - 1
    assert narrow[0].decoded_spans == [(first_answer, len(narrow[0].model_input))]
    assert narrow[0].weights[first_answer:] == [1.0] * (len(narrow[0].weights) - first_answer) and not any(narrow[0].weights[:first_answer])
    assert narrow[2].decoded_spans == [] and all(not d.decoded_spans for d in plain)

    whole = policy.compute_logprobs(plain)
    over_answer_tokens = policy.compute_logprobs(narrow, decoder=vocabulary)
    head = model.get_output_embeddings().weight
    ids = torch.tensor(sorted(vocabulary.token_ids))
    for d, w_lps, n_lps, spelled in zip(narrow, whole, over_answer_tokens, (True, True, False)):
        answer = [(w, n) for weight, w, n in zip(d.weights, w_lps, n_lps) if weight]
        assert all(math.isfinite(n) for _, n in answer)
        if spelled:  # log p(t) - log p(the vocabulary), from the whole-vocabulary logprobs
            assert all(n > w + 1e-4 for w, n in answer)
        else:
            assert [n for _, n in answer] == pytest.approx([w for w, _ in answer], abs=1e-5)
    # the same figure from the whole vocabulary's logits, renormalised over the answer tokens by hand
    with torch.no_grad():
        hidden = policy.model(input_ids=torch.tensor([narrow[0].model_input]), output_hidden_states=True).hidden_states[-1][0]
        logits = hidden @ head.T
        by_hand = torch.log_softmax(logits[:, ids], dim=-1)
    columns = {t: k for k, t in enumerate(ids.tolist())}
    expected = [float(by_hand[i, columns[t]]) for i, (t, w) in enumerate(zip(narrow[0].target_tokens, narrow[0].weights)) if w]
    assert [n for n, w in zip(over_answer_tokens[0], narrow[0].weights) if w] == pytest.approx(expected, abs=1e-4)

    out = policy.forward_backward(narrow[:2], "cross_entropy", decoder=vocabulary)
    answer_tokens = sum(sum(d.weights) for d in narrow[:2])
    assert out.loss == pytest.approx(-sum(n for d, lps in zip(narrow[:2], over_answer_tokens) for w, n in zip(d.weights, lps) if w) / answer_tokens, abs=1e-4)
    assert out.loss < policy.forward_backward(plain[:2], "cross_entropy").loss
    policy.optim_step(AdamParams(learning_rate=1e-2))


def test_sft_scores_the_later_passes_over_the_answer_tokens_and_logs_the_test_nll_both_ways(tmp_path, tiny_model):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_chats(train, 8)
    write_chats(test, 4)
    out = tmp_path / "sft"
    run_cli("run", str(ROOT / "recipes/sft.toml"), "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1",
            "--set", f"sft.train_file={json.dumps(str(train))}", "--set", f"sft.test_file={json.dumps(str(test))}", "--set", "sft.keep_best_read=1",
            "--set", "sft.batch_size=4", "--set", "sft.epochs=2", "--set", "sft.eval_every=1", "--set", "sft.sample_every=0", "--set", "sft.report_examples=0",
            "--set", "sft.max_new_tokens=6", "--set", 'sft.answer_tokens_only="later-passes"', "--set", f"out={json.dumps(str(out))}")
    metrics = read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    for row in metrics:  # the test answers use the training answers' emoji: likelier over their tokens than over all
        assert row["test_nll_answer_tokens"] < row["test_nll"]
    # The second pass trains the first pass's batches again, over the answer tokens: a random
    # model spreads its mass over 49,152 tokens, so that loss is nats below the whole vocabulary's.
    assert metrics[2]["loss"] < metrics[0]["loss"] - 1 and metrics[3]["loss"] < metrics[1]["loss"] - 1


# --- GRPO -----------------------------------------------------------------------------


def test_group_advantages():
    assert group_advantages([1.0, 0.0, 0.5, 0.5], normalize_std=False) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    normalised = group_advantages([1.0, 0.0], normalize_std=True)
    assert normalised == pytest.approx([1.0, -1.0], abs=1e-4)


def test_datums_weight_only_sender_tokens_of_every_turn():
    turns = [
        EpisodeTurn("🍕🎉", True, "pizza party", 0.4, sample=Sample([1, 2, 3], [10, 11, 2], [-0.1, -0.2, -0.3], "🍕🎉")),
        EpisodeTurn("🎂", True, "birthday", 0.9, sample=Sample([1, 2, 3, 10, 11, 2, 4, 5], [12, 2], [-0.5, -0.6], "🎂")),
    ]
    datums = episode_datums(Episode("x", turns=turns), advantage=0.7, budget=24)
    assert len(datums) == 2
    first, second = datums
    assert first.model_input == [1, 2, 3, 10, 11] and first.target_tokens == [2, 3, 10, 11, 2]
    assert first.weights == [0, 0, 1, 1, 1]
    assert first.advantages == pytest.approx([0, 0, 0.7, 0.7, 0.7])
    assert first.logprobs == pytest.approx([0, 0, -0.1, -0.2, -0.3])
    assert first.decoded_spans == [(2, 5)] and first.decode_budget == 24
    # The second turn's prompt (which holds turn 1 and the guess) carries no loss.
    assert second.weights == [0] * 7 + [1, 1] and second.advantages[-2:] == pytest.approx([0.7, 0.7])


def test_grpo_end_to_end_and_resume(tmp_path, tiny_model):
    out = tmp_path / "grpo"
    common = ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1", "--set", "grpo.batch_size=2", "--set", "grpo.group_size=2",
              "--set", "grpo.eval_targets=2", "--set", "grpo.save_every=1", "--set", "grpo.start_from=\"base\"",
              "--set", "game.max_turns=2", "--set", "game.max_new_tokens=6", "--set", "judge.distractors=8",
              "--set", "grpo.target_pool=16", "--set", "grpo.compare=false", "--set", f"out={json.dumps(str(out))}"]
    output = run_cli("run", str(ROOT / "recipes/grpo.toml"), "--set", "grpo.steps=2", *common)
    assert "before" in output and "after" in output and "success rate" in output
    metrics = read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2]
    for key in ("reward_mean", "reward_std", "similarity", "success_rate", "mean_turns", "format_violations", "entropy_estimate", "step_seconds", "sampled_tokens_per_s", "skipped_groups"):
        assert key in metrics[0], key
    trained = [r for r in metrics if r["datums"]]
    for row in trained:
        assert "kl" in row and abs(row["ratio_max_deviation"]) < 1e-3  # the PPO ratio starts at 1
    episodes = read_rows(out / "episodes.jsonl")
    assert {e["step"] for e in episodes} == {1, 2}
    assert all(e["turns"] and "total" in e["reward"] for e in episodes)
    assert (out / "checkpoints/step_2/adapter_config.json").exists()
    assert [r["step"] for r in read_rows(out / "eval.jsonl")] == [0, 2]

    run_cli("run", str(ROOT / "recipes/grpo.toml"), "--set", "grpo.steps=3", "--resume", *common)
    assert [r["step"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3]
    assert [r["step"] for r in read_rows(out / "eval.jsonl")] == [0, 2, 3]


# --- data: the communicability filter plays the game ------------------------------------


def test_communicability_filter_keeps_targets_the_game_gets_across(tmp_path, tiny_model):
    recipe = tmp_path / "data.toml"
    recipe.write_text(f"""
kind = "data"
out = "{tmp_path / 'data'}"
[prompts]
use = "generated"
[teacher]
use = "lexicon"
[backend]
use = "local"
model = "{tiny_model}"
[decoder]
use = "emoji-mask"
[judge]
use = "retrieval"
distractors = 4
[reward]
use = "similarity"
[data]
count = 40
rl_count = 12
rl_heldout_fraction = 0.25
filter_threshold = 0.5
""")
    run_cli("run", str(recipe))
    stats = json.loads((tmp_path / "data/data_stats.json").read_text())
    kept = read_rows(tmp_path / "data/rl_prompts.jsonl")
    assert stats["rl_filter_tried"] >= len(kept) == min(stats["rl_filter_kept"], 9)
    assert stats["rl_filter_threshold"] == 0.5
    assert len(read_rows(tmp_path / "data/rl_heldout.jsonl")) == 3  # held-out targets are not filtered


def test_no_row_of_the_heldout_file_trains_also_past_eval_targets(tmp_path):
    from emojikit.composition.recipe import load_recipe
    from emojikit.play.targets import split_targets
    from emojikit.stages.runs import RunDir
    from recipe_texts import GRPO_COMPONENTS, jsonl

    texts = [f"message number {i}" for i in range(10)]
    (tmp_path / "source.jsonl").write_text(jsonl({"text": t} for t in texts), encoding="utf-8")
    (tmp_path / "heldout.jsonl").write_text(jsonl({"text": t} for t in texts[:4]), encoding="utf-8")
    components = GRPO_COMPONENTS.replace('use = "generated"', f'use = "jsonl"\npath = {json.dumps(str(tmp_path / "source.jsonl"))}')
    (tmp_path / "grpo.toml").write_text(
        'kind = "grpo"\n' + components + f'[grpo]\nstart_from = "base"\neval_targets = 2\ntarget_pool = 10\nheldout_file = {json.dumps(str(tmp_path / "heldout.jsonl"))}\n',
        encoding="utf-8",
    )
    recipe = load_recipe(tmp_path / "grpo.toml")
    heldout, train = split_targets(recipe, recipe.settings["grpo"], RunDir(tmp_path / "run"))
    assert [m.text for m in heldout] == texts[:2]  # the first eval_targets rows are played
    assert [m.text for m in train] == texts[4:]  # rows 3-4 are not played, and do not train either


@pytest.mark.parametrize("kind", ["grpo", "rft"])
def test_no_row_of_exclude_files_trains_and_a_missing_one_is_named(tmp_path, kind):
    from emojikit.api.errors import InputFileError
    from emojikit.composition.recipe import load_recipe
    from emojikit.play.targets import split_targets
    from emojikit.stages.runs import RunDir
    from recipe_texts import GRPO_COMPONENTS, jsonl

    texts = [f"message number {i}" for i in range(10)]
    (tmp_path / "source.jsonl").write_text(jsonl({"text": t} for t in texts), encoding="utf-8")
    (tmp_path / "heldout.jsonl").write_text(jsonl({"text": t} for t in texts[:2]), encoding="utf-8")
    (tmp_path / "other.jsonl").write_text(jsonl({"text": t} for t in [texts[5], texts[7]]), encoding="utf-8")
    components = GRPO_COMPONENTS.replace('use = "generated"', f'use = "jsonl"\npath = {json.dumps(str(tmp_path / "source.jsonl"))}')
    table = f'[{kind}]\nstart_from = "base"\neval_targets = 2\ntarget_pool = 10\nheldout_file = {json.dumps(str(tmp_path / "heldout.jsonl"))}\n'
    (tmp_path / "run.toml").write_text(f'kind = "{kind}"\n' + components + table + f'exclude_files = [{json.dumps(str(tmp_path / "other.jsonl"))}]\n', encoding="utf-8")
    recipe = load_recipe(tmp_path / "run.toml")
    heldout, train = split_targets(recipe, recipe.settings[kind], RunDir(tmp_path / "run"))
    assert [m.text for m in heldout] == texts[:2]
    assert [m.text for m in train] == [texts[i] for i in (2, 3, 4, 6, 8, 9)]  # neither the held-out rows nor the excluded ones

    (tmp_path / "other.jsonl").unlink()
    with pytest.raises(InputFileError, match=rf"\[{kind}\] exclude_files: .*other.jsonl does not exist"):
        split_targets(recipe, recipe.settings[kind], RunDir(tmp_path / "run2"))
