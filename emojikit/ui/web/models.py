"""What the model worker runs: a sender per checkpoint, the judges, the reward, the held-out targets.

The browser names a checkpoint or a judge by an id chosen at start; it never sends a path.
Senders and judges are built on first use, inside the worker thread (see worker.py).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from emojikit.api.components import Episode, Message, guesses_of, similarities_of
from emojikit.api.errors import ConfigError
from emojikit.play.game import GameSettings, judge_view, sender_prompt
from emojikit.api.policy import SamplingParams

HELDOUT_DEFAULT = 64  # held-out targets when the recipe names no count


@dataclasses.dataclass
class Checkpoint:
    id: str  # what the browser sends
    ref: str  # "base" or a checkpoint directory, as given to `serve --checkpoint`


def checkpoint_ids(refs: Sequence[str]) -> list[Checkpoint]:
    """Short unique ids: "base", "<run>-<step dir>" for a checkpoint (e.g. sft-step_250), or
    the run's name for a run directory (its final checkpoint: runs/grpo is "grpo")."""
    out: list[Checkpoint] = []
    seen: set[str] = set()
    for ref in refs:
        path = Path(ref)
        if ref == "base":
            stem = "base"
        elif (path / "checkpoints").is_dir():
            stem = path.name
        else:
            run = path.parent.parent.name if path.parent.name == "checkpoints" else path.parent.name
            stem = "-".join(p for p in (run, path.name) if p)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-") or "checkpoint"
        cid, n = stem, 2
        while cid in seen:
            cid, n = f"{stem}-{n}", n + 1
        seen.add(cid)
        out.append(Checkpoint(cid, ref))
    return out


class Models:
    """Every component the server plays with. `senders` and `judges` map an id to a builder
    (called once, in the worker thread); `run` is the worker's entry point."""

    def __init__(
        self,
        *,
        game: GameSettings,
        decoder: Any,
        reward: Any,
        heldout: Sequence[Message],
        senders: dict[str, Callable[[], Any]],
        judges: dict[str, Callable[[], Any]],
        checkpoints: Sequence[Checkpoint],
        temperature: float = 0.7,
    ):
        if not senders or not judges:
            raise ConfigError("serve needs at least one checkpoint and one judge")
        from emojikit.api.format import format_of

        self.game, self.decoder, self.reward, self.temperature = game, decoder, reward, temperature
        self.format = format_of(decoder)  # the one owner of "2-8": prompts and checks read it
        self.heldout = list(heldout)
        self.checkpoints = list(checkpoints)
        self._sender_builders, self._judge_builders = dict(senders), dict(judges)
        self._senders: dict[str, Any] = {}
        self._judges: dict[str, Any] = {}
        self._candidates: dict[str, set[str]] = {}

    @property
    def checkpoint_refs(self) -> dict[str, str]:
        return {c.id: c.ref for c in self.checkpoints}

    @property
    def judge_names(self) -> list[str]:
        return list(self._judge_builders)

    def sender(self, checkpoint_id: str):
        if checkpoint_id not in self._senders:
            self._senders[checkpoint_id] = self._sender_builders[checkpoint_id]()
        return self._senders[checkpoint_id]

    def judge(self, name: str):
        if name not in self._judges:
            judge = self._judge_builders[name]()
            self._judges[name] = judge
            self._candidates[name] = set()
            self._add_candidates(name, [m.text for m in self.heldout])
        return self._judges[name]

    def _add_candidates(self, name: str, texts: Sequence[str]) -> None:
        judge, known = self._judges[name], self._candidates[name]
        new = [t for t in dict.fromkeys(texts) if t not in known]
        if new and hasattr(judge, "add_candidates"):
            judge.add_candidates(new)  # a retrieval judge can only guess what is in its pool
        known.update(new)

    # --- the worker's entry point ------------------------------------------------------------

    def run(self, kind: str, key: Any, payloads: list) -> list:
        if kind == "sender":
            return self.sender_turns(key, payloads)
        if kind == "judge":
            return self.judge_turns(key, payloads)
        if kind == "similarity":
            return self.similarities(payloads)
        if kind == "warm":
            return self.warm(payloads)
        raise ValueError(f"unknown model job {kind!r}")

    def warm(self, payloads: list) -> list:
        """Load the first sender and judge and the similarity model before the first game."""
        self.sender(self.checkpoints[0].id)
        self.judge(self.judge_names[0])
        self.reward.similarity(["warm up"], ["warm up"])
        return [None] * len(payloads)

    def sender_turns(self, checkpoint_id: str, episodes: list[Episode]) -> list[tuple[str, bool]]:
        """The sender's next emoji turn for each episode, in one batched sample call."""
        policy = self.sender(checkpoint_id)
        params = SamplingParams(max_tokens=self.game.max_new_tokens, temperature=self.temperature)
        prompts = [sender_prompt(self.game, ep.target, ep.turns, self.format) for ep in episodes]
        samples = policy.sample(prompts, 1, params, self.decoder)
        out = []
        for (sample, *_) in samples:
            text = sample.text.strip()
            out.append((text, bool(self.decoder.check(text).valid) if self.decoder is not None else self.format.check(text)))
        return out

    def judge_turns(self, name: str, episodes: list[Episode]) -> list[tuple[Optional[str], float]]:
        """The judge's guess of each episode's latest emoji turn and its similarity to the target."""
        judge = self.judge(name)
        self._add_candidates(name, [ep.target for ep in episodes])
        guesses = guesses_of(judge, [judge_view(ep) for ep in episodes])
        answered = [(ep.target, g) for ep, g in zip(episodes, guesses) if g is not None]
        sims = iter(similarities_of(self.reward, [t for t, _ in answered], [g for _, g in answered]) if answered else [])
        return [(g, float(next(sims))) if g is not None else (None, 0.0) for g in guesses]

    def similarities(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Similarity of each (target, a person's guess), in one batched call."""
        return [float(s) for s in similarities_of(self.reward, [t for t, _ in pairs], [g for _, g in pairs])]


# --- building from a recipe (the CLI) ---------------------------------------------------------


def heldout_targets(recipe) -> list[Message]:
    """The recipe's held-out targets: [grpo] heldout_file or [eval] targets_file when set,
    else the first eval_targets / n_targets messages of its prompt source."""
    from emojikit.play.targets import read_targets

    grpo, evals = recipe.settings.get("grpo"), recipe.settings.get("eval")
    count = (grpo.eval_targets if grpo is not None else None) or (evals.n_targets if evals is not None else None) or HELDOUT_DEFAULT
    path = getattr(grpo, "heldout_file", None) or getattr(evals, "targets_file", None)
    if path is not None and Path(path).is_file():
        return read_targets(Path(path), count)
    if not recipe.has("prompts"):
        raise ConfigError(f"{recipe.path}: no [prompts] table and no held-out file to draw targets from")
    return list(recipe.build("prompts").messages(count))


def build_models(recipe_path: Optional[Path], checkpoint_refs: Sequence[str], judge_names: Sequence[str], temperature: float) -> Models:
    """Models from a grpo or eval recipe (recipes/grpo.toml by default): its game settings,
    decoder, reward and held-out targets now; senders and judges on first use."""
    from emojikit.ui.interactive import build_parts, check_checkpoint, default_recipe, load_checkpoint
    from emojikit.composition.recipe import load_recipe
    from emojikit.composition.registry import get_registry

    recipe_path = default_recipe(recipe_path)
    if recipe_path is None:
        raise ConfigError("serve needs a grpo or eval recipe: pass --recipe PATH")
    recipe = load_recipe(recipe_path)
    if "game" not in recipe.settings:
        raise ConfigError(f"{recipe_path}: a {recipe.kind} recipe has no game; use a grpo or eval recipe")
    for ref in checkpoint_refs:
        check_checkpoint(ref)
    recipe_judge = recipe.components["judge"].spec.name if recipe.has("judge") else None
    names = list(dict.fromkeys(judge_names or [recipe_judge or "retrieval"]))
    registry = get_registry()
    for name in names:
        registry.get("judge", name)  # an unknown judge fails now, in one line
    parts = build_parts(recipe_path, ["decoder", "reward"], needs_game=True)

    def sender_builder(ref: str):
        def build():
            policy = build_parts(recipe_path, ["backend"])["backend"]
            load_checkpoint(policy, ref)
            return policy

        return build

    def judge_builder(name: str):
        choice = None if name == recipe_judge else name
        return lambda: build_parts(recipe_path, ["judge"], choices={"judge": choice})["judge"]

    checkpoints = checkpoint_ids(list(checkpoint_refs) or ["base"])
    return Models(
        game=parts.game,
        decoder=parts["decoder"],
        reward=parts["reward"],
        heldout=heldout_targets(recipe),
        senders={c.id: sender_builder(c.ref) for c in checkpoints},
        judges={n: judge_builder(n) for n in names},
        checkpoints=checkpoints,
        temperature=temperature,
    )
