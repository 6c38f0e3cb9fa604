"""Helpers for the crash tests: real child processes, their invocation logs, folded logs.

Every run in these tests executes in a child process (``python -m tests.crash.runner``) on an
embedded world in a fresh directory; crashes are real SIGKILLs from the runtime's fault
injection (``LITTLE_CRASH_AFTER_EVENT`` / ``LITTLE_CRASH_AFTER_CALL``) or from a workflow's own
crash hook. Nothing here touches the runtime in-process except to read the log afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from little.events import LoggedEvent, SubRunReserved
from little.replay import MaterializedRunState, fold_run
from tests.crash.runner import RESULT, WORLD_ENV, open_world
from tests.forkserver import ForkedChild, server_for

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 120.0
RESEARCH_INPUT = {"topic": "Kafka"}
_CRASH_ENV = (
    "LITTLE_CRASH_AFTER_EVENT",
    "LITTLE_CRASH_AFTER_CALL",
    "LITTLE_EXAMPLE_MODEL_LATENCY",
    "CRASH_TEST_KILL_AT_SQUARE",
    "CRASH_TEST_GATE",
)


@dataclass
class Child:
    """One finished child process."""

    pid: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def result(self) -> dict[str, Any]:
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(RESULT):
                parsed: dict[str, Any] = json.loads(line[len(RESULT) :])
                return parsed
        raise AssertionError(f"child {self.pid} printed no result:\n{self.describe()}")

    def describe(self) -> str:
        return (
            f"pid {self.pid} exited {self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n"
            f"--- stderr\n{self.stderr[-3000:]}"
        )


def child_env(calls_dir: Path, **extra: str | int | float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CRASH_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["LITTLE_EXAMPLE_CALLS_DIR"] = str(calls_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def spawn(
    data_dir: Path, run_id: str, mode: str, *args: str, env: dict[str, str]
) -> subprocess.Popen[str] | ForkedChild:
    """``python -m tests.crash.runner DATA_DIR RUN_ID MODE *ARGS``: a process of its own,
    forked from a server that has imported the runner's dependencies (``tests/forkserver.py``)."""
    argv = [str(data_dir), run_id, mode, *args]
    server = server_for("tests.crash.runner", env, REPO)
    if server is not None:
        return server.spawn("tests.crash.runner", argv, env, REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.crash.runner", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str] | ForkedChild) -> Child:
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode is not None
    return Child(proc.pid, proc.returncode, out, err)


def child(data_dir: Path, run_id: str, mode: str, *args: str, env: dict[str, str]) -> Child:
    return finish(spawn(data_dir, run_id, mode, *args, env=env))


T = TypeVar("T")
R = TypeVar("R")
WORKERS = 2
"""Crash points checked at once: each has its own directory and processes, and the machine
the suite is sized for has two cores."""


def each_crash_point(points: Iterable[T], check: Callable[[T], R]) -> list[R]:
    """``check(point)`` for every point, ``WORKERS`` at a time; the first failure is raised."""
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(check, points))


def start_args(workflow: str, input: Any) -> tuple[str, str, str]:
    return ("run", workflow, json.dumps(input))


@dataclass
class Scenario:
    """A fresh directory: the embedded world's data and the invocation logs."""

    root: Path
    kafka: str | None = None
    """``bootstrap|topic_prefix``: run on Kafka (fresh topics) instead of the embedded world."""
    data_dir: Path = field(init=False)
    calls_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir = self.root / "data"
        self.calls_dir = self.root / "calls"
        self.root.mkdir(parents=True, exist_ok=True)

    def env(self, **extra: str | int | float) -> dict[str, str]:
        if self.kafka:
            extra = {WORLD_ENV: self.kafka, **extra}
        return child_env(self.calls_dir, **extra)

    def start(self, run_id: str, workflow: str, input: Any, **extra: str | int | float) -> Child:
        return child(self.data_dir, run_id, *start_args(workflow, input), env=self.env(**extra))

    def resume(self, run_id: str, **extra: str | int | float) -> Child:
        return child(self.data_dir, run_id, "resume", env=self.env(**extra))

    def calls(self, kind: str) -> list[dict[str, Any]]:
        """The real invocations logged to ``{kind}.jsonl`` (model, tools, steps)."""
        path = self.calls_dir / f"{kind}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def events(self, run_id: str) -> list[LoggedEvent]:
        with open_world(str(self.data_dir), self.kafka) as world:
            return list(world.read_run(run_id))

    def fold(self, run_id: str) -> MaterializedRunState:
        with open_world(str(self.data_dir), self.kafka) as world:
            state, _, _ = fold_run(world, run_id, use_snapshot=False)
            return state

    def run_tree(self, run_id: str) -> dict[str, MaterializedRunState]:
        """The run and every sub-run reserved under it (recursively), folded, by run id."""
        states: dict[str, MaterializedRunState] = {}
        pending = [run_id]
        while pending:
            rid = pending.pop()
            state = self.fold(rid)
            states[rid] = state
            pending.extend(s.sub_run_id for s in state.sub_runs if s.sub_run_id not in states)
        return states


def counts(entries: list[dict[str, Any]], key: str) -> Counter[Any]:
    return Counter(e[key] for e in entries)


def output_of(state: MaterializedRunState) -> Any:
    assert state.output_ref is None, "test outputs are small and inline"
    return None if state.output_json is None else json.loads(state.output_json)


def essence(states: dict[str, MaterializedRunState], run_id: str) -> dict[str, Any]:
    """What must not depend on where a run crashed: outcomes, not ids, epochs or timestamps."""
    s = states[run_id]
    return {
        "status": s.status,
        "error": s.error,
        "workflow": (s.workflow, s.workflow_version),
        "input": s.input_json,
        "output": output_of(s),
        "steps": {
            st.step_path: {
                "status": st.status,
                "output": st.output_json,
                "output_ref": None if st.output_ref is None else st.output_ref.sha256,
                "visits": st.visits,
                "visit_outputs": [(v.visit, v.output_json) for v in st.visit_outputs],
                "usage": _tokens(st.usage),
            }
            for st in s.steps
        },
        "sessions": {
            se.session_id: {
                "status": se.status,
                "turns": se.turn_count,
                "tool_calls": se.tool_call_count,
                "output": se.output_json,
            }
            for se in s.sessions
        },
        "parallel_groups": [(g.group_path, g.branches) for g in s.parallel_groups],
        "values": [(v.kind, v.ordinal, v.step_path) for v in s.values],
        "usage": _tokens(s.usage),
        "sub_runs": {
            sub.call_id: {
                "sub_run_id": sub.sub_run_id,
                "workflow": sub.workflow,
                "input": sub.input_json,
                "step_path": sub.step_path,
                "run": essence(states, sub.sub_run_id),
            }
            for sub in s.sub_runs
        },
    }


def _tokens(u: Any) -> tuple[int, int, int, int, int]:
    return (u.calls, u.input_tokens, u.output_tokens, u.cached_input_tokens, u.reasoning_tokens)


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Readable differences between two nested values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                out.append(f"{path}/{key}: only in {'second' if key not in a else 'first'}")
            else:
                out.extend(diff(a[key], b[key], f"{path}/{key}"))
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def check_integrity(states: dict[str, MaterializedRunState]) -> None:
    """Every run folded (seq contiguous, else the fold raised) and no zombie wrote."""
    for rid, s in states.items():
        assert s.fenced_events == 0, f"{rid}: {s.fenced_events} fenced event(s)"
        assert s.rejected_claims == 0, f"{rid}: {s.rejected_claims} rejected claim(s)"
        assert s.last_seq == s.events_applied - 1, f"{rid}: seq not contiguous"


def process_order(sc: Scenario, run_id: str) -> list[tuple[str, Any]]:
    """Every event one uncrashed process appended for ``run_id``, in the order it appended
    them (claims included), as ``(run_id, event)``: a sub-run runs to its end right after its
    SubRunReserved, so its events follow that reservation. This is what the crash hook's
    ``LITTLE_CRASH_AFTER_EVENT`` counts."""
    out: list[tuple[str, Any]] = []
    for logged in sc.events(run_id):
        out.append((run_id, logged.event))
        if isinstance(logged.event, SubRunReserved):
            out.extend(process_order(sc, logged.event.sub_run_id))
    return out
