"""The house has no import circle, and no module of ``little`` or ``little_services`` is over
800 lines.

Every ``.py`` file of ``libs/little/src/little`` and ``services/little_services`` is parsed
(nothing is imported), and every import in it counts: module level, inside a function, under
``if TYPE_CHECKING:``, in a ``try``. A relative import is resolved against the importing
module's package, and ``from pkg import name`` names the submodule ``pkg.name`` when one
exists, else ``pkg`` itself. Imports made by ``importlib.import_module`` are not followed.

Packages (decision): importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``
first, so an import of ``a.b.c`` is an edge to ``a.b.c`` and to each of those packages,
except the packages the importer itself lives in. Python has started those before the importer
ran, and they do not have to finish for it to import a sibling, so ``a/b/__init__.py``
re-exporting ``a.b._x`` while ``a.b._x`` imports ``a.b._y`` is no circle. A module that takes a
*name* from its own package (``from a.b import thing`` in ``a.b._x``) does need ``a/b/__init__``
to have run that far: that is an edge to ``a.b``, and a circle if the package imports it back.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {
    "little": REPO / "libs" / "little" / "src" / "little",
    "little_services": REPO / "services" / "little_services",
}
MAX_LINES = 800


def find_modules(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Dotted name -> file, for every module under the roots (a package is its __init__)."""
    found: dict[str, Path] = {}
    for top, directory in roots.items():
        for path in sorted(directory.rglob("*.py")):
            parts = [top, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_by(name: str, path: Path, modules: Iterable[str]) -> set[str]:
    """The modules of ``modules`` that ``name`` (at ``path``) runs by importing, at any depth."""
    known = set(modules)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    edges: set[str] = set()
    for target in targets:
        while target and target not in known:  # ``a.b.missing`` still runs ``a.b``
            target = target.rpartition(".")[0]
        if not target:
            continue  # not ours (the standard library, a dependency)
        edges.add(target)
        parts = target.split(".")
        for depth in range(1, len(parts)):
            ancestor = ".".join(parts[:depth])
            inside = name == ancestor or name.startswith(ancestor + ".")
            if ancestor in known and not inside:
                edges.add(ancestor)
    edges.discard(name)
    return edges


def import_graph(roots: Mapping[str, Path]) -> dict[str, set[str]]:
    modules = find_modules(roots)
    return {name: imported_by(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def cycles_in(graph: Mapping[str, set[str]], component: list[str]) -> list[list[str]]:
    """A shortest circle through each module of a component, each written once."""
    inside = set(component)
    chains: dict[tuple[str, ...], list[str]] = {}
    for start in component:
        came_from: dict[str, str] = {}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if start in graph[node]:  # no module imports itself: edges to self are dropped
                chain = [node]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                chain.reverse()
                first = chain.index(min(chain))
                key = tuple(chain[first:] + chain[:first])
                chains.setdefault(key, [*key, key[0]])
                break
            for child in sorted(graph[node] & inside):
                if child not in came_from and child != start:
                    came_from[child] = node
                    queue.append(child)
    return sorted(chains.values())


def circles(graph: Mapping[str, set[str]], allowed: frozenset[str] = frozenset()) -> list[str]:
    """Every circle, as ``a -> b -> a`` lines, but those whose modules are all ``allowed``."""
    lines = []
    for component in strongly_connected(graph):
        if set(component) <= allowed:
            continue
        lines.append(f"circle of {len(component)} modules: {', '.join(component)}")
        lines += ["  " + " -> ".join(chain) for chain in cycles_in(graph, component)]
    return lines


def test_the_house_has_no_import_circle() -> None:
    found = circles(import_graph(ROOTS))
    assert not found, "import circles:\n" + "\n".join(found)


def test_no_module_is_over_800_lines() -> None:
    long = {
        name: n
        for name, path in find_modules(ROOTS).items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_walk_sees_every_kind_of_import() -> None:
    """The real tree, read the way the circle test reads it: a walk that found no edge would
    find no circle either."""
    graph = import_graph(ROOTS)
    assert {"little.runtime", "little.log._records", "little_services.projection._open"} <= set(
        graph
    )
    assert "little.log._records" in graph["little.log._port"]  # module level
    assert "little.log.kafka_settings" in graph["little.log.kafka.client"]  # in a function
    # in a function, and the package a submodule import runs
    assert {"little.harness.adapters.openai", "little.harness.adapters"} <= graph[
        "little.harness._providers"
    ]
    assert "little_services.projection._open" in graph["little_services.projection._workers"]
    assert "little.log" in graph["little.settings"]  # a name from a package: its __init__
    assert "little" in graph["little_services.projection._setup"]  # ``from little import World``


def _tree(tmp_path: Path, files: Mapping[str, str]) -> dict[str, set[str]]:
    for relative, text in files.items():
        path = tmp_path / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph({"pkg": tmp_path / "pkg"})


def test_a_package_that_re_exports_its_submodules_is_no_circle(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "__init__.py": "from pkg._a import A\nfrom pkg.sub import B\n",
            "_a.py": "from pkg._b import helper\nA = helper\n",
            "_b.py": "def helper(): ...\n",
            "sub/__init__.py": "from ._c import B\n",
            "sub/_c.py": "from .. import _b\nfrom pkg.sub import _d\nB = 1\n",
            "sub/_d.py": "import pkg._a\n",  # from outside pkg: runs pkg._a, not pkg
        },
    )
    assert graph["pkg.sub._c"] == {"pkg._b", "pkg.sub._d"}
    assert graph["pkg.sub._d"] == {"pkg._a"}
    assert circles(graph) == []


def test_every_kind_of_import_can_close_a_circle(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "__init__.py": "",
            # a function-local import
            "a.py": "def f():\n    from pkg import b\n",
            "b.py": "import pkg.a\n",
            # a type-only import, relative
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n",
            "d.py": "from pkg.c import C\n",
            # a name from one's own package, whose __init__ imports this module
            "p/__init__.py": "from pkg.p._e import E\nVALUE = 1\n",
            "p/_e.py": "from pkg.p import VALUE\nE = VALUE\n",
            # a submodule of another package runs that package's __init__
            "q/__init__.py": "from pkg.r import R\n",
            "q/_f.py": "",
            "r.py": "import pkg.q._f\nR = 1\n",
        },
    )
    found = circles(graph)
    assert "  pkg.a -> pkg.b -> pkg.a" in found
    assert "  pkg.c -> pkg.d -> pkg.c" in found
    assert "  pkg.p -> pkg.p._e -> pkg.p" in found
    assert "  pkg.q -> pkg.r -> pkg.q" in found
    assert len([line for line in found if line.startswith("circle")]) == 4
    assert circles(graph, frozenset({"pkg.a", "pkg.b"})) == [
        line for line in found if "pkg.a" not in line
    ]
