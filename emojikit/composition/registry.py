"""Plugin loading and component lookup.

Every plugin, built-in or third-party, is an entry point in the group "emojikit". Entry
points load one at a time; one that fails is recorded (and warned about) and the rest still
load. Environment controls, like pytest's and llm's:

  EMOJIKIT_PLUGINS=a,b          load only these entry points ("" loads none)
  EMOJIKIT_BLOCK_PLUGINS=a,b    never load these
  EMOJIKIT_STRICT_PLUGINS=1     re-raise a plugin's failure (load, preflight, factory) with its traceback
"""

from __future__ import annotations

import difflib
import os
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Optional

import pluggy

from emojikit.api import hookspecs
from emojikit.api.components import Component
from emojikit.api.errors import PluginError
from emojikit.api.secrets import declare_key

GROUP = "emojikit"
KINDS = tuple(hookspecs.KIND_HOOKS)


@dataclass
class PluginFailure:
    plugin: str
    distribution: str
    error: str


@dataclass
class Conflict:
    """Two or more plugins provide a component of the same kind and name: none of them is
    used (a command that asks for it fails, naming every provider); the others still load."""

    kind: str
    name: str
    providers: list[Component]

    def describe(self) -> str:
        who = " and ".join(f"plugin {c.plugin!r} ({c.distribution or 'no distribution'})" for c in self.providers)
        return f"duplicate {self.kind} {self.name!r}: provided by {who}; block one with EMOJIKIT_BLOCK_PLUGINS"


def _env_list(name: str) -> Optional[set[str]]:
    value = os.environ.get(name)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def canonical_kind(kind: str) -> str:
    """A component kind as the registry spells it (prompt_source), from any spelling a person
    types: prompt_source, prompt-source, "prompt source", Prompt Source. An unknown kind is
    returned as given, for the caller's error."""
    spelled = "_".join(str(kind).strip().lower().replace("-", " ").replace("_", " ").split())
    return spelled if spelled in KINDS else kind


def strict_plugins() -> bool:
    """EMOJIKIT_STRICT_PLUGINS=1: a plugin's failure (loading, preflight, factory) raises with its own traceback."""
    return os.environ.get("EMOJIKIT_STRICT_PLUGINS", "") not in ("", "0")


class Registry:
    def __init__(self, load_entrypoints: bool = True):
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.failures: list[PluginFailure] = []
        self.conflicts: list[Conflict] = []
        self._origin: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
        self._components: Optional[dict[str, dict[str, Component]]] = None
        if load_entrypoints:
            self.load_entrypoints()

    # -- loading ---------------------------------------------------------------------

    def load_entrypoints(self) -> None:
        allow = _env_list("EMOJIKIT_PLUGINS")
        block = _env_list("EMOJIKIT_BLOCK_PLUGINS") or set()
        strict = strict_plugins()
        seen: set[str] = set()
        for ep in metadata.entry_points(group=GROUP):
            if ep.name in seen or ep.name in block or (allow is not None and ep.name not in allow):
                continue
            seen.add(ep.name)
            dist = ep.dist.name if ep.dist else ""
            version = ep.dist.version if ep.dist else ""
            try:
                module = ep.load()
                self.register(module, ep.name, dist, version)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
                if strict:
                    raise
                self._fail(ep.name, dist, exc)
        unknown = sorted(allow - {ep.name for ep in metadata.entry_points(group=GROUP)}) if allow else []
        for name in unknown:  # a typo would otherwise just leave its components out
            warnings.warn(f"EMOJIKIT_PLUGINS names {name!r}, which is not an installed plugin; installed: {', '.join(sorted({ep.name for ep in metadata.entry_points(group=GROUP)}))}", stacklevel=2)

    def register(self, plugin: object, name: str, distribution: str = "", version: str = "") -> None:
        """Register a plugin object or module; hook implementations are validated at once."""
        self.pm.register(plugin, name=name)
        self.pm.check_pending()  # catches misspelled hook names
        self._origin[name] = (distribution, version)
        self._components = None

    def _fail(self, plugin: str, dist: str, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.failures.append(PluginFailure(plugin, dist, error))
        warnings.warn(f"emojikit plugin {plugin!r} failed to load: {error}", stacklevel=3)

    def plugins(self) -> list[tuple[str, str, str]]:
        """(plugin, distribution, version) of every registered plugin, by name."""
        return sorted((name, *origin) for name, origin in self._origin.items())

    # -- lookup ----------------------------------------------------------------------

    def _collect(self) -> dict[str, dict[str, Component]]:
        if self._components is not None:
            return self._components
        table: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
        clashes: dict[tuple[str, str], Conflict] = {}
        for kind, hook_name in hookspecs.KIND_HOOKS.items():
            hook = getattr(self.pm.hook, hook_name)
            # One call per implementation, so every component knows its plugin.
            for impl in reversed(hook.get_hookimpls()):
                dist, version = self._origin.get(impl.plugin_name, ("", ""))
                try:
                    specs = impl.function() or []
                except Exception as exc:  # noqa: BLE001
                    self._fail(impl.plugin_name, dist, exc)
                    continue
                for spec in specs:
                    if not isinstance(spec, Component):
                        self._fail(impl.plugin_name, dist, TypeError(f"{hook_name} returned {type(spec).__name__}, not Component"))
                        continue
                    spec.kind, spec.plugin, spec.distribution, spec.version = kind, impl.plugin_name, dist, version
                    for key in (spec.needs_key, spec.optional_key):
                        if key:
                            declare_key(key)
                    if (kind, spec.name) in clashes:
                        clashes[kind, spec.name].providers.append(spec)
                    elif spec.name in table[kind]:
                        clashes[kind, spec.name] = Conflict(kind, spec.name, [table[kind].pop(spec.name), spec])
                    else:
                        table[kind][spec.name] = spec
        self.conflicts = list(clashes.values())
        self._components = table
        return table

    def components(self, kind: Optional[str] = None) -> list[Component]:
        """Usable components (a name in `conflicts` is not one of them)."""
        table = self._collect()
        kinds = [canonical_kind(kind)] if kind else list(KINDS)
        for k in kinds:
            if k not in table:
                raise PluginError(f"unknown component kind {k!r}; kinds: {', '.join(KINDS)}")
        return [c for k in kinds for c in sorted(table[k].values(), key=lambda c: c.name)]

    def get(self, kind: str, name: str) -> Component:
        table = self._collect()
        kind = canonical_kind(kind)
        if kind not in table:
            raise PluginError(f"unknown component kind {kind!r}{did_you_mean(kind, KINDS)}; kinds: {', '.join(KINDS)}")
        for conflict in self.conflicts:
            if (conflict.kind, conflict.name) == (kind, name):
                raise PluginError(conflict.describe())
        if name not in table[kind]:
            installed = ", ".join(sorted(table[kind])) or "none"
            raise PluginError(f"no {kind} named {name!r}{did_you_mean(name, table[kind])}; installed: {installed}")
        return table[kind][name]


_default: Optional[Registry] = None


def get_registry() -> Registry:
    global _default
    if _default is None:
        _default = Registry()
    return _default
