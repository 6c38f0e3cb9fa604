"""Source identity (seed 003): which bytes a workflow's identity covers, when it is
``self-contained`` and when ``entry-only``. Projects are written to a temporary directory and
read, never imported."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from little.runtime._source import (
    COVERAGE_ENTRY_ONLY,
    COVERAGE_SELF_CONTAINED,
    SourceIdentity,
    source_identity,
    workflow_source,
)

_names = itertools.count()


def project(root: Path, files: dict[str, str]) -> str:
    """Write a package named uniquely under ``root``; ``files`` by path inside it."""
    name = f"proj_identity_{next(_names)}"
    for relative, text in {"__init__.py": "", **files}.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("PKG", name))
    return name


def identity(root: Path, package: str, module: str = "flow") -> SourceIdentity:
    return source_identity(f"{package}.{module}", root / package / f"{module}.py")


FLOW = (
    "import json\n"
    "from little.runtime import workflow\n"
    "from PKG.helpers import PROMPT\n"
    "from PKG import prompts\n"
    "from . import relative\n"
)
HELPERS = {"helpers.py": "PROMPT = 'Find facts about '\n", "prompts.py": "", "relative.py": ""}


def test_the_entry_and_the_project_modules_it_imports_are_hashed(tmp_path: Path) -> None:
    pkg = project(tmp_path, {"flow.py": FLOW, **HELPERS, "unused.py": "X = 1\n"})
    found = identity(tmp_path, pkg)
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
    assert identity(tmp_path, pkg).sha256 == found.sha256
    # a comment in an imported helper changes the identity (the bytes are the identity)
    helpers = tmp_path / pkg / "helpers.py"
    helpers.write_text(helpers.read_text() + "# a comment\n")
    edited = identity(tmp_path, pkg)
    assert edited.sha256 != found.sha256
    assert edited.modules == found.modules
    # and so does one in the package's __init__, which importing the entry runs
    (tmp_path / pkg / "__init__.py").write_text("# init\n")
    assert identity(tmp_path, pkg).sha256 not in (found.sha256, edited.sha256)


def test_imports_are_followed_transitively(tmp_path: Path) -> None:
    pkg = project(
        tmp_path,
        {
            "flow.py": "from PKG.a import x\n",
            "a.py": "from PKG.sub import b\nx = 1\n",
            "sub/__init__.py": "",
            "sub/b.py": "import importlib\nimportlib.import_module('PKG.c')\n",
            "c.py": "",
        },
    )
    found = identity(tmp_path, pkg)
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
    assert identity(tmp_path, pkg).sha256 != before


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
    pkg = project(tmp_path, {"flow.py": "from PKG import helpers\n", "helpers.py": helper})
    found = identity(tmp_path, pkg)
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
