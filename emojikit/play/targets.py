"""The game's targets: read from a targets file, and a run's held-out and training targets.

Shared by the loops (emojikit.training: grpo, rft), the evaluations (emojikit.evaluation:
evaluate, comparison, repair) and the web game, so none of them imports another for them.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path
from typing import Optional, Sequence

from emojikit.api.components import Message


def read_targets(path: Path, limit: Optional[int] = None):
    """Messages from JSONL (text, optional category), CSV/TSV with a header naming a text (and
    optional category) column, or plain text with one message per line; the first `limit`."""
    from emojikit.api.errors import InputFileError
    from emojikit.support.io import read_jsonl_numbered, read_lines

    path = Path(path)
    if path.suffix == ".jsonl":
        rows = []
        for number, row in read_jsonl_numbered(path):
            if not isinstance(row.get("text"), str):
                raise InputFileError(f'{path}:{number}: expected a "text" string (and optionally "category"), got keys {sorted(row)}')
            rows.append(Message(row["text"].strip(), str(row.get("category") or "unknown")))
    elif path.suffix in (".csv", ".tsv"):
        # read_lines first: a line that is not UTF-8 (or too long) is named by file:line
        text = "\n".join(line for _, line, _ in read_lines(path, what="targets file"))
        rows = _read_table(path, text, "\t" if path.suffix == ".tsv" else ",")
    else:
        rows = [Message(line.strip()) for _, line, _ in read_lines(path, what="targets file") if line.strip()]
    rows = [m for m in rows if m.text]
    seen: set[str] = set()
    unique = [m for m in rows if not (m.text in seen or seen.add(m.text))]  # the first of each text, in file order
    if len(unique) < len(rows) and path not in _WARNED_DUPLICATES:
        import sys

        _WARNED_DUPLICATES.add(path)  # a file is read more than once (checked, then played): say it once
        print(f"emojikit: warning: {path}: {len(rows) - len(unique)} repeated target(s) dropped: in one pool a reader can never tell two copies apart",
              file=sys.stderr, flush=True)
    rows = unique[:limit]
    if not rows:
        raise InputFileError(f"{path}: no targets")
    return rows


_WARNED_DUPLICATES: set[Path] = set()


def _read_table(path: Path, text: str, delimiter: str) -> list[Message]:
    """The rows of a CSV/TSV targets file. Strict: a row with more fields than the header (an
    unquoted delimiter inside a text) or a quote left open would otherwise cut or merge texts
    without a word."""
    import csv

    from emojikit.api.errors import InputFileError

    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    holds = "a tab" if delimiter == "\t" else 'a comma ("a,b")'
    start = 0
    try:
        header = [h.strip() for h in next(reader, [])]
        if "text" not in header:
            raise InputFileError(f"{path}:1: expected a header with a text column (and optionally category), got {header}")
        rows = []
        start = reader.line_num
        for fields in reader:
            if len(fields) > len(header):
                raise InputFileError(f"{path}:{start + 1}: {len(fields)} fields, the header has {len(header)}: "
                                     f"quote a text that holds {holds}")
            start = reader.line_num
            row = dict(zip(header, fields))
            rows.append(Message((row.get("text") or "").strip(), (row.get("category") or "").strip() or "unknown"))
    except csv.Error as e:
        raise InputFileError(f"{path}:{start + 1}: {e} (a quoted text ends with a quote; a quote inside it is written twice)") from None
    return rows


# --- a GRPO or RFT run's targets: held-out ones for evaluation, the rest for training ----------


def split_targets(recipe, g, run_dir, seen: frozenset[str] = frozenset()) -> tuple[list[Message], list[Message]]:
    """(held-out, training) targets; held-out ones never train, even when the prompt source repeats them.
    With a heldout_file, none of its rows trains, also those past the eval_targets played. No
    message in `seen` (those whose teacher answers the start's SFT trained on: `sft_seen`) trains
    either; the source is drawn past them, so the pool keeps its size. The held-out targets do
    not depend on `seen` (the comparison draws them without it)."""
    from emojikit.api.errors import ConfigError, InputFileError

    source = recipe.build("prompts", run_dir.path)
    seen = seen | excluded_texts(recipe, g)  # the other held-out sets never train either
    if g.heldout_file is not None:
        if not Path(g.heldout_file).is_file():  # preflight let it pass as an upstream run's output: that run did not write it
            raise InputFileError(f"{recipe.path}: [{table_of(g)}] heldout_file: {g.heldout_file} does not exist")
        whole_file = read_targets(g.heldout_file)
        heldout = whole_file[: g.eval_targets]
        held = {m.text for m in whole_file}  # the whole file, also the rows past eval_targets, never trains
        drawn = source.messages(draw_count(g, len(held)) + len(seen))
        train = list(itertools.islice((m for m in drawn if m.text not in held and m.text not in seen and short_enough(m, g)), g.target_pool))
    else:
        drawn = iter(source.messages(g.eval_targets + g.target_pool + len(seen)))
        heldout = list(itertools.islice(drawn, g.eval_targets))
        held = {m.text for m in heldout}
        train = list(itertools.islice((m for m in drawn if m.text not in held and m.text not in seen and short_enough(m, g)), g.target_pool))
    if not train:
        raise ConfigError(f"{recipe.path}: [{table_of(g)}] eval_targets: the prompt source gave no messages for training")
    return heldout, train


def check_target_files(recipe, g, upstream: Sequence[Path] = ()) -> None:
    """heldout_file, compare_files and exclude_files read now as the run will read them, so that
    a missing file or a bad line stops `validate` and `run` before any stage trains. A file not
    there yet passes only inside `upstream`, the run directories of the recipes this one runs
    first (a data run's rl_heldout.jsonl)."""
    from emojikit.api.errors import InputFileError

    named = [("heldout_file", g.heldout_file)] if g.heldout_file is not None else []
    named += [(key, path) for key in ("compare_files", "exclude_files") for path in getattr(g, key, [])]
    for key, path in named:
        path = Path(path)
        if path.is_file():
            try:
                read_targets(path)
            except InputFileError as exc:
                raise InputFileError(f"{recipe.path}: [{table_of(g)}] {key}: {exc}") from None
            continue
        if not any(path.resolve().is_relative_to(run.resolve()) for run in upstream):
            raise InputFileError(f"{recipe.path}: [{table_of(g)}] {key}: {path} does not exist")


def table_of(g) -> str:
    """The recipe table of the settings `g` (GRPO's or RFT's), for error lines."""
    return getattr(g, "table_name", "grpo")


def excluded_texts(recipe, g) -> frozenset[str]:
    """Every row of the held-out sets besides heldout_file: [grpo] compare_files (the comparison
    plays them) and exclude_files (sets another command plays, e.g. `emojikit eval --targets`)."""
    from emojikit.api.errors import InputFileError

    texts: set[str] = set()
    for key in ("compare_files", "exclude_files"):
        for path in getattr(g, key, []):
            if not Path(path).is_file():
                raise InputFileError(f"{recipe.path}: [{table_of(g)}] {key}: {path} does not exist")
            texts.update(m.text for m in read_targets(Path(path)))
    return frozenset(texts)


def short_enough(message: Message, g) -> bool:
    """Training targets as long as the held-out ones: the data recipe's RL targets have at most
    rl_max_words words, and a sender trained on long messages learns another game."""
    return g.target_max_words is None or len(message.text.split()) <= g.target_max_words


def draw_count(g, n_heldout: int) -> int:
    """How many messages to draw so that, after dropping held-out and long ones, about
    target_pool remain (a generated message has at most 12 words about half the time)."""
    return (g.target_pool + n_heldout) * (3 if g.target_max_words is not None else 1)
