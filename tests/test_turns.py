"""The turns apart in training: the loss normalisations and turn credit on the group of issue 28
([win in one turn | three two-turn games]), the centred KL, and training targets SFT never saw."""

from __future__ import annotations

import pytest

from emojikit.api.components import Episode, EpisodeTurn, Message
from emojikit.api.policy import Sample
from emojikit.training.grpo import GRPOSettings, Group, fold_kl, group_datums

TOKENS = 3  # sampled tokens per turn


def turn(sim: float) -> EpisodeTurn:
    return EpisodeTurn(emoji="🍕🎉", valid=True, similarity=sim, sample=Sample(prompt_tokens=[1, 2, 3], tokens=[5] * TOKENS, logprobs=[-0.5] * TOKENS, text="🍕🎉"))


def episode(total: float, sims: list[float]) -> Episode:
    return Episode(target="t", turns=[turn(s) for s in sims], reward={"total": total}, success=sims[-1] >= 0.85)


def one_win_three_two_turn_games() -> Group:
    # The group: one first-turn win, three games that missed turn 1 and then missed again.
    return Group(Message("t"), [episode(1.95, [1.0]), episode(0.40, [0.30, 0.50]), episode(0.25, [0.20, 0.35]), episode(0.30, [0.35, 0.40])])


def three_wins_and_a_rescue() -> Group:
    # Three first-turn wins and one game rescued on turn 2 (success bonus halved, two turn penalties).
    return Group(Message("t"), [episode(1.95, [1.0]), episode(1.95, [1.0]), episode(1.95, [1.0]), episode(1.40, [0.30, 1.0])])


def push(group: Group, **settings) -> tuple[float, float]:
    """Net push on the sampled tokens of turn 1 and of turn 2: the sum over them of weight x
    advantage, what the policy-gradient step raises (> 0) or lowers (< 0) on balance."""
    per_group, _ = group_datums([group], GRPOSettings(normalize_std=False, kl_coef=0.0, **settings), budget=8, max_turns=2)
    turn_of = [k for ep in group.episodes for k in range(len(ep.turns))]
    sums = [0.0, 0.0]
    for k, datum in zip(turn_of, per_group[0]):
        sums[k] += sum(w * a for w, a in zip(datum.weights, datum.advantages))
    return sums[0], sums[1]


@pytest.mark.parametrize(
    "credit, normalization, turn1, turn2, total",
    [
        # Every token of the batch counts once: turn 1 balances, the losers' second turns are pushed
        # down, and the batch as a whole goes down (the turn-count bias).
        ("episode", "token", 0, -1, -1),
        # Dr. GRPO's constant divisor keeps the token sum: the same signs, at another scale.
        ("episode", "constant", 0, -1, -1),
        # Each episode weighs once: the win's turn outweighs the losers' first turns, their second
        # turns are still pushed down, and the batch is balanced.
        ("episode", "sequence", +1, -1, 0),
        # Turn credit: turn 2 is judged against the other turn-2 players only, so it balances.
        ("turn", "token", 0, 0, 0),
        ("turn", "constant", 0, 0, 0),
        ("turn", "sequence", +1, 0, +1),
    ],
)
def test_the_sign_each_option_gives_on_turn_1_and_turn_2_tokens(credit, normalization, turn1, turn2, total):
    first, second = push(one_win_three_two_turn_games(), credit=credit, loss_normalization=normalization)
    sign = lambda x: 0 if abs(x) < 1e-9 else (1 if x > 0 else -1)
    assert (sign(first), sign(second), sign(first + second)) == (turn1, turn2, total)


def test_turn_credit_rewards_a_lone_rescue_on_its_second_turn_where_episode_credit_punishes_both():
    group = three_wins_and_a_rescue()
    for normalization in ("token", "sequence", "constant"):
        per_group, _ = group_datums([group], GRPOSettings(normalize_std=False, credit="episode", loss_normalization=normalization), budget=8, max_turns=2)
        rescue_turns = per_group[0][3:]
        assert all(a < 0 for d in rescue_turns for a, w in zip(d.advantages, d.weights) if w)
        per_group, _ = group_datums([group], GRPOSettings(normalize_std=False, credit="turn", loss_normalization=normalization), budget=8, max_turns=2)
        turn1, turn2 = per_group[0][3:]
        assert all(a < 0 for a, w in zip(turn1.advantages, turn1.weights) if w)  # its first answer missed
        assert all(a == pytest.approx(1.40 - 0.30) for a, w in zip(turn2.advantages, turn2.weights) if w)  # the repair's own gain


def test_weights_are_relative_to_token_so_the_batch_scale_stays():
    group = one_win_three_two_turn_games()
    n_tokens = TOKENS * 7
    for normalization, expected_sum in (("token", n_tokens), ("sequence", n_tokens), ("constant", n_tokens * n_tokens / (4 * 2 * 8))):
        per_group, _ = group_datums([group], GRPOSettings(normalize_std=False, loss_normalization=normalization), budget=8, max_turns=2)
        assert sum(w for d in per_group[0] for w in d.weights) == pytest.approx(expected_sum)
        assert all(w == 0 for d in per_group[0] for w in d.weights[:2])  # prompt positions stay unweighted
    per_group, _ = group_datums([group], GRPOSettings(normalize_std=False, loss_normalization="sequence"), budget=8, max_turns=2)
    by_episode = [per_group[0][0]], per_group[0][1:3]
    win, loser = by_episode[0][0].weights[-1], by_episode[1][0].weights[-1]
    assert win == pytest.approx(2 * loser)  # one turn's tokens carry what two turns' tokens carry


class ReferencePolicy:
    """compute_logprobs of a start policy that gives every sampled token a fixed logprob."""

    def __init__(self, ref_logprob):
        self.ref_logprob = ref_logprob

    def compute_logprobs(self, datums, **kwargs):
        return [[self.ref_logprob(d, t) for t in range(len(d.weights))] for d in datums]


def test_centred_kl_penalty_sums_to_zero_over_the_batch_and_keeps_the_order():
    group = one_win_three_two_turn_games()
    settings = GRPOSettings(normalize_std=False, credit="episode")
    plain, _ = group_datums([group], settings, budget=8, max_turns=2)
    centred, _ = group_datums([group], settings, budget=8, max_turns=2)
    # The sampler's logprob is -0.5 everywhere; the start policy's varies by datum, so KL does too.
    policy = ReferencePolicy(lambda d, t: -0.5 - 0.1 * (d.model_input[0] + len(d.model_input)) / 10)
    before = [list(d.advantages) for d in plain[0]]
    kl_plain = fold_kl(policy, plain[0], temperature=1.0, decoder=None, kl_coef=0.5)
    kl_centred = fold_kl(policy, centred[0], temperature=1.0, decoder=None, kl_coef=0.5, center=True)
    assert kl_plain == pytest.approx(kl_centred) and kl_plain > 0
    delta_plain = [a - b for d, row in zip(plain[0], before) for a, b, w in zip(d.advantages, row, d.weights) if w]
    delta_centred = [a - b for d, row in zip(centred[0], before) for a, b, w in zip(d.advantages, row, d.weights) if w]
    assert sum(delta_plain) < 0  # uncentred: every sampled token pushed down on balance
    assert sum(delta_centred) == pytest.approx(0.0, abs=1e-9)
    assert [a - b for a, b in zip(delta_centred, delta_plain)] == pytest.approx([0.5 * kl_plain] * len(delta_plain))


def test_local_loss_scales_each_position_by_its_weight():
    import torch

    from emojikit_local.losses import loss_sum

    logprobs = torch.tensor([-1.0, -2.0])
    advantages = torch.tensor([1.0, -1.0])
    for loss in ("importance_sampling", "ppo"):
        ones, _ = loss_sum(loss, logprobs, torch.ones(2), advantages, logprobs.clone(), 0.2)
        scaled, _ = loss_sum(loss, logprobs, torch.tensor([3.0, 1.0]), advantages, logprobs.clone(), 0.2)
        assert float(ones) == pytest.approx(0.0) and float(scaled) == pytest.approx(-2.0)


# --- training targets SFT never saw ----------------------------------------------------------


def test_grpo_training_targets_leave_out_the_messages_the_start_sft_trained_on(tmp_path):
    import json

    from emojikit.api.errors import InputFileError
    from emojikit.composition.recipe import load_recipe
    from emojikit.play.targets import split_targets
    from emojikit.stages.runs import RunDir
    from emojikit.training.targets import sft_seen
    from recipe_texts import GRPO_COMPONENTS, jsonl

    texts = [f"message number {i}" for i in range(12)]
    (tmp_path / "source.jsonl").write_text(jsonl({"text": t} for t in texts), encoding="utf-8")
    (tmp_path / "heldout.jsonl").write_text(jsonl({"text": t} for t in texts[:2]), encoding="utf-8")
    # An SFT run whose train file labelled messages 2-6 (chat rows, as the data recipe writes them).
    train_file = tmp_path / "sft_train.jsonl"
    train_file.write_text(jsonl({"messages": [{"role": "system", "content": "Reply with 2-8 emoji only."}, {"role": "user", "content": t},
                                              {"role": "assistant", "content": "🍕🎉"}]} for t in texts[2:7]), encoding="utf-8")
    checkpoint = tmp_path / "sft/checkpoints/step_5"
    checkpoint.mkdir(parents=True)
    (tmp_path / "sft/recipe.toml").write_text(f'kind = "sft"\n[sft]\ntrain_file = {json.dumps(str(train_file))}\n', encoding="utf-8")
    components = GRPO_COMPONENTS.replace('use = "generated"', f'use = "jsonl"\npath = {json.dumps(str(tmp_path / "source.jsonl"))}')
    (tmp_path / "grpo.toml").write_text(
        'kind = "grpo"\n' + components + f'[grpo]\nstart_from = "base"\neval_targets = 2\ntarget_pool = 4\nheldout_file = {json.dumps(str(tmp_path / "heldout.jsonl"))}\n',
        encoding="utf-8",
    )
    recipe = load_recipe(tmp_path / "grpo.toml")
    seen = sft_seen(str(checkpoint))
    assert seen == set(texts[2:7])
    heldout, train = split_targets(recipe, recipe.settings["grpo"], RunDir(tmp_path / "run"), seen)
    assert [m.text for m in heldout] == texts[:2]
    assert [m.text for m in train] == texts[7:11]  # drawn past the SFT's messages: the pool keeps its size
    assert sft_seen(None) == frozenset() and sft_seen("tinker://run/step_5") == frozenset()
    train_file.unlink()
    with pytest.raises(InputFileError, match="train_file"):
        sft_seen(str(checkpoint))


@pytest.mark.parametrize("normalization", ["sequence", "constant"])
def test_a_tiny_grpo_run_trains_with_each_normalization_turn_credit_and_the_centred_kl(tmp_path, tiny_model, normalization):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from emojikit.ui.cli import cli

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "grpo"
    args = ["run", str(root / "recipes/grpo.toml"), "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1", "--set", "grpo.steps=1",
            "--set", "grpo.batch_size=2", "--set", "grpo.group_size=3", "--set", "grpo.eval_targets=2", "--set", "grpo.start_from=\"base\"",
            "--set", "game.max_turns=2", "--set", "game.max_new_tokens=6", "--set", "judge.distractors=8", "--set", "grpo.target_pool=8",
            "--set", "grpo.compare=false", "--set", f"grpo.loss_normalization=\"{normalization}\"", "--set", "grpo.credit=\"turn\"",
            "--set", "grpo.kl_center=true", "--set", "grpo.kl_coef=0.1", "--set", f"out={json.dumps(str(out))}"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "first-turn success" in (out / "before_after.md").read_text()
    [row] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    if row["datums"]:
        assert "kl" in row and abs(row["ratio_max_deviation"]) < 1e-3  # the weighted loss still replays at ratio 1
    assert {"first_turn_success", "repair_rate", "repair_wins", "first_turn_misses"} <= set(row)
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert all("repair_rate" in r for r in evals)
