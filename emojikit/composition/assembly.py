"""The one path from (kind, name, settings, context) to a built component.

Every caller that turns settings into a component goes through here: recipes
(`Recipe.build`), `play`, `chat`, `play --human`, `mask`, and plugins that build another
component (the retrieval judge's distractor source). Four stages:

  choose     look the component up in the context's registry, validate the settings
             against its Config model (every problem on one line, `[table] key: problem`)
  preflight  the declared API key (`Component.needs_key`), then the component's own preflight
  construct  the factory, then a check of the result against the kind's Protocol
  build      all three

An EmojikitError from a plugin keeps its class and gains the table as a prefix; any other
exception from a plugin's preflight or factory becomes one PluginError line naming the
component, the plugin and its distribution.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from pydantic import BaseModel, ValidationError

from emojikit.api.components import BuildContext, Component, Decoder, Judge, PromptSource, Reward, Teacher, Tracker, mark_origin
from emojikit.api.errors import ConfigError, EmojikitError, PluginError
from emojikit.api.policy import Policy
from emojikit.composition.registry import Registry, did_you_mean, get_registry, strict_plugins
from emojikit.api.secrets import require_key

# The recipe table that selects each kind of component (`[prompts] use = "generated"`).
COMPONENT_TABLES = {
    "prompts": "prompt_source",
    "teacher": "teacher",
    "judge": "judge",
    "reward": "reward",
    "decoder": "decoder",
    "backend": "backend",
}
TABLE_OF_KIND = {kind: table for table, kind in COMPONENT_TABLES.items()}
TABLE_OF_KIND["tracker"] = "tracking"  # [tracking] use = [...] picks several (composition.recipe)

# What a built component of each kind must provide (docs/plugins.md has the whole contract).
KIND_PROTOCOLS: dict[str, type] = {
    "prompt_source": PromptSource,
    "teacher": Teacher,
    "judge": Judge,
    "reward": Reward,
    "decoder": Decoder,
    "backend": Policy,
    "tracker": Tracker,
}

Settings = Union[Mapping[str, Any], BaseModel, None]


def kind_label(kind: str) -> str:
    """"prompt_source" -> "prompt source"."""
    return kind.replace("_", " ")


def protocol_members(protocol: type) -> list[str]:
    """The attributes and methods a Protocol declares (its own and its bases'), in order."""
    names: list[str] = []
    for klass in reversed(protocol.__mro__):
        if klass in (object,) or not getattr(klass, "_is_protocol", False) or klass.__name__ in ("Protocol", "Generic"):
            continue
        for name in list(getattr(klass, "__annotations__", {})) + list(vars(klass)):
            if not name.startswith("_") and name not in names:
                names.append(name)
    return names


# Setting names as the peers spell them -> (emojikit's name, whose name it is). Spelling
# matches miss these (`beta` is nothing like `kl_coef`), and people arrive with them.
PEER_NAMES: dict[str, tuple[str, str]] = {
    "lr": ("learning_rate", "PyTorch's and torchtune's"),
    "beta": ("kl_coef", "TRL's"),
    "kl": ("kl_coef", "a common"),
    "kl_beta": ("kl_coef", "a common"),
    "kl_penalty_coef": ("kl_coef", "tinker-cookbook's"),
    "init_kl_coef": ("kl_coef", "TRL's PPO"),
    "num_generations": ("group_size", "TRL's"),
    "groups_per_batch": ("batch_size", "tinker-cookbook's"),
    "per_device_train_batch_size": ("batch_size", "TRL's"),
    "num_iterations": ("ppo_epochs", "TRL's"),
    "epsilon": ("clip", "TRL's"),
    "cliprange": ("clip", "TRL's PPO"),
    "clip_range": ("clip", "a common"),
    "scale_rewards": ("normalize_std", "TRL's"),
    "loss_type": ("loss", "TRL's"),
    "max_steps": ("steps", "TRL's"),
    "num_train_epochs": ("epochs", "TRL's"),
    "lr_scheduler_type": ("lr_schedule", "TRL's"),
    "save_steps": ("save_every", "TRL's"),
    "eval_steps": ("eval_every", "TRL's"),
    "max_completion_length": ("max_new_tokens", "TRL's"),
    "max_tokens": ("max_new_tokens", "tinker-cookbook's"),
    "model_name_or_path": ("model", "TRL's"),
    "r": ("lora_rank", "peft's"),
    "lora_r": ("lora_rank", "a common"),
    "lora_dropout_p": ("lora_dropout", "a common"),
}


def unknown_key_hint(key: str, fields) -> str:
    """` (did you mean 'kl_coef'? `beta` is TRL's name)` for a peer's name, else a spelling match."""
    peer = PEER_NAMES.get(key.lower())
    if peer is not None and peer[0] in fields:
        return f" (did you mean {peer[0]!r}? `{key}` is {peer[1]} name)"
    return did_you_mean(key, fields)


def format_validation(table: str, model: type[BaseModel], exc: ValidationError) -> list[str]:
    """Pydantic errors as `[table] key: problem` lines (unknown keys get a did-you-mean)."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(table)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + unknown_key_hint(str(err["loc"][-1]), model.model_fields)
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        lines.append(f"[{table}] {loc}: {msg}")
    return lines


@dataclass
class ComponentChoice:
    """A component picked for a table, with its validated config; `build(ctx)` constructs it."""

    table: str
    spec: Component
    config: BaseModel

    @property
    def kind(self) -> str:
        return self.spec.kind

    def build(self, ctx: BuildContext) -> Any:
        return construct(self, ctx)


def context(ctx: Optional[BuildContext] = None, **changes: Any) -> BuildContext:
    """A BuildContext that carries a registry (the default one unless given)."""
    ctx = ctx or BuildContext()
    if ctx.registry is None:
        changes.setdefault("registry", get_registry())
    return dataclasses.replace(ctx, **changes) if changes else ctx


def _registry(ctx: Optional[BuildContext]) -> Registry:
    return (ctx.registry if ctx is not None else None) or get_registry()


def choose(kind: str, name: str, settings: Settings = None, ctx: Optional[BuildContext] = None, *, table: Optional[str] = None) -> ComponentChoice:
    """Look up `name` of `kind` and validate `settings` (a dict or an already-built config)."""
    table = table or TABLE_OF_KIND.get(kind, kind)
    try:
        spec = _registry(ctx).get(kind, name)
    except PluginError as exc:
        raise PluginError(f"[{table}] use: {exc}") from None
    if isinstance(settings, spec.config):
        return ComponentChoice(table, spec, settings)
    data = settings.model_dump() if isinstance(settings, BaseModel) else dict(settings or {})
    try:
        config = spec.config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("; ".join(format_validation(table, spec.config, exc))) from None
    return ComponentChoice(table, spec, config)


def _origin(spec: Component) -> str:
    dist = f", {spec.distribution} {spec.version}".rstrip() if spec.distribution else ""
    return f"plugin {spec.plugin!r}{dist}"


def _plugin_failure(choice: ComponentChoice, stage: str, exc: BaseException) -> EmojikitError:
    """One line naming the component and its plugin, or the plugin's own EmojikitError with the table as prefix."""
    if isinstance(exc, EmojikitError):
        # a nested table's error ("[prompts.sources[0]] splitt: ...") already names where it is
        message = str(exc) if str(exc).startswith(f"[{choice.table}") else f"[{choice.table}] {exc}"
        try:
            return type(exc)(message)
        except Exception:  # noqa: BLE001 - an error class with another constructor
            return PluginError(message)
    text = " ".join(str(exc).split()) or "(no message)"
    spec = choice.spec
    return PluginError(f"[{choice.table}] {kind_label(spec.kind)} {spec.name!r} ({_origin(spec)}): {stage} failed: {type(exc).__name__}: {text}")


def preflight(choice: ComponentChoice, ctx: BuildContext) -> None:
    """Before any model loads or network call: the declared API key, then the plugin's preflight."""
    spec = choice.spec
    try:
        if spec.needs_key:
            require_key(spec.needs_key, f"the {spec.name} {kind_label(spec.kind)}")
        if spec.preflight is not None:
            spec.preflight(choice.config, context(ctx))
    except Exception as exc:  # noqa: BLE001 - every plugin failure becomes one line
        if strict_plugins() and not isinstance(exc, EmojikitError):
            raise  # EMOJIKIT_STRICT_PLUGINS=1: the plugin's own traceback, to debug it
        raise _plugin_failure(choice, "preflight", exc) from exc


def preflight_errors(choices, ctx: BuildContext) -> list[str]:
    """Preflight every choice; the one-line problems of all of them (empty when all pass)."""
    errors = []
    for choice in choices:
        try:
            preflight(choice, ctx)
        except EmojikitError as exc:
            errors.append(str(exc))
    return errors


def construct(choice: ComponentChoice, ctx: BuildContext) -> Any:
    """Run the factory and check the result against the kind's Protocol."""
    spec = choice.spec
    try:
        built = spec.factory(choice.config, context(ctx))
    except Exception as exc:  # noqa: BLE001
        if strict_plugins() and not isinstance(exc, EmojikitError):
            raise  # EMOJIKIT_STRICT_PLUGINS=1: the plugin's own traceback, to debug it
        raise _plugin_failure(choice, "factory", exc) from exc
    protocol = KIND_PROTOCOLS.get(spec.kind)
    if protocol is not None:
        missing = [m for m in protocol_members(protocol) if not hasattr(built, m)]
        if missing:
            raise PluginError(
                f"[{choice.table}] {kind_label(spec.kind)} {spec.name!r} ({_origin(spec)}): the factory returned {article_of(type(built).__name__)} "
                f"{type(built).__name__}, which is not a {protocol.__name__}: it has no {', '.join(missing)}"
            )
    mark_origin(built, f"[{choice.table}] {kind_label(spec.kind)} {spec.name!r} ({_origin(spec)})")  # names it if it returns a wrong value later
    return built


def article_of(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def build_component(kind: str, name: str, settings: Settings = None, ctx: Optional[BuildContext] = None, *, table: Optional[str] = None) -> Any:
    """Choose, preflight and construct one component: the whole seam in one call."""
    ctx = context(ctx)
    choice = choose(kind, name, settings, ctx, table=table)
    preflight(choice, ctx)
    return construct(choice, ctx)
