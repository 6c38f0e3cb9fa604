"""A workflow's source: its identity (what a replay compares with the recorded run's) and the
replay-safety scan of the code it runs (seed 003, "source identity", "replay-safety is
scanned, not asserted").

Reads module files and parses them; never imports what it reads. It does file I/O: the
runtime calls it on a worker thread.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import Any

from little.logging_setup import get_logger

__all__ = [
    "COVERAGE_ENTRY_ONLY",
    "COVERAGE_SELF_CONTAINED",
    "SourceIdentity",
    "replay_safe",
    "source_identity",
    "static_imports",
    "unsafe_reads",
    "workflow_source",
]

COVERAGE_SELF_CONTAINED = "self-contained"
"""Every import of the workflow's module, and of the project modules it imports, resolved
statically: the identity hash covers all the project code the workflow can run."""
COVERAGE_ENTRY_ONLY = "entry-only"
"""Some import could not be resolved statically (a computed ``importlib.import_module(x)``, a
relative import that goes nowhere, ``exec``): code the hash and the scan do not cover could
move calls or read the clock without changing the identity."""

SDK = "little"
"""The SDK's own modules are never part of a project (they are the engine, like any installed
package), even for a workflow that ships inside the SDK (``little.examples``)."""


RECORDED_READS = 50
"""How many of the scan's findings a run's ``RunStarted`` names (one is enough to refuse)."""


@dataclass(frozen=True)
class SourceIdentity:
    """The identity of a workflow's source and what the scan found in it."""

    sha256: str | None
    """sha256 over the entry module's and the hashed project modules' bytes (each module's
    name and the sha256 of its file, in name order); None when the entry cannot be read."""
    coverage: str | None
    """``self-contained`` or ``entry-only``; None when the entry cannot be read."""
    modules: tuple[str, ...] = ()
    """The modules hashed, entry first."""
    unresolved: tuple[str, ...] = ()
    """Why the coverage is ``entry-only``: ``module:line: what`` for each import not resolved."""
    reads: tuple[str, ...] = ()
    """Direct clock and randomness reads in the hashed modules (``line: what`` in the entry,
    ``module:line: what`` in the others)."""

    @property
    def readable(self) -> bool:
        return self.sha256 is not None

    def recorded_reads(self) -> tuple[str, ...] | None:
        """The scan's verdict as ``RunStarted.source_unsafe_reads`` records it: the reads (at
        most ``RECORDED_READS``, then how many more), or None when there is no source."""
        if not self.readable:
            return None
        if len(self.reads) <= RECORDED_READS:
            return self.reads
        more = len(self.reads) - RECORDED_READS
        return (*self.reads[:RECORDED_READS], f"... and {more} more")


log = get_logger("little.runtime")

# -- the replay-safety scan -------------------------------------------------------------------

_CLOCK_ATTRS = {
    "time": {
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "clock_gettime",
        "clock_gettime_ns",
        "process_time",
        "process_time_ns",
        "thread_time",
        "thread_time_ns",
        "localtime",
        "gmtime",
        "ctime",
        "asctime",
        "strftime",
    },
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
    "uuid": {"uuid1", "uuid4"},
    "os": {"urandom", "getrandom", "times"},
    "ssl": {"RAND_bytes", "RAND_pseudo_bytes"},
}
_RANDOM_MODULES = {"random", "secrets"}
_WATCHED = {"time", "datetime", "uuid", "os", "ssl", *_RANDOM_MODULES}
_CLASSES = {"datetime", "date"}  # datetime.datetime and datetime.date: their clocks
_INSTANCES = {"min", "max"}
"""Class attributes of ``datetime`` and ``date`` that are instances of the class: their
``now``/``today``/``utcnow`` is the class's (``datetime.min.now()``). An instance held in a
variable (``d = datetime(2020, 1, 1); d.now()``) is not seen: the scan reads syntax, and
knowing a variable's type needs data flow."""
_LOOP_CALLS = {"get_running_loop", "get_event_loop"}
_GATEWAYS = {"sys", "builtins", "importlib"}
"""Modules through which a watched module is reached without naming it in an import."""
_IMPORTERS = {
    "__import__",
    "builtins.__import__",
    "__builtins__.__import__",
    "importlib.import_module",
    "importlib.__import__",
}
_GETATTRS = {"getattr", "builtins.getattr"}
_NAMESPACES = {"globals", "vars", "locals", "builtins.globals", "builtins.vars", "builtins.locals"}
"""Calls with no argument whose result is a namespace: ``globals()["time"]`` is the name
``time``."""


class _Scan:
    """One module's scan: what each name stands for, then every expression checked."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.found: list[str] = []
        # local name -> the watched module or class, or the gateway member, it stands for
        self.aliases: dict[str, str] = {}
        self.allowed: set[int] = set()  # ids of nodes whose use as a value is harmless
        self.folded: set[int] = set()  # ids of ``X.__dict__`` nodes read by a literal key

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{getattr(node, 'lineno', 0)}: {what}")

    def run(self) -> list[str]:
        self.bind_imports()
        self.mark_allowed()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute):
                self.member(node, node.value, node.attr)
            elif isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.Subscript):
                self.subscript(node)
            if id(node) not in self.allowed and isinstance(node, ast.expr):
                self.value_use(node)
        return self.found

    def bind_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.split(".")[0]
                    if root in _RANDOM_MODULES:
                        self.flag(node, f"import {alias.name}")
                    elif root in _WATCHED or root in _GATEWAYS:
                        self.aliases[alias.asname or root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                root = node.module.split(".")[0]
                for alias in node.names:
                    local = alias.asname or alias.name
                    if alias.name == "*" and root in _WATCHED:
                        self.flag(node, f"from {node.module} import *")
                    elif root in _RANDOM_MODULES or alias.name in _CLOCK_ATTRS.get(root, ()):
                        self.flag(node, f"from {node.module} import {alias.name}")
                    elif root == "datetime" and alias.name in _CLASSES:
                        self.aliases[local] = alias.name
                    elif root in _GATEWAYS:  # from importlib import import_module, ...
                        self.aliases[local] = f"{root}.{alias.name}"

    def mark_allowed(self) -> None:
        """Positions where naming a watched module does not hand it on: the base of a member
        access (checked by itself), calling it (``datetime(2026, 1, 1)``), type checks and
        annotations."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Subscript) and _is_dict(node.value):
                self.folded.add(id(node.value))  # ``time.__dict__["time"]``: checked there
            if isinstance(node, ast.Attribute):
                self.allowed.add(id(node.value))
                if node.attr == "get" and _is_dict(node.value):
                    self.folded.add(id(node.value))  # ``time.__dict__.get("time")``
            elif isinstance(node, ast.Call):
                self.allowed.add(id(node.func))
                name = self.dotted(node.func)
                if name in _GETATTRS and node.args:
                    self.allowed.add(id(node.args[0]))
                elif name in ("isinstance", "issubclass") and len(node.args) == 2:
                    self.allowed.update(id(n) for n in ast.walk(node.args[1]))
            elif isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
                self.allowed.update(id(n) for n in ast.walk(node.annotation))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
                self.allowed.update(id(n) for n in ast.walk(node.returns))

    def dotted(self, expr: ast.expr) -> str | None:
        """A plain name or member chain, with its first name resolved through the aliases
        (``im`` for ``from importlib import import_module as im`` is
        ``importlib.import_module``)."""
        if isinstance(expr, ast.Name):
            return self.aliases.get(expr.id, expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.dotted(expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        return None

    def stands_for(self, expr: ast.expr, loose: bool = True) -> str | None:
        """The watched module or class ``expr`` evaluates to, when the syntax tells.
        ``loose``: also any member named like one (``x.datetime``, ``self.time``), which
        errs towards flagging ``x.datetime.now()``."""
        if isinstance(expr, ast.Name):
            target = self.aliases.get(expr.id, expr.id if expr.id in _WATCHED else None)
            return target if target in _WATCHED or target in _CLASSES else None
        if isinstance(expr, ast.Attribute):
            base = self.stands_for(expr.value, loose=False)
            if base == "datetime" and expr.attr in _CLASSES:
                return expr.attr
            if loose and base is None and (expr.attr in _WATCHED or expr.attr in _CLASSES):
                return expr.attr
            return None
        if isinstance(expr, ast.Call):
            name = self.dotted(expr.func)
            literal = _literal(expr.args[0]) if expr.args else None
            if name in _GETATTRS and len(expr.args) >= 2 and (attr := _literal(expr.args[1])):
                base = self.stands_for(expr.args[0])
                return attr if base == "datetime" and attr in _CLASSES else None
            if name in _IMPORTERS and literal is not None:
                root = literal.split(".")[0]
                return root if root in _WATCHED else None
            if name == "sys.modules.get" and literal is not None:
                return literal if literal in _WATCHED else None
            return None
        if isinstance(expr, ast.Subscript):
            key = _literal(expr.slice)
            if self.dotted(expr.value) == "sys.modules":
                return key if key in _WATCHED else None
            if _namespace_call(self, expr.value) and key is not None:
                return self.stands_for(ast.Name(key, ast.Load()), loose=False)
        return None

    def instance_of(self, expr: ast.expr) -> tuple[str, str] | None:
        """The class (``datetime`` or ``date``) of which ``expr`` is a class attribute chain
        (``datetime.min``, ``date.max.min``), and the chain as written; None otherwise."""
        if not isinstance(expr, ast.Attribute) or expr.attr not in _INSTANCES:
            return None
        cls = self.stands_for(expr.value, loose=False)
        if cls in _CLASSES:
            assert cls is not None
            return cls, f"{cls}.{expr.attr}"
        inner = self.instance_of(expr.value)
        return None if inner is None else (inner[0], f"{inner[1]}.{expr.attr}")

    def member(self, node: ast.AST, base_expr: ast.expr, attr: str) -> None:
        """``base.attr`` (or ``getattr(base, "attr")``): a clock or randomness read?"""
        name = self.stands_for(base_expr)
        if attr == "time" and (
            (isinstance(base_expr, ast.Name) and base_expr.id == "loop")
            or (isinstance(base_expr, ast.Call) and _called_name(base_expr) in _LOOP_CALLS)
        ):
            name = "loop"
        if name is None and (instance := self.instance_of(base_expr)) is not None:
            cls, path = instance  # ``datetime.min.now``: a class attribute's own clock
            if attr in _CLOCK_ATTRS[cls]:
                self.flag(node, f"{path}.{attr}")
            return
        if name == "loop" or (
            name is not None and (name in _RANDOM_MODULES or attr in _CLOCK_ATTRS.get(name, ()))
        ):
            self.flag(node, f"{name}.{attr}")
        elif name is not None and attr == "__dict__" and id(node) not in self.folded:
            self.flag(node, f"{name}.__dict__")  # its namespace handed on: every member

    def call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        literal = _literal(node.args[0]) if node.args else None
        if name in _GETATTRS and len(node.args) >= 2:
            attr = _literal(node.args[1])
            if attr is not None:
                self.member(node, node.args[0], attr)  # getattr(time, "time") is time.time
            elif (base := self.stands_for(node.args[0])) is not None:
                self.flag(node, f"getattr({base}, <computed>)")  # unfoldable: always unproven
        elif name in _IMPORTERS and literal is not None:
            if literal.split(".")[0] in _RANDOM_MODULES:
                self.flag(node, f"{name}({literal!r})")
        elif name == "sys.modules.get" and node.args and literal is None:
            self.flag(node, "sys.modules.get(<computed>)")
        elif isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            if func.attr == "get" and _is_dict(func.value):  # ``time.__dict__.get("time")``
                assert isinstance(func.value, ast.Attribute)
                self.keyed(node, func.value.value, literal)
            elif func.attr == "__getattribute__":  # ``time.__getattribute__("time")``
                self.keyed(node, func.value, literal)

    def keyed(self, node: ast.AST, base: ast.expr, key: str | None) -> None:
        """A member of ``base`` read by name (``base.__dict__[key]``): ``base.key`` when the
        name is a literal; when computed and ``base`` is watched, unfoldable: flagged."""
        if key is not None:
            self.member(node, base, key)
        elif (name := self.stands_for(base)) is not None:
            self.flag(node, f"{name}.__dict__[<computed>]")

    def subscript(self, node: ast.Subscript) -> None:
        if _is_dict(node.value):
            assert isinstance(node.value, ast.Attribute)
            self.keyed(node, node.value.value, _literal(node.slice))
        elif _namespace_call(self, node.value) and _literal(node.slice) is None:
            self.flag(node, "globals()[<computed>]")  # a computed global: always unproven
        if self.dotted(node.value) == "sys.modules":
            key = _literal(node.slice)
            if key is None:
                self.flag(node, "sys.modules[<computed>]")
            elif key.split(".")[0] in _RANDOM_MODULES:
                self.flag(node, f"sys.modules[{key!r}]")

    def value_use(self, node: ast.expr) -> None:
        """A watched module or class handed on as a value: ``t = time``, ``(t := time)``,
        ``a, b = time, 1``, ``def f(clock=time)``, ``f(time)``, ``return time``."""
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            return
        if isinstance(node, ast.Name) and node.id not in self.aliases:
            return  # a variable that happens to be called ``time``: not the module
        name = self.stands_for(node, loose=False)
        if name is not None and name not in _RANDOM_MODULES:  # those: flagged where reached
            self.flag(node, f"binds {name}")


def _is_dict(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "__dict__"


def _namespace_call(scan: _Scan, expr: ast.expr) -> bool:
    """``globals()`` (a module's namespace: its names are its imports)."""
    return isinstance(expr, ast.Call) and not expr.args and scan.dotted(expr.func) in _NAMESPACES


def _literal(expr: ast.expr) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def unsafe_reads(source: str) -> list[str]:
    """Direct clock and randomness reads in ``source`` (Python), as ``line: what``.

    Flagged: any import of ``random`` or ``secrets``; the clock functions of ``time`` (every
    one: ``time``, ``monotonic``, ``perf_counter``, ``process_time``, ``thread_time``,
    ``clock_gettime`` and their ``_ns`` forms, ``localtime``, ``gmtime``, ``ctime``,
    ``asctime``, ``strftime``), ``datetime.now/utcnow/today``, ``date.today``,
    ``uuid.uuid1/uuid4``, ``os.urandom/getrandom/times``, reached by name, through an import
    alias (``import time as t``, ``from datetime import datetime as dt``), imported directly or
    with ``from time import *``; reached through ``getattr(time, "time")`` (folded) or
    ``getattr(time, name)`` (computed: always flagged), through ``__import__("time")``,
    ``importlib.import_module("time")``, ``builtins.__import__``,
    ``sys.modules["time"]`` or a computed ``sys.modules[name]``; through a namespace
    (``time.__dict__["time"]``, ``time.__dict__.get("time")``, ``time.__getattribute__("time")``,
    ``globals()["time"]``; a computed key, or ``time.__dict__`` handed on, is always flagged);
    one of those modules handed on as a value (``t = time``, ``(t := time)``, ``a, b = time,
    1``, ``def f(clock=time)``, ``f(time)``); an event loop's ``time()``. A filter, not a
    proof: it reads syntax, so values assembled at run time or read from the environment stay
    invisible. It errs towards flagging: a false positive costs a cache miss, a false negative
    would replay an answer from a different world. ``ctx.now()``, ``ctx.random()`` and
    ``ctx.uuid4()`` are recorded values and never flagged.
    """
    found = _Scan(ast.parse(source)).run()
    return sorted(set(found), key=lambda line: (int(line.split(":", 1)[0]), line))


# -- static imports ---------------------------------------------------------------------------

_LOADERS = {
    "exec",
    "eval",
    "builtins.exec",
    "builtins.eval",
    "importlib.util.spec_from_file_location",
    "importlib.util.spec_from_loader",
    "importlib.reload",
    "runpy.run_module",
    "runpy.run_path",
}
"""Calls that run code the scan cannot follow: a module using one is ``entry-only``."""


def static_imports(
    source: str, package: str | None
) -> tuple[list[tuple[int, str, tuple[str, ...]]], list[str]]:
    """The modules ``source`` imports, resolved to absolute names without importing anything:
    ``(line, module, names imported from it)`` for each, and ``line: what`` for each import
    that cannot be resolved statically (a computed ``__import__`` / ``importlib.import_module``,
    a relative import beyond the top-level package or with no package, code loaded by
    ``exec``, ``eval``, ``runpy`` or a spec from a file). ``package`` is the module's package
    (``__package__``), which relative imports resolve against. Imports inside functions and
    ``if TYPE_CHECKING:`` blocks count too (they may run).
    """
    tree = ast.parse(source)
    scan = _Scan(tree)
    scan.bind_imports()
    found: list[tuple[int, str, tuple[str, ...]]] = []
    unresolved: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            if not node.level:
                found.append((node.lineno, node.module or "", names))
                continue
            absolute = _resolve_relative(node.module, node.level, package)
            if absolute is None:
                dots = "." * node.level
                unresolved.append(
                    f"{node.lineno}: from {dots}{node.module or ''} import ... (relative, "
                    f"resolves nowhere from package {package!r})"
                )
            else:
                found.append((node.lineno, absolute, names))
        elif isinstance(node, ast.Call):
            name = scan.dotted(node.func)
            if name in _IMPORTERS:
                literal = _literal(node.args[0]) if node.args else None
                relative = literal is not None and literal.startswith(".")
                if literal is None or relative:
                    unresolved.append(f"{node.lineno}: {name}(<computed>)")
                else:
                    found.append((node.lineno, literal, ()))
            elif name in _LOADERS:
                unresolved.append(f"{node.lineno}: {name}(...) runs code the scan cannot follow")
    return found, unresolved


def _resolve_relative(module: str | None, level: int, package: str | None) -> str | None:
    if not package:
        return None
    parts = package.split(".")
    if level > len(parts):
        return None
    base = ".".join(parts[: len(parts) - level + 1])
    return f"{base}.{module}" if module else base


# -- source identity --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Module:
    name: str
    path: Path
    is_package: bool


def _read(
    path: Path, package: str | None
) -> tuple[str, tuple[tuple[int, str, tuple[str, ...]], ...], tuple[str, ...], tuple[str, ...]]:
    """A module file's sha256, static imports, unresolved imports and unsafe reads. The file
    is read every time (an edit within the file system's timestamp resolution must show);
    parsing is cached by content."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    return (digest, *_parse(digest, data, package))


@functools.lru_cache(maxsize=1024)
def _parse(
    digest: str, data: bytes, package: str | None
) -> tuple[tuple[tuple[int, str, tuple[str, ...]], ...], tuple[str, ...], tuple[str, ...]]:
    try:
        text = data.decode("utf-8")
        imports, unresolved = static_imports(text, package)
        reads = unsafe_reads(text)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return (), (f"0: cannot be parsed ({type(exc).__name__}: {exc})",), ()
    return tuple(imports), tuple(unresolved), tuple(reads)


def _find(name: str, root: Path) -> list[_Module] | None:
    """The files importing ``name`` from the project at ``root`` runs (each enclosing
    package's ``__init__`` and the module), or None when ``name`` is not project-local: its
    top-level package is not importable from ``root`` (the standard library, installed
    packages, the SDK). ``[]`` past the top level means a submodule that is not there (``from
    pkg import name`` of an attribute)."""
    parts = name.split(".")
    if not name or parts[0] == SDK:
        return None
    where = str(root)
    search: list[str] | None = [where]
    absent = (parts[0], where)
    try:
        stamp: int | None = os.stat(root).st_mtime_ns
    except OSError:
        stamp = None
    if stamp is not None and _ABSENT.get(absent) == stamp:
        return None  # not in the project's directory, which has not changed since
    found: list[_Module] = []
    for i in range(len(parts)):
        full = ".".join(parts[: i + 1])
        spec = PathFinder.find_spec(full, search) if search is not None else None
        if i == 0 and spec is None and stamp is not None:
            if len(_ABSENT) >= 10_000:
                _ABSENT.clear()
            _ABSENT[absent] = stamp
        if spec is None or (i == 0 and not _imported_from(spec, full)):
            return None if i == 0 else found
        locations = spec.submodule_search_locations
        if spec.origin and spec.has_location:
            found.append(_Module(full, Path(spec.origin), locations is not None))
        search = list(locations) if locations is not None else None
    return found


_ABSENT: dict[tuple[str, str], int] = {}
"""(top-level name, project directory) -> the directory's ``st_mtime_ns`` when the name was
not found there: the standard library's and installed packages' names, most of a module's
imports. Finding one absent again cost most of a run's scan (~0.4 ms of CPU per run); the
name can only appear there by an entry added to the directory, which changes its mtime, the
same test Python's own path finder caches its listing of a directory by. Files that are there
are read and hashed on every scan, as before."""


def _imported_from(spec: ModuleSpec, name: str) -> bool:
    """Is top-level ``name`` imported from where ``spec`` (found in the project) says, or
    does an earlier entry of ``sys.path`` (or an installed module) shadow it? A directory of
    the project that is only a namespace portion is shadowed by any regular module."""
    try:
        actual = importlib.util.find_spec(name)  # a top-level name: imports nothing
    except (ImportError, ValueError):
        return spec.origin is not None
    if actual is None:
        return spec.origin is not None
    if spec.origin is not None and spec.has_location:
        return actual.origin == spec.origin
    mine = set(spec.submodule_search_locations or ())
    return bool(mine & set(actual.submodule_search_locations or ()))


def _root(name: str, path: Path) -> Path:
    """The directory the project's top-level package (or top-level module) is imported from."""
    depth = name.count(".") + (1 if path.name == "__init__.py" else 0)
    root = path.parent
    for _ in range(depth):
        root = root.parent
    return root


def source_identity(name: str, path: Path) -> SourceIdentity:
    """The identity of module ``name`` (whose file is ``path``) and of the project modules it
    imports statically, transitively; blocking file reads."""
    root = _root(name, path)
    entry = _Module(name, path, path.name == "__init__.py")
    todo = [entry]
    if "." in name:  # importing the entry runs its packages' ``__init__`` too
        todo.extend(_project_modules(name.rpartition(".")[0], (), root))
    seen: dict[str, _Module] = {}
    digests: dict[str, str] = {}
    unresolved: list[str] = []
    reads: list[str] = []
    while todo:
        module = todo.pop()
        if module.name in seen:
            continue
        seen[module.name] = module
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        try:
            digest, imports, missed, found = _read(module.path, package or None)
        except OSError as exc:
            if module is entry:
                return SourceIdentity(None, None)
            unresolved.append(f"{module.name}:0: cannot be read ({exc})")
            continue
        if module.path.suffix != ".py":
            unresolved.append(f"{module.name}:0: {module.path.name} is not Python source")
        digests[module.name] = digest
        prefix = "" if module is entry else f"{module.name}:"
        unresolved.extend(f"{module.name}:{line}" for line in missed)
        reads.extend(f"{prefix}{line}" for line in found)
        for _, imported, names in imports:
            todo.extend(_project_modules(imported, names, root))
    listing = "".join(f"{n}\0{digests[n]}\n" for n in sorted(digests))
    return SourceIdentity(
        sha256=hashlib.sha256(listing.encode()).hexdigest(),
        coverage=COVERAGE_ENTRY_ONLY if unresolved else COVERAGE_SELF_CONTAINED,
        modules=(entry.name, *sorted(n for n in digests if n != entry.name)),
        unresolved=tuple(unresolved),
        reads=tuple(reads),
    )


def _project_modules(imported: str, names: Iterable[str], root: Path) -> Iterator[_Module]:
    found = _find(imported, root)
    if found is None:
        return
    yield from found
    for name in names:  # ``from pkg import mod``: a submodule, or an attribute of pkg
        if name != "*":
            yield from _find(f"{imported}.{name}", root) or ()


def _entry(module_name: str) -> tuple[str, Path] | None:
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if module is None or not file:
        return None
    spec = getattr(module, "__spec__", None)
    name = getattr(spec, "name", None) or module_name  # ``python -m pkg.mod``: pkg.mod
    return name, Path(file)


def workflow_source(fn: Any, registered_in: str | None = None) -> SourceIdentity:
    """The source identity of the module defining ``fn`` (blocking: a worker thread), and of
    ``registered_in`` when another module made the workflow of it (a factory's function,
    registered with its prompts elsewhere): both are hashed and scanned. A module with no
    file (a REPL, ``exec``) has no identity: ``sha256`` and ``coverage`` are None; so has a
    source the scan fails on (it is logged), which refuses replay rather than the run."""
    module_name = getattr(fn, "__module__", "") or ""
    try:
        entry = _entry(module_name)
        if entry is None:
            return SourceIdentity(None, None)
        identity = source_identity(*entry)
        if registered_in is None or registered_in == module_name:
            return identity
        other = _entry(registered_in)
        if other is None:
            return SourceIdentity(None, None)
        return _both(identity, other[0], source_identity(*other))
    except Exception as exc:  # a finder, a parser or a file we cannot foresee
        log.warning(
            "source_identity_failed",
            module=module_name,
            error=f"{type(exc).__name__}: {exc}",
        )
        return SourceIdentity(None, None)


def _both(first: SourceIdentity, name: str, second: SourceIdentity) -> SourceIdentity:
    """One identity for a workflow whose function and registration live in two modules."""
    if first.sha256 is None or second.sha256 is None:
        return SourceIdentity(None, None)
    both = f"{first.sha256}\0{name}\0{second.sha256}".encode()
    entry_only = COVERAGE_ENTRY_ONLY in (first.coverage, second.coverage)
    own = tuple(r if not r[:1].isdigit() else f"{name}:{r}" for r in second.reads)
    return SourceIdentity(
        sha256=hashlib.sha256(both).hexdigest(),
        coverage=COVERAGE_ENTRY_ONLY if entry_only else COVERAGE_SELF_CONTAINED,
        modules=(*first.modules, *(m for m in second.modules if m not in first.modules)),
        unresolved=(*first.unresolved, *second.unresolved),
        reads=tuple(dict.fromkeys((*first.reads, *own))),
    )


def replay_safe(fn: Any, registered_in: str | None = None) -> tuple[bool, tuple[str, ...]]:
    """Whether the module defining ``fn`` (and ``registered_in``) and the project modules they
    import pass the scan (no source counts as unsafe)."""
    identity = workflow_source(fn, registered_in)
    if not identity.readable:
        return False, ("the workflow's source cannot be read",)
    return not identity.reads, identity.reads
