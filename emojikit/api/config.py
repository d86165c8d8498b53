"""Base class and field types for component and loop configs."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Sequence, Union, get_args, get_origin

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


def _must_be_file(path: Path) -> Path:
    _must_exist(path)
    if Path(path).is_dir():
        raise ValueError(f"{path} is a directory, expected a file")
    return path


# A file the recipe reads (not a directory): checked during validation.
ExistingFile = Annotated[Path, AfterValidator(_must_be_file)]


# --- types as a person writes them (`emojikit describe`) ------------------------------------

_TYPE_WORDS = {int: "integer", float: "number", str: "text", bool: "true or false", Path: "path", dict: "table", list: "list"}


def _constraint_words(metadata) -> list[str]:
    words = []
    for item in metadata:
        if isinstance(item, AfterValidator) and item.func is _must_exist:
            words.append("must exist")
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >=")):
            value = getattr(item, attr, None)
            if value is not None and not isinstance(item, type):
                words.append(f"{sign} {value}")
    return words


def describe_type(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """`Optional[ExistingPath]` -> "path, must exist, optional"; `int` with ge=1 -> "integer, >= 1"."""
    origin, args = get_origin(annotation), get_args(annotation)
    extra = _constraint_words(metadata)
    if origin is Annotated:
        return describe_type(args[0], [*args[1:], *metadata])
    if origin in (Union, UnionType):
        kinds = [a for a in args if a is not type(None)]
        text = " or ".join(describe_type(a) for a in kinds)
        return ", ".join([text, *extra] + (["optional"] if len(kinds) < len(args) else []))
    if origin is Literal:
        text = "one of " + ", ".join(str(a) for a in args)
    elif origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        text = "list of " + describe_type(args[0]) if args else "list"
    elif origin is dict:
        text = "table"
    else:
        text = _TYPE_WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return ", ".join([text, *extra])
