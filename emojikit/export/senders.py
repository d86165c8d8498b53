"""Trained senders outside a recipe: what a checkpoint reference names, and how to load it.

A reference is a checkpoint directory (runs/<run>/checkpoints/step_N: a local PEFT adapter,
or a Tinker checkpoint's tinker.json), a run directory (its final checkpoint), a tinker://
path, or a merged `emojikit export` folder (the local backend's model itself). The run's recipe.toml, when there is one, says which backend and model trained it and
which emoji format it was held to; a bare checkpoint says so in its own files.
`emojikit export` and the `llm` plugin both start here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from emojikit.api.components import BuildContext
from emojikit.api.config import for_playing
from emojikit.api.errors import ConfigError, EmojikitError, InputFileError
from emojikit.api.format import EmojiFormat
from emojikit.stages import runs

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # a PEFT adapter (local backend)
TINKER_FILE = "tinker.json"  # a Tinker checkpoint: its tinker:// state path
STATE_FILE = "stage.json"
SENDER_KINDS = ("sft", "grpo", "rft")


@dataclass
class Sender:
    """A trained sender: its checkpoint, the run it came from, and how to build its backend."""

    checkpoint: str  # a checkpoint directory or a tinker:// path
    name: str  # the run directory's name (sft, grpo, sft-1a2b3c4d), else the checkpoint's
    run_dir: Optional[Path] = None
    recipe: dict[str, Any] = field(default_factory=dict)  # the run's recipe.toml (secrets already redacted)
    backend: dict[str, Any] = field(default_factory=dict)  # the [backend] table that loads it: {"use": ..., ...}
    decoder: dict[str, Any] = field(default_factory=dict)  # the [decoder] table it was held to
    load: bool = True  # False for a merged export: the weights are the backend's model itself

    @property
    def kind(self) -> Optional[str]:
        return self.recipe.get("kind")

    @property
    def step(self) -> Optional[int]:
        name = Path(self.checkpoint).name
        return int(name[5:]) if name.startswith("step_") and name[5:].isdigit() else None

    @property
    def format(self) -> EmojiFormat:
        """The emoji format the run held the sender to (its decoder's limits)."""
        default = EmojiFormat()
        try:
            return EmojiFormat(int(self.decoder.get("min_emoji", default.min_emoji)), int(self.decoder.get("max_emoji", default.max_emoji)))
        except (TypeError, ValueError):
            return default

    @property
    def system_prompt(self) -> str:
        """The system prompt the sender was trained with: the recipe's [game] one, else the format's."""
        game = self.recipe.get("game")
        custom = game.get("system_prompt") if isinstance(game, dict) else None
        return custom if isinstance(custom, str) and custom else self.format.system_prompt


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_checkpoint(path: Path) -> bool:
    return all((path / name).is_file() for name in ADAPTER_FILES) or (path / TINKER_FILE).is_file()


def is_merged_export(path: Path) -> bool:
    """A plain transformers model folder (what `emojikit export --merged` writes)."""
    return (path / "config.json").is_file() and any(path.glob("*.safetensors")) and not (path / ADAPTER_FILES[0]).exists()


def resolve(ref: str) -> Sender:
    """The Sender a reference names; an InputFileError (one line) for anything else."""
    if ref.startswith("tinker://"):
        return Sender(checkpoint=ref, name=ref.rstrip("/").rpartition("/")[2] or "tinker", backend={"use": "tinker"})
    path = Path(ref)
    if not path.exists():
        raise InputFileError(f"{ref}: no such checkpoint or run directory")
    if not path.is_dir():
        raise InputFileError(f"{ref}: is a file, expected a checkpoint directory (runs/<run>/checkpoints/step_N) or a run directory")
    if is_merged_export(path):
        return Sender(checkpoint=str(path), name=path.name, backend={"use": "local", "model": str(path)}, load=False)
    if is_checkpoint(path):
        checkpoint = path
        parent = runs.run_of_checkpoint(path)
        run_dir = parent if parent is not None and (parent / "recipe.toml").is_file() else None
    else:
        latest = runs.latest_checkpoint(path)
        if latest is None:
            raise InputFileError(
                f"{ref}: not a checkpoint (no {' and '.join(ADAPTER_FILES)}, no {TINKER_FILE}) nor a run directory with checkpoints/step_N"
            )
        checkpoint, run_dir = latest[1], path
        if not is_checkpoint(checkpoint):
            raise InputFileError(f"{checkpoint}: not a checkpoint (no {' and '.join(ADAPTER_FILES)}, no {TINKER_FILE})")
    recipe = read_recipe(run_dir) if run_dir is not None else {}
    backend = dict(recipe["backend"]) if isinstance(recipe.get("backend"), dict) else {}
    if (checkpoint / TINKER_FILE).is_file():
        backend.setdefault("use", "tinker")
        record = _read_json(checkpoint / TINKER_FILE)
        if "base_model" in record:
            backend.setdefault("base_model", record["base_model"])
    else:
        backend.setdefault("use", "local")
        model = _read_json(checkpoint / "trainer_state.json").get("model")
        if model:
            backend.setdefault("model", model)
    backend.pop("init_from", None)  # the checkpoint is loaded onto the base: its start is inside it
    decoder = dict(recipe["decoder"]) if isinstance(recipe.get("decoder"), dict) else {}
    name = run_dir.name if run_dir is not None else checkpoint.name
    return Sender(checkpoint=str(checkpoint), name=name, run_dir=run_dir, recipe=recipe, backend=backend, decoder=decoder)


def read_recipe(run_dir: Path) -> dict:
    from emojikit.composition.recipe import read_toml

    try:
        return read_toml(run_dir / "recipe.toml")
    except EmojikitError:
        return {}


def finished_senders(runs_dir: Path) -> dict[str, Sender]:
    """Run name -> Sender for every finished SFT or GRPO run under `runs_dir` (stage.json
    says finished; a run made without the pipeline counts when its recipe's last step is saved)."""
    found: dict[str, Sender] = {}
    if not runs_dir.is_dir():
        return found
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        recipe = read_recipe(run_dir) if (run_dir / "recipe.toml").is_file() else {}
        kind = recipe.get("kind")
        latest = runs.latest_checkpoint(run_dir)
        if kind not in SENDER_KINDS or latest is None or not is_checkpoint(latest[1]):
            continue
        record = _read_json(run_dir / STATE_FILE)
        steps = recipe.get(kind, {}).get("steps") if isinstance(recipe.get(kind), dict) else None
        if record.get("status") == "finished" or (not record and steps == latest[0]):
            try:
                found[run_dir.name] = resolve(str(run_dir))
            except EmojikitError:
                continue
    return found


def build(sender: Sender, *, settings: Optional[dict[str, dict[str, Any]]] = None, tables: tuple[str, ...] = ("backend", "decoder")) -> dict[str, Any]:
    """Build the sender's backend (and decoder) through the assembly seam, then load its
    checkpoint: {"backend": policy, "decoder": decoder}. `settings` are merged into a table
    (e.g. {"backend": {"dtype": "float32"}})."""
    from emojikit.composition.assembly import COMPONENT_TABLES, choose, construct, context, preflight_errors

    seed = sender.recipe.get("seed", 0)
    ctx = context(BuildContext(seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0))
    tables_of = {"backend": sender.backend, "decoder": sender.decoder or {"use": "emoji-mask"}}
    picked, errors = {}, []
    for table in tables:
        body = {**tables_of[table], **(settings or {}).get(table, {})}
        use = body.pop("use", None) or ("local" if table == "backend" else "emoji-mask")
        try:
            picked[table] = choose(COMPONENT_TABLES[table], use, body, ctx, table=table)
        except EmojikitError as exc:
            errors.append(str(exc))
    if sender.load and "backend" in picked:  # the checkpoint plays with its own adapter, wherever the run's trained
        picked["backend"] = replace(picked["backend"], config=for_playing(picked["backend"].config))
    errors += preflight_errors(picked.values(), ctx) if not errors else []
    where = f"{sender.run_dir / 'recipe.toml'}: " if sender.run_dir is not None else f"{sender.checkpoint}: "
    if errors:
        raise ConfigError(where + "; ".join(errors))
    built = {table: construct(choice, ctx) for table, choice in picked.items()}
    if sender.load:
        built["backend"].load(sender.checkpoint, with_optimizer=False)
    return built
