"""A per-schema Avro body writer: the bytes fastavro's ``schemaless_writer`` writes, cheaper.

fastavro's writer walks the parsed schema for every record (a dict lookup and a call per
field, a union's branches validated one by one), and needs the record as a dict
(``model_dump``). That was about a quarter of the CPU of a recorded agent call. Here each
schema is compiled once into a straight-line Python function that reads an event's field
values (``event.__dict__``, or a record dict) and appends the Avro binary encoding to a
``bytearray``.

The contract is byte identity with ``fastavro.schemaless_writer(out, schema.parsed,
event.model_dump() | {"type": event.event_type})`` (what ``EventCodec.encode`` wrote before).
It holds by construction only on the inputs the compiled code accepts: every value is checked
for its exact type (``str``, ``int`` within the Avro range, ``True``/``False``, an aware
``datetime``, ``None`` in a union, a list or tuple for an array, a model or dict for a record).
Anything else raises ``NotCompiled`` (as does any failure on the way) and the caller writes that record with fastavro itself,
which stays the reference (and the decoder). Tests check identity on every schema version's
golden vector and on generated events of every type.

Schemas using an Avro type the events do not use (bytes, float, double, map, enum, fixed,
unions other than ``["null", X]``) do not compile (``compile_writer`` returns None): their
records are written by fastavro.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

BodyWriter = Callable[[Mapping[str, Any], str, bytearray], None]
"""``write(fields, event_type, out)``: append the Avro body of a record to ``out``. ``fields``
is the record's values by field name (an event's ``__dict__`` or a record dict); the top-level
``type`` field is written from ``event_type`` (the models carry it as a class attribute)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class NotCompiled(Exception):
    """A value the compiled writer does not take as is: write this record with fastavro."""


class _Unsupported(Exception):
    """A schema construct the compiler does not handle (that schema is left to fastavro)."""


def _varint(out: bytearray, n: int) -> None:
    """Append a zig-zagged value (``n`` >= 128) as a variable-length integer."""
    while n > 127:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _not_compiled(what: str) -> NotCompiled:
    return NotCompiled(what)


class _Compiler:
    """Emits the Python source of one schema's writer (straight-line, one block per field)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.named: dict[str, Any] = {}
        self._vars = 0

    def var(self, stem: str) -> str:
        self._vars += 1
        return f"{stem}{self._vars}"

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def long(
        self, value: str, indent: int, lo: int, hi: int, what: str, *, an_int: bool = False
    ) -> None:
        """Append the int in ``value`` (checked: exactly an ``int`` within [lo, hi];
        ``an_int``: known to be an int already)."""
        check = f"not {lo} <= {value} <= {hi}"
        if not an_int:
            check = f"type({value}) is not int or {check}"
        self.emit(indent, f"if {check}:")
        self.emit(indent + 1, f"raise _not_compiled({what!r})")
        self.zigzag(value, indent)

    def zigzag(self, value: str, indent: int) -> None:
        z = self.var("z")
        self.emit(indent, f"{z} = ({value} << 1) ^ ({value} >> 63)")
        self.emit(indent, f"if {z} < 128:")
        self.emit(indent + 1, f"out.append({z})")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"_varint(out, {z})")

    def string(self, value: str, indent: int, what: str) -> None:
        self.emit(indent, f"if type({value}) is not str:")
        self.emit(indent + 1, f"raise _not_compiled({what!r})")
        b = self.var("b")
        self.emit(indent, f"{b} = {value}.encode()")
        self.length(f"len({b})", indent)
        self.emit(indent, f"out += {b}")

    def length(self, expr: str, indent: int) -> None:
        """Append a non-negative count (a length: never beyond the long range)."""
        z = self.var("z")
        self.emit(indent, f"{z} = {expr} << 1")
        self.emit(indent, f"if {z} < 128:")
        self.emit(indent + 1, f"out.append({z})")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"_varint(out, {z})")

    def value(self, schema: Any, value: str, indent: int, what: str) -> None:
        """Append ``value`` encoded per ``schema`` (a parsed-schema node)."""
        if isinstance(schema, list):
            self.union(schema, value, indent, what)
            return
        if isinstance(schema, str):
            if schema in self.named:
                self.record(self.named[schema], value, indent, what)
                return
            schema = {"type": schema}
        if not isinstance(schema, dict):
            raise _Unsupported(f"schema node {schema!r}")
        kind = schema["type"]
        logical = schema.get("logicalType")
        if kind == "string" and logical in (None, "uuid"):
            # uuid: fastavro writes a UUID object as its text; only text is taken here
            self.string(value, indent, what)
        elif kind == "long" and logical == "timestamp-micros":
            self.timestamp_micros(value, indent, what)
        elif kind == "long" and logical is None:
            self.long(value, indent, _LONG_MIN, _LONG_MAX, what)
        elif kind == "int" and logical is None:
            self.long(value, indent, _INT_MIN, _INT_MAX, what)
        elif kind == "boolean" and logical is None:
            self.emit(indent, f"if {value} is True:")
            self.emit(indent + 1, "out.append(1)")
            self.emit(indent, f"elif {value} is False:")
            self.emit(indent + 1, "out.append(0)")
            self.emit(indent, "else:")
            self.emit(indent + 1, f"raise _not_compiled({what!r})")
        elif kind == "null":
            self.emit(indent, f"if {value} is not None:")
            self.emit(indent + 1, f"raise _not_compiled({what!r})")
        elif kind == "array" and logical is None:
            self.array(schema["items"], value, indent, what)
        elif kind == "record":
            self.record(schema, value, indent, what)
        elif isinstance(kind, dict | list) or (isinstance(kind, str) and kind in self.named):
            self.value(kind, value, indent, what)
        else:
            raise _Unsupported(f"{kind} (logical type {logical}) at {what}")

    def timestamp_micros(self, value: str, indent: int, what: str) -> None:
        # an aware datetime: fastavro's integer arithmetic on (value - epoch); a naive one
        # (local time) or an int is left to fastavro
        self.emit(indent, f"if type({value}) is not datetime or {value}.tzinfo is None:")
        self.emit(indent + 1, f"raise _not_compiled({what!r})")
        d, m = self.var("d"), self.var("m")
        self.emit(indent, f"{d} = {value} - _EPOCH")
        self.emit(indent, f"{m} = ({d}.days * 86400 + {d}.seconds) * 1000000 + {d}.microseconds")
        self.long(m, indent, _LONG_MIN, _LONG_MAX, what, an_int=True)

    def union(self, branches: list[Any], value: str, indent: int, what: str) -> None:
        if len(branches) != 2 or "null" not in branches:
            raise _Unsupported(f"union {branches!r} at {what}")
        null_index = branches.index("null")
        other = branches[1 - null_index]
        if isinstance(other, list) or other == "null":
            raise _Unsupported(f"union {branches!r} at {what}")
        self.emit(indent, f"if {value} is None:")
        self.emit(indent + 1, f"out.append({null_index * 2})")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"out.append({(1 - null_index) * 2})")
        self.value(other, value, indent + 1, what)

    def array(self, items: Any, value: str, indent: int, what: str) -> None:
        self.emit(indent, f"if type({value}) is not list and type({value}) is not tuple:")
        self.emit(indent + 1, f"raise _not_compiled({what!r})")
        self.emit(indent, f"if {value}:")
        self.length(f"len({value})", indent + 1)
        item = self.var("item")
        self.emit(indent + 1, f"for {item} in {value}:")
        self.value(items, item, indent + 2, f"{what}[]")
        self.emit(indent, "out.append(0)")

    def record(self, schema: dict[str, Any], value: str, indent: int, what: str) -> None:
        self.remember(schema)
        r = self.var("r")
        # a model's values (its __dict__: what model_dump gives for these field types), or
        # a record dict
        self.emit(indent, f"if type({value}) is dict:")
        self.emit(indent + 1, f"{r} = {value}")
        self.emit(indent, f"elif isinstance({value}, BaseModel):")
        self.emit(indent + 1, f"{r} = {value}.__dict__")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"raise _not_compiled({what!r})")
        self.fields(schema, r, indent, what, top=False)

    def remember(self, schema: dict[str, Any]) -> None:
        name = schema["name"]
        namespace = schema.get("namespace")
        self.named[name] = schema
        if namespace and "." not in name:
            self.named[f"{namespace}.{name}"] = schema

    def fields(
        self, schema: dict[str, Any], source: str, indent: int, what: str, top: bool
    ) -> None:
        for field in schema["fields"]:
            name = field["name"]
            v = self.var("v")
            if top and name == "type":
                self.emit(indent, f"{v} = event_type")
            else:
                # a missing field: KeyError, and fastavro applies the default
                self.emit(indent, f"{v} = {source}[{name!r}]")
            self.value(field["type"], v, indent, f"{what}.{name}")


def compile_writer(parsed: Any) -> BodyWriter | None:
    """The writer of one parsed record schema (``fastavro.parse_schema``), or None if it uses
    something the compiler leaves to fastavro."""
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    compiler = _Compiler()
    compiler.remember(parsed)
    try:
        compiler.fields(parsed, "fields", 1, parsed["name"], top=True)
    except _Unsupported:
        return None
    # any other failure on the way (a missing field: fastavro writes its default; text that
    # is not UTF-8) also leaves the record to fastavro, which writes it or raises its own error
    source = "\n".join(
        [
            "def write(fields, event_type, out):",
            "    try:",
            *(f"    {line}" for line in compiler.lines),
            "    except NotCompiled:",
            "        raise",
            "    except Exception as exc:",
            f"        raise NotCompiled({parsed['name']!r}) from exc",
        ]
    )
    namespace: dict[str, Any] = {
        "_varint": _varint,
        "_not_compiled": _not_compiled,
        "_EPOCH": _EPOCH,
        "datetime": datetime,
        "BaseModel": BaseModel,
        "NotCompiled": NotCompiled,
    }
    exec(compile(source, f"<avro writer {parsed['name']}>", "exec"), namespace)
    writer: BodyWriter = namespace["write"]
    return writer
