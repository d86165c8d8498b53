"""Games in the web page: the rules of Guess, Send and Watch, independent of the web framework.

guess  the sender (a checkpoint) sends emoji for a hidden target, the person guesses; after a
       miss the sender sees the guess and sends more emoji (as in the game), up to max turns.
send   the person sends emoji for a shown target, a judge guesses, turn by turn.
watch  sender and judge play, turn by turn.

Every model call goes to the worker; a game is "thinking" while its job waits or runs and the
page polls `state`. Finished guess and send games are appended to the human-game log.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from emojikit.api import emojis
from emojikit.api.components import Episode, EpisodeTurn, Message
from emojikit.evaluation.human_games import HumanGameLog
from emojikit.ui.web.models import Models
from emojikit.ui.web.worker import Job, ModelWorker

MODES = ("guess", "send", "watch")
MAX_TEXT = 300  # characters of a typed message or guess
MAX_EMOJI_INPUT = 120  # characters of emoji input (8 long ZWJ sequences fit)
MAX_LIVE_GAMES = 256  # games kept in memory; the oldest idle ones go first


class GameInputError(ValueError):
    """Input the person can fix; the page shows the message next to the field."""


class GameNotFound(KeyError):
    pass


@dataclass
class Game:
    id: str
    mode: str
    target: Message
    typed: bool  # a person typed the target (else it is a held-out target)
    max_turns: int
    checkpoint: Optional[str] = None  # checkpoint id (guess, watch)
    judge: Optional[str] = None  # judge name (send, watch)
    episode: Episode = None  # type: ignore[assignment]
    status: str = "thinking"  # thinking | your_turn | finished | error
    job: Optional[Job] = None
    error: str = ""
    started: float = field(default_factory=time.time)
    touched: float = field(default_factory=time.time)
    pending_guess: str = ""

    def __post_init__(self) -> None:
        self.episode = Episode(target=self.target.text, category=self.target.category)

    def snapshot(self) -> Episode:
        """A copy for the worker: the page never sees a half-updated game."""
        return Episode(target=self.episode.target, category=self.episode.category, turns=[EpisodeTurn(t.emoji, t.valid, t.guess, t.similarity) for t in self.episode.turns])


def _qualified(seq: str) -> str:
    """The fully-qualified form of an emoji typed without its variation selector (e.g. ❤ -> ❤️)."""
    known = emojis.info(seq)
    if known is not None and known.status == emojis.FULLY_QUALIFIED:
        return seq
    with_vs = seq + emojis.VS16 if not seq.endswith(emojis.VS16) else seq
    found = emojis.info(with_vs)
    return with_vs if found is not None and found.status == emojis.FULLY_QUALIFIED else seq


class GameService:
    def __init__(self, models: Models, worker: ModelWorker, log: Optional[HumanGameLog], *, rng: Optional[random.Random] = None):
        self.models, self.worker, self.log = models, worker, log
        self.format = models.format  # the one owner of "2-8"
        self.threshold = float(models.reward.success_threshold)
        self._games: dict[str, Game] = {}
        self._lock = threading.RLock()
        self._rng = rng or random.Random()

    # --- what the page asks --------------------------------------------------------------------

    def config(self) -> dict:
        return {
            "checkpoints": [{"id": c.id, "label": c.ref} for c in self.models.checkpoints],
            "judges": self.models.judge_names,
            "max_turns": self.models.game.max_turns,
            "min_emoji": self.format.min_emoji,
            "max_emoji": self.format.max_emoji,
            "success_threshold": self.threshold,
            "max_text": MAX_TEXT,
            "heldout_targets": len(self.models.heldout),
            "human_games": str(self.log.path) if self.log else None,
        }

    def state(self, game_id: str) -> dict:
        with self._lock:
            game = self._get(game_id)
            return self._public(game)

    # --- starting and playing ------------------------------------------------------------------

    def new_game(self, mode: str, *, checkpoint: Optional[str] = None, judge: Optional[str] = None, message: Optional[str] = None) -> dict:
        if mode not in MODES:
            raise GameInputError(f"mode must be one of {', '.join(MODES)}")
        if mode in ("guess", "watch"):
            checkpoint = checkpoint or self.models.checkpoints[0].id
            if checkpoint not in self.models.checkpoint_refs:
                raise GameInputError("unknown checkpoint: pick one from the list")
        else:
            checkpoint = None
        if mode in ("send", "watch"):
            judge = judge or self.models.judge_names[0]
            if judge not in self.models.judge_names:
                raise GameInputError("unknown judge: pick one from the list")
        else:
            judge = None
        typed = self._text(message, "message", required=False)
        if typed:
            target = Message(typed, "typed")
        elif self.models.heldout:
            target = self._rng.choice(self.models.heldout)
        else:
            raise GameInputError("no held-out targets: type a message")
        game = Game(secrets.token_urlsafe(12), mode, target, bool(typed), self.models.game.max_turns, checkpoint=checkpoint, judge=judge)
        with self._lock:
            self._evict()
            self._games[game.id] = game
            if mode == "send":
                game.status = "your_turn"
            else:
                self._sender_turn(game)
            return self._public(game)

    def guess(self, game_id: str, text: Any) -> dict:
        """Guess mode: the person's guess of the message, scored by the reward's similarity."""
        guess = self._text(text, "guess", required=True)
        with self._lock:
            game = self._get(game_id, mode="guess")
            self._expect_turn(game)
            game.pending_guess = guess
            game.status = "thinking"
            game.job = self.worker.submit(
                "similarity", None, (game.target.text, guess),
                lambda sim, g=game: self._scored(g, sim), lambda exc, g=game: self._failed(g, exc),
            )
            return self._public(game)

    def send(self, game_id: str, text: Any) -> dict:
        """Send mode: the person's emoji, checked by the format owner and the decoder, then judged."""
        with self._lock:
            game = self._get(game_id, mode="send")
            self._expect_turn(game)
            emoji = self.check_emoji(text)
            game.episode.turns.append(EpisodeTurn(emoji=emoji, valid=True))
            self._judge_turn(game)
            return self._public(game)

    def check_emoji(self, text: Any) -> str:
        """The person's emoji as the game's format wants them, or a GameInputError saying why not."""
        fmt = self.format
        if not isinstance(text, str) or not text.strip():
            raise GameInputError(f"Type or pick {fmt.range_text} emoji.")
        if len(text) > MAX_EMOJI_INPUT:
            raise GameInputError(f"That is too long: send {fmt.range_text} emoji.")
        found, rest = emojis.parse(text)
        if rest:
            raise GameInputError(f"Only emoji, please: {rest[:20]!r} is not an emoji.")
        if not fmt.in_range(len(found)):
            raise GameInputError(f"Send {fmt.range_text} emoji (you sent {len(found)}).")
        decoder = self.models.decoder
        joined = getattr(decoder, "separator", "").join(_qualified(e) for e in found)
        if decoder is not None:
            check = decoder.check(joined)
            if not check.valid:
                raise GameInputError(f"Not accepted: {check.reason}.")
        elif not fmt.check(joined):
            raise GameInputError(f"Send {fmt.range_text} emoji.")
        return joined

    # --- model turns (callbacks run in the worker thread) --------------------------------------

    def _sender_turn(self, game: Game) -> None:
        game.status = "thinking"
        game.job = self.worker.submit(
            "sender", game.checkpoint, game.snapshot(),
            lambda result, g=game: self._sent(g, result), lambda exc, g=game: self._failed(g, exc),
        )

    def _judge_turn(self, game: Game) -> None:
        game.status = "thinking"
        game.job = self.worker.submit(
            "judge", game.judge, game.snapshot(),
            lambda result, g=game: self._judged(g, result), lambda exc, g=game: self._failed(g, exc),
        )

    def _sent(self, game: Game, result: tuple[str, bool]) -> None:
        text, valid = result
        with self._lock:
            game.episode.turns.append(EpisodeTurn(emoji=text, valid=valid))
            game.job = None
            if game.mode == "watch":
                self._judge_turn(game)
            else:
                game.status = "your_turn"

    def _scored(self, game: Game, similarity: float) -> None:
        with self._lock:
            turn = game.episode.turns[-1]
            turn.guess, turn.similarity = game.pending_guess, float(similarity)
            game.pending_guess, game.job = "", None
            self._after_turn(game)

    def _judged(self, game: Game, result: tuple[Optional[str], float]) -> None:
        guess, similarity = result
        with self._lock:
            game.job = None
            if guess is None:
                game.episode.failed = True
                self._failed(game, RuntimeError("the judge gave no answer"))
                return
            turn = game.episode.turns[-1]
            turn.guess, turn.similarity = guess, float(similarity)
            self._after_turn(game)

    def _after_turn(self, game: Game) -> None:
        game.episode.success = game.episode.turns[-1].similarity >= self.threshold
        if game.episode.success or len(game.episode.turns) >= game.max_turns:
            self._finish(game)
        elif game.mode == "send":
            game.status = "your_turn"
        else:
            self._sender_turn(game)

    def _failed(self, game: Game, exc: BaseException) -> None:
        with self._lock:
            game.status, game.job = "error", None
            game.error = f"The model failed: {type(exc).__name__}: {str(exc)[:200]}"

    def _finish(self, game: Game) -> None:
        game.status = "finished"
        if game.mode != "watch" and self.log is not None:
            try:
                self.log.append(self.record(game))
            except Exception as exc:  # e.g. a full disk: the person must know the game was not kept
                game.status, game.error = "error", f"The game could not be saved: {str(exc)[:200]}"

    def record(self, game: Game) -> dict:
        """The game's row in the human-game log."""
        turns = game.episode.turns
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "mode": game.mode,
            "checkpoint": self.models.checkpoint_refs.get(game.checkpoint) if game.checkpoint else None,
            "judge": game.judge,
            "target": game.target.text,
            "category": game.target.category,
            "typed_target": game.typed,
            "turns": [{"emoji": t.emoji, "valid": t.valid, "guess": t.guess, "similarity": round(t.similarity, 4)} for t in turns],
            "success": game.episode.success,
            "similarity": round(max((t.similarity for t in turns), default=0.0), 4),
            "n_turns": len(turns),
            "max_turns": game.max_turns,
            "success_threshold": self.threshold,
            "seconds": round(time.time() - game.started, 1),
        }

    # --- helpers -------------------------------------------------------------------------------

    def _text(self, value: Any, what: str, *, required: bool) -> str:
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                raise GameInputError(f"Type a {what}.")
            return ""
        if not isinstance(value, str):
            raise GameInputError(f"{what} must be text")
        if len(value) > MAX_TEXT:
            raise GameInputError(f"The {what} is too long ({len(value)} characters; at most {MAX_TEXT}).")
        return " ".join(value.split())

    def _get(self, game_id: Any, mode: Optional[str] = None) -> Game:
        game = self._games.get(game_id) if isinstance(game_id, str) else None
        if game is None or (mode is not None and game.mode != mode):
            raise GameNotFound(game_id)
        game.touched = time.time()
        return game

    def _expect_turn(self, game: Game) -> None:
        if game.status == "thinking":
            raise GameInputError("Wait for the model's turn.")
        if game.status != "your_turn":
            raise GameInputError("This game is over: start a new one.")

    def _evict(self) -> None:
        idle = sorted((g for g in self._games.values() if g.status != "thinking"), key=lambda g: g.touched)
        while len(self._games) >= MAX_LIVE_GAMES and idle:
            self._games.pop(idle.pop(0).id, None)

    def _public(self, game: Game) -> dict:
        """What the page sees; in guess mode the target stays hidden until the game ends."""
        over = game.status in ("finished", "error")
        turns = game.episode.turns
        out = {
            "id": game.id,
            "mode": game.mode,
            "status": game.status,
            "checkpoint": game.checkpoint,
            "judge": game.judge,
            "max_turns": game.max_turns,
            "turns": [
                {"emoji": t.emoji, "valid": t.valid, "guess": t.guess if (t.guess or t.similarity) else None, "similarity": round(t.similarity, 4) if (t.guess or t.similarity) else None}
                for t in turns
            ],
            "success": game.episode.success,
            "best_similarity": round(max((t.similarity for t in turns), default=0.0), 4),
            "target": game.target.text if (game.mode != "guess" or over) else None,
            "error": game.error,
            "queue_ahead": self.worker.ahead_of(game.job) if game.status == "thinking" else 0,
        }
        if game.status == "thinking" and game.mode == "guess" and game.pending_guess:
            out["pending_guess"] = game.pending_guess
        return out
