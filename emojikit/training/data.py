"""The `kind = "data"` pipeline: prompts -> teacher -> SFT chat files, plus RL target files.

Outputs in the run directory (each written atomically):
  sft_train.jsonl / sft_test.jsonl  {"messages": [system, user, assistant], "category": ...};
                                    with [data] score_answers, each training row also has
                                    "reading": how well the [judge] reads its answer; with
                                    [data] repair_turns, sft_train.jsonl also holds two-turn
                                    rows marked "repair": true (the teacher's second turn)
  rl_prompts.jsonl / rl_heldout.jsonl  short messages {"text": ..., "category": ...}; the
                                    held-out targets never appear in any SFT file or in
                                    rl_prompts, and rl_prompts avoids the SFT test split
  data_stats.json                   counts, drops, teacher speed, test-split quality
  teacher_progress.jsonl            the teacher's answers, one line per finished chunk, so an
                                    interrupted run (SIGINT/SIGTERM or kill -9) resumes with
                                    --resume without asking the teacher again
  teacher_variantN_progress.jsonl   the same for [data] teacher_variants' table N
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from typing import Any, Mapping, Optional

from pydantic import Field, model_validator

from emojikit.api import emojis
from emojikit.api.components import TEACHER_DROP_REASONS, CandidatePool, JudgeView, Message, RepairTeacher, TargetBelief, answers_of, guesses_of, message_key
from emojikit.api.config import ConfigModel, ExistingFile
from emojikit.api.errors import ConfigError
from emojikit.api.format import DEFAULT_FORMAT
from emojikit.play.targets import read_targets
from emojikit.support.io import atomic_write_jsonl, atomic_write_text

SYSTEM_PROMPT = DEFAULT_FORMAT.system_prompt  # "Reply with 2-8 emoji only."
FILTER_TABLES = ("judge", "reward", "backend")
PROGRESS_FILE = "teacher_progress.jsonl"
FILTER_BATCH = 64  # candidates per batched game in the communicability filter
READ_BATCH = 512  # answers per judge call when scoring (a [batch, pool] score matrix each)


class DataSettings(ConfigModel):
    count: int = Field(25_000, ge=1, description="Messages sent to the teacher (SFT pairs before drops and the test split); from a prompt source with fewer messages, every one it has (a note says so).")
    test_fraction: float = Field(0.05, ge=0.0, lt=1.0, description="Share of the SFT pairs kept for sft_test.jsonl.")
    system_prompt: str = Field(SYSTEM_PROMPT, min_length=1, description="System message of every SFT chat.")
    teacher_batch: int = Field(512, ge=1, description="Messages per teacher call (one progress-bar step).")
    rl_count: int = Field(2_000, ge=0, description="RL targets in total: rl_prompts.jsonl plus rl_heldout.jsonl.")
    rl_max_words: int = Field(12, ge=1, description="RL targets are messages of at most this many words.")
    rl_heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="Share of the RL targets held out (rl_heldout.jsonl, for evaluation).")
    filter_threshold: Optional[float] = Field(
        None, description="Keep an RL target only if sender -> judge -> similarity reaches this (None = no filter; needs [judge], [reward], [backend])."
    )
    filter_max_turns: int = Field(1, ge=1, description="Game turns the communicability filter plays per candidate.")
    exclude_files: list[ExistingFile] = Field(
        [], description="Held-out sets whose messages never become an SFT pair or an RL target: the sets later runs measure on "
        "(JSONL with a \"text\" field, CSV/TSV with a text column, or plain text, as `emojikit eval --targets` reads them). "
        "recipes/data.toml names the shipped ones (recipes/targets/), which the generated and chitchat sources can repeat."
    )
    score_answers: bool = Field(
        False, description="Score every SFT training pair by how well the [judge] reads the teacher's answer: its log-belief in the "
        "pair's message among every training message, from the answer alone (one turn). Written into each training row as "
        "`reading`; [sft] keep_best_read trains on the best-read share. Needs a [judge] that holds a pool and tells its belief "
        "(retrieval, keywords, panel)."
    )

    teacher_variants: list[dict[str, Any]] = Field(
        [], description="More teacher answers per training message: each table holds [teacher] settings that differ from the "
        "recipe's (e.g. `{ message_weight = 0.8 }`), the teacher answers every training message once more with each, the [judge] "
        "reads every answer as score_answers does, and each message keeps its best-read answer (the test split keeps the [teacher]'s "
        "own). Needs score_answers. Each table costs one more labelling and one more reading of the training pairs."
    )
    repair_turns: bool = Field(
        False, description="Also write the game's second turn: for every training pair whose answer the [judge] takes for another "
        "message, a two-turn chat (the answer, the game's follow-up with that wrong guess, the teacher's repair: emoji for what the "
        "guess missed), read by the [judge] over both turns with its guess excluded, as in the game. Rows marked \"repair\": true in "
        "sft_train.jsonl; [sft] repair_share trains on the best-read of them. Needs score_answers and a teacher that repairs "
        "(lexicon-repair)."
    )
    repair_turns_share: float = Field(
        0.5, gt=0, le=1, description="Repair turns for this share of the missed pairs, those whose first turn reads best: a repair "
        "reads about as well as its first turn (on the default data the best-read 962 repairs are 98.8 % among the better half of the "
        "misses; the repair turns in 110 s instead of 209 on an AVX512 CPU). 1: every miss."
    )

    @model_validator(mode="after")
    def _threshold_range(self) -> "DataSettings":
        if self.filter_threshold is not None and not -1.0 <= self.filter_threshold <= 1.0:
            raise ValueError(f"filter_threshold must be a similarity in [-1, 1], got {self.filter_threshold}")
        return self


def chat_row(system: str, message: Message, answer: str, reading: Optional[float] = None) -> dict:
    row = {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": message.text},
            {"role": "assistant", "content": answer},
        ],
        "category": message.category,
    }
    if reading is not None:
        row["reading"] = round(reading, 4)
    return row


def repair_row(system: str, message: Message, answer: str, guess: str, repair: str, reading: float) -> dict:
    """A two-turn chat: the teacher's answer, the game's follow-up with the judge's wrong guess, the teacher's repair."""
    row = chat_row(system, message, answer)
    row["messages"] += [{"role": "user", "content": DEFAULT_FORMAT.follow_up.format(guess=guess, target=message.text)},
                        {"role": "assistant", "content": repair}]
    return row | {"reading": round(reading, 4), "repair": True}


def check_filter(recipe, settings: DataSettings) -> None:
    if settings.filter_threshold is None:
        return
    missing = [t for t in FILTER_TABLES if not recipe.has(t)]
    if missing:
        raise ConfigError(
            f"{recipe.path}: [data] filter_threshold: the communicability filter plays sender -> judge -> similarity; "
            f"add the {', '.join(f'[{t}]' for t in missing)} table(s) or remove filter_threshold"
        )


def check_reader(recipe, settings: DataSettings) -> None:
    if settings.score_answers and not recipe.has("judge"):
        raise ConfigError(f"{recipe.path}: [data] score_answers: the answers are read by the [judge]; add a [judge] table (e.g. use = \"panel\") or set score_answers = false")
    if settings.repair_turns and not settings.score_answers:
        raise ConfigError(f"{recipe.path}: [data] repair_turns: the repair turns are made where the [judge] misses the teacher's answer, so the answers must be read; set score_answers = true or remove repair_turns")
    if settings.teacher_variants and not settings.score_answers:
        raise ConfigError(f"{recipe.path}: [data] teacher_variants: each message keeps its best-read answer, so the answers must be read; set score_answers = true or remove teacher_variants")
    for number in range(1, len(settings.teacher_variants) + 1):
        variant_choice(recipe, settings, number)


def check_repair_teacher(recipe, settings: DataSettings, teacher) -> None:
    if settings.repair_turns and not isinstance(teacher, RepairTeacher):
        raise ConfigError(f"{recipe.path}: [data] repair_turns: the {recipe.components['teacher'].spec.name} teacher does not answer a "
                          "second turn; use a teacher that repairs ([teacher] use = \"lexicon-repair\") or remove repair_turns")


def variant_choice(recipe, settings: DataSettings, number: int):
    """The [teacher] with the settings of teacher_variants' table `number` (from 1) over the recipe's own."""
    from emojikit.composition.assembly import choose

    teacher = recipe.components["teacher"]
    settings_table = teacher.config.model_dump() | settings.teacher_variants[number - 1]
    try:
        return choose("teacher", teacher.spec.name, settings_table, recipe.context(), table=f"data.teacher_variants[{number}]")
    except ConfigError as exc:
        raise ConfigError(f"{recipe.path}: {exc}") from None


def preflight(recipe) -> None:
    """What run() would reject, checked before a run directory is made: the filter's tables,
    and a prompt source with no messages. A source smaller than [data] count (one that tells
    its capacity, such as a file of messages) is not an error: the run uses every message it
    has, and this prints a one-line note saying so."""
    settings: DataSettings = recipe.settings["data"]
    check_filter(recipe, settings)
    check_reader(recipe, settings)
    excluded_keys(settings)  # the held-out files' lines, read now
    if settings.repair_turns:
        check_repair_teacher(recipe, settings, recipe.build("teacher"))
    source = recipe.build("prompts")
    capacity = source_capacity(source)
    name = recipe.components["prompts"].spec.name
    if capacity == 0:
        raise ConfigError(f"{recipe.path}: [prompts] the {name} prompt source has no messages")
    if capacity is not None and settings.count > capacity:
        pairs, heldout = shrunk_counts(settings, capacity)
        also = f" and {heldout:,} held-out RL target{'s' if heldout > 1 else ''}" if heldout else ""
        fewer = ", fewer by its messages in [data] exclude_files" if settings.exclude_files else ""
        print(f"data: the {name} prompt source has {capacity:,} messages; making {pairs:,} pairs{also}{fewer}, not {settings.count:,}", flush=True)


def excluded_keys(settings: DataSettings) -> frozenset[str]:
    """Every message of [data] exclude_files, as `message_key` (a bad line names file:line)."""
    from emojikit.api.errors import InputFileError

    keys: set[str] = set()
    for path in settings.exclude_files:
        try:
            keys.update(message_key(m.text) for m in read_targets(path))
        except InputFileError as exc:
            raise InputFileError(f"[data] exclude_files: {exc}") from None
    return frozenset(keys)


def source_capacity(source) -> Optional[int]:
    """How many distinct messages the prompt source can give (None when it cannot tell)."""
    return source.capacity() if hasattr(source, "capacity") else None


def heldout_count(settings: DataSettings) -> int:
    return round(settings.rl_count * settings.rl_heldout_fraction)


def shrunk_counts(settings: DataSettings, capacity: int) -> tuple[int, int]:
    """(SFT messages, held-out RL targets) when the source has fewer messages than [data] count:
    every message is used; rl_heldout_fraction of them (at most the usual number) are held out."""
    heldout = min(heldout_count(settings), round(capacity * settings.rl_heldout_fraction))
    return capacity - heldout, heldout


def communicable(recipe, run_dir, settings: DataSettings, candidates: list[Message], want: int) -> tuple[list[Message], dict]:
    """The first `want` candidates whose game (sender -> judge -> similarity) reaches the
    threshold within filter_max_turns, played in batches; and how many were tried."""
    from tqdm import tqdm

    from emojikit.play.game import GameSettings, play
    from emojikit.api.policy import SamplingParams

    policy = recipe.build("backend", run_dir.path)
    decoder = recipe.build("decoder", run_dir.path) if recipe.has("decoder") else None
    judge = recipe.build("judge", run_dir.path)
    reward = recipe.build("reward", run_dir.path)
    game = GameSettings(max_turns=settings.filter_max_turns, system_prompt=settings.system_prompt)
    kept: list[Message] = []
    tried = 0
    with tqdm(total=want, desc="communicability filter", unit="target") as bar:
        for start in range(0, len(candidates), FILTER_BATCH):
            chunk = candidates[start : start + FILTER_BATCH]
            sampling = SamplingParams(temperature=0.7, seed=recipe.seed + start)
            episodes = play(policy, decoder, judge, reward, chunk, settings=game, sampling=sampling)
            tried += len(chunk)
            passed = [m for m, ep in zip(chunk, episodes) if ep.turns and max(t.similarity for t in ep.turns) >= settings.filter_threshold]
            kept.extend(passed)
            bar.update(min(len(passed), want - bar.n))
            if len(kept) >= want:
                break
    return kept[:want], {"rl_filter_tried": tried, "rl_filter_kept": len(kept), "rl_filter_threshold": settings.filter_threshold}


def answer_reader(recipe, run_dir):
    """The [judge] that reads the teacher's answers, built before the teacher works, so a judge
    that cannot read them fails in seconds rather than after the answers."""
    judge = recipe.build("judge", run_dir.path)
    name = recipe.components["judge"].spec.name
    if not (isinstance(judge, CandidatePool) and isinstance(judge, TargetBelief)):
        raise ConfigError(f"{recipe.path}: [data] score_answers: the {name} judge does not hold a pool and tell its belief; use retrieval, keywords or panel")
    return judge


def read_answers(judge, pairs: list[tuple[Message, str]]) -> list[float]:
    """Each pair's reading: the judge's log-belief in the pair's message, among every message
    of `pairs` (and the judge's own distractors), from the teacher's answer alone. A teacher
    answer that names its message unmistakably reads near 0; one the reader takes for other
    messages reads far below."""
    from tqdm import tqdm

    texts = [m.text for m, _ in pairs]
    judge.add_candidates(texts)
    readings: list[float] = []
    with tqdm(total=len(pairs), desc="reading answers", unit="pair") as bar:
        for start in range(0, len(pairs), READ_BATCH):
            chunk = pairs[start : start + READ_BATCH]
            beliefs = judge.target_logprobs([JudgeView(emoji_turns=[a]) for _, a in chunk], texts[start : start + READ_BATCH])
            # Every message is in the pool, so a belief is missing only for a blank message: the worst reading.
            readings.extend(b if b is not None else -1e9 for b in beliefs)
            bar.update(len(chunk))
    return readings


def best_read_answers(recipe, run_dir, settings: DataSettings, reader, train: list[tuple[Message, str]],
                      readings: list[float]) -> tuple[list[tuple[Message, str]], list[float], dict[str, int]]:
    """Each training message's best-read answer among the [teacher]'s and one more per
    teacher_variants table (each labelled with its own progress file, so an interrupted run
    resumes it), with its reading, and how many answers each teacher setting gave."""
    messages = [m for m, _ in train]
    answers, best, source = [a for _, a in train], list(readings), ["teacher"] * len(train)
    for number in range(1, len(settings.teacher_variants) + 1):
        name = f"teacher_variants[{number}]"
        teacher = variant_choice(recipe, settings, number).build(recipe.context(run_dir.path))
        said = label(teacher, messages, settings.teacher_batch, run_dir, recipe.resume_hint(),
                     progress=f"teacher_variant{number}_progress.jsonl", desc=f"teacher variant {number}")
        # Only a valid answer competes; the one the reader reads better replaces the kept one.
        valid = [i for i, a in enumerate(said) if a is not None and DEFAULT_FORMAT.check(a) and a.strip() != answers[i]]
        read = read_answers(reader, [(messages[i], said[i].strip()) for i in valid])
        for i, r in zip(valid, read):
            if r > best[i]:
                answers[i], best[i], source[i] = said[i].strip(), r, name
    return list(zip(messages, answers)), best, dict(Counter(source))


def repair_turns(judge, teacher: RepairTeacher, pairs: list[tuple[Message, str]], readings: list[float],
                 share: float = 1.0) -> tuple[list[tuple[Message, str, str, str, float]], int]:
    """(message, answer, the judge's wrong guess, the teacher's repair, its reading) for the pairs
    whose answer the judge (its pool already holding every message, as read_answers leaves it)
    takes for another message, the best-read `share` of those misses by their first turn's
    reading; the repair's reading is the judge's log-belief after both turns, its wrong guess
    excluded, as the game's judge reads a second turn. Also returns the number of misses."""
    from tqdm import tqdm

    guesses: list = []
    for start in range(0, len(pairs), READ_BATCH):  # the answers' readings are cached by now: fast
        guesses += guesses_of(judge, [JudgeView(emoji_turns=[a]) for _, a in pairs[start : start + READ_BATCH]])
    missed = [i for i, ((m, _), g) in enumerate(zip(pairs, guesses)) if g and g != m.text.strip()]
    chosen = sorted(sorted(missed, key=lambda i: -readings[i])[: math.ceil(share * len(missed))])
    out = []
    with tqdm(total=len(chosen), desc="repair turns", unit="pair") as bar:
        for start in range(0, len(chosen), READ_BATCH):
            chunk = [(*pairs[i], guesses[i]) for i in chosen[start : start + READ_BATCH]]
            repairs = teacher.repair([m.text for m, _, _ in chunk], [g for _, _, g in chunk], [a for _, a, _ in chunk])
            made = [(m, a, g, r.strip()) for (m, a, g), r in zip(chunk, repairs) if r is not None and DEFAULT_FORMAT.check(r)]
            views = [JudgeView(emoji_turns=[a, r], guesses=[g]) for _, a, g, r in made]
            beliefs = judge.target_logprobs(views, [m.text for m, _, _, _ in made]) if made else []
            out += [(m, a, g, r, b if b is not None else -1e9) for (m, a, g, r), b in zip(made, beliefs)]
            bar.update(len(chunk))
    return out, len(missed)


def reading_stats(readings: list[float], seconds: float) -> dict:
    """The median reading beside a reader that cannot read at all: -log(pool size), its belief in any message."""
    ordered = sorted(readings)
    middle = ordered[len(ordered) // 2] if ordered else None
    return {"reading_median": round(middle, 4) if middle is not None else None,
            "reading_uniform": round(-math.log(len(readings)), 4) if readings else None,
            "reading_seconds": round(seconds, 1)}


def _words(text: str) -> int:
    return len(text.split())


def draw_messages(source, n: int) -> list[Message]:
    """Up to n messages, deduplicated on their exact text (first occurrence wins)."""
    seen: set[str] = set()
    out = []
    for message in source.messages(n):
        if message.text not in seen:
            seen.add(message.text)
            out.append(message)
    return out


def label(teacher, messages: list[Message], batch: int, run_dir, resume_hint: str, drops: Optional[Counter] = None,
          progress: str = PROGRESS_FILE, desc: str = "teacher") -> list[Optional[str]]:
    """The teacher's answers, chunk by chunk. Each finished chunk is appended to `progress`
    (teacher_progress.jsonl, one write); a chunk answered there in full is not asked again.
    SIGINT or SIGTERM stops after the current chunk. `drops` gathers why answers are None,
    from a teacher that tells (its optional `stats`, see components.Teacher)."""
    from tqdm import tqdm

    from emojikit.stages.interrupt import Interrupted, graceful_stop

    done = run_dir.read(progress)
    if done:  # rewritten whole, so a line cut by kill -9 is gone before we append after it
        atomic_write_jsonl(run_dir.file(progress), done)
    # Only answers count: a message the teacher could not answer is asked again on resume.
    known = {text: answer for row in done for text, answer in zip(row["texts"], row["answers"]) if answer is not None}
    answers: list[Optional[str]] = []
    with graceful_stop() as stop, tqdm(total=len(messages), desc=desc, unit="msg") as bar:
        for start in range(0, len(messages), batch):
            chunk = messages[start : start + batch]
            if all(m.text in known for m in chunk):
                answers.extend(known[m.text] for m in chunk)
            else:
                chunk_answers = answers_of(teacher, chunk)  # checked before the progress file keeps them
                told = getattr(teacher, "stats", None)
                if drops is not None and isinstance(told, Mapping):
                    drops.update({reason: told.get(reason, 0) for reason in TEACHER_DROP_REASONS})
                run_dir.log(progress, {"texts": [m.text for m in chunk], "answers": chunk_answers})
                answers.extend(chunk_answers)
            bar.update(len(chunk))
            if stop and start + batch < len(messages):
                bar.close()
                raise Interrupted(f"stopped by {stop.signal_name} after {len(answers)} of {len(messages)} messages (answers saved); {resume_hint}")
    return answers


def run(recipe, run_dir) -> None:
    from emojikit.evaluation.metrics import distinct_per_100, literal_similarity

    settings: DataSettings = recipe.settings["data"]
    check_filter(recipe, settings)
    check_reader(recipe, settings)
    rng = random.Random(f"emojikit-data:{recipe.seed}")
    started = time.monotonic()

    # Draw extra messages so the held-out RL targets can be kept out of the SFT pairs.
    n_heldout = heldout_count(settings)
    source = recipe.build("prompts", run_dir.path)
    draw, count = settings.count + n_heldout, settings.count
    capacity = source_capacity(source)
    if capacity is not None and settings.count > capacity:  # a small source (preflight printed the note): all of it
        _, n_heldout = shrunk_counts(settings, capacity)
        draw = count = capacity
    # past the held-out sets' messages, also their variants in case or punctuation (the generated
    # source writes "Pizza?" and "PIZZA!"); a source gives what it has
    excluded = excluded_keys(settings)
    drawn = [(m, message_key(m.text) in excluded) for m in draw_messages(source, draw + len(excluded))]
    pool = [m for m, held in drawn if not held][:draw]
    short = [m for m in pool if _words(m.text) <= settings.rl_max_words]
    rng.shuffle(short)
    heldout = short[:n_heldout]
    heldout_texts = {m.text for m in heldout}
    sft_messages = [m for m in pool if m.text not in heldout_texts][:count]
    excluded_count = sum(held for _, held in drawn)
    if capacity is not None and settings.count > capacity and excluded_count:  # the preflight's note said "fewer by"
        name = recipe.components["prompts"].spec.name
        print(f"data: {excluded_count:,} of the {name} prompt source's messages are in [data] exclude_files; making {len(sft_messages):,} pairs", flush=True)

    reader = answer_reader(recipe, run_dir) if settings.score_answers else None
    teacher = recipe.build("teacher", run_dir.path)
    check_repair_teacher(recipe, settings, teacher)
    teacher_started = time.monotonic()
    drops: Counter = Counter()
    answers = label(teacher, sft_messages, settings.teacher_batch, run_dir, recipe.resume_hint(), drops)
    teacher_seconds = time.monotonic() - teacher_started

    pairs, dropped_none, dropped_invalid = [], 0, 0
    for message, answer in zip(sft_messages, answers):
        if answer is None:
            dropped_none += 1
        elif not DEFAULT_FORMAT.check(answer):
            dropped_invalid += 1  # a teacher's promise is checked, never trusted
        else:
            pairs.append((message, answer.strip()))
    # A teacher that drops an invalid answer itself returns None for it: count it as invalid.
    told_invalid = min(drops["invalid"], dropped_none)
    dropped_none, dropped_invalid = dropped_none - told_invalid, dropped_invalid + told_invalid
    rng.shuffle(pairs)
    n_test = round(len(pairs) * settings.test_fraction)
    test, train = pairs[:n_test], pairs[n_test:]
    read_started = time.monotonic()
    readings = read_answers(reader, train) if reader is not None else [None] * len(train)
    read_seconds = time.monotonic() - read_started
    answer_stats: dict = {}  # the teacher_variants' and repair_turns' counts and seconds
    if settings.teacher_variants:
        variants_started = time.monotonic()
        train, readings, kept_from = best_read_answers(recipe, run_dir, settings, reader, train, readings)
        answer_stats = {"answers_kept_from": kept_from, "teacher_variants_seconds": round(time.monotonic() - variants_started, 1)}
    repairs: list = []
    if settings.repair_turns:
        repair_started = time.monotonic()
        repairs, misses = repair_turns(reader, teacher, train, readings, settings.repair_turns_share)
        answer_stats["repair_turns_misses"] = misses
        answer_stats["repair_turns"] = len(repairs)
        answer_stats["repair_turns_median_reading"] = round(sorted(b for *_, b in repairs)[len(repairs) // 2], 4) if repairs else None
        answer_stats["repair_turns_seconds"] = round(time.monotonic() - repair_started, 1)
    rows = [chat_row(settings.system_prompt, m, a, r) for (m, a), r in zip(train, readings)]
    rows += [repair_row(settings.system_prompt, m, a, g, r, b) for m, a, g, r, b in repairs]
    atomic_write_jsonl(run_dir.file("sft_train.jsonl"), rows)
    atomic_write_jsonl(run_dir.file("sft_test.jsonl"), (chat_row(settings.system_prompt, m, a) for m, a in test))

    test_texts = {m.text for m, _ in test}
    rl_pool = [m for m in short[n_heldout:] if m.text not in test_texts]
    filter_stats: dict = {}
    if settings.filter_threshold is None:
        rl_prompts = rl_pool[: settings.rl_count - n_heldout]
    else:
        # Training targets only: held-out targets stay unfiltered, so evaluation sees the plain distribution.
        rl_prompts, filter_stats = communicable(recipe, run_dir, settings, rl_pool, settings.rl_count - n_heldout)
    atomic_write_jsonl(run_dir.file("rl_prompts.jsonl"), ({"text": m.text, "category": m.category} for m in rl_prompts))
    atomic_write_jsonl(run_dir.file("rl_heldout.jsonl"), ({"text": m.text, "category": m.category} for m in heldout))

    test_answers = [a for _, a in test]
    literal = literal_similarity([m.text for m, _ in test], test_answers) if test else []
    stats = {
        "messages": len(pool),
        "excluded_messages": excluded_count,  # drawn, but in [data] exclude_files
        "sft_messages": len(sft_messages),
        "dropped_no_answer": dropped_none,
        "dropped_invalid": dropped_invalid,
        # Of dropped_no_answer: batch items the teacher says errored, expired or were canceled.
        **{f"dropped_{reason}": drops[reason] for reason in ("errored", "expired", "canceled")},
        "sft_train": len(train),
        "sft_test": len(test),
        "rl_prompts": len(rl_prompts),
        "rl_heldout": len(heldout),
        "rl_shortfall": max(0, settings.rl_count - len(rl_prompts) - len(heldout)),
        "teacher": recipe.components["teacher"].spec.name,
        "teacher_msgs_per_s": round(len(sft_messages) / teacher_seconds, 1) if teacher_seconds > 0 else None,
        "test_literal_similarity": round(sum(literal) / len(literal), 4) if literal else None,
        "test_distinct_emoji_per_100": round(distinct_per_100(test_answers), 1) if test else None,
        "test_mean_emoji": round(sum(emojis.count(a) for a in test_answers) / len(test_answers), 2) if test else None,
        **filter_stats,
        **(reading_stats(readings, read_seconds) if settings.score_answers else {}),
        **answer_stats,
        "seconds": round(time.monotonic() - started, 1),
    }
    atomic_write_text(run_dir.file("data_stats.json"), json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats, indent=2))
