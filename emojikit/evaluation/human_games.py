"""Games people played in `emojikit serve`: the durable JSONL log and its summary for `eval`.

Each finished game is one line, appended with a single write and an fsync (io.append_jsonl),
so killing the server loses no finished game. A write cut by kill -9 leaves a torn last line;
reading skips it, and the log cuts it off before its next append so the new line stays whole.

A row: time, mode ("guess": the person guessed a checkpoint's emoji; "send": the person sent
emoji to a judge), checkpoint (the reference given to serve, e.g. "base" or a directory;
None in send mode), judge (send mode), target, category, turns (emoji, valid, guess,
similarity), success, similarity (best over turns), n_turns, max_turns, success_threshold.
"""

from __future__ import annotations

import os
import statistics
import threading
from pathlib import Path
from typing import Iterable, Optional

from emojikit.api.errors import InputFileError
from emojikit.support.io import append_jsonl, read_jsonl

FILE_NAME = "human_games.jsonl"


class HumanGameLog:
    """Appends finished games to `path` (thread-safe); cuts a torn last line first."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.dropped_bytes = self._cut_torn_tail()

    def _cut_torn_tail(self) -> int:
        """Truncate an unterminated last line (a write cut by a kill); returns the bytes dropped."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        with open(self.path, "r+b") as f:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        return len(data) - keep

    def append(self, row: dict) -> None:
        with self._lock:
            append_jsonl(self.path, row)

    def rows(self) -> list[dict]:
        return read_games(self.path) if self.path.exists() else []


def read_games(path: Path | str) -> list[dict]:
    """Every game in a log; a torn last line is skipped, any other bad line names file:line."""
    path = Path(path)
    rows = list(read_jsonl(path, tolerate_torn_tail=True))
    for number, row in enumerate(rows, start=1):
        if row.get("mode") not in ("guess", "send") or not isinstance(row.get("turns"), list):
            raise InputFileError(f"{path}: game {number}: not a human game (needs mode guess/send and turns)")
    return rows


def _figures(games: Iterable[dict]) -> dict:
    games = list(games)
    return {
        "games": len(games),
        "success_rate": sum(bool(g.get("success")) for g in games) / max(len(games), 1),
        "similarity": statistics.fmean(float(g.get("similarity", 0.0)) for g in games) if games else 0.0,
        "mean_turns": statistics.fmean(int(g.get("n_turns", len(g["turns"]))) for g in games) if games else 0.0,
    }


def summarize(games: Iterable[dict]) -> dict:
    """Per checkpoint: people as the judge (guess mode); per judge: people as the sender (send mode)."""
    games = list(games)
    guessers: dict[str, list[dict]] = {}
    senders: dict[str, list[dict]] = {}
    for g in games:
        if g["mode"] == "guess":
            guessers.setdefault(str(g.get("checkpoint") or "base"), []).append(g)
        else:
            senders.setdefault(str(g.get("judge") or "?"), []).append(g)
    return {
        "games": len(games),
        "human_judge": {name: _figures(rows) for name, rows in guessers.items()},
        "human_sender": {name: _figures(rows) for name, rows in senders.items()},
    }


def markdown(summary: dict, model_results: Optional[dict] = None) -> str:
    """Human figures per checkpoint next to the model judge's (an eval.json's results)."""
    model = (model_results or {}).get("checkpoints", {})
    judge = (model_results or {}).get("judge", "model judge")
    lines = [f"Human games: {summary['games']}.", ""]
    names = list(dict.fromkeys(list(summary["human_judge"]) + list(model)))
    if names:
        lines += [
            f"People as the judge (guess mode) next to the `{judge}` judge on the eval targets:",
            "",
            "| checkpoint | human games | human success rate | human mean similarity | human mean turns | model-judge success rate | model-judge mean similarity |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in names:
            h = summary["human_judge"].get(name)
            m = model.get(name, {}).get("masked")
            human = f"{h['games']} | {h['success_rate']:.3f} | {h['similarity']:.3f} | {h['mean_turns']:.2f}" if h else "0 | - | - | -"
            judged = f"{m['success_rate']:.3f} | {m['similarity']:.3f}" if m else "- | -"
            lines.append(f"| {name} | {human} | {judged} |")
    if summary["human_sender"]:
        lines += ["", "People as the sender (send mode):", "", "| judge | games | success rate | mean similarity | mean turns |", "|---|---|---|---|---|"]
        for name, h in summary["human_sender"].items():
            lines.append(f"| {name} | {h['games']} | {h['success_rate']:.3f} | {h['similarity']:.3f} | {h['mean_turns']:.2f} |")
    return "\n".join(lines) + "\n"


def checkpoints_played(games: Iterable[dict]) -> list[str]:
    """The checkpoints people guessed for, in first-played order."""
    return list(dict.fromkeys(str(g.get("checkpoint") or "base") for g in games if g["mode"] == "guess"))


def write_report(games: list[dict], out_dir: Path | str) -> tuple[Path, str]:
    """human_games.md (and .json) in an eval directory, beside its eval.json; returns (path, text)."""
    import json

    from emojikit.support.io import atomic_write_text

    out_dir = Path(out_dir)
    results = json.loads((out_dir / "eval.json").read_text(encoding="utf-8")) if (out_dir / "eval.json").exists() else None
    summary = summarize(games)
    text = markdown(summary, results)
    atomic_write_text(out_dir / "human_games.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    path = out_dir / "human_games.md"
    atomic_write_text(path, text)
    return path, text
