"""The module paths emojikit had before its core was grouped by domain still import.

`import emojikit.components` (or `emojikit.game`, `emojikit.web.models`, ...) gives the very
module that now lives at `emojikit.api.components` (`emojikit.play.game`, ...), so plugins and
scripts written against the flat layout keep working unchanged. One table, one finder; no
shim files in the tree.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Optional

# old module under emojikit -> its home now (a package moves with everything under it)
MOVED: dict[str, str] = {
    "hookspecs": "api", "components": "api", "policy": "api", "format": "api", "config": "api",
    "errors": "api", "emojis": "api", "secrets": "api",
    "registry": "composition", "assembly": "composition", "recipe": "composition", "preflight": "composition",
    "game": "play", "guesses": "play", "embedding": "play",
    "data": "training", "sft": "training", "grpo": "training", "guidance": "training", "credit": "training",
    "targets": "training",
    "evaluate": "evaluation", "comparison": "evaluation", "metrics": "evaluation", "sweep": "evaluation",
    "human_games": "evaluation",
    "runs": "stages", "pipeline": "stages", "fingerprint": "stages", "interrupt": "stages",
    "bundled": "support", "io": "support", "retry": "support",
    "cli": "ui", "interactive": "ui", "inspect_run": "ui", "web": "ui",
}


def new_name(old: str) -> Optional[str]:
    """`emojikit.web.models` -> `emojikit.ui.web.models`; None for a name that did not move."""
    parts = old.split(".")
    if len(parts) < 2 or parts[0] != "emojikit" or parts[1] not in MOVED:
        return None
    return ".".join(["emojikit", MOVED[parts[1]], *parts[1:]])


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def get_code(self, fullname):
        """For `python -m emojikit.cli` and other old paths run as scripts (runpy asks for the code)."""
        return importlib.util.find_spec(self.target).loader.get_code(self.target)

    def exec_module(self, module) -> None:
        # The import system stamped the old name's spec on the real module: give it its own back.
        module.__spec__ = self.real_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
