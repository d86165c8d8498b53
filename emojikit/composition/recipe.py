"""Recipes: TOML files that assemble components into a data, sft, grpo or eval run.

The whole recipe is validated here, every component table against its component's own
Config model and every loop table against the loop's settings model, and all errors are
collected before failing. Nothing in this module loads a model or touches the network.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from pydantic import BaseModel, ValidationError

from emojikit.composition.assembly import COMPONENT_TABLES, ComponentChoice, choose, context, format_validation, preflight_errors
from emojikit.api.components import BuildContext
from emojikit.api.config import for_playing, holds_path, plain_problem, reads_path
from emojikit.api.errors import ConfigError, EmojikitError, PluginError
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
    missing_paths: list["RecipePath"] = field(default_factory=list)  # relative paths of the file found in neither place

    def has(self, table: str) -> bool:
        return table in self.components

    def context(self, run_dir: Optional[Path] = None) -> BuildContext:
        return context(BuildContext(seed=self.seed, run_dir=run_dir or self.out, recipe_path=self.path, registry=self.registry))

    def build(self, table: str, run_dir: Optional[Path] = None) -> Any:
        """Build the component of `table` through the assembly seam (factory + Protocol check)."""
        return self.components[table].build(self.context(run_dir))

    def build_player(self, run_dir: Optional[Path] = None) -> Any:
        """The backend a saved checkpoint is loaded on to play: the recipe's, without the settings
        that place what a run trains (api.config.for_playing), so the checkpoint's own adapter loads."""
        choice = self.components["backend"]
        return replace(choice, config=for_playing(choice.config)).build(self.context(run_dir))

    def build_named(self, kind: str, name: str, run_dir: Optional[Path] = None) -> Any:
        """Build a component the recipe names in a setting rather than a table (a teacher played as a
        sender, or proposing to RFT's search), with its default settings, through the same seam."""
        from emojikit.composition.assembly import build_component

        return build_component(kind, name, None, self.context(run_dir), table=kind)

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


# --- relative paths ----------------------------------------------------------------------
#
# A relative path a recipe file names for reading (a data file, a checkpoint, another recipe)
# is looked up in the current directory first; when nothing is there, under the recipe's
# project root: the folder holding the recipe's `recipes/` folder (for
# /home/me/emojikit/recipes/sft.toml: /home/me/emojikit), else the recipe's own folder. So the
# shipped recipes work from any directory, and a recipe that names files beside the command
# keeps working. Where a run writes (`out`) and paths typed on the command line (--set,
# --targets, --checkpoint) are relative to the current directory only (docs/recipes.md).

PATH_TEXT_FIELDS = ("start_from", "checkpoints")  # text settings of the loop tables that may name a path
# The recipe a kind may name for its input, (table, key): kept beside emojikit.stages.pipeline.UPSTREAM_KEYS.
UPSTREAM_RECIPE_KEYS = {"sft": ("sft", "data"), "grpo": ("grpo", "start_from"), "rft": ("rft", "start_from")}


@dataclass(frozen=True)
class RecipePath:
    """A relative path the recipe file names that exists neither in the current directory nor
    under the recipe's project root: its errors say where it was looked for."""

    table: str  # "sft", "prompts.sources[0]"
    key: str
    value: str
    cwd: Path
    root: Path

    def where(self) -> str:
        here = self.cwd / self.value
        if self.root == self.cwd:
            return f"looked for at {here}"
        return f"looked for at {here} (the current directory) and at {self.root / self.value} (the recipe's project root)"


def project_root(recipe_path: Path | str) -> Path:
    """The folder a recipe's relative input paths fall back to: the parent of its `recipes/`
    folder when the recipe is in one, else the recipe's own folder."""
    folder = Path(os.path.abspath(recipe_path)).parent
    return folder.parent if folder.name == "recipes" else folder


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def resolve_recipe_paths(data: dict, recipe_path: Path | str, registry: Optional[Registry] = None) -> tuple[dict, list[RecipePath]]:
    """The recipe file's TOML with every relative input path that is missing from the current
    directory but present under the recipe's project root made absolute (project_root); and the
    relative input paths found in neither place. Paths are the loop tables' path settings
    (start_from and [eval] checkpoints too) and the components' ExistingPath/ExistingFile
    settings, also in nested component tables ([[prompts.sources]])."""
    kind = data.get("kind")
    if kind not in RECIPE_KINDS:
        return data, []
    registry = registry or get_registry()
    cwd, root = Path.cwd(), project_root(recipe_path)
    if _same_dir(root, cwd):
        root = cwd
    data = copy.deepcopy(data)
    missing: list[RecipePath] = []

    def resolve(value: Any, table: str, key: str) -> Any:
        if isinstance(value, list):
            return [resolve(v, table, key) for v in value]
        if not isinstance(value, str) or not value.strip() or os.path.isabs(value) or value.startswith("~") or Path(value).exists():
            return value
        if root != cwd and (root / value).exists():
            return str(root / value)
        if "/" in value or "." in value:  # a path, not a word like "base" or "auto"
            missing.append(RecipePath(table, key, value, cwd, root))
        return value

    def component(body: dict, kind_name: str, table: str) -> None:
        use = body.get("use")
        if not isinstance(use, str):
            return
        try:
            config = registry.get(kind_name, use).config
        except (EmojikitError, KeyError):
            return  # load_recipe reports the unknown component
        for key, value in list(body.items()):
            f = config.model_fields.get(key)
            if f is None:
                continue
            if reads_path(f.annotation, f.metadata):
                body[key] = resolve(value, table, key)
            elif isinstance(value, list) and all(isinstance(v, dict) and "use" in v for v in value):
                for i, item in enumerate(value):  # nested components of the same kind (mix's sources)
                    component(item, kind_name, f"{table}.{key}[{i}]")

    shape = RECIPE_SHAPES[kind]
    for table, body in data.items():
        if not isinstance(body, dict):
            continue
        if table in shape["settings"]:
            model = import_object(shape["settings"][table])
            for key, value in list(body.items()):
                f = model.model_fields.get(key)
                if f is not None and (holds_path(f.annotation) or key in PATH_TEXT_FIELDS):
                    body[key] = resolve(value, table, key)
        elif table in COMPONENT_TABLES:
            component(body, COMPONENT_TABLES[table], table)
    return data, missing


def _explain_missing(errors: list[str], missing: Sequence[RecipePath], data: dict) -> list[str]:
    """Errors about a relative path of the recipe file found nowhere, with where it was looked
    for (unless --set replaced the value)."""

    def current(p: RecipePath) -> bool:
        body = data.get(p.table)
        if "." in p.table or not isinstance(body, dict):
            return "." in p.table  # a nested table's value: as the file wrote it
        value = body.get(p.key)
        return value == p.value or (isinstance(value, list) and p.value in value)

    out = []
    for line in errors:
        for p in missing:
            if line.startswith(f"[{p.table}]") and p.value in line and current(p):
                # The recipe's own path: where it was looked for, both places (replacing a setting's own clause).
                line = f"{re.sub(r' [(]looked for at [^)]*[)]$', '', line)} ({p.where()})"
                break
        out.append(line)
    return out


def validation_lines(table: str, model: type[BaseModel], exc: ValidationError) -> list[str]:
    """format_validation's `[table] key: problem` lines, a wrong type or range in plain words
    ("[grpo] steps: expected an integer, got 'ten'") instead of pydantic's."""
    lines = format_validation(table, model, exc)
    out = []
    for err, line in zip(exc.errors(), lines):
        plain = plain_problem(err)
        if plain is not None:
            loc = ".".join(str(p) for p in err["loc"]) or "(table)"
            line = f"[{table}] {loc}: {plain}"
        out.append(line)
    return out


def choose_table(kind: str, use: str, body: Mapping[str, Any], ctx: BuildContext, *, table: str) -> ComponentChoice:
    """assembly.choose, with a wrong type or range of the settings in plain words (validation_lines)."""
    try:
        spec = (ctx.registry or get_registry()).get(kind, use)
    except PluginError:
        return choose(kind, use, dict(body), ctx, table=table)  # its one line: no such component
    try:
        config = spec.config.model_validate(dict(body))
    except ValidationError as exc:
        raise ConfigError("; ".join(validation_lines(table, spec.config, exc))) from None
    return choose(kind, use, config, ctx, table=table)


# --- what a misplaced key or table is for ----------------------------------------------------

KIND_WORDS = {"sft": "SFT", "grpo": "GRPO", "rft": "RFT", "data": "data", "eval": "eval", "game": "game"}


def article(kind: str) -> str:
    """"an" sft, rft or eval recipe (as they are read: es-ef-tee, ar-ef-tee, eval), "a" data or grpo one."""
    return "an" if kind in ("sft", "rft", "eval") else "a"


def tables_with_key(key: str, kind: str, data: dict, registry: Registry) -> list[str]:
    """`table.key` for every table of a `kind` recipe that has setting `key`: its loop tables,
    and the component tables by the component `data` names (else the default one)."""
    shape = RECIPE_SHAPES[kind]
    found = [f"{table}.{key}" for table, ref in shape["settings"].items() if key in import_object(ref).model_fields]
    for table in shape["required"] + shape["optional"]:
        body = data.get(table)
        use = body.get("use") if isinstance(body, dict) else None
        if not isinstance(use, str):
            continue
        try:
            if key in registry.get(COMPONENT_TABLES[table], use).config.model_fields:
                found.append(f"{table}.{key}")
        except EmojikitError:
            continue
    return found


def misplaced_key(key: str, kind: str, data: dict, registry: Registry) -> str:
    """A top-level `key = value` that is a setting of a table (`--set learning_rate=1e-4`):
    which tables have it, or the closest setting of the recipe's loop tables."""
    import difflib

    found = tables_with_key(key, kind, data, registry)
    if found:
        return (f"{key}: not a top-level key (those are {', '.join(TOP_LEVEL_KEYS)}); did you mean {' or '.join(found)}? "
                f"(--set {found[0]}=..., or under [{found[0].split('.')[0]}] in the recipe)")
    settings = {f"{t}.{k}": k for t, ref in RECIPE_SHAPES[kind]["settings"].items() for k in import_object(ref).model_fields}
    close = difflib.get_close_matches(key, list(TOP_LEVEL_KEYS), n=1) or [
        full for word in difflib.get_close_matches(key, sorted(set(settings.values())), n=1) for full in settings if settings[full] == word
    ][:1]
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{key}: not a top-level key of {article(kind)} {kind} recipe{hint}; top-level keys: {', '.join(TOP_LEVEL_KEYS)}; a setting goes in its table, e.g. --set {kind if kind in RECIPE_SHAPES[kind]['settings'] else 'game'}.KEY=VALUE"


def foreign_table(table: str, kind: str, data: dict) -> str:
    """` (SFT settings go in the sft recipe that [grpo] start_from names: recipes/sft.toml)`
    for a table another kind of recipe uses; "" otherwise."""
    owners = [k for k, shape in RECIPE_SHAPES.items() if table in shape["settings"]]
    if not owners:
        return ""
    words = KIND_WORDS.get(table, f"[{table}]")
    ref = UPSTREAM_RECIPE_KEYS.get(kind)
    named = data.get(ref[0], {}).get(ref[1]) if ref and isinstance(data.get(ref[0]), dict) else None
    if isinstance(named, str) and named.endswith(".toml"):
        try:
            named_kind = tomllib.loads(Path(named).read_text(encoding="utf-8")).get("kind")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            named_kind = None
        if named_kind in owners:
            return f" ({words} settings go in the {named_kind} recipe that [{ref[0]}] {ref[1]} names: {named})"
    which = owners[0] if len(owners) == 1 else ", ".join(owners[:-1]) + " or " + owners[-1]
    return f" ({words} settings go in {article(owners[0])} {which} recipe" + (f", e.g. recipes/{owners[0]}.toml" if len(owners) == 1 else "") + ")"


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


def flag_sources(
    overrides: Sequence[str] = (),
    choices: Optional[Mapping[str, Optional[str]]] = None,
    settings: Optional[Mapping[str, Any]] = None,
    flags: Optional[Mapping[str, str]] = None,
) -> dict[str, str]:
    """The command-line flag behind each `table.key` it set (resolve_data's inputs), so that an
    error about that value names what the user typed, not only a recipe file they did not
    edit. `flags` names the flag of each `settings` key ("eval.checkpoints": "--checkpoint")."""
    sources: dict[str, str] = {}
    for table, name in (choices or {}).items():
        if name:
            sources[table] = f"--{table} {name}"  # the whole table is the flag's
    for text in overrides:
        keys, _ = parse_override(text)
        key = ".".join(keys)
        sources[key] = f"--set {key}"  # never the value: a mistyped key's value may be a secret

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, f"{prefix}{key}.")
            else:
                sources[f"{prefix}{key}"] = (flags or {}).get(f"{prefix}{key}", "a command-line flag")

    walk(settings or {}, "")
    return sources


# An error line's subject: `[table] key:`, `[table]:`, `[table] words`, `[a.b[0]] key:` or a top-level `key:`.
ERROR_SUBJECT = re.compile(r"^\[(.+?)\](?=[ :])(?: ([\w.-]+):)?|^([\w-]+):")


def name_flags(lines: Sequence[str], sources: Mapping[str, str]) -> list[str]:
    """Each error line about a value a flag set, with "(from FLAG)": `[eval] checkpoints: ...
    (from --checkpoint)`. The most specific key wins (a --set inside a --judge's table); a line
    about a whole table (`[sft]: not used by ...`) is the flag's that set a key in it."""
    out = []
    for line in (piece for joined in lines for piece in re.split(r"; (?=\[)", joined)):  # a component's lines come joined
        match = ERROR_SUBJECT.match(line) if sources else None
        if match is None:
            out.append(line)
            continue
        subject = match[3] or (f"{match[1]}.{match[2]}" if match[2] else match[1])
        parts = subject.split(".")
        source = next((sources[k] for i in range(len(parts), 0, -1) if (k := ".".join(parts[:i])) in sources), None)
        if source is None and not match[2] and match[1]:
            source = next((v for k, v in sources.items() if k.startswith(f"{match[1]}.")), None)
        out.append(f"{line} (from {source})" if source else line)
    return out


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
    flags: Optional[Mapping[str, str]] = None,
    typed: Optional[Sequence[str]] = None,
) -> Recipe:
    """Load and validate a recipe; raises ConfigError listing every problem on one line.

    `overrides` are `--set table.key=value` texts; `choices` and `settings` come from CLI
    flags (see resolve_data for the order), `flags` names the flag of each settings key for
    the errors (flag_sources), `typed` the overrides the user typed when the caller added its
    own (an upstream's output; default: all of them); `trackers` (--tracker) join [tracking] use."""
    path = Path(path)
    registry = registry or get_registry()
    raw, missing = resolve_recipe_paths(read_toml(path), path, registry)  # the file's relative paths (project_root)
    data = with_trackers(resolve_data(raw, overrides or [], choices=choices, settings=settings), trackers)
    sources = flag_sources(overrides or [] if typed is None else typed, choices, settings, flags)
    errors: list[str] = []

    kind = data.get("kind")
    if kind not in RECIPE_KINDS:
        shown = "missing" if kind is None else repr(kind)
        raise ConfigError(f"{path}: " + name_flags([f"kind: {shown} is not a recipe kind; expected one of {', '.join(RECIPE_KINDS)}"], sources)[0])
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
        if key not in allowed_tables and not isinstance(value, dict):
            errors.append(misplaced_key(key, kind, data, registry))  # `--set learning_rate=1e-4`: a table's key
        elif key not in allowed_tables:
            hint = did_you_mean(key, sorted(allowed_tables | set(TOP_LEVEL_KEYS))) or foreign_table(key, kind, data)
            errors.append(f"[{key}]: not used by {article(kind)} {kind} recipe{hint}; tables: {', '.join(sorted(allowed_tables))}")
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
            components[table] = choose_table(COMPONENT_TABLES[table], use, body, BuildContext(registry=registry), table=table)
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
            errors.extend(validation_lines(table, model, exc))

    trackers = choose_trackers(data.get(TRACKING_TABLE), registry, errors)

    if errors:
        raise ConfigError(f"{path}: " + "; ".join(name_flags(_explain_missing(errors, missing, data), sources)))

    recipe = Recipe(path, kind, name, seed, Path(out), components, loop_settings, data, overrides=list(overrides or []), registry=registry, trackers=trackers,
                    missing_paths=missing)
    # Preflight: declared API keys, files. Still before any model load or network call.
    errors = preflight_errors([*components.values(), *trackers], recipe.context())
    if errors:
        raise ConfigError(f"{path}: " + "; ".join(name_flags(_explain_missing(errors, missing, data), sources)))
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
    if Path(recipe.out).is_file():  # as RunDir would refuse it, after the stages before it ran
        from emojikit.api.errors import RunDirectoryError

        raise RunDirectoryError(f"{recipe.out}: is a file, expected a run directory; choose another name with --set name=<new> (or out=<dir>)")
    if recipe.kind == "eval":  # every sender's files, before the first game (not when its turn comes)
        from emojikit.composition.preflight import check_sender_checkpoints

        try:
            check_sender_checkpoints(recipe.settings["eval"].checkpoints, "[eval] checkpoints")
        except EmojikitError as exc:
            raise type(exc)(f"{recipe.path}: {exc}") from None
    module, _, _ = RECIPE_SHAPES[recipe.kind]["runner"].partition(":")
    preflight = getattr(importlib.import_module(module), "preflight", None)
    if preflight is not None:
        try:
            preflight(recipe)
        except EmojikitError as exc:  # a relative path of the recipe found nowhere: where it was looked for
            text = str(exc)
            where = next((p.where() for p in recipe.missing_paths if p.value in text and "looked for at" not in text), None)
            if where is None:
                raise
            raise type(exc)(f"{text} ({where})") from None
