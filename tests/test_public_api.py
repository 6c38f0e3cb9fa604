"""The public API is curated: __all__ lists exactly what the packages export."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import little
import little_services
from tests.paths import REPO


def _public_modules() -> list[str]:
    """Every module of the library and the services whose dotted name has no private part."""
    found = []
    for root in (little, little_services):
        found.append(root.__name__)
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                found.append(info.name)
    return found


PACKAGES = _public_modules()


def test_the_public_modules_are_found() -> None:
    assert {"little.runtime", "little.harness", "little.replay", "little.commands"} <= set(PACKAGES)
    assert {"little.settings", "little.cli", "little_services.projection"} <= set(PACKAGES)
    assert "little.testing" in PACKAGES


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol} is in __all__ but missing"


def _public_members(module: object) -> set[str]:
    """What a module offers: public names it defines at top level (def, class, assignment),
    and those it takes from its own private modules (``little.log`` from ``little.log._port``).
    A name it imports from elsewhere (``Path``, another package's error) is not its own."""
    name = module.__name__  # type: ignore[attr-defined]
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.module:
            own = node.module.startswith(name + ".") and node.module[len(name) + 1 :].startswith(
                "_"
            )
            if own:
                found.update(alias.asname or alias.name for alias in node.names)
    return {n for n in found if not n.startswith("_")}


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_the_public_members(name: str) -> None:
    module = importlib.import_module(name)
    assert set(module.__all__) >= _public_members(module), sorted(
        _public_members(module) - set(module.__all__)
    )


def test_importing_little_does_not_import_the_kafka_client() -> None:
    import subprocess
    import sys

    code = "import sys, little, little.events, little.log; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_little_does_not_import_the_test_suites_or_pytest() -> None:
    """``little.testing`` needs pytest, a test-time dependency: only tests import it."""
    import subprocess
    import sys

    code = (
        "import sys, little, little.events, little.log, little.runtime, little.harness; "
        "print('little.testing' in sys.modules, 'pytest' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def _a_fresh_run(tmp_path: Path, *prints: str) -> list[str]:
    """What ``prints`` print (one line each) in a fresh process that imports little and the
    runtime, opens the embedded world at ``tmp_path`` and runs a workflow of one step: what a
    worker resuming a run does."""
    import subprocess
    import sys

    code = "\n".join(
        [
            "import asyncio, sys",
            "import little",
            "from little.events import EVENT_TYPES",
            "from little.runtime import run, workflow",
            "async def one(step, _):",
            "    return 'ok'",
            "@workflow('lazy-imports', version='1')",
            "async def flow(ctx, input):",
            "    return await ctx.step('one', one, None)",
            f"with little.local_world({str(tmp_path)!r}) as world:",
            "    result = asyncio.run(run(world, flow, None))",
            "assert result.status == 'completed', result",
            *(f"print({p})" for p in prints),
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()


def test_a_run_on_the_embedded_world_imports_neither_yaml_nor_the_trace_propagators(
    tmp_path: Path,
) -> None:
    """What a resume (a fresh process: import, open the world, run) does not use is not
    imported: the topics file's YAML parser (the Kafka provisioning's) and OpenTelemetry's
    propagators (whose import loads entry points; needed only to carry a span's context)."""
    printed = _a_fresh_run(
        tmp_path, "'yaml' in sys.modules, 'opentelemetry.propagate' in sys.modules"
    )
    assert printed == ["False False"]


LAZY_ON_A_RESUME = (
    "little.replay_modes",
    "little.runtime._simulate",
    "little.golden",
    "little.runtime._host",
    "little.runtime._outer_loop",
    "little.runtime._client",
    "little.runtime._loading",
    "little.runtime._workflow_tool",
    "little.runtime._ending",
    "little.cli",
    "little.report",
    "little.integrations",
    "little.settings",
    "little_services",
    "yaml",
    "confluent_kafka",
    "opentelemetry",
)
"""What a fresh process resuming a run on the embedded world does not use, so does not import
(issue 29, recovery: ``bench/lone_run.py --recovery`` measures what it costs)."""


def test_a_fresh_process_running_a_workflow_imports_only_what_it_uses(tmp_path: Path) -> None:
    """A worker's process (``import little``, the runtime, the embedded world opened, a run of
    steps) imports none of the modules above, and builds the validators of none of the event
    models it did not decode or validate: each model's is built on first use."""
    imported, built = _a_fresh_run(
        tmp_path,
        f"sorted(m for m in {LAZY_ON_A_RESUME!r} if m in sys.modules)",
        "sorted(t for t, cls in EVENT_TYPES.items() if cls.__pydantic_complete__)",
    )
    assert imported == "[]"
    assert set(ast.literal_eval(built)) <= {"RunStarted", "RunClaimed", "RunCompleted"}


def test_the_names_exported_on_first_use_are_the_modules_own() -> None:
    """``from little import PartialReplay`` and ``from little.runtime import simulate`` give
    the objects their modules define, imported then; an unknown name is an AttributeError."""
    import little.replay_modes
    import little.runtime
    import little.runtime._host
    import little.runtime._simulate

    assert little.PartialReplay is little.replay_modes.PartialReplay
    assert little.runtime.simulate is little.runtime._simulate.simulate
    assert little.runtime.follow is little.runtime._host.follow
    assert {"PartialReplay", "replay_in_mode"} <= set(dir(little))
    assert {"simulate", "follow", "run"} <= set(dir(little.runtime))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        little.runtime.nothing_here  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        little.nothing_here  # noqa: B018


def test_the_test_suites_do_not_import_the_kafka_client() -> None:
    """A third-party backend runs the conformance suites without confluent-kafka's backend."""
    import subprocess
    import sys

    code = "import sys, little.testing; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _imports(package_dir: Path) -> dict[str, set[str]]:
    """Every module a package's files import (at any depth: functions, TYPE_CHECKING)."""
    found: dict[str, set[str]] = {}
    for path in package_dir.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(package_dir))] = names
    return found


def test_the_harness_does_not_import_the_runtime() -> None:
    """Layering: the runtime drives agent sessions on the harness's models and tools; the
    harness never reaches back (no import cycle, not even a deferred one)."""
    import little.harness

    harness_dir = Path(little.harness.__file__).parent
    back = {
        module: sorted(n for n in names if n == "little.runtime" or n.startswith("little.runtime."))
        for module, names in _imports(harness_dir).items()
    }
    assert {m: n for m, n in back.items() if n} == {}


def _private_imports_across_packages(root: Path) -> list[str]:
    """``from a.b._c import d`` / ``from a.b import _d`` where the importer lives outside the
    package that owns the private name (``a.b``)."""
    found = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.level == 0, f"{path}: relative import of {node.module}"
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                if not name.startswith(("little.", "little_services.")):
                    continue
                segments = name.split(".")
                for i, segment in enumerate(segments):
                    if segment.startswith("_") and not segment.startswith("__"):
                        owner = ".".join(segments[:i])
                        if package != owner and not package.startswith(owner + "."):
                            found.append(f"{path}: {name}")
                        break
    return found


def test_no_package_imports_another_packages_private_names() -> None:
    """The library and the services use each other's public names only (a private module
    or name belongs to its package: ``little.log.kafka._log`` to ``little.log.kafka``)."""
    found = _private_imports_across_packages(REPO / "libs" / "little" / "src")
    found += _private_imports_across_packages(REPO / "services")
    assert found == []


def _unexported_imports(root: Path) -> list[str]:
    """``from little.x import y`` where ``y`` is neither in ``little.x.__all__`` nor a
    submodule, and the importer lives outside ``little.x``."""
    found = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        importer = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            target = node.module
            if not target.startswith(("little", "little_services")) or any(
                part.startswith("_") for part in target.split(".")
            ):
                continue
            if importer == target or importer.startswith(target + "."):
                continue
            module = importlib.import_module(target)
            for alias in node.names:
                if alias.name in module.__all__:
                    continue
                try:
                    importlib.import_module(f"{target}.{alias.name}")
                except ModuleNotFoundError:
                    found.append(f"{path.relative_to(root)}: from {target} import {alias.name}")
    return found


def test_the_library_the_services_and_the_cli_import_only_exported_names() -> None:
    """What one package takes from another is in that package's __all__: its public API,
    not whatever happens to be bound in its namespace."""
    found = _unexported_imports(REPO / "libs" / "little" / "src")
    found += _unexported_imports(REPO / "services")
    assert found == []


def test_the_import_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    pkg = tmp_path / "little_services" / "thing"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from little.log import EventLog\n"  # exported
        "from little.log import kafka\n"  # a submodule
        "from little.runtime import lookup, REGISTRY_OF_SORTS\n"  # not exported
        "from little.log._port import CursorStore\n"  # another package's private module
    )
    assert _unexported_imports(tmp_path) == [
        "little_services/thing/__init__.py: from little.runtime import REGISTRY_OF_SORTS"
    ]
    assert _private_imports_across_packages(tmp_path) == [
        f"{pkg / '__init__.py'}: little.log._port.CursorStore"
    ]
