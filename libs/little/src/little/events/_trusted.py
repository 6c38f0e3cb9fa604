"""Building an event from values already of their field's type, without pydantic's validation.

The run writer builds every event it records from values the runtime computed (ids, counters,
hashes, canonical JSON text, usage models). Validating them again cost more than building the
event (and ``model_construct`` costs more still). ``build_event`` checks each given value for
exactly what validation would keep unchanged (its field's exact type: ``str``, ``int`` but not
``bool``, ``None`` where the field is optional, a ``Usage`` or ``ArtifactRef`` instance, a tuple
of those items) and the field's constraints (``ge``, ``min_length``, an aware ``occurred_at``),
fills the defaults and sets the fields directly. Any other value, an unknown field, a missing
required one or a field with another constraint (the ``event_id`` pattern) goes through the
model's validation instead, which coerces or raises exactly as before: an event built here is
the event validation would have built (equal, same ``model_dump``, same fields set).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel

from little.events._models import Event

E = TypeVar("E", bound=Event)


_MISSING: Any = object()


def _condition(annotation: Any, metadata: list[Any], v: str) -> str | None:
    """A Python expression, true when validation would NOT keep ``v`` as is for a field of
    this annotation and constraints; None: a field always left to validation."""
    checks: list[str] = []
    for m in metadata:
        if isinstance(m, annotated_types.Ge) and type(m.ge) is int:
            checks.append(f"(type({v}) is int and {v} < {m.ge})")
        elif isinstance(m, annotated_types.MinLen) and type(m.min_length) is int:
            checks.append(f"(type({v}) is str and len({v}) < {m.min_length})")
        else:
            return None  # a pattern, or a constraint not checked here
    options = (
        get_args(annotation)
        if get_origin(annotation) in (Union, types.UnionType)
        else (annotation,)
    )
    kinds: list[str] = []
    for option in options:
        if option is type(None):
            kinds.append(f"{v} is None")
        elif option in (str, int, bool):
            kinds.append(f"type({v}) is {option.__name__}")
        elif option is datetime:  # an aware one (``Event._utc``; naive: validated)
            kinds.append(f"(type({v}) is datetime and {v}.tzinfo is not None)")
        elif isinstance(option, type) and issubclass(option, BaseModel):
            # an instance is kept as is (models are not revalidated)
            kinds.append(f"type({v}) is {_NAMES.setdefault(option, f'_M{len(_NAMES)}')}")
        elif get_origin(option) is tuple:
            item, *rest = get_args(option)
            if rest != [Ellipsis]:
                return None
            if item in (str, int):
                item_name = item.__name__
            elif isinstance(item, type) and issubclass(item, BaseModel):
                item_name = _NAMES.setdefault(item, f"_M{len(_NAMES)}")
            else:
                return None
            kinds.append(f"(type({v}) is tuple and all(type(i) is {item_name} for i in {v}))")
        else:
            return None
    return " or ".join([f"not ({' or '.join(kinds)})", *checks])


_CHECKED_VALIDATORS = {"_utc"}
"""The model validators the generated checks stand for (``Event._utc``: an aware
``occurred_at``)."""


def _always_validated(fields: dict[str, Any]) -> None:
    return None


_NAMES: dict[type, str] = {}
"""The model types the generated checks name, and their names there."""


def _compile(cls: type[Event]) -> Callable[[dict[str, Any]], Any]:
    """The builder of one event class: the event, or None if validation must build it."""
    decorators = cls.__pydantic_decorators__
    if (
        set(decorators.model_validators) != _CHECKED_VALIDATORS
        or decorators.field_validators
        or decorators.validators
        or decorators.root_validators
    ):
        return _always_validated  # a validator these checks do not know of
    fields = cls.model_fields
    lines = [
        "def build(fields):",
        "    if not fields.keys() <= NAMES or not REQUIRED <= fields.keys():",
        "        return None",
        "    given = set(fields)",
    ]
    factories: dict[str, Any] = {}
    for name, info in fields.items():
        condition = _condition(info.annotation, info.metadata, "v")
        required = info.is_required()
        if condition is None:
            lines += [f"    if {name!r} in fields:", "        return None"]
        elif required:
            lines += [f"    v = fields[{name!r}]", f"    if {condition}:", "        return None"]
        else:
            lines += [
                f"    v = fields.get({name!r}, _MISSING)",
                f"    if v is not _MISSING and ({condition}):",
                "        return None",
            ]
        if info.default_factory is not None:
            factories[name] = info.default_factory
    # the defaults made by factories, once every given value passed (``fields`` goes to
    # validation unchanged otherwise)
    for n, name in enumerate(factories):
        lines += [f"    if {name!r} not in fields:", f"        fields[{name!r}] = _f{n}()"]
    # declaration order, as validation leaves ``__dict__``
    lines += [
        "    event = _new(cls)",
        "    _setattr(event, '__dict__', TEMPLATE | fields)",
        "    _setattr(event, '__pydantic_fields_set__', given)",
        "    _setattr(event, '__pydantic_extra__', None)",
        "    _setattr(event, '__pydantic_private__', None)",
        "    return event",
    ]
    namespace: dict[str, Any] = {
        "cls": cls,
        "NAMES": frozenset(fields),
        "REQUIRED": frozenset(n for n, f in fields.items() if f.is_required()),
        "TEMPLATE": {
            n: None if f.is_required() or f.default_factory is not None else f.default
            for n, f in fields.items()
        },
        "_MISSING": _MISSING,
        "_new": object.__new__,
        "_setattr": object.__setattr__,
        "datetime": datetime,
        **{f"_f{n}": factory for n, factory in enumerate(factories.values())},
        **{name: model for model, name in _NAMES.items()},
    }
    exec(compile("\n".join(lines), f"<event builder {cls.__name__}>", "exec"), namespace)
    builder: Callable[[dict[str, Any]], Any] = namespace["build"]
    return builder


_BUILDERS: dict[type[Event], Callable[[dict[str, Any]], Any]] = {}


def build_event(cls: type[E], fields: dict[str, Any]) -> E:
    """``cls(**fields)``, without validating values that are of their field's type already.
    Takes ``fields`` over (it gets the defaults made by factories)."""
    builder = _BUILDERS.get(cls)
    if builder is None:
        builder = _BUILDERS[cls] = _compile(cls)
    event: E | None = builder(fields)
    if event is None:
        return cls(**fields)  # validated: coerced, or refused, as before
    return event
