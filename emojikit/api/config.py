"""Base class and field types for component and loop configs."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Mapping, Optional, Sequence, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


class ConfigModel(BaseModel):
    """Every config rejects unknown keys, so a typo is an error, never a silent default."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    # A backend's settings that place the adapter a run trains: where it starts (init_from), and
    # in a backend that has them, which layers train. A saved checkpoint plays with its own adapter
    # on the base model, so a backend built to play one leaves them at their defaults (for_playing).
    training_placement: ClassVar[tuple[str, ...]] = ("init_from",)

    @field_validator("*", mode="before")
    @classmethod
    def _no_truth_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        """`steps = true` is not 1 step, nor `compare = "yes"` or 1 true: pydantic's lax mode
        would take both, and the run would silently do something else than the recipe says."""
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if field is None or value is None:
            return value
        leaves = {leaf for leaf, _ in _annotation_parts(field.annotation, field.metadata)}
        if isinstance(value, bool) and bool not in leaves and leaves & {int, float}:
            kind = "int_type" if int in leaves else "float_type"
            raise PydanticCustomError(kind, "expected a number, got true or false")
        if leaves == {bool} and not isinstance(value, bool):
            raise PydanticCustomError("bool_type", "expected true or false")
        return value


def for_playing(config: ConfigModel) -> ConfigModel:
    """`config` with its training placement at the defaults: a backend that loads a saved
    checkpoint to play it (a run's start, or the layers a run trains, are not the checkpoint's)."""
    fields = type(config).model_fields
    reset = {key: fields[key].get_default(call_default_factory=True) for key in type(config).training_placement if key in fields}
    return config.model_copy(update=reset) if reset else config


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


def _annotation_parts(annotation: Any, metadata: Sequence[Any] = ()) -> list[tuple[Any, list[Any]]]:
    """Every leaf type of an annotation (through Optional, unions, lists, Annotated) with its metadata."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _annotation_parts(args[0], [*args[1:], *metadata])
    if origin in (Union, UnionType, list, tuple, set, frozenset):
        return [part for arg in args if arg is not type(None) and arg is not Ellipsis for part in _annotation_parts(arg, metadata)]
    return [(annotation, list(metadata))]


def holds_path(annotation: Any) -> bool:
    """Whether a field holds a path (Path, ExistingPath, ExistingFile; optional or a list of them)."""
    return any(leaf is Path for leaf, _ in _annotation_parts(annotation))


def reads_path(annotation: Any, metadata: Sequence[Any] = ()) -> bool:
    """Whether a field holds a path the config reads: ExistingPath or ExistingFile (optional or a list of them)."""
    return any(
        leaf is Path and any(isinstance(m, AfterValidator) and m.func in (_must_exist, _must_be_file) for m in meta)
        for leaf, meta in _annotation_parts(annotation, metadata)
    )


# --- validation errors as a person reads them ------------------------------------------------

_EXPECTED = {
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer", "int_parsing_size": "an integer",
    "float_parsing": "a number", "float_type": "a number", "finite_number": "a finite number",
    "bool_parsing": "true or false", "bool_type": "true or false",
    "string_type": "text (in quotes)", "path_type": "a path (text in quotes)",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table",
}
_BOUNDS = {"greater_than_equal": ("ge", "greater than or equal to"), "greater_than": ("gt", "greater than"),
           "less_than_equal": ("le", "less than or equal to"), "less_than": ("lt", "less than")}


def shown_value(value: Any) -> str:
    """A value as the recipe or --set wrote it: 'ten' (text), 3, 2.5, true, ["a", "b"]."""
    import json

    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def plain_problem(error: Mapping[str, Any]) -> Optional[str]:
    """One pydantic error (an item of ValidationError.errors()) in plain words, e.g.
    "expected an integer, got 'ten'" for int_parsing; None for a type without plainer words
    (missing and unknown keys, a validator's own message)."""
    kind, ctx = error.get("type"), error.get("ctx") or {}
    got = f", got {shown_value(error['input'])}" if "input" in error else ""
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}{got}"
    if kind in ("literal_error", "enum") and "expected" in ctx:
        return f"expected one of {ctx['expected']}{got}"
    if kind in _BOUNDS and _BOUNDS[kind][0] in ctx:
        return f"must be {_BOUNDS[kind][1]} {ctx[_BOUNDS[kind][0]]}{got}"
    return None


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
