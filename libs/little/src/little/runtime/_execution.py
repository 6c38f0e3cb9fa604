"""The per-run kernel: one execution of one run (``Execution``), its result, and payloads.

``Execution`` holds what every context, session and wait of an execution shares: the writer,
the state as claimed, the agent-call admission, budgets, patches and waits. It sits below the
author API and the executor: it must never import ``_context``, ``_runner``, ``_session`` or
the client and host modules (the executor hands it ``run_sub``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from little._canonical import canonical_json
from little._world import World
from little.errors import LittleError
from little.events import ArtifactRef, ValueRecorded
from little.harness import Model
from little.replay import (
    MaterializedRunState,
    RecordedValue,
    ReplayEnvelope,
    fold_run,
    replay_envelope,
)
from little.runtime._errors import INTEGRITY, BudgetExceededError, latched_error, raised_again
from little.runtime._patches import Patches
from little.runtime._recorded import AgentCalls, RecordedCalls
from little.runtime._registry import AnyWorkflow
from little.runtime._waits import RunWaits, hold_seconds
from little.runtime._writer import RunWriter

LARGE_PAYLOAD = 64 * 1024
"""Outputs and bodies larger than this (bytes of canonical JSON) go to the artifact store."""

SubRun = Callable[["Execution", AnyWorkflow, str, Any, str], Awaitable[Any]]
"""How an execution runs a sub-run: ``(execution, workflow, sub_run_id, input, call_id)`` to
the sub-run's output (the executor's, handed in so this module never imports it)."""


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str
    output: Any = None
    error: str | None = None
    served_calls: int = 0
    """Model calls of this execution answered from the log (recorded before), not invoked."""
    reinvoked_calls: int = 0
    """Model calls invoked again because the log holds their request but no answer (they were
    in flight when the previous writer stopped: the provider may have billed them twice)."""
    replay: ReplayEnvelope | None = None
    """Recorded-call replay of the run (``little.replay.ReplayEnvelope``): set on every result
    ``run``, ``resume`` and ``execute`` return, a run that is not a replay included (its
    ``source_run_id`` is None, ``replayed`` False); None only for a result built by hand."""
    wake_at: datetime | None = None
    """A ``waiting`` run's earliest due time (None: only a signal can wake it)."""
    waiting_for: tuple[str, ...] = ()
    """What a ``waiting`` run waits for: ``timer``, ``signal:<name>``, ``approval:<call>``."""


async def store_json(
    world: World, run_id: str, value: Any
) -> tuple[str | None, ArtifactRef | None]:
    """Canonical JSON inline, or in the artifact store when larger than LARGE_PAYLOAD. A
    pydantic model (a structured answer a step returns) is stored as its JSON."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return await store_text(world, run_id, canonical_json(value))


async def store_text(world: World, run_id: str, text: str) -> tuple[str | None, ArtifactRef | None]:
    """``store_json`` for text that is already canonical JSON (a large one is written and
    fsynced off the event loop, and is durable before the record naming it is written)."""
    if len(text) <= LARGE_PAYLOAD:
        return text, None
    ref = await asyncio.to_thread(world.artifacts.put, run_id, text.encode(), "application/json")
    return None, ref


async def load_json(world: World, text: str | None, ref: ArtifactRef | None) -> Any:
    """The value ``store_json`` stored: inline text or the artifact ``ref`` points to (read
    off the event loop)."""
    if ref is not None:
        return await asyncio.to_thread(read_json, world, text, ref)
    return read_json(world, text, ref)


def read_json(world: World, text: str | None, ref: ArtifactRef | None) -> Any:
    """``load_json``, blocking (tooling, worker threads)."""
    if ref is not None:
        return json.loads(world.artifacts.get(ref))
    return None if text is None else json.loads(text)


async def load_text(world: World, text: str | None, ref: ArtifactRef | None) -> str | None:
    if ref is not None:
        return bytes(await asyncio.to_thread(world.artifacts.get, ref)).decode()
    return text


async def fold_run_off_loop(world: World, run_id: str) -> MaterializedRunState:
    """``fold_run`` on a worker thread: reading and folding a long run never blocks the loop."""
    state, _, _ = await asyncio.to_thread(fold_run, world, run_id)
    return state


class IntegrityLatch:
    """The first integrity error (``INTEGRITY``) an execution met, latched: once there is one,
    the execution is finished whatever its workflow does with the exception. ``check`` raises
    it again before any new work (a step, an agent call, a model turn, a tool call, a wait, a
    sub-run, a recorded value), the writer appends nothing but the run's end, and the executor
    ends the run by it when the workflow returns. Used as ``with x.integrity:`` around code
    that can raise one: checked on entry, latched on the way out.

    A sub-run's latch has its parent's as ``parent``: an error the parent (or its parent)
    latched finishes the sub-run too, even one already running (a sibling branch of the
    parent met it meanwhile); the sub-run's own error reaches the parent as the exception its
    sub-run raised, and latches it there (``start_workflow``)."""

    __slots__ = ("_writer", "error", "parent")

    def __init__(self, writer: RunWriter, parent: IntegrityLatch | None = None) -> None:
        self._writer = writer
        self.error: LittleError | None = None
        self.parent = parent

    def first(self) -> LittleError | None:
        """This execution's latched error, else the nearest enclosing run's."""
        if self.error is not None or self.parent is None:
            return self.error
        return self.parent.first()

    def check(self) -> None:
        if self.error is None and self.parent is not None:
            inherited = self.parent.first()
            if inherited is not None:  # a run above this sub-run met one: this ends too
                self.latch(inherited)
        if self.error is not None:
            raise raised_again(self.error) from self.error

    def holds(self, exc: BaseException) -> bool:
        """Is ``exc`` the latched error (or a copy ``check`` raised of it)?"""
        return self.error is not None and latched_error(exc) is self.error

    def latch(self, error: LittleError) -> LittleError:
        """Latch ``error`` if it is the execution's first integrity error; returns it."""
        original = latched_error(error)
        if isinstance(original, LittleError):
            error = original  # a copy ``check`` raised: the error it copies
        if self.error is None:
            self.error = error
            self._writer.refused = error
        return error

    def __enter__(self) -> None:
        self.check()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, INTEGRITY):
            self.latch(exc)


class Execution:
    """One execution of one run: its writer, its replayed state, its budget counters."""

    def __init__(
        self,
        world: World,
        run_id: str,
        replayed: MaterializedRunState,
        writer: RunWriter,
        owner: str,
        source: RecordedCalls | None = None,
        hold: float | None = None,
        models: Mapping[str, Model] | None = None,
        *,
        run_sub: SubRun,
        sub_runs_fresh: Mapping[str, bool | None] | None = None,
        parent_integrity: IntegrityLatch | None = None,
    ) -> None:
        self.world = world
        self.run_id = run_id
        self.replayed = replayed
        self.writer = writer
        self.owner = owner
        self.integrity = IntegrityLatch(writer, parent_integrity)
        """The first integrity error of this execution, latched: it finishes the execution
        (and a sub-run's, its parent's: ``parent_integrity``, the parent's latch)."""
        self.billed_calls = replayed.usage.calls
        self.billed_tokens = replayed.usage.input_tokens + replayed.usage.output_tokens
        self.counted_calls = {
            c.ordinal
            for c in replayed.agent_calls
            if not c.replayed and not (c.outcome is not None and c.model_calls == 0)
        }
        """The agent calls ``max_agent_calls`` counts: those that made a model call fresh
        (one in flight when the last writer stopped included: its resume is the same call).
        A served call, or one settled without a model call (a refused panel leg), is free."""
        self.served_calls = 0
        self.reinvoked_calls = 0
        self.reserved_calls = 0
        """Model calls reserved by fresh panels' legs and not made yet (``reserve_calls``)."""
        self.agent_calls = AgentCalls.of(replayed, source, sub_runs_fresh)
        """Agent-call admission, and recorded-call replay from ``source``."""
        self.patches = Patches(replayed, None if source is None else source.state, writer)
        """``ctx.patched`` answers, decided against the state as claimed."""
        self.values: dict[tuple[str | None, int], RecordedValue | ValueRecorded] = {}
        """This run's recorded values by place: those of its log, then those it records now
        (a retried step's second attempt reads the first attempt's)."""
        for v in replayed.values:
            self.values.setdefault((v.step_path, v.ordinal), v)
        self.waits = RunWaits(world, writer, self.agent_calls, replayed, hold_seconds(hold))
        """Durable waits and the signals sent to the run (``little.runtime._waits``)."""
        self.models: Mapping[str, Model] = models or {}
        """A full replay's models by session name (``"*"``: every other session;
        ``FullReplay``): a session not named keeps the model its code names."""
        self._run_sub = run_sub

    def model_for(self, session: str) -> Model | None:
        """The model a full replay asks in the sessions named ``session`` (None: their own)."""
        return self.models.get(session) or self.models.get("*")

    def replay(self) -> ReplayEnvelope:
        """The run's replay envelope now: the state as claimed plus the agent calls this
        execution's writer landed (neither a read nor a fold of the run)."""
        return replay_envelope(self.replayed, after=self.writer.agent_events)

    def count_served(self) -> None:
        self.served_calls += 1
        if self.writer.control is not None:
            self.writer.control.served_calls += 1

    def count_reinvoked(self) -> None:
        self.reinvoked_calls += 1
        if self.writer.control is not None:
            self.writer.control.reinvoked_calls += 1

    # -- payloads ------------------------------------------------------------------------

    async def store_json(self, value: Any) -> tuple[str | None, ArtifactRef | None]:
        return await store_json(self.world, self.run_id, value)

    async def store_text(self, text: str) -> tuple[str | None, ArtifactRef | None]:
        return await store_text(self.world, self.run_id, text)

    async def load_json(self, text: str | None, ref: ArtifactRef | None) -> Any:
        return await load_json(self.world, text, ref)

    async def load_text(self, text: str | None, ref: ArtifactRef | None) -> str | None:
        return await load_text(self.world, text, ref)

    # -- budget --------------------------------------------------------------------------

    def check_budget(self, ordinal: int, *, reserved: bool = False) -> None:
        """Before a fresh model call of agent call ``ordinal``: the first one counts the call
        against ``max_agent_calls`` (an agent call is one ``agent.run`` exchange, whatever
        its tool round trips); every one meets ``max_tokens``. Calls served from a record
        never count. Calls reserved by fresh panels count as spent, except the caller's own
        (``reserved``: a panel leg's first call, which its reservation covers and consumes)."""
        cap_calls, cap_tokens = self.replayed.max_agent_calls, self.replayed.max_tokens
        new = ordinal not in self.counted_calls
        held = self.reserved_calls - (1 if reserved else 0)
        made = len(self.counted_calls)
        if new and cap_calls is not None and made + held >= cap_calls:
            raise BudgetExceededError(
                f"run {self.run_id}: budget of {cap_calls} agent call(s) spent "
                f"({made} made, {held} reserved by panels; "
                f"{self.served_calls} model call(s) more served from the log, free): agent "
                f"call {ordinal} was not made"
            )
        if cap_tokens is not None and self.billed_tokens >= cap_tokens:
            raise BudgetExceededError(
                f"run {self.run_id}: budget of {cap_tokens:,} tokens spent ({self.billed_tokens:,})"
            )
        self.counted_calls.add(ordinal)
        if reserved:
            self.reserved_calls -= 1

    def reserve_calls(self, count: int, where: str) -> None:
        """A fresh panel's worst case, up front: one call per leg, or BudgetExceededError
        before any leg runs. Each leg's first model call consumes its reservation (a leg that
        ends without one gives it back, ``release_call``)."""
        cap_calls, cap_tokens = self.replayed.max_agent_calls, self.replayed.max_tokens
        made = len(self.counted_calls)
        left = None if cap_calls is None else cap_calls - made - self.reserved_calls
        if left is not None and count > left:
            raise BudgetExceededError(
                f"run {self.run_id}: the panel at {where} has {count} fresh leg(s) but the "
                f"budget of {cap_calls} agent call(s) has {max(left, 0)} left "
                f"({made} made, {self.reserved_calls} reserved): no leg was run"
            )
        if cap_tokens is not None and self.billed_tokens >= cap_tokens:
            raise BudgetExceededError(
                f"run {self.run_id}: budget of {cap_tokens:,} tokens spent "
                f"({self.billed_tokens:,}): the panel at {where} ran no leg"
            )
        self.reserved_calls += count

    def release_call(self) -> None:
        self.reserved_calls -= 1

    def billed(self, input_tokens: int, output_tokens: int) -> None:
        self.billed_calls += 1
        self.billed_tokens += input_tokens + output_tokens

    # -- sub-runs ------------------------------------------------------------------------

    async def run_sub(
        self, workflow: AnyWorkflow, sub_run_id: str, input: Any, call_id: str
    ) -> Any:
        """Run ``workflow`` as the sub-run ``sub_run_id`` of this run, started at ``call_id``;
        its output (the executor decides how: ``SubRun``)."""
        return await self._run_sub(self, workflow, sub_run_id, input, call_id)
