"""What a workflow sees: steps, parallel groups, decisions, sub-runs, recorded values.

Every call is memoized in the run's log. On resume the context holds the state replayed
before the execution began: a step with a committed StepCompleted returns its output without
running; a recorded value returns what it returned the first time.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random as _random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel

from little import tracing
from little._canonical import canonical_json
from little.errors import ConfigurationError
from little.events import (
    ArtifactCommitted,
    ArtifactRef,
    DecisionRecorded,
    ParallelBranchScheduled,
    StepCompleted,
    StepFailed,
    StepStarted,
    SubRunReserved,
    ValueRecorded,
)
from little.logging_setup import get_logger
from little.replay import (
    MaterializedRunState,
    assert_completed_parallel_replay_matches_input,
    branch_set_hash,
)
from little.runtime._errors import (
    ENDS_THE_RUN,
    LoopLimitError,
    SimulationDivergedError,
    StepFailedError,
)
from little.runtime._groups import _Group, drain
from little.runtime._output import DEFAULT_OUTPUT_RETRIES, OutputType
from little.runtime._panels import run_panel
from little.runtime._patches import Reached, ScopeKey
from little.runtime._recording import Recorder, ToolScope, inside_tool
from little.runtime._registry import lookup
from little.runtime._session import AgentSession, ApprovalPolicy
from little.runtime._tool_calls import DEFAULT_MAX_PARALLEL_TOOLS
from little.runtime._waits import ScopeWaits, seconds, utcnow

if TYPE_CHECKING:
    from little.harness import Content, McpServer, Model, Tool
    from little.runtime._compaction import CompactionPolicy
    from little.runtime._execution import Execution

log = get_logger("little.runtime")

M = TypeVar("M", bound=BaseModel)
A = TypeVar("A")
"""A structured output's pydantic model (``step.session(..., output=M)``)."""


@dataclass(frozen=True)
class Retry:
    """Step retry policy: attempts in all, and the wait before each retry (doubling)."""

    max_attempts: int = 1
    backoff: float = 0.0


class _RecordedValues:
    """Clock, random and uuid values of one scope (run, branch or step), recorded in order.

    Keyed by (scope, ordinal within the scope), so concurrent branches cannot swap values. In
    a run replaying a recorded one, a value this run has not recorded yet is the source run's
    value at the same place, while the replay's prefix holds; otherwise it is produced fresh,
    and that ends the prefix (``AgentCalls.value``).
    """

    def __init__(self, execution: Execution, scope: str | None, workflow_scope: str) -> None:
        self._x = execution
        self._scope = scope
        self._workflow_scope = workflow_scope
        self._ordinal = 0

    def get(self, kind: str, produce: Callable[[], Any]) -> Any:
        self._x.integrity.check()
        ordinal = self._ordinal
        self._ordinal += 1
        known = self._x.values.get((self._scope, ordinal))
        if known is not None:  # recorded by this run: before a crash, or by an earlier attempt
            if known.kind != kind:
                raise ConfigurationError(
                    f"run {self._x.run_id}: recorded value {ordinal} of "
                    f"{self._scope or 'the run'} is a {known.kind}, but the workflow now asks "
                    f"for a {kind}: the code changed"
                )
            return json.loads(known.value_json)
        recorded = self._x.agent_calls.value(self._workflow_scope, (self._scope, ordinal), kind)
        if recorded is not None:
            value_json, value = recorded.value_json, json.loads(recorded.value_json)
        else:
            value = produce()
            value_json = canonical_json(value)
        # Deferred: it reaches the log with the run's next acked event, ahead of anything that
        # could depend on it; a crash before that loses it with everything that saw it.
        event = self._x.writer.defer(
            ValueRecorded,
            step_path=self._scope,
            kind=kind,
            ordinal=ordinal,
            value_json=value_json,
            source_run_id=None if recorded is None else self._x.agent_calls.source_run_id,
        )
        self._x.values[(self._scope, ordinal)] = event
        return value


class _ValuesMixin:
    _x: Execution
    _values: _RecordedValues

    def now(self) -> datetime:
        """The current time, recorded: a resume sees the same instant."""
        micros = self._values_here().get("clock", lambda: time.time_ns() // 1000)
        return datetime.fromtimestamp(micros / 1_000_000, UTC)

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return float(self._values_here().get("random", _random.random))

    def uuid4(self) -> uuid.UUID:
        """A random UUID, recorded."""
        return uuid.UUID(self._values_here().get("uuid", lambda: str(uuid.uuid4())))

    def _values_here(self) -> _RecordedValues:
        """The values sequence a value asked for now takes (the scope's own)."""
        return self._values

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new path of the code change ``patch_id``:
        ``if ctx.patched("retry-search"): <new code> else: <old code>``.

        True for a run that reaches this point for the first time (recorded with
        ``PatchMarked``, so every resume answers True again); False for a run whose log shows
        it went past this point before the patch existed (it recorded work of this scope
        that this execution has not reached yet), so a resume on the new code takes the old
        path the run was recorded on. The same answer for the rest of the execution, per
        patch id and scope (docs/architecture.md, "Changing workflow code")."""
        key, _, reached = self._patch_scope()
        return self._x.patches.patched(key, reached, patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """The code change ``patch_id`` once every run that took its old path has ended: the
        code keeps only the new path. A run reaching it records the patch as ``patched``
        would (so code that still asks ``patched(patch_id)`` answers True for it); a run
        that went past this point on the old path fails with ``PatchDeprecatedError``."""
        key, where, reached = self._patch_scope()
        self._x.patches.deprecate(key, where, reached, patch_id)

    def _patch_scope(self) -> tuple[ScopeKey, str, Reached]:
        """This scope's key for ``Patches``, its name in a message, and how far this
        execution got through it."""
        raise NotImplementedError

    async def flush(self) -> None:
        """Make this run's deferred records durable now (recorded values above all).

        Recorded values reach the log with the run's next acked event, which every recorded
        call writes before it acts; await this before handing a value to the outside world
        some other way (an HTTP request made in a step's own code, say)."""
        await self._x.writer.flush()


class _WaitsMixin:
    _x: Execution
    _waits: ScopeWaits

    def _check_group(self) -> None:
        raise NotImplementedError

    def _waits_here(self) -> ScopeWaits:
        """The waits sequence a wait started now takes (the scope's own)."""
        return self._waits

    async def sleep(self, duration: float | timedelta) -> None:
        """Wait ``duration`` (seconds or a timedelta), durably: the due time is recorded
        before the wait, so a resume waits only for what is left, and the run holds no
        process meanwhile (it is ``waiting``; whoever wakes it executes it at its due time)."""
        due = utcnow() + timedelta(seconds=seconds(duration, "sleep's duration"))
        await self._timer(due)

    async def sleep_until(self, when: datetime) -> None:
        """Wait until ``when`` (timezone-aware), durably; see ``sleep``."""
        if when.tzinfo is None:
            raise ConfigurationError(f"sleep_until needs a timezone-aware datetime, not {when}")
        await self._timer(when.astimezone(UTC))

    async def _timer(self, due: datetime) -> None:
        self._x.integrity.check()
        self._check_group()
        with self._x.integrity:  # a simulated wait that does not match latches
            await self._waits_here().wait("timer", "sleep", due)

    async def wait_for_signal(
        self,
        name: str,
        *,
        timeout: float | timedelta | None = None,  # noqa: ASYNC109 (durable, not asyncio's)
    ) -> Any:
        """Wait for the signal ``name`` (``little signal <run> <name> --data JSON``) and return
        its JSON payload; ``WaitTimeoutError`` if none is sent within ``timeout``. A signal sent
        before the wait is kept for it; the run holds no process while it waits. The signal is
        recorded as taken: a resume or a replay returns the same payload without its sender."""
        if not name or name.startswith("approval:"):
            raise ConfigurationError(f"{name!r} is not a signal name a workflow can wait for")
        self._x.integrity.check()
        self._check_group()
        with self._x.integrity:  # a simulated wait that does not match latches
            waits = self._waits_here()
            _, payload = await waits.wait(
                "signal", name, waits.due(timeout, "wait_for_signal's timeout")
            )
        return payload


class WorkflowContext(_ValuesMixin, _WaitsMixin):
    """The durable API of one scope of a run (the run itself or a parallel branch)."""

    def __init__(
        self,
        execution: Execution,
        scope: str = "",
        branch_path: str | None = None,
        group: _Group | None = None,
    ):
        self._x = execution
        self._scope = scope
        self._branch_path = branch_path
        self._group = group
        self._values = _RecordedValues(execution, scope or None, scope)
        self._waits = ScopeWaits(execution.waits, scope or None)
        self._calls: dict[str, int] = {}

    @property
    def run_id(self) -> str:
        return self._x.run_id

    @property
    def replayed(self) -> MaterializedRunState:
        """The run's state as replayed when this execution began."""
        return self._x.replayed

    def _patch_scope(self) -> tuple[ScopeKey, str, Reached]:
        scope = self._scope
        reached = Reached(self._values._ordinal, self._waits.ordinal, calls=self._calls)
        return (scope, None, None), f"branch {scope.rstrip('/')}" if scope else "the run", reached

    def _path(self, path: str) -> str:
        if not path or "#" in path:
            raise ConfigurationError(f"step path {path!r} must be non-empty and contain no '#'")
        return f"{self._scope}{path}"

    def _visit(self, path: str, max_visits: int) -> int:
        visit = self._calls.get(path, 0) + 1
        if visit > max_visits:
            raise LoopLimitError(
                f"run {self.run_id}: step {path} visited {visit} times, max_visits={max_visits}"
            )
        self._calls[path] = visit
        return visit

    # -- steps ---------------------------------------------------------------------------

    async def step(
        self,
        path: str,
        fn: Callable[..., Any],
        *args: Any,
        max_visits: int = 1,
        retry: Retry | None = None,
    ) -> Any:
        """Run ``fn(step_ctx, *args)`` once per visit, durably; return its output.

        A visit with a committed StepCompleted returns the recorded output and does not run.
        After an integrity error (``Execution.integrity``) every step refuses with it.
        """
        self._x.integrity.check()
        full = self._path(path)
        visit = self._visit(full, max_visits)
        recorded = await self._recorded_visit(full, visit, max_visits)
        attributes = {
            "little.run_id": self._x.run_id,
            "little.step": full,
            "little.visit": visit,
            "little.epoch": self._x.writer.epoch,
            "little.served_from_log": recorded is not None,
        }
        with tracing.span(f"little.step {full}", attributes) as span:
            if recorded is not None:  # committed before: its output, from the log
                return recorded[0]
            return await self._run_step(path, full, visit, max_visits, fn, args, retry, span)

    async def _run_step(
        self,
        path: str,
        full: str,
        visit: int,
        max_visits: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        retry: Retry | None,
        span: Any,
    ) -> Any:
        self._check_group()
        policy = retry or Retry()
        attempt = self._attempts_before(full)
        while True:
            attempt += 1
            # Deferred: it reaches the log with the step's first acked event (its first
            # write-ahead record, or its StepCompleted). Only StepCompleted memoizes a step.
            self._x.writer.defer(
                StepStarted,
                step_path=full,
                step_id=path.rsplit("/", 1)[-1],
                attempt=attempt,
                visit=visit,
                max_visits=max_visits,
                branch_path=self._branch_path,
            )
            sctx = StepContext(self, full, visit)
            tracing.set_attributes(span, little_attempt=attempt)
            try:
                result = fn(sctx, *args)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:  # (an interrupt is no Exception: it goes up as it is)
                if isinstance(exc, ENDS_THE_RUN):
                    raise  # never the step's failure: every attempt would meet it again
                retrying = attempt < policy.max_attempts
                await self._x.writer.emit(
                    StepFailed,
                    step_path=full,
                    step_id=path.rsplit("/", 1)[-1],
                    attempt=attempt,
                    visit=visit,
                    branch_path=self._branch_path,
                    error_type=type(exc).__name__,
                    message=str(exc),
                    retryable=retrying,
                    will_retry=retrying,
                )
                if not retrying:
                    tracing.set_error(span, type(exc).__name__)  # the cause, not the wrapper
                    raise StepFailedError(full, exc) from exc
                await asyncio.sleep(policy.backoff * 2 ** (attempt - 1))
                continue
            output_json, output_ref = await self._x.store_json(result)
            await self._x.writer.emit(
                StepCompleted,
                step_path=full,
                step_id=path.rsplit("/", 1)[-1],
                attempt=attempt,
                visit=visit,
                branch_path=self._branch_path,
                output_json=output_json,
                output_ref=output_ref,
                artifact_refs=tuple(sctx.artifact_refs),
            )
            return result

    def _check_group(self) -> None:
        if self._group is not None:
            self._group.check(self._x.run_id)

    def _attempts_before(self, full: str) -> int:
        step = self.replayed.step(full)
        return 0 if step is None or step.status == "completed" else step.attempts

    async def _recorded_visit(self, full: str, visit: int, max_visits: int) -> tuple[Any] | None:
        step = self.replayed.step(full)
        if step is None or step.visits < visit:
            return None
        if max_visits > 1:
            for v in step.visit_outputs:
                if v.visit == visit:
                    return (await self._x.load_json(v.output_json, v.output_ref),)
            return None
        return (await self._x.load_json(step.output_json, step.output_ref),)

    async def decide(
        self, path: str, fn: Callable[..., Any], *args: Any, max_visits: int = 1
    ) -> str | None:
        """A decision step: ``fn`` returns the next step's name (or None to stop).

        The target is recorded (DecisionRecorded) before the step commits, so a resume goes to
        the decided target without deciding again, also when the process died between the
        two (``fn`` is not called again for that visit).
        """

        async def decision(sctx: StepContext, *a: Any) -> str | None:
            recorded = self._x.replayed.step(sctx.step_path)
            if (
                recorded is not None
                and recorded.decision_visit == sctx.visit
                and recorded.visits < sctx.visit
            ):
                # decided before a crash, not committed yet: the log's answer, not a new one
                return recorded.decision_target
            target = fn(sctx, *a)
            if inspect.isawaitable(target):
                target = await target
            if target is not None and not isinstance(target, str):
                raise ConfigurationError(f"decision {path} must return a step name or None")
            await self._x.writer.emit(
                DecisionRecorded,
                step_path=sctx.step_path,
                step_id=path.rsplit("/", 1)[-1],
                visit=sctx.visit,
                target=target,
            )
            return target

        result = await self.step(path, decision, *args, max_visits=max_visits)
        return None if result is None else str(result)

    async def parallel(
        self, path: str, branches: Mapping[str, Callable[[WorkflowContext], Awaitable[Any]]]
    ) -> dict[str, Any]:
        """Run branches concurrently, each ``async fn(branch_ctx)``; returns outputs by name.

        The resolved branch set is recorded (ParallelBranchScheduled) and checked on resume.
        The group drains: when a branch fails, the others stop at their next recorded
        boundary (what they have in flight settles and is logged; they start nothing new),
        and the first failure is raised once every branch has ended.
        """
        full = self._path(path)
        names = list(branches)
        for name in names:
            if not name or "#" in name or "/" in name:
                raise ConfigurationError(
                    f"parallel {full!r}: branch name {name!r} must be non-empty and contain "
                    "no '#' or '/'"
                )
        self._check_group()
        with self._x.integrity:  # a changed branch set finishes the execution
            scheduled = self.replayed.parallel_group(full) is not None
            if scheduled:
                assert_completed_parallel_replay_matches_input(self.replayed, full, names)
        if not scheduled:
            await self._x.writer.emit(
                ParallelBranchScheduled,
                step_path=full,
                branches=tuple(names),
                branch_set_hash=branch_set_hash(names),
            )
        self._calls[f"parallel:{full}"] = 1  # reached (``patched`` asks)
        group = _Group(full, self._group)
        tasks = [
            asyncio.ensure_future(
                branches[n](WorkflowContext(self._x, f"{full}/{n}/", f"{full}/{n}", group))
            )
            for n in names
        ]

        def stop_siblings(branch: str) -> None:
            if group.failed is None:
                group.failed = branch
                log.warning(
                    "parallel_group_draining", run_id=self.run_id, group=full, failed=branch
                )

        results = await drain(tasks, names, stop_siblings)
        return dict(zip(names, results, strict=True))

    # -- sub-runs ------------------------------------------------------------------------

    async def start_workflow(self, name: str, input: Any = None, *, key: str | None = None) -> Any:
        """Run workflow ``name`` as a sub-run with a reserved id; returns its output.

        The sub-run id is reserved (SubRunReserved) before it starts and derived from this
        run's id and the call's path, so a resume re-dispatches the same sub-run; a sub-run
        that already completed is not executed again, its output is read from its own log.
        """
        label = key or f"{name}.{self._calls.get(f'start_workflow:{name}', 0) + 1}"
        self._calls[f"start_workflow:{name}"] = self._calls.get(f"start_workflow:{name}", 0) + 1

        async def run_sub(sctx: StepContext) -> Any:
            return await sctx.start_workflow(name, input)

        return await self.step(f"start_workflow/{label}", run_sub)


class _InTool:
    """The values, waits and sub-runs one recorded tool call makes through its step, numbered
    from 0 (sub-runs from 1) in the tool call's scope: ``<values scope>#<rank>/<tool call
    id>/`` (``ToolScope.mark``): ``<step>#0/1:c1/`` for tool call ``c1`` of the first model
    turn of the first agent call of the step's workflow scope."""

    def __init__(self, step: StepContext, inside: ToolScope) -> None:
        self.path = f"{step.step_path}{inside.mark}"
        self.call_id = inside.call_id
        scope = f"{step._values_scope}{inside.mark}"
        self.values = _RecordedValues(step._x, scope, step.scope)
        self.waits = ScopeWaits(step._x.waits, scope)
        self.sub_runs = 0


class StepContext(_ValuesMixin, _WaitsMixin):
    """What a step function sees: its path, its visit, agent sessions, artifacts, sub-runs."""

    def __init__(self, parent: WorkflowContext, step_path: str, visit: int) -> None:
        self._x = parent._x
        self.scope = parent._scope
        """The workflow scope the step runs in: "" the run, else a parallel branch's path."""
        self.step_path = step_path
        self.visit = visit
        self.artifact_refs: list[ArtifactRef] = []
        # a revisited step's values are its own (a loop's second visit reads the clock anew)
        self._values_scope = step_path if visit == 1 else f"{step_path}@{visit}"
        self._values = _RecordedValues(self._x, self._values_scope, self.scope)
        self._waits = ScopeWaits(self._x.waits, self._values_scope)
        self._group = parent._group
        self._sub_runs = 0
        self._given_in_tools = 0  # sub-runs a tool call gave an id not its own (``_sub_run_call``)
        self._sessions: set[str] = set()
        self._tool_calls: dict[ToolScope, _InTool] = {}

    @property
    def run_id(self) -> str:
        return self._x.run_id

    def _patch_scope(self) -> tuple[ScopeKey, str, Reached]:
        reached = Reached(
            self._values._ordinal,
            self._waits.ordinal,
            sessions=self._sessions,
            sub_runs=self._sub_runs + self._given_in_tools,
            artifacts=len(self.artifact_refs),
        )
        key = (self.scope, self.step_path, self.visit)
        return key, f"step {self.step_path} (visit {self.visit})", reached

    def _check_group(self) -> None:
        """Raise ``BranchStopped`` if the parallel group this step runs in is draining."""
        if self._group is not None:
            self._group.check(self._x.run_id)

    # What a recorded tool call of this step makes through it (``inside_tool``) is numbered in
    # that tool call's own sequences (``_InTool``), not in the step's: a replay, a resume or a
    # simulation serving the tool's agent call whole never runs the tool again, and the step's
    # later values, waits and sub-runs keep their places.

    def _in_tool(self) -> _InTool | None:
        """The sequences of the recorded tool call of this step running now, if any (None in
        a run logged before ``RunStarted.tool_scopes``: numbered in the step's, as then)."""
        inside = inside_tool(self._x, self.step_path)
        if inside is None or not self._x.replayed.tool_scopes:
            return None
        found = self._tool_calls.get(inside)
        if found is None:
            found = self._tool_calls[inside] = _InTool(self, inside)
        return found

    def _values_here(self) -> _RecordedValues:
        found = self._in_tool()
        return self._values if found is None else found.values

    def _waits_here(self) -> ScopeWaits:
        found = self._in_tool()
        return self._waits if found is None else found.waits

    def _sub_run_call(self, given: str | None) -> str:
        """The call id of the sub-run starting now: ``given``, else ``<step>/sub<n>``, or
        ``<step>#<rank>/<tool call id>/sub<n>`` in a recorded tool call of the step (``n``
        counts from 1 in each; one given counts too, as it always did). One a tool call gives
        its own id (``workflow_tool``) is the tool call's work to patches; one given another id
        in a tool call is the step's, as the log cannot tell it apart."""
        found = self._in_tool()
        if found is None:
            self._sub_runs += 1
            return given or f"{self.step_path}/sub{self._sub_runs}"
        found.sub_runs += 1
        if given is not None and given != found.call_id:
            self._given_in_tools += 1
        return given or f"{found.path}sub{found.sub_runs}"

    @overload
    def session(
        self,
        name: str,
        *,
        model: Model,
        tools: Sequence[Tool | McpServer] | None = ...,
        system: str | None = ...,
        manifest: Mapping[str, Any] | None = ...,
        approval: ApprovalPolicy = ...,
        compact: CompactionPolicy | None = ...,
        max_parallel_tools: int = ...,
        output: None = None,
        output_retries: int = ...,
    ) -> AgentSession[str | None]: ...

    @overload
    def session(
        self,
        name: str,
        *,
        model: Model,
        tools: Sequence[Tool | McpServer] | None = ...,
        system: str | None = ...,
        manifest: Mapping[str, Any] | None = ...,
        approval: ApprovalPolicy = ...,
        compact: CompactionPolicy | None = ...,
        max_parallel_tools: int = ...,
        output: type[M],
        output_retries: int = ...,
    ) -> AgentSession[M]: ...

    @overload
    def session(
        self,
        name: str,
        *,
        model: Model,
        tools: Sequence[Tool | McpServer] | None = ...,
        system: str | None = ...,
        manifest: Mapping[str, Any] | None = ...,
        approval: ApprovalPolicy = ...,
        compact: CompactionPolicy | None = ...,
        max_parallel_tools: int = ...,
        output: Mapping[str, Any],
        output_retries: int = ...,
    ) -> AgentSession[Any]: ...

    def session(
        self,
        name: str,
        *,
        model: Model,
        tools: Sequence[Tool | McpServer] | None = None,
        system: str | None = None,
        manifest: Mapping[str, Any] | None = None,
        approval: ApprovalPolicy = False,
        compact: CompactionPolicy | None = None,
        max_parallel_tools: int = DEFAULT_MAX_PARALLEL_TOOLS,
        output: OutputType | None = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
    ) -> AgentSession[Any]:
        """An agent session whose model and tool calls are recorded and fast-forwarded.

        ``compact``: a ``CompactionPolicy`` that trims or summarises the history before an
        exchange when it nears a limit; its result is recorded (``harness.session.compacted``)
        and reused by a resume (``little.runtime._compaction``).

        ``approval``: ask a person before tool calls (True: every one; a function of the tool's
        name and arguments: those it says), besides tools declared ``requires_approval``. The
        request is recorded and the run waits for ``little approve`` / ``little reject``,
        holding no process; a rejection reaches the model as the tool's error.

        ``max_parallel_tools``: how many tool calls of one model turn run at once (8 unless
        set; 1: one after the other). Each is recorded write-ahead under its own call id and
        the answers go back to the model in the order it asked.

        ``output``: a pydantic model class or a JSON schema every ``agent.run`` of the session
        answers in (unless it names its own), validated, at most ``output_retries`` retries;
        part of the session's configuration (its manifest)."""
        session_id = self._session_id(name)
        model = self._x.model_for(name) or model  # a full replay may name another model
        return AgentSession(
            self._x,
            self,
            session_id,
            name,
            model,
            tools or [],
            system,
            manifest,
            approval,
            compact,
            max_parallel_tools,
            output,
            output_retries,
        )

    def _session_id(self, name: str, numbered: bool = False) -> str:
        """The id of this step's session ``name``, taken (a step's sessions are named apart;
        ``numbered``: a taken name goes on as ``name.2``, ``name.3``, ...)."""
        base = f"{self.step_path}#{name}" + (f"@{self.visit}" if self.visit > 1 else "")
        session_id, n = base, 1
        while numbered and (session_id in self._sessions or self._made_elsewhere(session_id)):
            n += 1
            session_id = f"{base}.{n}"
        if session_id in self._sessions:
            # its turns and calls would be recorded under the first one's keys
            raise ConfigurationError(
                f"run {self.run_id}: step {self.step_path} opens a second session named "
                f"{name!r}; give each session of a step its own name"
            )
        self._sessions.add(session_id)
        return session_id

    def _made_elsewhere(self, session_id: str) -> bool:
        """Did the run's log (or the record it replays) make session ``session_id``'s calls in
        another scope than a session opened here now would: the step's own and those a
        recorded tool call of the step opens (``inside_tool``) are numbered apart, so that a
        numbered session's name does not depend on whether a tool served whole runs again."""
        recorded = self._x.agent_calls.recorded_scope(session_id)
        if recorded is None:
            return False
        inside = inside_tool(self._x, self.step_path)
        return recorded != (self.scope if inside is None else inside.scope)

    def recorder(
        self,
        name: str,
        *,
        provider: str,
        model: str,
        manifest: Mapping[str, Any],
        side_effecting: bool,
        numbered: bool = False,
    ) -> Recorder:
        """The recording of a conversation this step drives with a loop of its own (a framework
        adapter, ``little.integrations``): a session named ``name`` whose agent calls, model
        turns and tool calls go through the recording kernel exactly as ``session``'s do.
        ``manifest`` is everything that configures it (hashed into every call's key);
        ``side_effecting``: its calls are never answered from a recorded run. ``numbered``:
        the step may open several sessions of that name (a stateless framework call is one
        each): the second is ``name.2``, and so on, in the order the step opens them."""
        session_id = self._session_id(name, numbered)
        return Recorder(self._x, self, session_id, provider, model, manifest, side_effecting)

    async def panel(
        self, legs: Sequence[tuple[AgentSession[A], Content]], *, max_turns: int = 10
    ) -> list[A]:
        """Several agent calls at once (a vote, a fusion of answers); their answers in order.

        ``await step.panel([(critic, prompt), (judge, prompt)])``: each leg is a session of
        this step (one session per leg: a session is one conversation) and the prompt it is
        asked, exactly as ``await critic.run(prompt)`` would ask it. Legs are admitted in list
        order before any runs, so their ordinals and places never depend on timing. In a run
        with ``replay_from`` a panel is served entirely from the record or runs entirely fresh:
        a mix of recorded and fresh legs ends the run (``PanelMixedError``). A fresh panel
        reserves one agent call per leg against ``max_agent_calls`` before any leg runs; a
        served one costs nothing. If a leg fails, the others run to their settlement first.
        """
        return await run_panel(self._x, self, legs, max_turns)

    async def artifact(
        self, name: str, data: bytes, media_type: str = "application/octet-stream"
    ) -> ArtifactRef:
        """Store bytes in the artifact store (off the event loop) and commit them to this
        step: ``ArtifactCommitted`` is acked only once the blob is durable."""
        self._x.integrity.check()
        ref = await asyncio.to_thread(self._x.world.artifacts.put, self.run_id, data, media_type)
        await self._x.writer.emit(ArtifactCommitted, step_path=self.step_path, name=name, ref=ref)
        self.artifact_refs.append(ref)
        return ref

    async def reserve_sub_run(self, name: str, input: Any, call_id: str) -> str:
        """The sub-run id for ``call_id``: the reserved one if any, else reserve a new one."""
        for sub in self._x.replayed.sub_runs:
            if sub.call_id == call_id and sub.step_path == self.step_path:
                return sub.sub_run_id
        sub_run_id = f"{self.run_id}~{call_id}"
        # a replay's sub-run replays the recorded one at this call, or runs fresh and latches
        self._x.agent_calls.start_sub_run(self.scope, call_id, name)
        await self._x.writer.emit(
            SubRunReserved,
            step_path=self.step_path,
            sub_run_id=sub_run_id,
            workflow=name,
            input_json=canonical_json(input),
            call_id=call_id,
        )
        return sub_run_id

    async def start_workflow(
        self, name: str, input: Any = None, *, call_id: str | None = None
    ) -> Any:
        """Run a sub-run from inside a step (or a tool); see WorkflowContext.start_workflow."""
        self._check_group()
        call_id = self._sub_run_call(call_id)
        with self._x.integrity:  # a sub-run's integrity error finishes its parent's execution
            sub_run_id = await self.reserve_sub_run(name, input, call_id)
            try:
                return await self._x.run_sub(
                    lookup(name, run_id=self.run_id), sub_run_id, input, call_id
                )
            except SimulationDivergedError as exc:  # a simulated sub-run diverged: say where
                raise exc.inside(self.scope, call_id, f"sub-run {name} at {call_id}") from exc
