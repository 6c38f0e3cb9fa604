"""The public API is curated: __all__ lists exactly what the packages export."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = [
    "little",
    "little.events",
    "little.log",
    "little.errors",
    "little.harness",
    "little.runtime",
    "little.log.kafka",
    "little.testing",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol} is in __all__ but missing"


@pytest.mark.parametrize("name", PACKAGES)
def test_no_public_name_outside_all(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and not (getattr(v, "__module__", name) or name).startswith(
            ("typing", "collections", "__future__")
        )
        and not isinstance(v, type(importlib))
        and n != "annotations"
    }
    assert public <= set(module.__all__), sorted(public - set(module.__all__))


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
    repo = Path(__file__).resolve().parents[2]
    found = _private_imports_across_packages(repo / "libs" / "little" / "src")
    found += _private_imports_across_packages(repo / "services")
    assert found == []
