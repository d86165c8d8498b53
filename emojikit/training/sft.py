"""Supervised fine-tuning: one loop against Policy, readable top to bottom.

Loss falls on the assistant's tokens only. Data order is a pure function of (seed, step),
so a resumed run sees exactly the batches it would have seen; with group_by_length, runs of
batches are sorted by token length and cut again, so a batch pads less (same examples per epoch).
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import statistics
import time
from pathlib import Path
from typing import Literal, Optional, Sequence

from pydantic import Field, field_validator

from emojikit.api.config import ConfigModel
from emojikit.api.errors import InputFileError
from emojikit.support.io import read_jsonl_numbered
from emojikit.training.weights import loss_weights

MAKE_DATA = "emojikit run recipes/data.toml"
DEFAULT_DATA_FILES = (Path("runs/data/sft_train.jsonl"), Path("runs/data/sft_test.jsonl"))  # what recipes/data.toml makes


class SFTSettings(ConfigModel):
    data: Optional[Path] = Field(
        None, description="The data recipe that makes train_file and test_file (e.g. recipes/data.toml): emojikit run runs it first when its run is missing or stale; a plain train_file/test_file still wins."
    )
    train_file: Path = Field(DEFAULT_DATA_FILES[0], description="Chat-format JSONL made by a data recipe.")
    test_file: Path = Field(DEFAULT_DATA_FILES[1], description="Held-out chat-format JSONL (eval NLL, final report).")
    max_train_examples: Optional[int] = Field(None, ge=1, description="Use only the first N training examples.")
    keep_best_read: float = Field(
        1.0, gt=0, le=1, description="Train on this share of the training chats (those not marked \"repair\"): those whose teacher answer reads best (each row's "
        "`reading`, written by a data recipe with [data] score_answers); 1: every chat. The main job trains three passes over the "
        "best-read 18 %: fewer, better-read pairs, each seen more often (docs/experiments/learning-per-minute.md)."
    )
    repair_share: float = Field(
        0.0, ge=0, lt=1, description="Share of the chats trained on that are repair turns: the best-read of train_file's rows marked "
        "\"repair\": true (written by a data recipe with [data] repair_turns), in place of as many one-turn chats, so the step count "
        "stays keep_best_read's. 0: none (a row marked repair trains only through this share)."
    )
    batch_size: int = Field(16, ge=1, description="Chats per optimizer step.")
    learning_rate: float = Field(3e-3, gt=0, description="Peak Adam learning rate of the LoRA weights.")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field("cosine", description="After warmup: constant, or a linear or cosine decay to zero at the last step.")
    warmup_steps: int = Field(10, ge=0, description="Steps of linear warmup from zero to learning_rate.")
    epochs: int = Field(1, ge=1, description="Passes over the training set (ignored when steps is set).")
    steps: Optional[int] = Field(None, ge=1, description="Optimizer steps; overrides epochs.")
    group_by_length: int = Field(
        0, ge=0, description="Cut padding: every N batches of the shuffled order are sorted by token length and cut again, so a batch "
        "pads to a length near its own examples' (0: random batches). Each example still comes once per epoch, within N batches of "
        "its random place."
    )
    repeat_batches: bool = Field(
        False, description="Every pass after the first trains the first pass's batches again (the same chats together) in a new seeded "
        "order, instead of new batches. A backend that keeps what its frozen layers computed for a batch (the local backend's "
        "keep_lower_layers_mb with lora_layers) skips those layers on every later pass."
    )
    loss_normalization: Literal["batch", "dataset"] = Field(
        "batch", description='How a step\'s summed answer-token loss is scaled: "batch" divides by the batch\'s own answer tokens (a '
        'batch of short answers weighs each token more); "dataset" by batch_size x the training set\'s mean answer tokens, so every '
        "token weighs the same whichever batch it lands in (length-grouped batches vary most; the logged loss is then that scaled one). "
        "Measured with group_by_length = 16: the same test NLL, no better a sender (docs/experiments/learning-per-minute.md)."
    )
    answer_tokens_only: Literal["never", "later-passes", "always"] = Field(
        "never", description="Score each answer position over the tokens the training answers are spelled with only (83 of "
        "SmolLM2's 49,152 for the main job's emoji answers), not the whole vocabulary: the loss's softmax runs over those, and a backend that masks "
        "(local) projects onto them alone: a later step of the main job's SFT in 0.89x the seconds on an AVX2 CPU (bench/answer_tokens.py; "
        "0.81x between two runs), the game the same. never: the whole vocabulary, whose loss also pushes every other token down, which teaches the format without a mask; "
        "later-passes: from the second pass on, after the first has pushed them down (unmasked, 0.910 of answers kept 2-8 emoji "
        "against 0.975); always: never pushed down (scored so under the decoder's own mask: 0.100). An answer with a token outside them (a test chat's) keeps the whole "
        "vocabulary. The test NLL is then logged both ways (test_nll, test_nll_answer_tokens) (docs/experiments/learning-per-minute.md)."
    )
    eval_every: int = Field(50, ge=0, description="Test-set NLL every N steps (0: never).")
    eval_examples: int = Field(64, ge=1, description="Test chats whose NLL is measured every eval_every steps.")
    sample_every: int = Field(50, ge=0, description="Sample the fixed prompts every N steps (0: never).")
    sample_prompts: int = Field(4, ge=1, description="Fixed test prompts sampled every sample_every steps (samples.jsonl).")
    save_every: int = Field(100, ge=0, description="Checkpoint every N steps (0: only at the end).")
    max_new_tokens: int = Field(32, ge=1, description="Token budget of the fixed-prompt samples and the final report (leave room for the longest training answer).")
    report_examples: int = Field(100, ge=0, description="Held-out prompts in the final format report (0: skip).")
    report_temperature: float = Field(0.7, ge=0, description="Sampling temperature of the fixed-prompt samples and the final report.")
    max_invalid_answers: float = Field(0.05, ge=0, le=1, description="Largest share of training answers that may break the emoji format (the decoder's, else 2-8 emoji) before the run is refused; a smaller share is a warning.")

    @field_validator("train_file", "test_file")
    @classmethod
    def _exists(cls, path: Path) -> Path:
        if not path.exists():
            # Only the default data run's files are made by the data recipe; a file of one's own is just not there.
            made_by_data = os.path.abspath(path) in {os.path.abspath(f) for f in DEFAULT_DATA_FILES}
            where = "" if path.is_absolute() else f" (looked for at {os.path.abspath(path)})"
            raise ValueError(f"file not found: {path}" + (f" (make it with: {MAKE_DATA})" if made_by_data else where))
        load_chats(path)  # a bad line fails here, naming file:line, before a run directory is made
        return path

    @field_validator("data")
    @classmethod
    def _recipe_exists(cls, path: Optional[Path]) -> Optional[Path]:
        if path is not None and (path.suffix != ".toml" or not path.is_file()):
            raise ValueError(f"{path} is not a recipe file (a data recipe such as recipes/data.toml)")
        return path

def chat_problem(messages) -> Optional[str]:
    """Why `messages` is not a chat SFT can train on (None when it is): an optional system
    message, then user and assistant alternating, ending with a non-empty assistant answer;
    every content a string."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages) or messages[-1]["role"] != "assistant":
        return 'expected {"messages": [...]} ending with an assistant message'
    for i, m in enumerate(messages):
        if not isinstance(m["content"], str):
            return f"message {i + 1} ({m['role']}): content must be a string, got {json.dumps(m['content'])[:40]}"
    roles = [m["role"] for m in messages]
    body = roles[1:] if roles[0] == "system" else roles
    expected = ["user", "assistant"] * (len(body) // 2 + 1)
    if not body or body != expected[: len(body)]:
        return f"roles {', '.join(roles)}: expected an optional system message, then user and assistant alternating"
    if not messages[-1]["content"].strip():
        return "empty assistant answer"
    return None


def load_chats(path: Path, limit: Optional[int] = None) -> list[list[dict]]:
    """Chat examples ({"messages": [...]} ending with the assistant's answer)."""
    chats = []
    for number, row in read_jsonl_numbered(path):
        messages = row.get("messages")
        problem = chat_problem(messages)
        if problem is not None:
            raise InputFileError(f"{path}:{number}: {problem}")
        chats.append(messages)
        if limit and len(chats) >= limit:
            break
    if not chats:
        raise InputFileError(f"{path}: no examples")
    return chats


def row_reading(row: dict) -> Optional[float]:
    """A data row's `reading` ([data] score_answers), None when it has no number there."""
    reading = row.get("reading")
    return float(reading) if isinstance(reading, (int, float)) and not isinstance(reading, bool) else None


def best_read(path: Path, chats: list[list[dict]], share: float, repair_share: float = 0.0) -> list[list[dict]]:
    """The chats to train on, in the file's order: `share` of `chats` (the first rows of `path`)
    that are not repair rows, those whose rows read best; with `repair_share`, that share of
    them replaced by the best-read repair rows (a data run's [data] repair_turns)."""
    rows = [(number, row) for (number, row), _ in zip(read_jsonl_numbered(path), chats)]
    turn_one = [i for i, (_, row) in enumerate(rows) if row.get("repair") is not True]
    repairs = [i for i, (_, row) in enumerate(rows) if row.get("repair") is True]
    total = len(turn_one) if share >= 1 else max(1, math.ceil(share * len(turn_one)))
    n_repair = round(repair_share * total)
    if n_repair > len(repairs):
        raise InputFileError(f"{path}: [sft] repair_share = {repair_share} takes {n_repair} repair rows, the file has {len(repairs)}; "
                             "make the data with [data] repair_turns = true, or lower repair_share")

    def best(indices: list[int], n: int) -> list[int]:
        if n >= len(indices):
            return indices
        readings = {}
        for i in indices:
            reading = row_reading(rows[i][1])
            if reading is None:
                raise InputFileError(f"{path}:{rows[i][0]}: no number in \"reading\"; [sft] keep_best_read needs a data run with [data] score_answers = true")
            readings[i] = reading
        return sorted(indices, key=lambda i: -readings[i])[:n]

    kept = sorted(best(turn_one, total - n_repair) + best(repairs, n_repair))
    return chats if len(kept) == len(chats) else [chats[i] for i in kept]


def preflight(recipe) -> None:
    """What run() would reject, checked before a run directory is made: training answers
    outside the recipe's emoji format (over [sft] max_invalid_answers fails, fewer warn) and a
    token budget too small for the decoder's shortest answer."""
    from emojikit.api.emojis import is_emoji_only
    from emojikit.api.errors import ConfigError
    from emojikit.composition.preflight import token_budget_problem, warn

    s: SFTSettings = recipe.settings["sft"]
    config = recipe.components["decoder"].config if recipe.has("decoder") else None
    lo, hi = getattr(config, "min_emoji", 2), getattr(config, "max_emoji", 8)
    rows = list(read_jsonl_numbered(s.train_file))[: s.max_train_examples]
    if s.keep_best_read < 1:
        unread = next((n for n, row in rows if row_reading(row) is None), None)
        if unread is not None:
            raise ConfigError(f"{recipe.path}: [sft] keep_best_read: {s.train_file}:{unread} has no \"reading\"; make the data with [data] score_answers = true, or set keep_best_read = 1")
    if s.repair_share > 0:
        try:
            best_read(s.train_file, [row["messages"] for _, row in rows], s.keep_best_read, s.repair_share)
        except InputFileError as exc:
            raise ConfigError(f"{recipe.path}: {exc}") from None
    bad = [n for n, row in rows if not is_emoji_only(row["messages"][-1]["content"], lo, hi)]
    if bad:
        share = len(bad) / len(rows)
        text = (
            f"[sft] train_file: {len(bad)} of {len(rows)} answers ({share:.1%}) are not {lo}-{hi} emoji only "
            f"(first at {s.train_file}:{bad[0]})"
        )
        if share > s.max_invalid_answers:
            raise ConfigError(f"{recipe.path}: {text}, over [sft] max_invalid_answers = {s.max_invalid_answers}; fix the data or raise max_invalid_answers")
        warn(f"{recipe.path}: {text}; they are trained on as they are")
    problem = token_budget_problem(recipe, s.max_new_tokens, "[sft] max_new_tokens")
    if problem:
        raise ConfigError(f"{recipe.path}: {problem}")


def chat_datum(policy, messages: list[dict], vocabulary: Optional["AnswerTokens"] = None):
    """A Datum with loss on the assistant's answer (and its end-of-turn token) only; with a
    vocabulary that spells the whole answer, the answer is scored over that vocabulary alone."""
    from emojikit.api.policy import Datum

    prompt = policy.encode_prompt(messages[:-1])
    answer = policy.encode_completion(messages[-1]["content"])
    tokens = prompt + answer
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    datum = Datum(model_input=tokens[:-1], target_tokens=tokens[1:], weights=weights)
    if vocabulary is not None and vocabulary.spells(answer):
        # the answer's positions as if drawn under a mask that allows the vocabulary everywhere
        datum.decoded_spans = [(len(prompt) - 1, len(tokens) - 1)]
        datum.decode_budget = len(answer)
    return datum


class AnswerTokens:
    """The tokens a set of answers is spelled with, as a decoder whose mask allows all of them at
    every position (answer_tokens_only): passed with datums whose answers are marked decoded, a
    masking backend scores them over these tokens alone. Its own constraint (start, advance,
    allowed): the state never changes."""

    def __init__(self, token_ids: Sequence[int], eos_token_id: int):
        import torch

        self.eos_token_id = eos_token_id
        self.token_ids = frozenset(token_ids) | {eos_token_id}
        self._allowed_W = torch.zeros(max(self.token_ids) + 1, dtype=torch.bool)  # a backend pads it to its vocabulary
        self._allowed_W[sorted(self.token_ids)] = True

    @classmethod
    def of(cls, policy, chats: Sequence[list[dict]]) -> "AnswerTokens":
        ids = {token for chat in chats for token in policy.encode_completion(chat[-1]["content"])}
        return cls(ids, policy.encode_completion("")[-1])

    def spells(self, tokens: Sequence[int]) -> bool:
        return all(token in self.token_ids for token in tokens)

    def bind(self, tokenizer):
        return self

    def start(self) -> int:
        return 0

    def advance(self, state: int, token_id: int) -> int:
        return 0

    def allowed(self, state: int, tokens_left: int):
        return self._allowed_W

    def allowed_batch(self, states: Sequence[int], tokens_left: Sequence[int]):
        return self._allowed_W.expand(len(states), -1)


def learning_rate(settings: SFTSettings, step: int, total: int) -> float:
    base = settings.learning_rate
    if step < settings.warmup_steps:
        return base * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, total - settings.warmup_steps)
    if settings.lr_schedule == "linear":
        return base * max(0.0, 1.0 - progress)
    if settings.lr_schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * progress))
    return base


@functools.lru_cache(maxsize=2)
def _epoch_order(n_examples: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n_examples))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


def _stream(n_examples: int, seed: int, start: int, count: int) -> list[int]:
    """Positions start .. start + count - 1 of the seeded epoch permutations laid end to end."""
    out: list[int] = []
    while len(out) < count:
        epoch, offset = divmod(start + len(out), n_examples)
        out.extend(_epoch_order(n_examples, seed, epoch)[offset : offset + count - len(out)])
    return out


def batch_indices(n_examples: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Indices of the batch at `step`: epochs are seeded permutations laid end to end."""
    return _stream(n_examples, seed, step * batch_size, batch_size)


def length_grouped_batch_indices(lengths: Sequence[int], batch_size: int, step: int, seed: int, group_batches: int) -> list[int]:
    """batch_indices with padding cut: each run of group_batches batches of the same stream is
    sorted by length (longest first) and cut into batches again, which then come in a seeded
    order. Every example still comes once per epoch, at most group_batches batches from where
    batch_indices puts it; a batch pads to a length near its own examples'. A pure function of
    (seed, step), as batch_indices, so a resumed run sees the same batches."""
    window, position = divmod(step, group_batches)
    members = _stream(len(lengths), seed, window * batch_size * group_batches, batch_size * group_batches)
    members.sort(key=lambda i: -lengths[i])  # stable: equal lengths keep the shuffled order
    batches = [members[k : k + batch_size] for k in range(0, len(members), batch_size)]
    random.Random(f"{seed}:{window}").shuffle(batches)
    return batches[position]


def repeated_step(step: int, steps_per_pass: int, seed: int) -> int:
    """The first pass's step whose batch comes again at `step`: each later pass is a seeded
    permutation of the first pass's steps (a pure function, so a resumed run sees the same)."""
    repeat, position = divmod(step, steps_per_pass)
    if repeat == 0:
        return step
    order = list(range(steps_per_pass))
    random.Random(f"{seed}:repeat:{repeat}").shuffle(order)
    return order[position]


def test_nll(policy, datums, decoder=None) -> float:
    # Only the answers' positions count: a backend may skip the others (the shared system prompt
    # once, the vocabulary at answer tokens only: 1.5x faster on an AVX2 CPU, the same NLL).
    logprobs = policy.compute_logprobs(datums, decoder=decoder, weighted_only=True)
    total = sum(-lp * w for d, lps in zip(datums, logprobs) for lp, w in zip(lps, d.weights))
    count = sum(sum(d.weights) for d in datums)
    return total / max(count, 1e-9)


def run(recipe, run_dir) -> None:
    from tqdm import tqdm

    from emojikit.evaluation.evaluate import format_report, write_report
    from emojikit.stages.interrupt import Interrupted, graceful_stop
    from emojikit.api.policy import AdamParams, SamplingParams

    s: SFTSettings = recipe.settings["sft"]
    train = best_read(s.train_file, load_chats(s.train_file, s.max_train_examples), s.keep_best_read, s.repair_share)
    test = load_chats(s.test_file)
    steps = s.steps or s.epochs * math.ceil(len(train) / s.batch_size)

    policy = recipe.build("backend", run_dir.path)
    decoder = recipe.build("decoder", run_dir.path) if recipe.has("decoder") else None

    start = run_dir.resume_policy(policy, ("metrics.jsonl", "samples.jsonl"))

    test_datums = [chat_datum(policy, chat) for chat in test[: s.eval_examples]]
    steps_per_pass = math.ceil(len(train) / s.batch_size)
    # The step from which answers are scored over the answers' tokens only (None: never).
    narrow_from = {"never": None, "later-passes": steps_per_pass, "always": 0}[s.answer_tokens_only]
    vocabulary, narrow_test = None, []
    if narrow_from is not None:
        vocabulary = AnswerTokens.of(policy, train)
        narrow_test = [chat_datum(policy, chat, vocabulary) for chat in test[: s.eval_examples]]
    sample_chats = [chat[:-1] for chat in test[: s.sample_prompts]]
    sample_params = SamplingParams(max_tokens=s.max_new_tokens, temperature=s.report_temperature, seed=recipe.seed)

    lengths, answer_tokens = None, None
    if s.group_by_length or s.loss_normalization == "dataset":
        measured = [chat_datum(policy, chat) for chat in tqdm(train, desc="lengths", unit="chat", leave=False)]
        lengths = [len(d.model_input) for d in measured] if s.group_by_length else None
        answer_tokens = statistics.fmean(sum(1 for w in d.weights if w) for d in measured)

    def batch_at(step: int) -> list[int]:
        if s.repeat_batches:
            step = repeated_step(step, steps_per_pass, recipe.seed)
        if lengths is None:
            return batch_indices(len(train), s.batch_size, step, recipe.seed)
        return length_grouped_batch_indices(lengths, s.batch_size, step, recipe.seed, s.group_by_length)

    stop_hint = recipe.resume_hint()  # repeats the --set values, so it works as printed
    with graceful_stop() as stop:
        bar = tqdm(range(start, steps), initial=start, total=steps, desc="sft", unit="step")
        for step in bar:
            t0 = time.time()
            batch = [train[i] for i in batch_at(step)]
            narrow = narrow_from is not None and step >= narrow_from
            datums = [chat_datum(policy, chat, vocabulary if narrow else None) for chat in batch]
            if s.loss_normalization == "dataset":
                # every chat an episode: the summed answer-token loss over batch_size x the data's mean answer tokens
                loss_weights([[d] for d in datums], "constant", answer_tokens)
            lr = learning_rate(s, step, steps)
            out = policy.forward_backward(datums, "cross_entropy", decoder=vocabulary if narrow else None)
            optim = policy.optim_step(AdamParams(learning_rate=lr))
            done = step + 1
            row = {"step": done, "loss": out.loss, "lr": lr, "tokens": out.n_tokens, **{f"optim/{k}": v for k, v in optim.items()}}
            if s.eval_every and (done % s.eval_every == 0 or done == steps):
                row["test_nll"] = test_nll(policy, test_datums)
                if narrow_from is not None:
                    row["test_nll_answer_tokens"] = test_nll(policy, narrow_test, vocabulary)
            if s.sample_every and (done % s.sample_every == 0 or done == steps):
                samples = policy.sample(sample_chats, 1, sample_params, None)
                for chat, (sample,) in zip(sample_chats, samples):
                    run_dir.log("samples.jsonl", {"step": done, "prompt": chat[-1]["content"], "answer": sample.text})
                    tqdm.write(f"[step {done}] {chat[-1]['content'][:60]!r} -> {sample.text}")
            row["seconds"] = time.time() - t0
            run_dir.log("metrics.jsonl", row)
            bar.set_postfix(loss=f"{out.loss:.3f}", lr=f"{lr:.1e}")
            if (s.save_every and done % s.save_every == 0) or done == steps or stop:
                with run_dir.new_checkpoint(done) as tmp:
                    policy.save(str(tmp))
            if stop:
                bar.close()
                raise Interrupted(f"stopped by {stop.signal_name} after step {done} (checkpoint saved); {stop_hint}")
        bar.close()

    final = run_dir.checkpoint_path(steps)
    if s.report_examples:
        prompts = [chat[:-1] for chat in test[: s.report_examples]]
        report = format_report(policy, decoder, prompts, temperature=s.report_temperature, max_tokens=s.max_new_tokens, seed=recipe.seed)
        write_report(report, run_dir.path, "eval_sft", title=f"SFT format report: {final}")
    print(f"final adapter: {final}")
