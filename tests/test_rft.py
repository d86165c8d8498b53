"""Rejection-sampling fine-tuning (emojikit/training/rft.py): the keep rule, the recipe, a tiny
run on the local backend that checkpoints and resumes, and the same loop through the Tinker
backend against the fake service of test_tinker.py."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.api.errors import ConfigError
from emojikit.training.rft import Candidate, RFTSettings, keep_answers, threshold
from emojikit.ui.cli import cli

from test_tinker import service, tokenizer  # noqa: F401 - the fake Tinker service and its tokenizer (fixtures)
from cli_helpers import read_rows, run_cli

ROOT = Path(__file__).resolve().parents[1]


def cand(state, text, reward, success=False, valid=True):
    return Candidate(state=state, sample=None, text=text, valid=valid, reward=reward, success=success, similarity=reward)


# --- the keep rule -----------------------------------------------------------------------------

BATCH = [
    # state 0: two winners, the better one first sampled second
    [cand(0, "🎉🎂", 1.2, True), cand(0, "🍕🍕", 0.3), cand(0, "🎂🎁", 1.5, True), cand(0, "🎂🎁", 1.5, True)],
    # state 1: no answer wins
    [cand(1, "☔😞", 0.6), cand(1, "🌧️😢", 0.7)],
    # state 2: every answer wins alike: none beats the mean
    [cand(2, "🐶🏃", 1.1, True), cand(2, "🐕🏃", 1.1, True)],
    # state 3: the best answer breaks the format
    [cand(3, "✈️ Paris", 1.4, True, valid=False), cand(3, "✈️🗼", 1.0, True), cand(3, "🚗", 0.2)],
    # state 4: the judge gave up on every answer
    [],
]


def test_keep_best_keeps_the_top_winner_above_the_states_mean():
    kept = keep_answers(BATCH, RFTSettings(), threshold(RFTSettings()))
    assert [(c.state, c.text, c.reward) for c in kept] == [(0, "🎂🎁", 1.5), (3, "✈️🗼", 1.0)]


def test_keep_wins_keeps_every_distinct_winner_and_min_reward_replaces_success():
    s = RFTSettings(keep="wins")
    assert [(c.state, c.text) for c in keep_answers(BATCH, s, threshold(s))] == [(0, "🎂🎁"), (0, "🎉🎂"), (3, "✈️🗼")]
    s = RFTSettings(min_reward=0.65, baseline="none")
    assert [(c.state, c.text) for c in keep_answers(BATCH, s, threshold(s))] == [(0, "🎂🎁"), (1, "🌧️😢"), (2, "🐶🏃"), (3, "✈️🗼")]


def test_repeat_baseline_is_the_reward_of_sending_turn_one_again():
    s = RFTSettings(baseline="repeat")
    kept = keep_answers(BATCH, s, threshold(s), baselines=[1.5, 0.0, 1.0, 0.9, 0.0])
    assert [(c.state, c.text) for c in kept] == [(2, "🐶🏃"), (3, "✈️🗼")]  # state 0's best only ties its repeat
    with pytest.raises(ValueError, match="needs states"):
        RFTSettings(states="first_turn", baseline="repeat")


def test_shipped_recipe_is_valid_and_starts_from_the_sft_recipe():
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.pipeline import plan

    recipe = load_recipe(ROOT / "recipes/rft.toml")
    s = recipe.settings["rft"]
    assert recipe.kind == "rft" and s.states == "repair" and s.start_from == "recipes/sft.toml"
    assert [stage.kind for stage in plan(ROOT / "recipes/rft.toml")][-2:] == ["sft", "rft"]


def test_a_wrong_rft_key_is_one_line(tmp_path):
    from emojikit.composition.recipe import load_recipe

    with pytest.raises(ConfigError, match=r"\[rft\].*samples_per_stat"):
        load_recipe(ROOT / "recipes/rft.toml", ["rft.samples_per_stat=4"])


# --- rehearsal: the start's SFT chats beside the kept pairs ---------------------------------------


class RecordingPolicy:
    """Tokenizes by character and records every cross-entropy batch."""

    def __init__(self):
        self.batches = []

    def encode_prompt(self, messages):
        return [ord(c) for m in messages for c in m["content"]]

    def encode_completion(self, text):
        return [ord(c) for c in text] + [0]

    def forward_backward(self, batch, loss):
        from types import SimpleNamespace

        assert loss == "cross_entropy"
        self.batches.append(batch)
        return SimpleNamespace(loss=1.0)

    def optim_step(self, params):
        return {}


def chat(i):
    return [{"role": "user", "content": f"m{i}"}, {"role": "assistant", "content": f"a{i}"}]


def test_rehearsal_puts_the_start_chats_beside_the_kept_pairs_in_every_step():
    from emojikit.api.policy import Sample
    from emojikit.training.rft import train_kept

    kept = [Candidate(i, Sample([1, 2], [3 + i, 0], [0.0, 0.0], "x"), "x", True, 1.0, True, 1.0) for i in range(3)]
    chats = [chat(i) for i in range(5)]
    s = RFTSettings(rehearsal=2, batch_size=3, sft_steps=3)
    policy = RecordingPolicy()
    rows = [train_kept(policy, kept, s, seed=0, round_index=r, rehearsal=chats) for r in range(2)]
    assert [row["rehearsal_chats"] for row in rows] == [6, 6]
    replayed = []
    for batch in policy.batches:
        assert len(batch) == 3 + 2
        assert sorted(d.target_tokens[-1] for d in batch[:3]) == [0, 0, 0] and {d.model_input[:2] == [1, 2] for d in batch[:3]} == {True}
        for d in batch[3:]:
            text = "".join(chr(t) for t, w in zip(d.target_tokens, d.weights) if w and t)
            assert text.startswith("a")  # the loss falls on the chat's answer only
            replayed.append(int(text[1:]))
    # Twelve replayed chats walk the file in epochs laid end to end, across rounds: every chat twice.
    assert sorted(replayed[:10]) == sorted(list(range(5)) * 2)
    # Without rehearsal a step holds the kept pairs only.
    policy = RecordingPolicy()
    assert "rehearsal_chats" not in train_kept(policy, kept, RFTSettings(batch_size=3, sft_steps=1), 0, 0, chats)
    assert [len(b) for b in policy.batches] == [3]


def test_rehearsal_reads_the_start_sft_train_file_or_says_what_is_missing(tmp_path):
    from recipe_texts import jsonl

    from emojikit.composition.recipe import load_recipe
    from emojikit.training.rft import rehearsal_chats

    train_file = tmp_path / "sft_train.jsonl"
    train_file.write_text(jsonl({"messages": chat(i)} for i in range(4)), encoding="utf-8")
    checkpoint = tmp_path / "sft/checkpoints/step_5"
    checkpoint.mkdir(parents=True)
    (tmp_path / "sft/recipe.toml").write_text(f'kind = "sft"\n[sft]\ntrain_file = {json.dumps(str(train_file))}\n', encoding="utf-8")
    recipe = load_recipe(ROOT / "recipes/rft.toml", ["rft.rehearsal=4"])
    s = recipe.settings["rft"]
    assert rehearsal_chats(recipe, s, str(checkpoint)) == [chat(i) for i in range(4)]
    assert rehearsal_chats(recipe, s.model_copy(update={"rehearsal": 0}), None) == []
    with pytest.raises(ConfigError, match=r"rft\.toml: \[rft\] rehearsal = 4 .*rehearsal_file"):
        rehearsal_chats(recipe, s, None)
    other = tmp_path / "other.jsonl"
    other.write_text(jsonl({"messages": chat(i)} for i in range(7, 9)), encoding="utf-8")
    named = load_recipe(ROOT / "recipes/rft.toml", ["rft.rehearsal=4", f"rft.rehearsal_file={json.dumps(str(other))}"])
    assert rehearsal_chats(named, named.settings["rft"], str(checkpoint)) == [chat(7), chat(8)]  # the named file wins
    other.write_text(jsonl({"messages": chat(1)} for _ in range(1)) + '{"messages": [{"role": "user", "content": "no answer"}]}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[rft\].*rehearsal_file.*other\.jsonl:2"):
        load_recipe(ROOT / "recipes/rft.toml", ["rft.rehearsal=4", f"rft.rehearsal_file={json.dumps(str(other))}"])


# --- the reader's subset search ---------------------------------------------------------------------


class BeliefJudge:
    """A judge whose log-belief in a target is the sum of its emoji's weights for that target, less 1 per emoji."""

    def __init__(self, weights):
        self.weights = weights

    def guess(self, views):
        return [""] * len(views)

    def target_logprobs(self, views, targets):
        from emojikit.api import emojis

        return [None if t not in self.weights else sum(self.weights[t].get(e, 0.0) - 1.0 for e in emojis.split(v.emoji_turns[-1])) for v, t in zip(views, targets)]


def test_subset_search_grows_the_answer_the_judge_believes_in_from_the_states_own_emoji():
    from emojikit.api.format import EmojiFormat
    from emojikit.training.rft import subset_search

    judge = BeliefJudge({"a": {"🍕": 5.0, "🎉": 3.0, "🌧️": 0.5, "🐶": 4.0}, "b": {"☔": 0.2}, "c": {"🐱": 9.0}})
    groups = [
        [cand(0, "🌧️🍕", 0.1), cand(0, "🎉🌧️", 0.2)],  # 🐶 would score, but no sample used it: never tried
        [cand(1, "☔🌂", 0.1)],  # every emoji lowers the belief: the two of the format's minimum, best first
        [cand(2, "🐱", 0.1)],  # one distinct emoji: no answer of two
        [cand(3, "🍕🎉", 0.1)],  # a target the judge has no belief in
    ]
    answers = subset_search(judge, ["a", "b", "c", "zzz"], groups, EmojiFormat(2, 3))
    assert answers == ["🍕🎉", "☔🌂", None, None]  # 🌧️ (-0.5) would lower a's belief: the search stops at two
    assert subset_search(judge, ["a"], groups[:1], EmojiFormat(2, 2)) == ["🍕🎉"]  # max_emoji caps the growth
    # A teacher's answer proposes more emoji: 🐶 now joins a's answer, and c has two to pick from.
    proposed = subset_search(judge, ["a", "b", "c", "zzz"], groups, EmojiFormat(2, 3), extra=["🐶🌂", None, "🍩", "🍕"])
    assert proposed == ["🍕🐶🎉", "☔🌂", "🐱🍩", None]
    # With the teacher's length as the floor, the search keeps adding the reader's best emoji past
    # the point where the belief stops rising, up to that length (within the proposals and the format).
    floored = subset_search(judge, ["a", "b"], groups[:2], EmojiFormat(2, 4), extra=["🐶🌂🍩", "☔🌂🍩🌈"], floor_from_extra=True)
    assert floored == ["🍕🐶🎉", "☔🌂🍩🌈"]  # a: the belief still rises to three; b: four though every emoji lowers it
    longer = subset_search(judge, ["a"], groups[:1], EmojiFormat(2, 4), extra=["🐶🌂🍩🌈"], floor_from_extra=True)
    assert longer == ["🍕🐶🎉🌧️"]  # four emoji: the least harmful of the rest (🌧️, -0.5) joins
    assert subset_search(judge, ["a"], groups[:1], EmojiFormat(2, 3), extra=["🐶🌂🍩🌈"], floor_from_extra=True) == ["🍕🐶🎉"]  # max_emoji caps the floor


def test_the_search_needs_a_judge_with_a_belief_in_the_target():
    from types import SimpleNamespace

    from emojikit.training.rft import require_belief_for_search

    recipe = SimpleNamespace(path="r.toml", components={"judge": SimpleNamespace(spec=SimpleNamespace(name="claude"))})
    with pytest.raises(ConfigError, match=r'^r.toml: \[rft\] search = "subset": the judge `claude` reports no belief'):
        require_belief_for_search(recipe, RFTSettings(states="first_turn", search="subset"), object())
    require_belief_for_search(recipe, RFTSettings(states="first_turn", search="subset"), BeliefJudge({}))  # a belief: no error
    require_belief_for_search(recipe, RFTSettings(), object())  # no search: any judge


# --- end to end on the local backend ----------------------------------------------------------------


def tiny_source(tmp_path: Path) -> tuple[list[str], list[str]]:
    """A prompt source of 20 messages whose first 6 are the held-out file (2 of them played)."""
    texts = [f"message number {i} about pizza and rain" for i in range(20)]
    (tmp_path / "source.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:6]), encoding="utf-8")
    common = ["--set", f"prompts={{use = \"jsonl\", path = {json.dumps(str(tmp_path / 'source.jsonl'))}}}",
              "--set", f"rft.heldout_file={json.dumps(str(tmp_path / 'heldout.jsonl'))}", "--set", "rft.eval_targets=2",
              "--set", "rft.target_pool=14", "--set", "rft.target_max_words=20"]
    return texts[:6], common


def run_one_round(tiny_model, out: Path, source: list[str], *settings: str) -> None:
    """recipes/rft.toml on the tiny model from base: one round of 4 states, one cross-entropy step, no held-out game."""
    run_cli("run", str(ROOT / "recipes/rft.toml"), "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", 'rft.start_from="base"',
            "--set", "rft.rounds=1", "--set", "rft.states_per_round=4", "--set", "rft.sft_steps=1", "--set", "rft.eval_targets=0",
            "--set", "judge.distractors=8", *(a for setting in settings for a in ("--set", setting)), "--set", f"out={json.dumps(str(out))}", *source)


def test_repair_rft_end_to_end_checkpoints_resumes_and_never_trains_held_out(tmp_path, tiny_model):
    heldout, source = tiny_source(tmp_path)
    out = tmp_path / "rft"
    # A random model hardly wins: keep the best answer above its state's mean, win or not.
    common = ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", 'rft.start_from="base"', "--set", "rft.states_per_round=3",
              "--set", "rft.samples_per_state=3", "--set", "rft.sft_steps=2", "--set", "rft.batch_size=2", "--set", "rft.min_reward=-10",
              "--set", "game.max_new_tokens=6", "--set", "judge.distractors=8", "--set", f"out={json.dumps(str(out))}", *source]
    output = run_cli("run", str(ROOT / "recipes/rft.toml"), "--set", "rft.rounds=2", *common)
    assert "repair rate" in output and "before" in output and "after" in output
    metrics = read_rows(out / "metrics.jsonl")
    assert [r["round"] for r in metrics] == [1, 2]
    for row in metrics:
        assert row["states"] == 3 and row["samples"] <= 9
        for key in ("kept_share", "reward_mean_all", "states_with_win", "format_violations"):
            assert key in row, key
        if row["kept"]:
            assert row["reward_mean_kept"] >= row["reward_mean_all"] and row["sft_steps"] == 2 and row["loss"] > 0
    assert any(r["kept"] for r in metrics)
    assert (out / "checkpoints/step_1/adapter_config.json").exists() and (out / "checkpoints/step_2/adapter_config.json").exists()
    assert [r["step"] for r in read_rows(out / "eval.jsonl")] == [0, 2]
    states = read_rows(out / "train_states.jsonl")
    assert states[0]["repair_states"] == 1 and states[0]["targets"] == "training" and len(states) > 1
    # Held-out targets never make a state, and never train.
    assert not {s["target"] for s in states[1:]} & set(heldout)
    assert not {k["target"] for k in read_rows(out / "kept.jsonl")} & set(heldout)
    states_text = (out / "train_states.jsonl").read_text()

    run_cli("run", str(ROOT / "recipes/rft.toml"), "--set", "rft.rounds=3", "--resume", *common)
    assert [r["round"] for r in read_rows(out / "metrics.jsonl")] == [1, 2, 3]
    assert [r["step"] for r in read_rows(out / "eval.jsonl")] == [0, 2, 3]
    assert (out / "train_states.jsonl").read_text() == states_text  # made once, by the start
    assert (out / "checkpoints/step_3/adapter_config.json").exists()


def test_a_teacher_answer_joins_each_repair_state_and_trains_where_it_wins(tmp_path, tiny_model):
    heldout, source = tiny_source(tmp_path)
    out = tmp_path / "rft-teacher"
    # keep = "wins", no baseline: every distinct winning answer trains, the teacher's among them.
    run_one_round(tiny_model, out, source, 'rft.teacher="lexicon-repair"', "rft.samples_per_state=2", 'rft.keep="wins"', 'rft.baseline="none"',
                  "rft.log_kept=100")
    (row,) = read_rows(out / "metrics.jsonl")
    assert row["states"] == 4 and 0 <= row["teacher_unproducible"] <= 4 and row["teacher_wins"] > 0
    assert row["samples"] == 4 * 2 + 4 - row["teacher_unproducible"]
    kept = read_rows(out / "kept.jsonl")
    taught = [k for k in kept if k["source"] == "teacher"]
    assert taught and row["kept_teacher_share"] == len(taught) / len(kept)
    # A kept teacher answer is the lexicon-repair teacher's own answer to that state.
    from emojikit.composition.assembly import build_component, context
    from emojikit.evaluation.repair import read_states

    _, states = read_states(out / "train_states.jsonl")
    teacher = build_component("teacher", "lexicon-repair", None, context(seed=0, run_dir=out, recipe_path=ROOT / "recipes/rft.toml"), table="teacher")
    by_target = {st.target: st for st in states}
    for k in taught:
        st = by_target[k["target"]]
        assert k["answer"] == teacher.repair([st.target], [st.guess], [st.turn1])[0]
    assert not {k["target"] for k in kept} & set(heldout)
    with pytest.raises(ValueError, match="teacher needs states"):
        RFTSettings(states="first_turn", teacher="lexicon")  # on the first turn a teacher only proposes emoji to the search
    assert RFTSettings(states="first_turn", teacher="lexicon", search="subset").teacher == "lexicon"


def test_first_turn_rft_trains_on_the_best_of_k_first_answers(tmp_path, tiny_model):
    heldout, source = tiny_source(tmp_path)
    out = tmp_path / "rft1"
    run_one_round(tiny_model, out, source, 'rft.states="first_turn"', "rft.samples_per_state=2", "rft.min_reward=-10", "game.max_new_tokens=6")
    (row,) = read_rows(out / "metrics.jsonl")
    assert row["states"] == 4 and row["samples"] <= 8 and 0 < row["kept"] <= 4  # at most the best per state
    assert not (out / "train_states.jsonl").exists()
    assert not {k["target"] for k in read_rows(out / "kept.jsonl")} & set(heldout)


def test_first_turn_rft_with_the_subset_search_adds_a_searched_candidate_per_state(tmp_path, tiny_model):
    heldout, source = tiny_source(tmp_path)
    out = tmp_path / "rft-search"
    run_one_round(tiny_model, out, source, 'rft.states="first_turn"', 'rft.search="subset"', "rft.samples_per_state=3", "rft.min_reward=-10",
                  "game.max_new_tokens=12")
    (row,) = read_rows(out / "metrics.jsonl")
    assert row["states"] == 4 and row["samples"] <= 12 and 0 < row["kept"] <= 4  # the searched answer competes, it does not add a pair
    assert row["search_answers"] >= 1 and row["search_answers"] + row["search_unproducible"] <= 4  # at most one per state, played or counted
    assert 0 <= row["search_wins"] <= row["search_answers"] / 4 and 0 <= row["kept_searched_share"] <= 1
    kept = read_rows(out / "kept.jsonl")
    assert {k["source"] for k in kept} <= {"sample", "search"} and not {k["target"] for k in kept} & set(heldout)
    with pytest.raises(ValueError, match="search needs states"):
        RFTSettings(states="repair", search="subset")


def test_the_teachers_emoji_join_the_first_turn_search(tmp_path, tiny_model, monkeypatch):
    from emojikit.training import rft

    heldout, source = tiny_source(tmp_path)
    out = tmp_path / "rft-search-teacher"
    seen = []
    search = rft.subset_search

    def recorded(judge, targets, groups, fmt, extra=None, floor_from_extra=False):
        seen.append((targets, extra, floor_from_extra))
        return search(judge, targets, groups, fmt, extra, floor_from_extra)

    monkeypatch.setattr(rft, "subset_search", recorded)
    run_one_round(tiny_model, out, source, 'rft.states="first_turn"', 'rft.search="subset"', 'rft.teacher="lexicon"', "rft.samples_per_state=2",
                  'rft.search_min_emoji="teacher"', "rft.min_reward=-10", "game.max_new_tokens=12")
    ((targets, extra, floor_from_extra),) = seen
    assert floor_from_extra  # search_min_emoji = "teacher" reaches the search
    from emojikit.api.components import Message
    from emojikit.composition.assembly import build_component, context

    teacher = build_component("teacher", "lexicon", None, context(seed=0, run_dir=out, recipe_path=ROOT / "recipes/rft.toml"), table="teacher")
    assert extra == teacher.answer([Message(t) for t in targets]) and any(extra)  # the teacher's answers to the round's states, proposed
    (row,) = read_rows(out / "metrics.jsonl")
    assert row["search_answers"] + row["search_unproducible"] >= 1
    if row["search_answers"]:
        assert 2 <= row["search_emoji_mean"] <= 8
    for bad in ({"search": "none", "teacher": None}, {"search": "subset", "teacher": None}):
        with pytest.raises(ValueError, match='search_min_emoji = "teacher" needs'):
            RFTSettings(states="first_turn", search_min_emoji="teacher", **bad)


def test_the_search_alone_on_the_teachers_emoji_samples_nothing(tmp_path, tiny_model):
    heldout, source = tiny_source(tmp_path)
    out = tmp_path / "rft-search-only"
    run_one_round(tiny_model, out, source, 'rft.states="first_turn"', 'rft.search="subset"', 'rft.teacher="lexicon"', "rft.samples_per_state=0",
                  'rft.baseline="none"', "rft.min_reward=-10", "game.max_new_tokens=12")
    (row,) = read_rows(out / "metrics.jsonl")
    assert row["samples"] == 0 and row["states"] == 4 and row["search_answers"] >= 1
    kept = read_rows(out / "kept.jsonl")
    assert kept and {k["source"] for k in kept} == {"search"} and row["kept_searched_share"] == 1.0
    assert row["kept"] == row["search_answers"] and row["kept_share"] == row["kept"] / 4  # min_reward -10: every played answer trains
    for bad in ({"search": "none", "teacher": "lexicon"}, {"search": "subset"}, {"search": "subset", "teacher": "lexicon", "baseline": "mean"}):
        with pytest.raises(ValueError, match="samples_per_state = 0 needs"):
            RFTSettings(states="first_turn", samples_per_state=0, **bad)


# --- the same loop through Tinker -----------------------------------------------------------------


def test_rft_through_the_tinker_backend(service, tmp_path, monkeypatch):  # noqa: F811 - the fixture
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.runs import RunDir

    monkeypatch.chdir(tmp_path)
    # The fake service's random model writes no emoji, and an answer that breaks the format is
    # never kept: count its answers as well-formed so the rounds have pairs to train on.
    monkeypatch.setattr("emojikit.play.game._format_ok", lambda decoder, fmt, text: True)
    Path("tinker-rft.toml").write_text(
        'kind = "rft"\nname = "r"\nout = "runs/r"\n\n[backend]\nuse = "tinker"\nmax_redraws = 1\n\n[decoder]\nuse = "emoji-mask"\n\n'
        '[judge]\nuse = "tinker"\nmax_tokens = 6\n\n[reward]\nuse = "similarity"\n\n[prompts]\nuse = "generated"\n\n'
        "[game]\nmax_turns = 2\nmax_new_tokens = 4\n\n"
        '[rft]\nstates = "repair"\nrounds = 2\nstates_per_round = 2\nsamples_per_state = 2\nsft_steps = 1\nbatch_size = 2\n'
        'min_reward = -10.0\neval_targets = 1\ntarget_pool = 6\nstart_from = "base"\n',
        encoding="utf-8",
    )
    recipe = load_recipe("tinker-rft.toml")
    with RunDir(recipe.out, recipe_toml=recipe.to_toml()) as run_dir:
        recipe.runner()(recipe, run_dir)
        metrics = run_dir.read("metrics.jsonl")
    assert [r["round"] for r in metrics] == [1, 2]
    assert any(r["kept"] for r in metrics)
    assert {name for name, _, _ in service.received} == {"cross_entropy"}
    # Every trained answer is one the sampler produced, token for token.
    sampled = {tuple(s.tokens) for s in service.sampled}
    for _, sent, _ in service.received:
        for d in sent:
            weights = d.loss_fn_inputs["weights"].tolist()
            first = next(i for i, w in enumerate(weights) if w)
            assert tuple(d.loss_fn_inputs["target_tokens"].tolist()[first:]) in sampled
    assert json.loads(Path("runs/r/checkpoints/step_2/tinker.json").read_text())["state_path"].startswith("tinker://")


def test_a_missing_heldout_file_is_one_line_naming_the_rft_table(tmp_path, tiny_model):
    result = CliRunner().invoke(cli, ["run", str(ROOT / "recipes/rft.toml"), "--set", f"backend.model={json.dumps(str(tiny_model))}",
                                      "--set", 'rft.start_from="base"', "--set", f"rft.heldout_file={json.dumps(str(tmp_path / 'nope.jsonl'))}",
                                      "--set", f"out={json.dumps(str(tmp_path / 'r'))}"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "[rft] heldout_file" in lines[-1] and "nope.jsonl" in lines[-1]
