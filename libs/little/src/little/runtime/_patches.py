"""Patches: letting a workflow branch on whether a run was recorded before a code change.

``if ctx.patched("retry-search"): <new code> else: <old code>`` (Temporal's ``patched``, DBOS's
``patch``). A run that reaches the call on its first pass records ``PatchMarked`` and takes
the new path; a run whose log shows it went past that point before the patch existed takes the
old path, so a resume on the new code replays what the old code recorded.

*Went past that point* is decided per scope (the run itself, a parallel branch, a step's
visit), from the state the execution claimed: a scope has recorded work this execution has not
reached yet (a step visit, a parallel group or a recorded value of the scope; in a step, a
session, a recorded value, a durable wait, a sub-run or an artifact of that visit; a wait
of a workflow scope too) exactly when the run's
earlier executions got further through the scope than this one has so far. Since a resume
re-executes the workflow from the top, memoized work first, that means the run passed the
patch point before, without recording the patch: the old code ran there. With nothing
recorded ahead, this execution is at the run's frontier in that scope, and new code runs.

A run replaying a recorded one (``replay_from``, ``simulate``) follows that run where its own
log says nothing: the recorded run's mark means the new path, its recorded work ahead of this
execution in the scope the old path. So new code with a patch still replays (and simulates
against) a golden run recorded before the patch, as Temporal's replayer does.

The answer is fixed per (scope, patch id) for the rest of the execution, so one patch guarding
several places of a scope answers alike, and a step retried in the same execution sees what
its first attempt saw. ``PatchMarked`` is deferred, like a recorded value: it reaches the log
with the run's next acked event. A crash before that loses it with everything after it, and
the resume, finding nothing recorded past the point, answers True again.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from little.errors import ConfigurationError
from little.events import PatchMarked
from little.replay import MaterializedRunState
from little.runtime._errors import PatchDeprecatedError
from little.runtime._writer import RunWriter

ScopeKey = tuple[str, str | None, int | None]
"""(workflow scope, step path, visit): a workflow scope has no step; a step's visit does."""


@dataclass(frozen=True)
class Reached:
    """How far this execution got through one scope, as the context asking tells it: what
    ``Patches`` compares with the work the log recorded there."""

    values: int
    """Recorded values of the scope reached (the next value's ordinal)."""
    waits: int
    """Durable waits of the scope reached."""
    calls: Mapping[str, int] = field(default_factory=dict)
    """A workflow scope's: step path -> visits reached, ``parallel:<path>`` per group."""
    sessions: Collection[str] = ()
    """A step visit's: the sessions it opened."""
    sub_runs: int = 0
    artifacts: int = 0


_VISIT_SUFFIX = re.compile(r"@(\d+)$")


@dataclass
class _Scope:
    """What the claimed state recorded in one scope, for ``Patches.ahead``."""

    steps: dict[str, int] = field(default_factory=dict)
    """Step path -> visits recorded (committed, plus the one in progress if any)."""
    groups: set[str] = field(default_factory=set)
    values: int = 0
    """Recorded values of the scope (ordinals 0 .. values-1)."""
    waits: int = 0
    """Durable waits of the scope (ordinals 0 .. waits-1)."""


@dataclass
class _StepVisit:
    """What the claimed state recorded in a step's visit that never committed."""

    sessions: set[str] = field(default_factory=set)
    values: int = 0
    waits: int = 0
    sub_runs: int = 0
    artifacts: int = 0


class _Recorded:
    """What one run's state recorded per scope: its patch marks, and (indexed on first use)
    the work ``Patches`` compares with what this execution reached."""

    def __init__(self, state: MaterializedRunState) -> None:
        self._state = state
        self.marks = {(m.scope, m.step_path, m.visit, m.patch_id) for m in state.patches}
        self._scopes: dict[str, _Scope] | None = None
        self._visits: dict[tuple[str, int], _StepVisit] | None = None

    def _index(self) -> tuple[dict[str, _Scope], dict[tuple[str, int], _StepVisit]]:
        if self._scopes is not None and self._visits is not None:
            return self._scopes, self._visits
        state = self._state
        scopes: dict[str, _Scope] = {"": _Scope()}
        for group in state.parallel_groups:
            for branch in group.branches:
                scopes.setdefault(f"{group.group_path}/{branch}/", _Scope())
        visits: dict[tuple[str, int], _StepVisit] = {}
        for step in state.steps:
            scope = "" if step.branch_path is None else f"{step.branch_path}/"
            in_progress = step.status != "completed"
            recorded = step.visits + (1 if in_progress else 0)
            scopes.setdefault(scope, _Scope()).steps[step.step_path] = recorded
            if in_progress:
                visits[(step.step_path, recorded)] = _StepVisit()
        for group in state.parallel_groups:
            # the enclosing scope is the longest one the group's path lies in (a path is the
            # scope's string and the path the workflow gave, so a group path with a '/' of its
            # own could be read in two ways: the deeper scope is taken)
            owner = max((s for s in scopes if group.group_path.startswith(s)), key=len)
            scopes[owner].groups.add(group.group_path)
        # what a recorded tool call made through its step (its place ``<step>#...``) is no
        # work of the step's sequences: a resume serving the tool's agent call whole skips it
        for value in state.values:
            where = value.step_path
            if where is not None and "#" in where:
                continue
            if where is None or where.endswith("/"):  # a workflow scope's value
                scope_values = scopes.setdefault(where or "", _Scope())
                scope_values.values = max(scope_values.values, value.ordinal + 1)
                continue
            path, visit = _values_scope(where)
            entry = visits.get((path, visit))
            if entry is not None:
                entry.values = max(entry.values, value.ordinal + 1)
        for wait in state.waits:  # placed as values are: a workflow scope's, or a step visit's
            where = wait.step_path
            if where is not None and "#" in where:  # a tool call's, or an approval's
                continue
            if where is None or where.endswith("/"):
                scope_waits = scopes.setdefault(where or "", _Scope())
                scope_waits.waits = max(scope_waits.waits, wait.ordinal + 1)
                continue
            path, visit = _values_scope(where)
            entry = visits.get((path, visit))
            if entry is not None:
                entry.waits = max(entry.waits, wait.ordinal + 1)
        nested = {  # sessions whose calls were made in a recorded tool call
            f"{c.node_phase}#{c.node_label}" for c in state.agent_calls if "#" in c.scope
        }
        for session in state.sessions:
            if session.step_path is None or session.compacted or session.session_id in nested:
                continue
            entry = visits.get((session.step_path, _session_visit(session.session_id)))
            if entry is not None:
                entry.sessions.add(session.session_id)
        tool_calls = (  # a sub-run a tool started with the call's id (``workflow_tool``)
            {(s.step_path, c.call_id) for s in state.sessions for c in s.tool_calls}
            if state.tool_scopes
            else set()
        )
        for sub in state.sub_runs:
            if (sub.call_id or "").startswith(f"{sub.step_path}#"):
                continue  # started in a recorded tool call of the step
            if (sub.step_path, sub.call_id) in tool_calls:
                continue
            entry = visits.get((sub.step_path or "", 1))
            if entry is not None:  # (first visits only: a sub-run records no visit)
                entry.sub_runs += 1
        for artifact in state.artifacts:
            entry = visits.get((artifact.step_path or "", 1))
            if entry is not None:  # (first visits only: an artifact records no visit)
                entry.artifacts += 1
        self._scopes, self._visits = scopes, visits
        return scopes, visits

    def ahead_of_workflow(self, scope: str, reached: Reached) -> bool:
        """Whether this state recorded work of workflow scope ``scope`` that the execution
        has not reached yet."""
        scopes, _ = self._index()
        recorded = scopes.get(scope)
        if recorded is None:
            return False
        calls = reached.calls
        if any(calls.get(path, 0) < n for path, n in recorded.steps.items()):
            return True
        if any(f"parallel:{path}" not in calls for path in recorded.groups):
            return True
        return reached.values < recorded.values or reached.waits < recorded.waits

    def ahead_of_step(self, step_path: str, visit: int, reached: Reached) -> bool:
        """The same for a step's visit: work of it recorded while it did not commit."""
        _, visits = self._index()
        recorded = visits.get((step_path, visit))
        if recorded is None:  # the visit never started before, or it committed
            return False
        return (
            bool(recorded.sessions - set(reached.sessions))
            or reached.values < recorded.values
            or reached.waits < recorded.waits
            or reached.sub_runs < recorded.sub_runs
            or reached.artifacts < recorded.artifacts
        )


class Patches:
    """The patch answers of one execution, decided against the state it claimed and, for a
    run replaying a recorded one (``replay_from``), against the recorded run's state too.
    A context asks with its scope's key (``ScopeKey``), the scope's name for a message, and
    how far the execution got through the scope (``Reached``)."""

    def __init__(
        self,
        state: MaterializedRunState,
        source: MaterializedRunState | None,
        writer: RunWriter,
    ) -> None:
        self._own = _Recorded(state)
        self._source = None if source is None else _Recorded(source)
        self._writer = writer
        self._answers: dict[tuple[ScopeKey, str], bool] = {}

    def patched(self, key: ScopeKey, reached: Reached, patch_id: str) -> bool:
        answer = self._answers.get((key, patch_id))
        if answer is None:
            answer = self._decide(key, reached, patch_id)
        return answer

    def deprecate(self, key: ScopeKey, where: str, reached: Reached, patch_id: str) -> None:
        """``where``: the scope as a message names it."""
        answer = self._answers.get((key, patch_id))
        if answer is None:
            answer = self._decide(key, reached, patch_id)
        if not answer:
            raise PatchDeprecatedError(self._writer.run_id, patch_id, where)

    def _decide(self, key: ScopeKey, reached: Reached, patch_id: str) -> bool:
        if not isinstance(patch_id, str) or not patch_id:
            raise ConfigurationError(
                f"run {self._writer.run_id}: a patch id must be a non-empty string, not "
                f"{patch_id!r}"
            )
        mark = (*key, patch_id)
        scope, step_path, visit = key
        # The run's own log first; where it says nothing (this execution is at the run's
        # frontier there), a replaying run follows the run it replays; else: new code.
        answer = True
        for recorded in (self._own, self._source):
            if recorded is None:
                continue
            if mark in recorded.marks:
                break  # the run passed here on the new path before
            ahead = (
                recorded.ahead_of_workflow(scope, reached)
                if step_path is None or visit is None
                else recorded.ahead_of_step(step_path, visit, reached)
            )
            if ahead:
                answer = False  # it went past here before the patch existed: the old path
                break
        if answer and mark not in self._own.marks:
            self._writer.defer(
                PatchMarked, step_path=step_path, patch_id=patch_id, scope=scope, visit=visit
            )
            self._own.marks.add(mark)
        self._answers[(key, patch_id)] = answer
        return answer


def _values_scope(where: str) -> tuple[str, int]:
    """A step's values scope (``path`` or ``path@visit``) as (step path, visit)."""
    match = _VISIT_SUFFIX.search(where)
    if match is None:
        return where, 1
    return where[: match.start()], int(match.group(1))


def _session_visit(session_id: str) -> int:
    """The visit of a session id (``<step>#<name>`` or ``<step>#<name>@<visit>``)."""
    match = _VISIT_SUFFIX.search(session_id)
    return 1 if match is None else int(match.group(1))
