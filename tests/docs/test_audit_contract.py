"""The audit contract names every event written outside a run's seq chain.

An audit consumer checks that a run's seqs are contiguous from the docs alone (the README's
audit section and each schema's ``seq`` doc): an event written with ``seq`` -1 that the docs
do not name is a gap to it. The set of such event types is read from the code (the models
that default ``seq`` to -1, and every constructor call in the writers that passes ``seq=-1``),
never listed here, so a new one fails this test until the docs name it.
"""

from __future__ import annotations

import ast
import json
import re

from little.events import EVENT_TYPES
from tests.paths import REPO

SOURCES = [REPO / "libs" / "little" / "src" / "little", REPO / "services" / "little_services"]


def _is_minus_one(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 1
    )


def written_outside_the_chain() -> set[str]:
    """Event types the code writes with seq -1: a model's default, or ``Type(seq=-1, ...)``."""
    by_class = {cls.__name__: event_type for event_type, cls in EVENT_TYPES.items()}
    found = {t for t, cls in EVENT_TYPES.items() if cls.model_fields["seq"].default == -1}
    for root in SOURCES:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else None
                name = node.func.id if isinstance(node.func, ast.Name) else name
                if name in by_class and any(
                    k.arg == "seq" and _is_minus_one(k.value) for k in node.keywords
                ):
                    found.add(by_class[name])
    return found


def named(text: str) -> set[str]:
    return {t for t in EVENT_TYPES if re.search(rf"(?<![\w.]){re.escape(t)}(?![\w.])", text)}


def test_the_code_writes_some_event_outside_the_chain() -> None:
    # the claim and the signal today; an empty set would make the tests below check nothing
    assert written_outside_the_chain()


def test_every_schemas_seq_doc_names_exactly_the_events_outside_the_chain() -> None:
    outside = written_outside_the_chain()
    files = sorted((REPO / "schemas").glob("*/v*.avsc"))
    checked = 0
    for path in files:
        schema = json.loads(path.read_text("utf-8"))
        if schema.get("little.type") not in EVENT_TYPES:
            continue  # snapshots and commands are no run events
        (seq,) = [f for f in schema["fields"] if f["name"] == "seq"]
        assert "-1" in seq["doc"], f"{path}: the seq doc does not say which value is outside"
        assert named(seq["doc"]) == outside, (
            f"{path.relative_to(REPO)}: the seq doc names {sorted(named(seq['doc']))}, the code "
            f"writes {sorted(outside)} with seq -1"
        )
        checked += 1
    assert checked >= len(EVENT_TYPES)


def test_the_readme_audit_section_names_every_event_outside_the_chain() -> None:
    text = (REPO / "README.md").read_text("utf-8")
    start = text.index("**Reading the run topic as an audit consumer**")
    section = text[start : text.index("*Computing the fingerprint*", start)]
    assert "-1" in section
    missing = written_outside_the_chain() - named(section)
    assert not missing, f"the README's audit section does not name {sorted(missing)} (seq -1)"


def test_the_architecture_map_names_every_event_outside_the_chain() -> None:
    text = (REPO / "docs" / "architecture.md").read_text("utf-8")
    (line,) = [p for p in text.split("\n* ") if "seq = -1" in p]
    missing = written_outside_the_chain() - named(line)
    assert not missing, f"docs/architecture.md's envelope note does not name {sorted(missing)}"
