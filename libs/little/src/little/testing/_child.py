"""The child processes of the conformance suites: reopen a backend from its spec, write, and
die without closing, so the parent can check that what was acknowledged is durable.

Run as ``python -m little.testing._child VERB SUITE SPEC ARGS...``: ``SUITE`` is the
``module:qualname`` of the conformance subclass (its hooks open the backend), ``SPEC`` the JSON
the subclass's ``backend_spec`` fixture returned.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from typing import Any

from little.log import OutgoingRecord

BackendSpec = dict[str, Any]
"""One test's fresh storage, as JSON (child processes get it on their command line)."""

CHILD_TIMEOUT = 120.0


def missing_hook(suite: object, hook: str) -> NotImplementedError:
    """The error of a suite's hook its subclass did not supply."""
    return NotImplementedError(
        f"{type(suite).__qualname__} must override {hook} (see little.testing)"
    )


def suite_name(suite: object) -> str:
    """``module:qualname`` of a suite's class, which the child imports."""
    cls = type(suite)
    return f"{cls.__module__}:{cls.__qualname__}"


def run_child(name: str, verb: str, spec: BackendSpec, *args: str) -> str:
    """Run one child to its end (it exits without closing the backend); its last line."""
    # The child imports the suite's module as this process did: same interpreter, same path.
    path = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-m", "little.testing._child", verb, name, json.dumps(spec), *args],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(
            f"child {verb} of {name} exited with {out.returncode}:\n{out.stderr[-4000:]}"
        )
    lines = out.stdout.strip().splitlines()
    if not lines:
        raise AssertionError(f"child {verb} of {name} printed nothing:\n{out.stderr[-4000:]}")
    return lines[-1]


def _resolve(name: str) -> Any:
    module_name, _, qualname = name.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def main(argv: list[str]) -> None:
    verb, name, spec_json, *rest = argv
    suite = _resolve(name)()
    spec = json.loads(spec_json)
    if verb == "append":  # RUN_ID COUNT: records p0..p{COUNT-1}; prints their positions
        run_id, count = rest
        log = suite.open_log(spec)
        records = [OutgoingRecord(f"p{i}".encode()) for i in range(int(count))]
        positions = log.append(run_id, records)
        print(json.dumps([[p.partition, p.offset] for p in positions]), flush=True)
    elif verb == "put":  # RUN_ID TEXT: the run's snapshot is TEXT's UTF-8 bytes
        run_id, text = rest
        store = suite.open_store(spec)
        store.put(run_id, text.encode())
        print("put", flush=True)
    else:
        raise SystemExit(f"unknown verb {verb!r}")
    os._exit(0)  # no close, no flush: what was acknowledged must already be durable


if __name__ == "__main__":
    main(sys.argv[1:])
