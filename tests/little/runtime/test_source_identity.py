"""Source identity and the scan, end to end on the embedded world (seed 003): a run records
its workflow's source identity on RunStarted; a replay is refused (and runs fresh, saying why)
when it targets another workflow, when either identity's coverage is unproven, when a project
module reads the clock, or in strict mode when the source changed; the repairable default
reuses the unchanged prefix of an edited helper module.

Each test writes a real workflow package to a temporary directory, imports it from there and
runs it; an edit is written to the files and the package imported again, as a new process
would (the registry entry of the old module is dropped, since one process cannot register
two functions under one name and version).

The first part is the identity itself, without running anything: which bytes a workflow's
identity covers, when it is ``self-contained`` and when ``entry-only`` (those projects are
written to a temporary directory and read, never imported)."""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
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
from little.runtime._source import (
    COVERAGE_ENTRY_ONLY,
    COVERAGE_SELF_CONTAINED,
    SourceIdentity,
    source_identity,
    workflow_source,
)
from tests.little.runtime import replay_workflows as rw

_packages = itertools.count()


# Which bytes the identity covers (read, never imported)

_names = itertools.count()


def write_project(root: Path, files: dict[str, str]) -> str:
    """Write a package named uniquely under ``root``; ``files`` by path inside it."""
    name = f"proj_identity_{next(_names)}"
    for relative, text in {"__init__.py": "", **files}.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("PKG", name))
    return name


def identity_of(root: Path, package: str, module: str = "flow") -> SourceIdentity:
    return source_identity(f"{package}.{module}", root / package / f"{module}.py")


SCAN_FLOW = (
    "import json\n"
    "from little.runtime import workflow\n"
    "from PKG.helpers import PROMPT\n"
    "from PKG import prompts\n"
    "from . import relative\n"
)
SCAN_HELPERS = {"helpers.py": "PROMPT = 'Find facts about '\n", "prompts.py": "", "relative.py": ""}


def test_the_entry_and_the_project_modules_it_imports_are_hashed(tmp_path: Path) -> None:
    pkg = write_project(tmp_path, {"flow.py": SCAN_FLOW, **SCAN_HELPERS, "unused.py": "X = 1\n"})
    found = identity_of(tmp_path, pkg)
    assert found.coverage == COVERAGE_SELF_CONTAINED
    # the stdlib, installed packages and the SDK are outside the project: not hashed
    assert found.modules == (
        f"{pkg}.flow",
        pkg,
        f"{pkg}.helpers",
        f"{pkg}.prompts",
        f"{pkg}.relative",
    )
    assert found.unresolved == ()
    assert found.reads == ()
    assert found.sha256 is not None
    assert len(found.sha256) == 64

    # a file the workflow does not import changes nothing
    (tmp_path / pkg / "unused.py").write_text("X = 2\n")
    assert identity_of(tmp_path, pkg).sha256 == found.sha256
    # a comment in an imported helper changes the identity (the bytes are the identity)
    helpers = tmp_path / pkg / "helpers.py"
    helpers.write_text(helpers.read_text() + "# a comment\n")
    edited = identity_of(tmp_path, pkg)
    assert edited.sha256 != found.sha256
    assert edited.modules == found.modules
    # and so does one in the package's __init__, which importing the entry runs
    (tmp_path / pkg / "__init__.py").write_text("# init\n")
    assert identity_of(tmp_path, pkg).sha256 not in (found.sha256, edited.sha256)


def test_imports_are_followed_transitively(tmp_path: Path) -> None:
    pkg = write_project(
        tmp_path,
        {
            "flow.py": "from PKG.a import x\n",
            "a.py": "from PKG.sub import b\nx = 1\n",
            "sub/__init__.py": "",
            "sub/b.py": "import importlib\nimportlib.import_module('PKG.c')\n",
            "c.py": "",
        },
    )
    found = identity_of(tmp_path, pkg)
    assert found.modules == (
        f"{pkg}.flow",
        pkg,
        f"{pkg}.a",
        f"{pkg}.c",
        f"{pkg}.sub",
        f"{pkg}.sub.b",
    )
    assert found.coverage == COVERAGE_SELF_CONTAINED
    before = found.sha256
    (tmp_path / pkg / "c.py").write_text("# reached through a literal import_module\n")
    assert identity_of(tmp_path, pkg).sha256 != before


@pytest.mark.parametrize(
    ("helper", "unresolved"),
    [
        ("import importlib\nmod = importlib.import_module(NAME)\n", ":2: importlib.import_module"),
        ("m = __import__('PKG.' + 'x')\n", ":1: __import__(<computed>)"),
        ("from .... import far\n", ":1: from .... import ... (relative, resolves nowhere"),
        ("exec('import time')\n", ":1: exec(...) runs code the scan cannot follow"),
        ("def broken(:\n", ":0: cannot be parsed (SyntaxError"),
    ],
)
def test_an_import_that_cannot_be_resolved_statically_makes_it_entry_only(
    tmp_path: Path, helper: str, unresolved: str
) -> None:
    pkg = write_project(tmp_path, {"flow.py": "from PKG import helpers\n", "helpers.py": helper})
    found = identity_of(tmp_path, pkg)
    assert found.coverage == COVERAGE_ENTRY_ONLY
    assert len(found.unresolved) == 1
    assert found.unresolved[0].startswith(f"{pkg}.helpers{unresolved}"), found.unresolved
    assert found.sha256 is not None  # still hashed: what could be resolved


def test_a_top_level_module_has_no_package_to_import_relatively_from(tmp_path: Path) -> None:
    (tmp_path / "solo_flow.py").write_text("from . import x\n")
    found = source_identity("solo_flow", tmp_path / "solo_flow.py")
    assert found.coverage == COVERAGE_ENTRY_ONLY
    assert found.unresolved == (
        "solo_flow:1: from . import ... (relative, resolves nowhere from package None)",
    )


def test_a_top_level_module_hashes_its_sibling_modules(tmp_path: Path) -> None:
    (tmp_path / "top_flow_x.py").write_text("import top_helper_x\nimport json\n")
    (tmp_path / "top_helper_x.py").write_text("import time\nNOW = time.time()\n")
    found = source_identity("top_flow_x", tmp_path / "top_flow_x.py")
    assert found.modules == ("top_flow_x", "top_helper_x")
    assert found.coverage == COVERAGE_SELF_CONTAINED
    # an unsafe read in a helper module is found, and named by its module
    assert found.reads == ("top_helper_x:2: time.time",)


def test_a_module_added_to_the_project_after_a_scan_is_hashed_by_the_next_scan(
    tmp_path: Path,
) -> None:
    (tmp_path / "late_flow_x.py").write_text("import late_helper_x\nimport json\n")
    before = source_identity("late_flow_x", tmp_path / "late_flow_x.py")
    assert before.modules == ("late_flow_x",)  # not in the project: not followed
    stamp = os.stat(tmp_path).st_mtime_ns
    (tmp_path / "late_helper_x.py").write_text("PROMPT = 'x'\n")
    # the entry changed the directory (set apart from the first write's time explicitly: a
    # file system's clock may not tick between two writes this quick, for Python's own
    # finder's listing cache as for the scan's)
    os.utime(tmp_path, ns=(stamp + 1_000_000_000, stamp + 1_000_000_000))
    after = source_identity("late_flow_x", tmp_path / "late_flow_x.py")
    assert after.modules == ("late_flow_x", "late_helper_x")
    assert after.sha256 != before.sha256


def test_a_project_directory_named_like_a_stdlib_module_does_not_shadow_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "json").mkdir()  # a namespace portion: the stdlib's json wins
    (tmp_path / "shadow_flow_x.py").write_text("import json\n")
    found = source_identity("shadow_flow_x", tmp_path / "shadow_flow_x.py")
    assert found.modules == ("shadow_flow_x",)


def test_a_workflow_with_no_source_file_has_no_identity() -> None:
    namespace: dict[str, object] = {"__name__": "not_a_module_anywhere"}
    exec("async def flow(ctx, input):\n    return input\n", namespace)
    assert workflow_source(namespace["flow"]) == SourceIdentity(None, None)
    assert not workflow_source(namespace["flow"]).readable


def test_the_sdk_is_outside_every_project() -> None:
    from little.examples import research

    found = workflow_source(research.RESEARCH_BRIEF.fn)
    assert found.modules == ("little.examples.research",)
    assert found.coverage == COVERAGE_SELF_CONTAINED


# End to end on the embedded world

FLOW = """\
from little.runtime import workflow
from tests.little.runtime.replay_workflows import ask
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
        ("import time", "stamp = time.clock_gettime(time.CLOCK_REALTIME)"),
        ("from time import clock_gettime_ns", "pass"),
        ("import time", "stamp = time.__dict__['time']()"),
        ("import time", "stamp = globals()['time'].monotonic()"),
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
        "clock_gettime",
        "from-import-clock_gettime_ns",
        "namespace-subscript",
        "globals-subscript",
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


def test_a_run_recorded_by_code_reading_randomness_is_never_a_replay_source(
    world: little.World, project: Project
) -> None:
    """The scan's verdict on the recorded run's code is recorded on its RunStarted: a replay
    of it by clean code is refused, since its answers came from a world the replay cannot
    reproduce (issue 26 item 3)."""
    project.flow(imports="import random", body="order = ['a', 'b']\n    random.shuffle(order)")
    first = asyncio.run(run(world, project.load(), "Kafka"))
    assert first.status == "completed"
    recorded = started(world, first.run_id).source_unsafe_reads
    assert recorded is not None
    assert any("random" in r for r in recorded), recorded
    assert replay_run(world, first.run_id).state.source_unsafe_reads == recorded

    project.flow()  # the read removed: this code is clean, the recorded run's was not
    clean = project.load()
    second = asyncio.run(run(world, clean, "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert started(world, second.run_id).source_unsafe_reads == ()
    assert started(world, second.run_id).replay_refused_reason == "replay-unsafe-script"
    assert second.replay is not None
    assert second.replay.refused_reason == "replay-unsafe-script"
    assert served(world, second.run_id) == [(False, None), (False, None)]
    assert invocations() == {"research": 2, "outline": 2}
    # the clean run is a replay source
    third = asyncio.run(run(world, clean, "Kafka", replay_from=second.run_id))
    assert started(world, third.run_id).replay_refused_reason is None
    assert served(world, third.run_id) == [(True, None), (True, None)]


def test_a_source_run_logged_before_the_scan_verdict_is_accepted_as_before(
    world: little.World, project: Project
) -> None:
    """A run logged before RunStarted v5 has no recorded verdict: it is accepted as before,
    by the same code and by edited code (refusing it would make every log and golden file
    recorded before v5 useless for replaying or simulating edited code). The refusal applies
    to a source that recorded a verdict (the test above)."""
    wf = project.load()
    first = asyncio.run(run(world, wf, "Kafka"))
    old = "run_logged_before_v5"
    events = []
    for logged in world.read_run(first.run_id):
        update: dict[str, Any] = {"run_id": old}
        if isinstance(logged.event, RunStarted):
            update |= {"source_unsafe_reads": None}
        events.append(logged.event.model_copy(update=update))
    world.append(events)
    assert replay_run(world, old).state.source_unsafe_reads is None
    same = asyncio.run(run(world, wf, "Kafka", replay_from=old))
    assert started(world, same.run_id).replay_refused_reason is None
    assert served(world, same.run_id) == [(True, None), (True, None)]

    project.write("helpers.py", HELPERS + "# reviewed\n")
    edited = asyncio.run(run(world, project.load(), "Kafka", replay_from=old))
    assert started(world, edited.run_id).source_sha256 != started(world, same.run_id).source_sha256
    assert started(world, edited.run_id).replay_refused_reason is None
    assert served(world, edited.run_id) == [(True, None), (True, None)]


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
from tests.little.runtime.replay_workflows import ask


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
