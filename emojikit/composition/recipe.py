"""Recipes: TOML files that assemble components into a data, sft, grpo or eval run.

The whole recipe is validated here, every component table against its component's own
Config model and every loop table against the loop's settings model, and all errors are
collected before failing. Nothing in this module loads a model or touches the network.
"""

from __future__ import annotations

import copy
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from pydantic import BaseModel, ValidationError

from emojikit.composition.assembly import COMPONENT_TABLES, ComponentChoice, choose, context, format_validation, preflight_errors
from emojikit.api.components import BuildContext
from emojikit.api.errors import ConfigError, EmojikitError
from emojikit.composition.registry import Registry, did_you_mean, get_registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RECIPE_KINDS = ("data", "sft", "grpo", "rft", "eval")
TOP_LEVEL_KEYS = ("kind", "name", "seed", "out")
# Every kind may send its run to trackers: `[tracking] use = ["tensorboard", "wandb"]`, each
# tracker's settings in a table named after it (`[tracking.wandb] project = "..."`).
TRACKING_TABLE = "tracking"

# Per recipe kind: required component tables, optional ones, and loop tables
# (table -> "module:SettingsModel"; the loop modules keep torch out of their top level).
RECIPE_SHAPES: dict[str, dict[str, Any]] = {
    "data": {
        "required": ["prompts", "teacher"],
        "optional": ["judge", "reward", "backend", "decoder"],
        "settings": {"data": "emojikit.training.data:DataSettings"},
        "runner": "emojikit.training.data:run",
    },
    "sft": {
        "required": ["backend"],
        "optional": ["decoder"],
        "settings": {"sft": "emojikit.training.sft:SFTSettings"},
        "runner": "emojikit.training.sft:run",
    },
    "grpo": {
        "required": ["backend", "decoder", "judge", "reward", "prompts"],
        "optional": ["teacher"],
        "settings": {"grpo": "emojikit.training.grpo:GRPOSettings", "game": "emojikit.play.game:GameSettings"},
        "runner": "emojikit.training.grpo:run",
    },
    "rft": {
        "required": ["backend", "decoder", "judge", "reward", "prompts"],
        "optional": [],
        "settings": {"rft": "emojikit.training.rft:RFTSettings", "game": "emojikit.play.game:GameSettings"},
        "runner": "emojikit.training.rft:run",
    },
    "eval": {
        "required": ["backend", "decoder", "judge", "reward", "prompts"],
        "optional": [],
        "settings": {"eval": "emojikit.evaluation.evaluate:EvalSettings", "game": "emojikit.play.game:GameSettings"},
        "runner": "emojikit.evaluation.evaluate:run",
    },
}

SECRET_MARKERS = ("api_key", "apikey", "token", "secret", "password")
SEED_MAX = 2**32 - 1  # what every seeded generator (random, numpy, torch) accepts


def import_object(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass
class Recipe:
    path: Path
    kind: str
    name: str
    seed: int
    out: Path
    components: dict[str, ComponentChoice]
    settings: dict[str, BaseModel]
    data: dict[str, Any] = field(repr=False, default_factory=dict)  # the resolved TOML
    overrides: list[str] = field(default_factory=list)  # the --set values it was loaded with
    resume_command: Optional[str] = None  # set by emojikit.stages.pipeline: the command that continues the whole chain
    registry: Optional[Registry] = field(repr=False, default=None)  # where the components were found
    trackers: list[ComponentChoice] = field(default_factory=list)  # [tracking] use, in order

    def has(self, table: str) -> bool:
        return table in self.components

    def context(self, run_dir: Optional[Path] = None) -> BuildContext:
        return context(BuildContext(seed=self.seed, run_dir=run_dir or self.out, recipe_path=self.path, registry=self.registry))

    def build(self, table: str, run_dir: Optional[Path] = None) -> Any:
        """Build the component of `table` through the assembly seam (factory + Protocol check)."""
        return self.components[table].build(self.context(run_dir))

    def runner(self):
        return import_object(RECIPE_SHAPES[self.kind]["runner"])

    def to_toml(self) -> str:
        return dump_toml(redact(self.data))

    def resume_hint(self) -> str:
        """`resume with: emojikit run RECIPE --set ... --resume`, the --set values repeated so
        the command works as printed (and names the same run directory)."""
        import shlex

        if self.resume_command:
            return f"resume with: {redact_text(self.resume_command)}"
        sets = "".join(f" --set {shlex.quote(redact_text(o))}" for o in self.overrides)
        return f"resume with: emojikit run {shlex.quote(str(self.path))}{sets} --resume"


# --- loading ---------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """`table.key=value`: value is a TOML value, or a bare string if it does not parse."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected table.key=value")
    key, _, raw = text.partition("=")
    keys = [k.strip() for k in key.strip().split(".") if k.strip()]
    if not keys:
        raise ConfigError(f"--set {text}: expected table.key=value")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return keys, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """`--set` texts (the user's TOML values, parsed once) applied to a copy of `data`."""
    data = copy.deepcopy(data)
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text}: {k} is not a table")
        node[keys[-1]] = value
    return data


def merge_settings(data: dict, updates: Mapping[str, Any]) -> dict:
    """Settings from CLI flags (nested dicts, never TOML text) merged into a copy of `data`:
    a dict updates a table key by key, anything else replaces the value."""
    data = copy.deepcopy(data)
    for key, value in updates.items():
        if isinstance(value, Mapping) and isinstance(data.get(key), dict):
            data[key] = merge_settings(data[key], value)
        else:
            data[key] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else copy.deepcopy(value)
    return data


def resolve_data(
    data: dict,
    overrides: Sequence[str] = (),
    *,
    choices: Optional[Mapping[str, Optional[str]]] = None,
    settings: Optional[Mapping[str, Any]] = None,
) -> dict:
    """The recipe as the run will see it. In order: `choices` (table -> component name, from
    flags like --judge) replace whole tables, since the old table's keys may not apply; then
    the `--set` overrides, so `--judge claude --set judge.timeout_s=2` sets the new judge's
    timeout; then `settings` from other flags (e.g. --checkpoint), merged as dicts."""
    data = copy.deepcopy(data)
    for table, name in (choices or {}).items():
        if name:
            data[table] = {"use": name}
    data = apply_overrides(data, list(overrides))
    return merge_settings(data, settings or {})


def read_toml(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"{path}: recipe file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a recipe file (.toml)")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None


def load_recipe(
    path: Path | str,
    overrides: Optional[Sequence[str]] = None,
    registry: Optional[Registry] = None,
    *,
    choices: Optional[Mapping[str, Optional[str]]] = None,
    settings: Optional[Mapping[str, Any]] = None,
    trackers: Sequence[str] = (),
) -> Recipe:
    """Load and validate a recipe; raises ConfigError listing every problem on one line.

    `overrides` are `--set table.key=value` texts; `choices` and `settings` come from CLI
    flags (see resolve_data for the order); `trackers` (--tracker) join [tracking] use."""
    path = Path(path)
    registry = registry or get_registry()
    data = with_trackers(resolve_data(read_toml(path), overrides or [], choices=choices, settings=settings), trackers)
    errors: list[str] = []

    kind = data.get("kind")
    if kind not in RECIPE_KINDS:
        shown = "missing" if kind is None else repr(kind)
        raise ConfigError(f"{path}: kind: {shown} is not a recipe kind; expected one of {', '.join(RECIPE_KINDS)}")
    shape = RECIPE_SHAPES[kind]
    name = data.get("name", path.stem)
    seed = data.get("seed", 0)
    if not isinstance(name, str) or not name:
        errors.append(f"name: expected a non-empty string")
    if not isinstance(seed, int) or isinstance(seed, bool):
        errors.append(f"seed: expected an integer, got {seed!r}")
    elif not 0 <= seed <= SEED_MAX:
        errors.append(f"seed: {seed} is out of range; expected 0 to {SEED_MAX}")
    out = data.get("out", f"runs/{name}")
    if not isinstance(out, str):
        errors.append("out: expected a path string")

    allowed_tables = set(shape["required"]) | set(shape["optional"]) | set(shape["settings"]) | {TRACKING_TABLE}
    for key, value in data.items():
        if key in TOP_LEVEL_KEYS:
            continue
        if key not in allowed_tables:
            hint = did_you_mean(key, sorted(allowed_tables | set(TOP_LEVEL_KEYS)))
            errors.append(f"[{key}]: not used by a {kind} recipe{hint}; tables: {', '.join(sorted(allowed_tables))}")
        elif not isinstance(value, dict):
            errors.append(f"{key}: expected a table")

    components: dict[str, ComponentChoice] = {}
    for table in shape["required"] + shape["optional"]:
        body = data.get(table)
        if body is None:
            if table in shape["required"]:
                errors.append(f"[{table}]: required table is missing (it selects a {COMPONENT_TABLES[table]} with use = \"<name>\")")
            continue
        if not isinstance(body, dict):
            continue
        body = dict(body)
        use = body.pop("use", None)
        if not isinstance(use, str):
            errors.append(f"[{table}] use: required key is missing (the name of a {COMPONENT_TABLES[table]})")
            continue
        try:
            components[table] = choose(COMPONENT_TABLES[table], use, body, BuildContext(registry=registry), table=table)
        except EmojikitError as exc:
            errors.append(str(exc))

    loop_settings: dict[str, BaseModel] = {}
    for table, ref in shape["settings"].items():
        model = import_object(ref)
        body = data.get(table, {})
        if not isinstance(body, dict):
            continue
        try:
            loop_settings[table] = model.model_validate(body)
        except ValidationError as exc:
            errors.extend(format_validation(table, model, exc))

    trackers = choose_trackers(data.get(TRACKING_TABLE), registry, errors)

    if errors:
        raise ConfigError(f"{path}: " + "; ".join(errors))

    recipe = Recipe(path, kind, name, seed, Path(out), components, loop_settings, data, overrides=list(overrides or []), registry=registry, trackers=trackers)
    # Preflight: declared API keys, files. Still before any model load or network call.
    errors = preflight_errors([*components.values(), *trackers], recipe.context())
    if errors:
        raise ConfigError(f"{path}: " + "; ".join(errors))
    return recipe


def tracker_names(body: Any) -> list[str]:
    """The names of [tracking] use: one string or a list of them (checked by choose_trackers)."""
    use = body.get("use", []) if isinstance(body, dict) else []
    return [use] if isinstance(use, str) else list(use) if isinstance(use, list) else []


def with_trackers(data: dict, names: Sequence[str]) -> dict:
    """`data` with `names` (from --tracker) added to [tracking] use, each once."""
    if not names:
        return data
    data = copy.deepcopy(data)
    body = data.setdefault(TRACKING_TABLE, {})
    if not isinstance(body, dict):
        return data  # load_recipe reports the table
    body["use"] = list(dict.fromkeys([*tracker_names(body), *names]))
    return data


def choose_trackers(body: Any, registry: Registry, errors: list[str]) -> list[ComponentChoice]:
    """[tracking]: `use` names trackers (a string or a list); a table named after a tracker
    holds its settings. Problems are appended to `errors`."""
    if body is None or not isinstance(body, dict):
        return []  # a non-table [tracking] is reported with the other tables
    use = body.get("use", [])
    if not (isinstance(use, str) or (isinstance(use, list) and all(isinstance(u, str) for u in use))):
        errors.append(f"[{TRACKING_TABLE}] use: expected a tracker name or a list of them, e.g. [\"tensorboard\", \"wandb\"]")
        return []
    names = tracker_names(body)
    for key, value in body.items():
        if key != "use" and key not in names:
            errors.append(f"[{TRACKING_TABLE}] {key}: settings of a tracker that use does not name (use = {names})")
        elif key != "use" and not isinstance(value, dict):
            errors.append(f"[{TRACKING_TABLE}] {key}: expected a table of that tracker's settings")
    chosen = []
    for name in dict.fromkeys(names):
        settings = body.get(name) if isinstance(body.get(name), dict) else {}
        try:
            chosen.append(choose("tracker", name, settings, BuildContext(registry=registry), table=f"{TRACKING_TABLE}.{name}"))
        except EmojikitError as exc:
            errors.append(str(exc))
    return chosen


# --- writing ---------------------------------------------------------------------------


def redact_text(text: str) -> str:
    """A known secret value (ANTHROPIC_API_KEY, TINKER_API_KEY from the environment or .env)
    anywhere in text, replaced by its variable's name."""
    from emojikit.api.secrets import scrub

    return scrub(text)


def redact(data: Any) -> Any:
    """Replace the value of every secret-looking key, and every known secret value pasted
    into any other field."""
    if isinstance(data, dict):
        return {k: ("<redacted>" if any(m in k.lower() for m in SECRET_MARKERS) and isinstance(v, str) else redact(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [redact(v) for v in data]
    if isinstance(data, str):
        return redact_text(data)
    return data


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        import json

        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dump_toml(data: dict) -> str:
    """A small TOML writer for resolved recipes (scalars first, then one level of tables)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines.extend(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())
    return "\n".join(lines) + "\n"


def check_ready(recipe: Recipe) -> None:
    """What the run would reject before training, checked now (by `validate` and `run`, before
    a run directory is made): the loop module's `preflight(recipe)`, when it has one. It may
    read the datasets and load a tokenizer, never a model."""
    module, _, _ = RECIPE_SHAPES[recipe.kind]["runner"].partition(":")
    preflight = getattr(importlib.import_module(module), "preflight", None)
    if preflight is not None:
        preflight(recipe)
