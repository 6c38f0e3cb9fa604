"""One error tree: every exception class little defines is under LittleError (or, for the
interrupts of a run, under RunInterrupt, a BaseException) and drawn in the ``little.errors``
docstring, where the drawing's indentation is the class hierarchy."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import LittleError, RunInterrupt
from little.runtime import ExecutionStopped

ROOTS = (LittleError, RunInterrupt)
"""The two roots the drawing starts from: errors, and what ends an execution without failing."""

# The services (little_services) draw their own errors, in little_services' docstring.
NOT_DRAWN_HERE = ("little_services",)

INTERNAL_SIGNALS = {
    "little.events._writer.NotCompiled": "the compiled Avro writer's 'write this record with "
    "fastavro', caught by EventCodec.encode (tests/little/events/test_writer.py: fallbacks)",
    "little.events._writer._Unsupported": "a schema construct the writer compiler leaves to "
    "fastavro, caught by compile_writer",
    "little.integrations.openai_agents._tools._Refused": "a refusal met inside an Agents SDK "
    "tool carried past the recording kernel unrecorded, caught by the same module's "
    "on_invoke_tool and raised as the UnsupportedFeatureError it holds",
}
"""Exceptions used as control flow inside one private module, caught there and never raised
to a caller of little: not errors of little's, so not under the root nor drawn."""


@dataclass(frozen=True)
class Drawn:
    name: str
    parent: str | None
    module: str
    """The public module that defines and exports it (``little.errors`` unless drawn)."""
    bases: tuple[str, ...]
    """Standard bases besides little's, drawn as ``(ValueError)``."""
    description: str


_LINE = re.compile(r"(?P<tree>[│├└─ ]*)(?P<name>[A-Z]\w+)(?P<rest>.*)")
_GROUP = re.compile(r"\s*\((?P<inside>[A-Za-z_.]+(?:, [A-Za-z_.]+)*)\)")


def _drawing(doc: str | None = None) -> dict[str, Drawn]:
    """Parse the tree in ``little.errors.__doc__`` (or ``doc``): from the ``LittleError`` line
    to the first blank line, four columns of tree per level (a root at column 0)."""
    doc = (little.errors.__doc__ if doc is None else doc) or ""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("LittleError"))
    indent = len(lines[start]) - len(lines[start].lstrip())
    drawn: dict[str, Drawn] = {}
    stack: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = _LINE.fullmatch(line[indent:])
        assert match is not None, f"not a line of the tree: {line!r}"
        tree, name, rest = match["tree"], match["name"], match["rest"]
        assert len(tree) % 4 == 0, f"misaligned: {line!r}"
        depth = len(tree) // 4
        assert depth <= len(stack), f"skips a level: {line!r}"
        del stack[depth:]
        module, bases = "little.errors", ()
        while group := _GROUP.match(rest):
            inside = group["inside"]
            if inside == "little" or inside.startswith(("little.", "little_services")):
                module = inside
            else:
                bases = tuple(inside.split(", "))
            rest = rest[group.end() :]
        assert name not in drawn, f"{name} is drawn twice"
        drawn[name] = Drawn(name, stack[-1] if stack else None, module, bases, rest.strip())
        stack.append(name)
    return drawn


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "w") as w:
        yield w


def _little_modules() -> list[Any]:
    modules = [little]
    for info in pkgutil.walk_packages(little.__path__, "little."):
        modules.append(importlib.import_module(info.name))  # every module imports cleanly
    return modules


def _defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of little, by name."""
    found: dict[str, type[BaseException]] = {}
    for module in _little_modules():
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and f"{obj.__module__}.{obj.__name__}" not in INTERNAL_SIGNALS
            ):
                assert obj.__name__ not in found or found[obj.__name__] is obj, obj.__name__
                found[obj.__name__] = obj
    return found


def _subclasses(cls: type) -> set[type]:
    out: set[type] = set()
    for sub in cls.__subclasses__():
        out.add(sub)
        out |= _subclasses(sub)
    return out


def _tree() -> dict[str, type[BaseException]]:
    """The roots and every subclass little defines (imported: every module is)."""
    _little_modules()
    classes = [*ROOTS, *(c for root in ROOTS for c in _subclasses(root))]
    return {
        c.__name__: c
        for c in classes
        if (c.__module__ == "little" or c.__module__.startswith("little."))
        and not c.__module__.startswith(NOT_DRAWN_HERE)
    }


def test_every_exception_little_defines_is_under_the_root() -> None:
    outside = sorted(
        f"{c.__module__}.{name}"
        for name, c in _defined_exceptions().items()
        if not issubclass(c, ROOTS)
    )
    assert outside == []


def test_the_drawing_holds_every_class_and_nothing_else() -> None:
    drawn, real = set(_drawing()), set(_tree())
    assert not real - drawn, f"not drawn in little.errors: {sorted(real - drawn)}"
    assert not drawn - real, f"drawn but not a class of the tree: {sorted(drawn - real)}"
    # every exception class of every module (projection's aside) is in the tree
    defined = {
        n for n, c in _defined_exceptions().items() if not c.__module__.startswith(NOT_DRAWN_HERE)
    }
    assert defined == real


def test_the_drawing_is_the_hierarchy() -> None:
    real = _tree()
    for name, d in _drawing().items():
        cls = real[name]
        ours = [b.__name__ for b in cls.__bases__ if issubclass(b, ROOTS)]
        standard = tuple(b.__name__ for b in cls.__bases__ if not issubclass(b, ROOTS))
        if d.parent is None:
            assert cls in ROOTS
            assert standard == d.bases, f"{name}: standard bases {standard}, drawn {d.bases}"
            continue
        assert ours == [d.parent], f"{name} derives from {ours}, drawn under {d.parent}"
        assert standard == d.bases, f"{name}: standard bases {standard}, drawn {d.bases}"
        assert d.parent in [c.__name__ for c in cls.__mro__[1:]]


def test_each_class_is_exported_where_the_drawing_says() -> None:
    real = _tree()
    for name, d in _drawing().items():
        module = importlib.import_module(d.module)
        assert getattr(module, name, None) is real[name], f"{d.module} does not export {name}"
        assert name in module.__all__, f"{name} is not in {d.module}.__all__"


def test_retryable_is_a_bool_decided_per_family_and_drawn() -> None:
    real = _tree()
    for name, d in _drawing().items():
        cls = real[name]
        assert type(cls.retryable) is bool, name
        if d.parent in ("LittleError", "RunInterrupt"):
            assert "retryable" in vars(cls), f"{name} does not decide retryable itself"
        marked = bool(re.search(r"\bretryable\b", d.description))
        assert marked == cls.retryable, f"{name}: retryable={cls.retryable}, drawn {marked}"


def test_retryable_values_the_coordinator_relies_on() -> None:
    from little import errors
    from little.commands import CommandDecodeError
    from little.replay import SnapshotError, StreamIntegrityError
    from little.runtime import (
        ClaimRejectedError,
        RunNotStartedError,
        SubRunFailedError,
        UnknownWorkflowError,
        WorkflowVersionError,
    )

    retry = [
        ClaimRejectedError,  # a racing claimer won: the next claim has a higher epoch
        errors.LogError,
        errors.AppendOutcomeUnknownError,  # the writer ends; resuming reads what landed
        errors.BrokerUnavailableError,
        ExecutionStopped,
    ]
    park = [
        LittleError,  # anything little does not say can succeed again
        errors.RuntimeIntegrityError,
        errors.CapabilityDriftError,
        StreamIntegrityError,
        WorkflowVersionError,
        errors.ConfigurationError,
        UnknownWorkflowError,
        errors.EventDecodeError,
        CommandDecodeError,
        little.RecordDecodeError,
        errors.ArtifactIntegrityError,
        SnapshotError,
        SubRunFailedError,
        RunNotStartedError,
    ]
    assert [c.__name__ for c in retry if not c.retryable] == []
    assert [c.__name__ for c in park if c.retryable] == []


def test_snapshot_error_is_still_a_value_error() -> None:
    from little.replay import SnapshotError, decode_snapshot

    with pytest.raises(ValueError, match="not a RunSnapshot") as raised:
        decode_snapshot(b"not a snapshot")  # except ValueError still catches it
    assert isinstance(raised.value, SnapshotError)
    assert isinstance(raised.value, LittleError)


def test_the_services_draw_their_errors_under_the_root() -> None:
    """little_services' docstring draws its classes under little's (drawn without a module:
    they are the library's, anchors for the services' own)."""
    import little_services

    for info in pkgutil.walk_packages(little_services.__path__, "little_services."):
        importlib.import_module(info.name)
    drawn = _drawing(little_services.__doc__)
    ours = {n: d for n, d in drawn.items() if d.module.startswith("little_services")}
    anchors = {n for n in drawn if n not in ours}
    library = _tree()
    assert anchors <= set(library), sorted(anchors - set(library))
    defined = {
        c.__name__: c
        for c in _subclasses(BaseException)
        if c.__module__.startswith("little_services")
    }
    assert set(ours) == set(defined), (sorted(ours), sorted(defined))
    for name, d in ours.items():
        cls = defined[name]
        assert [b.__name__ for b in cls.__bases__ if issubclass(b, LittleError)] == [d.parent]
        module = importlib.import_module(d.module)
        assert getattr(module, name) is cls, (name, d.module)
        assert name in module.__all__, (name, d.module)
        marked = bool(re.search(r"\bretryable\b", d.description))
        assert marked == cls.retryable, f"{name}: retryable={cls.retryable}, drawn {marked}"


# -- the classes that replaced bare LittleErrors -------------------------------------------


def test_an_unknown_workflow_is_a_configuration_error_naming_it() -> None:
    from little.errors import ConfigurationError
    from little.runtime import UnknownWorkflowError, lookup

    with pytest.raises(UnknownWorkflowError) as raised:
        lookup("tests.errors.no-such-workflow", run_id="run-x")
    err = raised.value
    assert isinstance(err, ConfigurationError)
    assert (err.workflow, err.run_id) == ("tests.errors.no-such-workflow", "run-x")
    assert str(err).startswith("workflow 'tests.errors.no-such-workflow' is not registered")
    assert "run run-x" in str(err)


def test_resuming_a_run_that_never_started_says_so(world: little.World) -> None:
    from little.runtime import RunNotStartedError, resume

    with pytest.raises(RunNotStartedError, match="has no events in its log") as raised:
        asyncio.run(resume(world, "tests-errors-never-started"))
    assert raised.value.run_id == "tests-errors-never-started"
    assert list(world.read_run("tests-errors-never-started")) == []  # refused before claiming


def test_resuming_a_run_whose_workflow_is_not_registered_names_both(world: little.World) -> None:
    from little.runtime import RunControl, UnknownWorkflowError, execute, resume, workflow
    from little.runtime._registry import _REGISTRY as REGISTRY  # test clean-up only

    control = RunControl()

    async def stops(step: Any) -> None:
        control.stop("leave it running")  # lands this step, then stops: RunStarted is logged

    async def flow(ctx: Any, _: None) -> None:
        await ctx.step("only", stops)

    name, run_id = "tests.errors.unregistered", "tests-errors-unregistered"
    wf = workflow(name, version="e1")(flow)
    try:
        with pytest.raises(ExecutionStopped):
            asyncio.run(execute(world, run_id, wf, None, control=control))
    finally:
        REGISTRY.pop(name, None)
    with pytest.raises(UnknownWorkflowError) as raised:
        asyncio.run(resume(world, run_id))  # looked up by the name its log gives
    assert (raised.value.workflow, raised.value.run_id) == (name, run_id)
    assert f"run {run_id}" in str(raised.value)


def test_a_failed_sub_run_fails_its_parent_step_with_its_own_error(world: little.World) -> None:
    from little.runtime import StepFailedError, SubRunFailedError, run, workflow
    from little.runtime._registry import _REGISTRY as REGISTRY  # test clean-up only

    async def child(ctx: Any, n: int) -> int:
        raise RuntimeError(f"child cannot do {n}")

    async def parent(ctx: Any, _: None) -> int:
        try:
            return int(await ctx.start_workflow("tests.errors.child", 7))
        except StepFailedError as exc:  # the step that ran the sub-run, failed by it
            seen.append(exc.error)
            raise

    seen: list[BaseException] = []
    child_wf = workflow("tests.errors.child", version="e1")(child)
    parent_wf = workflow("tests.errors.parent", version="e1")(parent)
    try:
        result = asyncio.run(run(world, parent_wf, None, run_id="tests-errors-parent"))
    finally:
        REGISTRY.pop(child_wf.name, None)
        REGISTRY.pop(parent_wf.name, None)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("SubRunFailedError: ")
    (err,) = seen
    assert isinstance(err, SubRunFailedError)
    assert err.run_id == "tests-errors-parent"
    assert err.sub_run_id.startswith("tests-errors-parent~")
    assert (err.workflow, err.status) == ("tests.errors.child", "failed")
    assert err.error is not None
    assert "child cannot do 7" in err.error
    assert not err.retryable
