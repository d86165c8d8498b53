"""API keys from the environment or a `.env` file in the working directory.

Keys are declared on the component that needs them (`Component.needs_key`) and read only
through `require_key`, never stored in configs, so they cannot reach a run directory;
`scrub` removes any known key from text before it is logged.
"""

from __future__ import annotations

import os
from pathlib import Path

from emojikit.api.errors import MissingCredentialError


def _dotenv(path: Path = Path(".env")) -> dict[str, str]:
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def find_key(var: str) -> str | None:
    return os.environ.get(var) or _dotenv().get(var) or None


def require_key(var: str, what: str) -> str:
    """The key's value, or a MissingCredentialError naming the variable."""
    value = find_key(var)
    if not value:
        raise MissingCredentialError(f"{what} needs an API key: set {var} in the environment or in a .env file")
    return value


# Variables whose values are scrubbed: every key a component declares (`Component.needs_key`,
# recorded by the registry), and any variable named like a key.
_DECLARED: set[str] = set()
SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET")


def declare_key(var: str) -> None:
    """Record a key variable a component needs, so `scrub` removes its value."""
    _DECLARED.add(var)


def secret_vars() -> list[str]:
    named = {v for v in (*os.environ, *_dotenv()) if v.upper().endswith(SECRET_SUFFIXES)}
    return sorted(_DECLARED | named)


def scrub(text: str) -> str:
    for var in secret_vars():
        value = find_key(var)
        if value and len(value) >= 6:
            text = text.replace(value, f"<{var}>")
    return text
