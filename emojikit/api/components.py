"""The component spec every hook returns, and the interfaces of the seven component kinds.

Interfaces are Protocols so plugins need not inherit from anything; the training loops and
the game speak only to these. Optional capabilities are Protocols of their own
(`CandidatePool`, `TargetBelief`, `SuccessThreshold`), read only through the helpers below them, so a
component that implements just the required methods still plays. docs/plugins.md is the
whole contract.
"""

from __future__ import annotations

import re
import weakref

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel

from emojikit.api.errors import PluginError


@dataclass(frozen=True)
class BuildContext:
    """What a factory may know about the run it is built for.

    `registry` is the plugin registry the component was looked up in; a factory that needs
    another component builds it with `emojikit.build_component(kind, name, settings, ctx)`,
    which uses it. None means the default registry.
    """

    seed: int = 0
    run_dir: Optional[Path] = None
    recipe_path: Optional[Path] = None
    registry: Any = field(default=None, compare=False, repr=False)


@dataclass
class Component:
    """A component spec: what a hook implementation returns.

    `factory(config, ctx)` builds the component; heavy imports (torch, SDKs) belong inside it
    so listing plugins stays fast. `preflight(config, ctx)` runs during recipe validation,
    before any model loads or network call: check files exist there. `needs_key` names the
    environment variable of an API key the component needs (e.g. "ANTHROPIC_API_KEY"): the
    core checks it before the preflight and scrubs its value from error messages.
    """

    name: str
    summary: str
    config: type[BaseModel]
    factory: Callable[[Any, BuildContext], Any]
    preflight: Optional[Callable[[Any, BuildContext], None]] = None
    needs_key: Optional[str] = None
    # A key the component uses when it is set and works without (W&B: online with it,
    # offline without): declared so its value is scrubbed, never required.
    optional_key: Optional[str] = None
    # Filled by the registry: which plugin and distribution provided the component.
    kind: str = ""
    plugin: str = ""
    distribution: str = ""
    version: str = ""


# --- prompt sources and teachers -------------------------------------------------------


@dataclass(frozen=True)
class Message:
    text: str
    category: str = "unknown"


def message_key(text: str) -> str:
    """A message as prompt sources tell repeats apart: case, spacing and punctuation left out
    ("Pizza night!" and "PIZZA NIGHT?" are one message)."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


@runtime_checkable
class PromptSource(Protocol):
    def messages(self, n: Optional[int] = None) -> Iterator[Message]:
        """Yield up to n messages (all if None), deterministic for the build seed."""


@runtime_checkable
class Teacher(Protocol):
    """Answers messages in emoji.

    Optional attribute `stats`: a mapping of counts for the last answer() call. Where it
    holds the keys of TEACHER_DROP_REASONS, they count the messages answered None for that
    reason ("invalid": an answer came back but was not valid emoji; "errored", "expired",
    "canceled": a batch item without an answer; "missing"), and data_stats.json reports
    them separately (an answer it gets but finds invalid itself also counts as invalid).
    """

    def answer(self, messages: Sequence[Message]) -> list[Optional[str]]:
        """Emoji answers, one per message; None where no valid 2-8 emoji answer was obtained."""


TEACHER_DROP_REASONS = ("invalid", "errored", "expired", "canceled", "missing")


@runtime_checkable
class RepairTeacher(Protocol):
    """A teacher that also answers the game's second turn (e.g. `lexicon-repair`)."""

    def repair(self, targets: Sequence[str], guesses: Sequence[str], first_turns: Sequence[str]) -> list[Optional[str]]:
        """One more turn of emoji per (target, the judge's wrong guess, the first turn's emoji); None where it has none."""


# --- game: judges and rewards ----------------------------------------------------------


@dataclass
class JudgeView:
    """What a judge sees of one episode: every emoji turn so far and its own earlier guesses."""

    emoji_turns: list[str]
    guesses: list[str] = field(default_factory=list)


@runtime_checkable
class Judge(Protocol):
    """Reconstructs messages from emoji. Optional capabilities: `CandidatePool`, `TargetBelief`."""

    def guess(self, views: Sequence[JudgeView]) -> list[Optional[str]]:
        """One reconstructed message per view (batched); "" where there is nothing to read.

        None for a view the judge could not answer: a remote judge whose request still failed
        after its retries. The game ends that episode as failed; GRPO drops its group.
        """


@dataclass
class EpisodeTurn:
    emoji: str  # the sender's decoded text for this turn
    valid: bool  # passed the decoder's format check
    guess: str = ""
    similarity: float = 0.0
    # The judge's log-probability of the true target after this turn (`TargetBelief`), or None.
    target_logprob: Optional[float] = None
    # The policy's Sample (prompt_tokens, tokens, logprobs) for building training datums;
    # not part of the episode's JSON (see game.episode_to_json).
    sample: Any = field(default=None, repr=False, compare=False)


@dataclass
class Episode:
    target: str
    category: str = "unknown"
    turns: list[EpisodeTurn] = field(default_factory=list)
    success: bool = False
    reward: dict[str, float] = field(default_factory=dict)
    failed: bool = False  # the judge could not answer a turn (remote faults); the episode ended there


@runtime_checkable
class CandidatePool(Protocol):
    """Optional judge capability: the game gives the judge its targets before play (a
    retrieval judge adds them to the pool it retrieves from)."""

    def add_candidates(self, texts: Sequence[str]) -> None: ...


# --- what a plugin's component returned: checked where the core calls it -----------------------

_ORIGINS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def mark_origin(component: Any, origin: str) -> None:
    """The assembly seam records who built a component ("judge 'x' (plugin 'y', dist 1.0)"), so
    that a wrong return value later names the plugin, not a line of the core."""
    try:
        _ORIGINS[component] = origin
    except TypeError:  # an object that takes no weak reference: errors name its class
        pass


def origin_of(component: Any) -> str:
    try:
        return _ORIGINS.get(component) or type(component).__name__
    except TypeError:
        return type(component).__name__


def _one_per(component: Any, method: str, returned: Any, expected: int, what: str) -> list:
    if not isinstance(returned, (list, tuple)) or len(returned) != expected:
        got = f"{len(returned)} values" if isinstance(returned, (list, tuple)) else type(returned).__name__
        raise PluginError(f"{origin_of(component)}: {method} returned {got} for {expected} {what}; it returns one per {what.rstrip('s')}")
    return list(returned)


def _texts_or_none(component: Any, method: str, returned: Any, expected: int, what: str) -> list[Optional[str]]:
    """_one_per, each value a string or None."""
    values = _one_per(component, method, returned, expected, what)
    for value in values:
        if value is not None and not isinstance(value, str):
            kind = type(value).__name__
            raise PluginError(f"{origin_of(component)}: {method} returned {'an' if kind[0] in 'aeiou' else 'a'} {kind} among its "
                              f"{method}{'s' if method == 'answer' else 'es'}; each is a string, or None")
    return values


def guesses_of(judge: "Judge", views: Sequence["JudgeView"]) -> list[Optional[str]]:
    """judge.guess(views), checked: one guess (a string, or None when it gave up) per view."""
    return _texts_or_none(judge, "guess", judge.guess(views), len(views), "views")


def answers_of(teacher: "Teacher", messages: Sequence["Message"]) -> list[Optional[str]]:
    """teacher.answer(messages), checked before it is saved: one answer (a string, or None to drop it) per message."""
    return _texts_or_none(teacher, "answer", teacher.answer(messages), len(messages), "messages")


def similarities_of(reward: "Reward", targets: Sequence[str], guesses: Sequence[str]) -> list[float]:
    """reward.similarity(targets, guesses), checked: one number per pair."""
    return _one_per(reward, "similarity", reward.similarity(targets, guesses), len(targets), "pairs")


def add_candidates(judge: Judge, texts: Sequence[str]) -> None:
    """Give a `CandidatePool` judge these texts; other judges need nothing."""
    if isinstance(judge, CandidatePool):
        judge.add_candidates(texts)


@runtime_checkable
class TargetBelief(Protocol):
    """Optional judge capability: how likely the judge finds the true target, given a view.

    The listener's log-probability of the target is the speaker's reward in referential
    games; unlike the guess it moves with every emoji, also when the guess stays wrong."""

    def target_logprobs(self, views: Sequence[JudgeView], targets: Sequence[str]) -> list[Optional[float]]:
        """log p(target | view) per pair; None where the judge cannot say (target not in its pool)."""


def target_logprobs(judge: Judge, views: Sequence[JudgeView], targets: Sequence[str]) -> list[Optional[float]]:
    """A `TargetBelief` judge's log-probabilities of the targets; None for other judges."""
    if isinstance(judge, TargetBelief):
        return judge.target_logprobs(views, targets)
    return [None] * len(views)


@runtime_checkable
class Reward(Protocol):
    """Scores guesses and finished episodes. Optional capability: `SuccessThreshold`."""

    def similarity(self, targets: Sequence[str], guesses: Sequence[str]) -> list[float]:
        """Similarity in [-1, 1] for each (target, guess) pair, batched."""

    def score(self, episodes: Sequence[Episode]) -> list[dict[str, float]]:
        """A breakdown per finished episode; the key "total" is the reward."""


DEFAULT_SUCCESS_THRESHOLD = 0.85


@runtime_checkable
class SuccessThreshold(Protocol):
    """Optional reward capability: the similarity at which a guess ends the episode as a
    success (DEFAULT_SUCCESS_THRESHOLD for a reward without it)."""

    success_threshold: float


def success_threshold(reward: Reward) -> float:
    return float(reward.success_threshold) if isinstance(reward, SuccessThreshold) else DEFAULT_SUCCESS_THRESHOLD


def is_success(reward: Reward, similarity: float) -> bool:
    """The one place success is decided: the guess is at least the reward's threshold."""
    return float(similarity) >= success_threshold(reward)


# --- decoders --------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatCheck:
    valid: bool
    n_emoji: int
    reason: str = ""


@runtime_checkable
class Decoder(Protocol):
    min_emoji: int
    max_emoji: int

    def check(self, text: str) -> FormatCheck:
        """Validate a whole sample (used where logits cannot be masked, and for metrics)."""

    def bind(self, tokenizer: Any) -> Any:
        """A `policy.TokenConstraint` for this tokenizer, or None if the decoder masks nothing."""


@runtime_checkable
class BindingReport(Protocol):
    """Optional decoder capability, used by `emojikit mask`."""

    def binding_report(self, model: str, export: Optional[Path] = None) -> list[tuple[str, str]]:
        """(label, value) rows describing the decoder bound to MODEL's tokenizer; `export`
        writes its per-state masks to that file."""


# --- trackers --------------------------------------------------------------------------


@dataclass
class TrackedRun:
    """What a tracker is told about the run it records (Tracker.start).

    `config` is the resolved recipe with secrets redacted; `code` is the run's code.json
    (emojikit version, git commit and dirty flag, plugin distributions). `resume_id` is the id
    this tracker's start() returned for the same run directory before (a resumed run), else None.
    """

    name: str  # the recipe's name, e.g. "grpo"
    kind: str  # data | sft | grpo | eval
    run_dir: Path
    config: dict
    code: dict = field(default_factory=dict)
    resume_id: Optional[str] = None
    resume_step: Optional[int] = None  # the last step sent to it before; later ones come again


@runtime_checkable
class Tracker(Protocol):
    """Sends a run to an experiment tracker. emojikit.stages.tracking calls it; metrics.jsonl
    stays the source of truth, so a tracker that raises is warned about once and dropped."""

    def start(self, run: TrackedRun) -> str:
        """Open the tracker's run (with run.resume_id: continue that one); returns its id,
        which emojikit keeps in the run directory (trackers.json) for a resume."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One step's numeric metrics, handed to the tracker's store before returning."""

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        """A table (held-out game, comparison, sample episodes), as a table or as text."""

    def finish(self, status: str) -> None:
        """Close the run; status is "finished", "failed" or "interrupted"."""


@runtime_checkable
class StoredStep(Protocol):
    """Optional tracker capability: the last step up to which the tracker's own store holds every
    row of the run (-1 when it holds none; None when it cannot tell, and emojikit trusts what it
    recorded as sent). On resume, rows after it are sent again from metrics.jsonl and eval.jsonl
    up to the checkpoint, so a write the tracker lost to kill -9 leaves no gap. A lower step is
    safe when log_metrics skips the (key, step) pairs the store already holds: none comes twice."""

    def stored_step(self) -> Optional[int]: ...
