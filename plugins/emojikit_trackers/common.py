"""What the four trackers share: the missing-library check and the config they log."""

from __future__ import annotations

import importlib.util
import json

from emojikit import ConfigError


def library_check(tracker: str, module: str, extra: str):
    """A preflight: the tracker's library is importable, else one line naming the extra."""

    def preflight(config, ctx) -> None:
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"the {tracker} tracker needs the {module} library: pip install 'emojikit[{extra}]' (or `pip install {extra}`)")

    return preflight


def run_config(run) -> dict:
    """The redacted resolved recipe, with the run's code record under "code"."""
    return {**run.config, "code": run.code}


def markdown_table(columns: list[str], rows: list[list]) -> str:
    def cell(value) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
