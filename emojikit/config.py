"""Base class and field types for component and loop configs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """Every config rejects unknown keys, so a typo is an error, never a silent default."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())


def _must_exist(path: Path) -> Path:
    if not Path(path).exists():
        raise ValueError(f"file not found: {path}")
    return path


# A path the recipe reads: checked during validation, before any model loads.
ExistingPath = Annotated[Path, AfterValidator(_must_exist)]
