"""The typed fields of an error class, read from its annotations and checked by pydantic.

``broker.errors.ReviseError`` declares its subclasses' fields the way a dataclass
does: ``identity: IdentityText | None = None`` in the class body. This module
turns those annotations into one checker per field (pydantic, strict: no
coercion of ``"3"`` to ``3``), once per class and only when an error of the class
is first made, so importing the error hierarchy never loads pydantic (``revise
--help`` stays fast).

A field's value must be JSON (str, int, float, bool, None, lists and dicts of
those; ``pydantic.JsonValue`` for a value of any JSON shape): an error crosses
Celery's JSON result backend, a queue answer and the run store as it is.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

MISSING: Any = object()  # a required field (no default)
RESERVED = frozenset({"message", "code", "args", "fields"})


class Positional(NamedTuple):
    """The class-body value of a field declared with ``broker.errors.positional``."""

    default: Any


@runtime_checkable
class _IdentityLike(Protocol):
    """``broker.identity.Identity`` without importing it (it imports this package's errors)."""

    site: str
    path: tuple[int, ...]
    occurrence: int


def identity_text(value: Any) -> Any:
    """An identity given as the value type is stored as its text, the form that crosses a
    queue; anything else is left for the type check."""
    return str(value) if isinstance(value, _IdentityLike) else value


class Field(NamedTuple):
    name: str
    check: Callable[[Any], Any]  # the value as stored; raises pydantic's ValidationError
    default: Any  # MISSING when the field is required
    hint: str  # the annotation as written, for messages
    positional: bool = False


def fields_of(cls: type) -> tuple[Field, ...]:
    """``cls``'s fields: those it takes by position first, each group in declaration order
    (a base class's first); the order of ``args`` and of positional values."""
    found = cls.__dict__.get("_fields_spec")
    if found is None:
        found = _read(cls)
        type.__setattr__(cls, "_fields_spec", found)
    return found


def check(cls: type, positional: tuple[Any, ...], given: dict[str, Any]) -> dict[str, Any]:
    """Every field of ``cls`` with its checked value: ``positional`` fill the fields in
    declaration order (how Celery rebuilds an exception: ``cls(*args)``), ``given`` by name.
    A TypeError names an unknown, missing, repeated or mistyped field."""
    from pydantic import ValidationError

    spec = fields_of(cls)
    if len(positional) > len(spec):
        raise TypeError(f"{cls.__name__} takes a message and at most {len(spec)} field "
                        f"values, got {len(positional)}")
    values = dict(given)
    for field, value in zip(spec, positional, strict=False):
        if field.name in values:
            raise TypeError(f"{cls.__name__} got field {field.name!r} twice")
        values[field.name] = value
    names = {f.name for f in spec}
    unknown = sorted(set(values) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}; its fields are: "
                        f"{', '.join(sorted(names)) or 'none'}")
    out: dict[str, Any] = {}
    for field in spec:
        value = values.get(field.name, field.default)
        if value is MISSING:
            raise TypeError(f"{cls.__name__} needs its field {field.name!r} ({field.hint})")
        try:
            out[field.name] = field.check(value)
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]
            where = "".join(f"[{p!r}]" for p in problem["loc"])
            raise TypeError(f"{cls.__name__} field {field.name!r}{where} must be "
                            f"{field.hint}: {problem['msg']} (got {type(value).__name__})"
                            ) from None
    return out


def _read(cls: type) -> tuple[Field, ...]:
    import inspect  # here: importing the hierarchy stays cheap

    hints = typing.get_type_hints(cls, localns=_names(), include_extras=True)
    written: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        written.update({k: str(v) for k, v in inspect.get_annotations(klass).items()})
    spec = []
    for name, hint in hints.items():
        if typing.get_origin(hint) is ClassVar or name.startswith("_") or name == "message":
            continue
        if name in RESERVED:
            raise TypeError(f"{cls.__name__} declares a field {name!r}; that name is taken")
        default = _default(cls, name)
        by_position = isinstance(default, Positional)
        spec.append(Field(name, _checker(hint), default.default if by_position else default,
                          written[name], by_position))
    return tuple(sorted(spec, key=lambda f: not f.positional))


def _default(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            value = klass.__dict__[name]
            if isinstance(value, list | dict | set):
                raise TypeError(f"{cls.__name__}.{name}: a mutable default is shared by "
                                "every error; use None")
            return value
    return MISSING


@functools.cache
def _checker(hint: Any) -> Callable[[Any], Any]:
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(hint, config=ConfigDict(strict=True)).validate_python


@functools.cache
def _names() -> dict[str, Any]:
    """What field annotations may name beyond builtins, resolved when first needed."""
    from typing import Annotated

    from pydantic import BeforeValidator, JsonValue

    return {"IdentityText": Annotated[str, BeforeValidator(identity_text)],
            "JsonValue": JsonValue}
