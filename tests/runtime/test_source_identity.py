"""Source identity and the scan, end to end on the embedded world (seed 003): a run records
its workflow's source identity on RunStarted; a replay is refused (and runs fresh, saying why)
when it targets another workflow, when either identity's coverage is unproven, when a project
module reads the clock, or in strict mode when the source changed; the repairable default
reuses the unchanged prefix of an edited helper module.

Each test writes a real workflow package to a temporary directory, imports it from there and
runs it; an edit is written to the files and the package imported again, as a new process
would (the registry entry of the old module is dropped, since one process cannot register
two functions under one name and version)."""

from __future__ import annotations

import asyncio
import importlib
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import little
from little.errors import ConfigurationError
from little.events import AgentCallSettled, RunStarted
from little.replay import replay_run
from little.runtime import _registry, run
from little.runtime._source import COVERAGE_ENTRY_ONLY, COVERAGE_SELF_CONTAINED
from tests.runtime import replay_workflows as rw

_packages = itertools.count()

FLOW = """\
from little.runtime import workflow
from tests.runtime.replay_workflows import ask
from PKG.helpers import PROMPTS
{imports}

@workflow("NAME", version="{version}")
async def flow(ctx, topic):
    {body}
    research = await ctx.step("research", ask, "research", PROMPTS["research"] + topic)
    outline = await ctx.step("outline", ask, "outline", PROMPTS["outline"] + str(research))
    return [research, outline]
"""
HELPERS = """\
PROMPTS = {"research": "Find facts about ", "outline": "Outline: "}
"""


class Project:
    """A workflow package under ``root``: ``PKG.flow`` (the workflow) and ``PKG.helpers``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = f"proj_source_{next(_packages)}"
        self.workflow_name = f"tests.source.{self.name}"
        (root / self.name).mkdir()
        self.write("__init__.py", "")

    def write(self, file: str, text: str) -> None:
        text = text.replace("PKG", self.name).replace("NAME", self.workflow_name)
        (self.root / self.name / file).write_text(text)

    def flow(self, imports: str = "", body: str = "pass", version: str = "1") -> None:
        self.write("flow.py", FLOW.format(imports=imports, body=body, version=version))

    def load(self) -> Any:
        """Import the package as it is on disk now (a fresh import, as a new process does)."""
        for name in [m for m in sys.modules if m == self.name or m.startswith(f"{self.name}.")]:
            del sys.modules[name]
        _registry._REGISTRY.pop(self.workflow_name, None)
        importlib.invalidate_caches()
        module: ModuleType = importlib.import_module(f"{self.name}.flow")
        return module.flow


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    with little.local_world(tmp_path / "world") as w:
        yield w


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    root = tmp_path / "src"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    made = Project(root)
    made.write("helpers.py", HELPERS)
    made.flow()
    yield made
    for name in [m for m in sys.modules if m == made.name or m.startswith(f"{made.name}.")]:
        del sys.modules[name]
    _registry._REGISTRY.pop(made.workflow_name, None)


def started(world: little.World, run_id: str) -> RunStarted:
    return next(e for x in world.read_run(run_id) if isinstance(e := x.event, RunStarted))


def served(world: little.World, run_id: str) -> list[tuple[bool, str | None]]:
    return [
        (e.replayed, e.miss_reason)
        for x in world.read_run(run_id)
        if isinstance(e := x.event, AgentCallSettled)
    ]


def invocations() -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in ("research", "outline")}


def test_a_run_records_its_source_identity_and_an_edited_helper_changes_it(
    world: little.World, project: Project
) -> None:
    first = asyncio.run(run(world, project.load(), "Kafka"))
    assert first.status == "completed"
    recorded = started(world, first.run_id)
    assert recorded.source_coverage == COVERAGE_SELF_CONTAINED
    assert recorded.source_sha256 is not None
    assert recorded.replay_mode is None  # not a replay
    state = replay_run(world, first.run_id).state
    assert (state.source_sha256, state.source_coverage) == (
        recorded.source_sha256,
        COVERAGE_SELF_CONTAINED,
    )

    # repairable (the default): the edited helper changes stage 2's prompt; stage 1 is served
    project.write("helpers.py", HELPERS.replace("Outline: ", "Outline in three points: "))
    second = asyncio.run(run(world, project.load(), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert started(world, second.run_id).source_sha256 != recorded.source_sha256
    assert started(world, second.run_id).replay_mode == "repairable"
    assert started(world, second.run_id).replay_refused_reason is None
    assert served(world, second.run_id) == [(True, None), (False, "key-mismatch")]
    assert invocations() == {"research": 1, "outline": 2}


def test_strict_mode_refuses_any_source_change_even_a_comment_in_a_helper(
    world: little.World, project: Project
) -> None:
    first = asyncio.run(run(world, project.load(), "Kafka"))
    # unchanged: strict replays like repairable does
    same = asyncio.run(
        run(world, project.load(), "Kafka", replay_from=first.run_id, replay_mode="strict")
    )
    assert started(world, same.run_id).replay_refused_reason is None
    assert started(world, same.run_id).replay_mode == "strict"
    assert served(world, same.run_id) == [(True, None), (True, None)]
    assert invocations() == {"research": 1, "outline": 1}

    # a comment moves no call, yet the bytes changed: strict refuses, the run executes fresh
    project.write("helpers.py", HELPERS + "# reviewed\n")
    edited = project.load()
    refused = asyncio.run(
        run(world, edited, "Kafka", replay_from=first.run_id, replay_mode="strict")
    )
    assert refused.status == "completed"
    assert refused.output == first.output
    assert started(world, refused.run_id).replay_refused_reason == "source-changed"
    assert served(world, refused.run_id) == [(False, None), (False, None)]
    assert invocations() == {"research": 2, "outline": 2}
    assert replay_run(world, refused.run_id).state.replay_refused_reason == "source-changed"
    # the same edit in the default mode reuses everything (no request changed)
    repaired = asyncio.run(run(world, edited, "Kafka", replay_from=first.run_id))
    assert served(world, repaired.run_id) == [(True, None), (True, None)]
    assert invocations() == {"research": 2, "outline": 2}


def test_strict_mode_refuses_a_new_workflow_version_of_the_same_bytes(
    world: little.World, project: Project
) -> None:
    first = asyncio.run(run(world, project.load(), "Kafka"))
    project.flow(version="2")
    second = asyncio.run(
        run(world, project.load(), "Kafka", replay_from=first.run_id, replay_mode="strict")
    )
    assert started(world, second.run_id).replay_refused_reason == "source-changed"


def test_an_unknown_replay_mode_is_a_configuration_error_naming_it(
    world: little.World, project: Project
) -> None:
    with pytest.raises(ConfigurationError, match=r"replay_mode='exact'.*'repairable', 'strict'"):
        asyncio.run(run(world, project.load(), "Kafka", replay_from="r", replay_mode="exact"))


def test_an_unsafe_read_in_a_project_helper_module_refuses_the_replay(
    world: little.World, project: Project
) -> None:
    project.write(
        "helpers.py",
        HELPERS + "import time\n\ndef stamp():\n    return time.time()\n",
    )
    first = asyncio.run(run(world, project.load(), "Kafka"))
    second = asyncio.run(run(world, project.load(), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert started(world, second.run_id).replay_refused_reason == "replay-unsafe-script"
    assert served(world, second.run_id) == [(False, None), (False, None)]
    assert invocations() == {"research": 2, "outline": 2}


def test_an_entry_only_workflow_is_refused_and_so_is_a_source_recorded_entry_only(
    world: little.World, project: Project
) -> None:
    dynamic = "import importlib\nPLUGIN = 'json'\nplugin = importlib.import_module(PLUGIN)"
    project.flow(imports=dynamic)
    first = asyncio.run(run(world, project.load(), "Kafka"))
    assert started(world, first.run_id).source_coverage == COVERAGE_ENTRY_ONLY
    again = asyncio.run(run(world, project.load(), "Kafka", replay_from=first.run_id))
    assert started(world, again.run_id).replay_refused_reason == "identity-coverage-unproven"
    assert served(world, again.run_id) == [(False, None), (False, None)]

    # the import made static: this source is self-contained, but the recorded run is not
    project.flow(imports="import json as plugin")
    fixed = asyncio.run(run(world, project.load(), "Kafka", replay_from=first.run_id))
    assert started(world, fixed.run_id).source_coverage == COVERAGE_SELF_CONTAINED
    assert started(world, fixed.run_id).replay_refused_reason == "identity-coverage-unproven"
    assert invocations() == {"research": 3, "outline": 3}
    # a replay of the self-contained run is served
    last = asyncio.run(run(world, project.load(), "Kafka", replay_from=fixed.run_id))
    assert served(world, last.run_id) == [(True, None), (True, None)]


def test_a_source_run_logged_before_source_identity_is_refused(
    world: little.World, project: Project
) -> None:
    """A run logged by an older release has RunStarted without the identity fields (v2):
    its calls would match, but nothing proves what code made them."""
    wf = project.load()
    first = asyncio.run(run(world, wf, "Kafka"))
    old = "run_logged_before_v3"
    events = []
    for logged in world.read_run(first.run_id):
        update: dict[str, Any] = {"run_id": old}
        if isinstance(logged.event, RunStarted):
            update |= {"source_sha256": None, "source_coverage": None}
        events.append(logged.event.model_copy(update=update))
    world.append(events)
    assert replay_run(world, old).state.status == "completed"
    assert replay_run(world, old).state.source_coverage is None
    second = asyncio.run(run(world, wf, "Kafka", replay_from=old))
    assert started(world, second.run_id).replay_refused_reason == "identity-coverage-unproven"
    assert served(world, second.run_id) == [(False, None), (False, None)]


@pytest.mark.parametrize(
    ("imports", "body"),
    [
        ("import time", "stamp = getattr(time, 'time')()"),
        ("import time", "name = 'time'; stamp = getattr(time, name)()"),
        ("", "stamp = __import__('time').time()"),
        ("import importlib", "r = importlib.import_module('random')"),
        ("import sys", "stamp = sys.modules['time'].time()"),
        ("import builtins", "stamp = builtins.__import__('time').monotonic()"),
        ("import time", "(clock := time)"),
        ("import time", "clock, n = time, 1"),
        ("import time", "def later(clock=time.time): return clock()"),
        ("from time import *", "pass"),
    ],
    ids=[
        "getattr-literal",
        "getattr-computed",
        "__import__",
        "import_module",
        "sys.modules",
        "builtins",
        "walrus",
        "tuple",
        "default-argument",
        "star-import",
    ],
)
def test_each_hole_of_the_scan_refuses_a_replay_end_to_end(
    world: little.World, project: Project, imports: str, body: str
) -> None:
    project.flow(imports=imports, body=body)
    wf = project.load()
    first = asyncio.run(run(world, wf, "Kafka"))
    assert first.status == "completed"
    second = asyncio.run(run(world, wf, "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert started(world, second.run_id).replay_refused_reason == "replay-unsafe-script"
    assert invocations() == {"research": 2, "outline": 2}


def test_a_source_run_that_settled_no_agent_call_is_refused_as_no_recorded_calls(
    world: little.World, project: Project
) -> None:
    project.flow(body="if topic == 'nothing':\n        return []")
    wf = project.load()
    empty = asyncio.run(run(world, wf, "nothing"))
    assert (empty.status, empty.output) == ("completed", [])
    second = asyncio.run(run(world, wf, "Kafka", replay_from=empty.run_id))
    assert second.status == "completed"
    assert started(world, second.run_id).replay_refused_reason == "no-recorded-calls"
    assert served(world, second.run_id) == [(False, None), (False, None)]


FACTORY = """\
from tests.runtime.replay_workflows import ask


def make(prompts):
    async def flow(ctx, topic):
        research = await ctx.step("research", ask, "research", prompts["research"] + topic)
        outline = await ctx.step("outline", ask, "outline", prompts["outline"] + str(research))
        return [research, outline]

    return flow
"""
REGISTERED = """\
from little.runtime import workflow
from PKG.factory import make
{imports}

flow = workflow("NAME", version="1")(make({{"research": "{prompt}", "outline": "Outline: "}}))
"""


def test_a_workflow_made_by_a_factory_is_identified_by_the_module_that_registers_it_too(
    world: little.World, project: Project
) -> None:
    """The function comes from a factory module, its prompts and registration from another:
    both are the workflow's source (strict mode sees an edit of either; the scan reads both)."""
    project.write("factory.py", FACTORY)
    project.write("flow.py", REGISTERED.format(imports="", prompt="Find facts about "))
    first = asyncio.run(run(world, project.load(), "Kafka"))
    assert first.status == "completed"
    assert started(world, first.run_id).source_coverage == COVERAGE_SELF_CONTAINED

    # only the registering module changes: strict mode refuses, as for any source change
    project.write("flow.py", REGISTERED.format(imports="", prompt="Find facts about ") + "# x\n")
    strict = asyncio.run(
        run(world, project.load(), "Kafka", replay_from=first.run_id, replay_mode="strict")
    )
    assert started(world, strict.run_id).source_sha256 != started(world, first.run_id).source_sha256
    assert started(world, strict.run_id).replay_refused_reason == "source-changed"

    # a clock read in the registering module is found by the scan
    project.write(
        "flow.py", REGISTERED.format(imports="import time\nSTAMP = time.time()", prompt="F ")
    )
    clocked = asyncio.run(run(world, project.load(), "Kafka", replay_from=first.run_id))
    assert started(world, clocked.run_id).replay_refused_reason == "replay-unsafe-script"
