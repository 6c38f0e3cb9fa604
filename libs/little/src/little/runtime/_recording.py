"""The recording kernel: one conversation's agent calls admitted, its model turns and tool calls
recorded write-ahead and answered (served from a record, or invoked), and its calls settled.

Framework-neutral: it knows a model request by its link in the request hash chain and a response
by its JSON, not by a chat loop (``AgentSession`` is one caller; a framework adapter is
another). Where an answer comes from is ``little.runtime._serving``'s decision; this module
writes what it decides, and never asks itself whether the run resumes, replays or simulates.
Budgets, redaction, approvals and the crash hooks are called from here, at named points.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from little import tracing
from little._canonical import canonical_hash, canonical_json
from little.errors import RunInterrupt
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    SessionCompacted,
    SessionCompleted,
    SessionStarted,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
)
from little.harness import Tool, ToolCallRequest, ToolContext, ToolError
from little.harness.content import TOOL_PARTS, content_json, is_content, tool_text
from little.redaction import REDACTED
from little.replay import assert_harness_manifest_consistent, manifest_hash
from little.runtime._errors import ENDS_THE_RUN, BranchStopped, BudgetExceededError
from little.runtime._faults import FAULTS
from little.runtime._model_turns import (
    SessionStep,
    TurnRecording,
)
from little.runtime._parts import ConversationParts
from little.runtime._recorded import MISS_RECORD_UNUSABLE
from little.runtime._serving import OWN_LOG, Fresh, Served, Serving, ToolAsk
from little.runtime._spans import SessionSpans

if TYPE_CHECKING:
    from little.runtime._execution import Execution

ApprovalPolicy = bool | Callable[[str, dict[str, Any]], bool]
"""A session's approval policy: True asks a person before every tool call, a function
``(tool name, arguments) -> bool`` before the calls it names; tools declared
``requires_approval=True`` are always asked for."""


@dataclass(eq=False)
class ToolScope:
    """A recorded tool call while it runs (``inside_tool``), for what the tool makes through its
    step: an agent call (a framework agent run in a tool, a session opened by a tool), a
    recorded value, a durable wait, a sub-run. A replay, a resume or a simulation that serves
    the tool's agent call whole never runs the tool again, so what it made must not take a place
    in its step's sequences, or every later one of the step would stand one place off."""

    execution: Execution
    step_path: str
    workflow_scope: str
    """The step's workflow scope (the run's ``""``, or a parallel branch's path)."""
    scope: str
    """The scope an agent call admitted inside it takes: ``<the outer call's scope>#<its rank
    there>/<the tool call id>/`` (its place, not its ordinal, which the interleaving of parallel
    branches decides; ``#`` is in no step path or branch name)."""
    call_id: str
    """The tool call's id (``<turn>:<model's id>``): a sub-run the tool starts given it
    (``workflow_tool``) is known by it as the tool call's."""

    @property
    def mark(self) -> str:
        """``scope`` past the step's workflow scope (``#<rank>/<tool call id>/``, more for a
        call nested deeper): after a step's own values scope or path, it names this tool
        call's values, waits and sub-runs (``<step>#0/1:c1/``)."""
        return self.scope.removeprefix(self.workflow_scope)


_INSIDE_TOOL: ContextVar[ToolScope | None] = ContextVar("little_inside_tool", default=None)


def inside_tool(execution: Execution, step_path: str) -> ToolScope | None:
    """The recorded tool call of ``execution``'s step ``step_path`` running now, if any."""
    inside = _INSIDE_TOOL.get()
    if inside is None or inside.execution is not execution or inside.step_path != step_path:
        return None
    return inside


REJECTED = "rejected by a person"
"""What the model is told (as the tool's error) of a tool call a person rejected."""

SETTLING = (BranchStopped, BudgetExceededError)
"""What ends an agent call's exchange and settles it as failed: a branch stopped between turns,
or a spent budget (it did not finish, and the run is ending). An interrupt that stops the
writer (a stop, a fence) leaves the call in flight instead, for the resume to run on."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool call's outcome as the kernel hands it back (``Recorder.tool_call_outcome``):
    its result's JSON, or its error (``"<type>: <message>"``), recorded or just made."""

    content: str | None
    error: str | None = None
    rejected: bool = False
    """A person rejected the call (``error`` says why); nothing was invoked or recorded."""

    def render(self) -> str | None:
        """What a chat model is told: the result, or ``{"error": ...}``."""
        return self.content if self.error is None else canonical_json({"error": self.error})


class AgentCallTicket:
    """One admitted agent call on its way to settlement."""

    __slots__ = ("answer", "ordinal", "text")

    def __init__(self, ordinal: int, answer: Served | Fresh) -> None:
        self.ordinal = ordinal
        self.answer = answer
        """``Served``: answered whole from a record; ``Fresh``: its turns run."""
        self.text: str | None = None
        """A served call's recorded result, once read."""

    @property
    def settled(self) -> bool:
        """Settled in this run's log already: nothing more is written for it."""
        return self.answer.settled

    @property
    def served(self) -> bool:
        return isinstance(self.answer, Served)

    @property
    def miss(self) -> str | None:
        return self.answer.miss if isinstance(self.answer, Fresh) else None


class Recorder(TurnRecording):
    """The recording of one conversation (an agent session) of one step. A caller (the
    session's loop, or a framework adapter around its own) drives it in this order::

        await recorder.start(name, system)
        ticket = recorder.admit(request)               # per agent call, before any await
        if ticket.served:                              # answered whole from a record
            result = await recorder.served_result(ticket)
            ...                                        # (recorder.served_turn per turn in it)
            await recorder.settle_served(ticket)
        else:                                          # its turns run, each asked again
            response = await recorder.model_turn(turn_request, invoke, decode)
            content = await recorder.tool_call(turn, call, tool, live)
            await recorder.settle(ticket, "succeeded", result)
        await recorder.finish(turns, output, exc)
    """

    def __init__(
        self,
        execution: Execution,
        step: SessionStep,
        session_id: str,
        provider: str,
        model: str,
        manifest: Mapping[str, Any],
        side_effecting: bool,
        approval: ApprovalPolicy = False,
    ) -> None:
        self._x = execution
        self._step = step
        self.session_id = session_id
        self.provider = provider
        self.model = model
        self.manifest = manifest
        self.manifest_hash = manifest_hash(manifest)
        self.side_effecting = side_effecting
        self._approval = approval
        self._redact = execution.world.redact
        self.serving = Serving.of(
            execution, session_id, manifest, self.manifest_hash, side_effecting
        )
        self.spans = SessionSpans(
            execution.run_id, step.step_path, session_id, execution.writer.epoch
        )
        self.tokens = [0, 0, 0, 0]  # input, output, cached input, reasoning: this execution's
        self.exchanges = 0  # agent calls admitted so far: the occurrence of each one's node
        self.exchange_tokens = [0, 0, 0, 0]  # this exchange's usage, served turns included
        self.exchange_calls = 0  # this exchange's model calls, served turns included
        self.ordinal = -1  # the agent call of this exchange (its fresh turns count it)
        self.reserved = False  # a panel leg holding a budget reservation for its first call
        self.parts = ConversationParts(execution)
        """The bytes of the conversation's image and document parts (stored, loaded)."""
        self._tool_calls: dict[tuple[str, str], int] = {}
        """Tool calls so far per (tool, arguments JSON), those served from the log too: a tool
        call's occurrence, which a full replay takes receipts by (a resume walks the session's
        recorded turns again, so it takes them in the order the first execution did)."""

    async def flush(self) -> None:
        """Make every deferred record durable now."""
        await self._x.writer.flush()

    # -- the session ---------------------------------------------------------------------

    async def start(self, name: str, system: str | None) -> None:
        """Open the session: checked against the log if it started before, else recorded."""
        resumed = self.serving.own.session is not None
        if resumed:
            with self._x.integrity:  # a drifted manifest is latched: it finishes the execution
                assert_harness_manifest_consistent(self._x.replayed, self.session_id, self.manifest)
        else:
            # Deferred: nothing acts on it before the session's first write-ahead record, which
            # carries it; a crash before that leaves no session, and the resume starts it anew.
            # The system prompt is recorded (the manifest has its hash only), so every request
            # can be rebuilt from the log (``little export --format chat-jsonl``).
            system_json, system_ref = await self._x.store_text(canonical_json(system))
            self._defer(
                SessionStarted,
                session_name=name,
                model=f"{self.provider}:{self.model}",
                manifest_json=canonical_json(self.manifest),
                manifest_hash=self.manifest_hash,
                system_json=system_json,
                system_ref=system_ref,
            )
        self.spans.open(name, self.provider, self.model, resumed)

    async def finish(self, turns: int, output: Any, exc: BaseException | None) -> None:
        """Close the session: completed (with ``output``) unless ``exc`` left it unfinished."""
        self.spans.close(turns, self.tokens, exc)
        if exc is not None:
            return  # not completed: a resume runs the session on from its log
        own = self.serving.own.session
        if own is None or own.status != "completed":
            # Deferred: it reaches the log with the step's next acked event. Every result of
            # the session is already durable (each exchange flushes its last one).
            output_json, output_ref = await self._x.store_text(canonical_json(output))
            self._defer(
                SessionCompleted,
                turns=turns,
                output_json=output_json,
                output_ref=output_ref,
                usage=_usage(self.tokens),
            )

    async def recorded_history(
        self, exchange: int, policy_hash: str, conversation: str
    ) -> tuple[Any, str] | None:
        """The history this run's log compacted the conversation (its canonical JSON) to
        before ``exchange`` and the chain's link after it; None if it did not compact there."""
        with self._x.integrity:
            recorded = self.serving.own.compaction(exchange, policy_hash, conversation)
        if recorded is None:
            return None
        text = await self._x.load_text(recorded.history_json, recorded.history_ref)
        return json.loads(text or "[]"), recorded.history_hash

    async def compacted(self, history: str, **fields: Any) -> None:
        """Record a compaction of the history (``harness.session.compacted``)."""
        history_json, history_ref = await self._x.store_text(history)
        # Deferred: the exchange's first write-ahead record carries it. A kill before loses it
        # with that record; the resume compacts again the same way (a trim is a function of
        # the conversation, and a summary is served from its own recorded agent call).
        self._defer(SessionCompacted, history_json=history_json, history_ref=history_ref, **fields)

    # -- agent calls ---------------------------------------------------------------------

    def admit(
        self, request: Mapping[str, Any], configuration: Mapping[str, Any] | None = None
    ) -> AgentCallTicket:
        """Admit the next agent call (synchronous: no await, so its ordinal and place never
        depend on timing): its node, its request key (the manifest, the node and ``request``,
        everything else that decides its answer), and where its answer comes from.
        ``configuration``: the part of ``request`` that configures this call alone (its
        structured output), which the caller records in its settled result as
        ``"configuration"``: a replay's key miss it explains is ``configuration-changed``."""
        calls = self._x.agent_calls
        occurrence = self.exchanges
        self.exchanges += 1
        label = self.session_id.split("#", 1)[1]  # the name, with @visit on later visits
        node = (self._step.step_path, label, occurrence)
        key = canonical_hash({"manifest": self.manifest_hash, "node": list(node), **request})
        inside = inside_tool(self._x, self._step.step_path)
        scope = self._step.scope if inside is None else inside.scope
        with self._x.integrity:
            ordinal, place = calls.admit(node, scope)
            answer = self.serving.exchange(ordinal, place, node, key, configuration)
        ticket = AgentCallTicket(ordinal, answer)
        self.exchange_tokens = [0, 0, 0, 0]
        self.exchange_calls = 0
        self.ordinal = ordinal
        if answer.settled:
            return ticket
        if ordinal not in calls.own and ordinal not in calls.admitted:
            self._defer(
                AgentCallAdmitted,
                ordinal=ordinal,
                request_key=key,
                node_phase=node[0],
                node_label=node[1],
                node_occurrence=node[2],
                side_effecting=self.side_effecting,
                scope=place[0],
            )
        calls.admitted.add(ordinal)
        return ticket

    async def served_result(self, ticket: AgentCallTicket) -> Any:
        """A call answered whole: its recorded result. One that cannot be read fails the call
        and ends the replay there, even if the workflow catches the error: no later call may
        be answered from the record."""
        served = ticket.answer
        assert isinstance(served, Served)
        assert served.call is not None
        try:
            text = await self._x.load_text(served.call.result_json, served.call.result_ref) or "{}"
            result = json.loads(text)
        except Exception as exc:
            if isinstance(exc, ENDS_THE_RUN):  # the writer or the run ending: not the record's
                raise
            self._x.agent_calls.refuse(ticket.ordinal)
            if not ticket.settled:
                self._defer(
                    AgentCallSettled,
                    ordinal=ticket.ordinal,
                    outcome="failed",
                    replayed=False,
                    source_run_id=served.source_run_id,
                    miss_reason=MISS_RECORD_UNUSABLE,
                    provider=self.provider,
                    model=self.model,
                    model_calls=0,
                )
                await self.flush()
            raise
        ticket.text = text
        return result

    async def settle_served(self, ticket: AgentCallTicket) -> None:
        """Settle a call answered whole: what the record says it cost is counted as avoided,
        never billed, and the settlement is durable before the answer is returned."""
        served = ticket.answer
        assert isinstance(served, Served)
        assert served.call is not None
        assert ticket.text is not None
        call = served.call
        self.spans.replayed_exchange(
            call.provider or self.provider,
            call.model or self.model,
            call.usage,
            served.source_run_id,
            ticket.ordinal,
            call.model_calls,
        )
        if ticket.settled:
            return
        result_json, result_ref = await self._x.store_text(ticket.text)
        self._defer(
            AgentCallSettled,
            ordinal=ticket.ordinal,
            outcome="succeeded",
            result_json=result_json,
            result_ref=result_ref,
            usage=call.usage,
            replayed=True,
            source_run_id=served.source_run_id,
            provider=call.provider,
            model=call.model,
            model_calls=call.model_calls,
        )
        await self.flush()

    async def settle(self, ticket: AgentCallTicket, outcome: str, result: Any) -> None:
        """Settle a call whose turns ran (deferred: the caller flushes when it needs it)."""
        if ticket.settled:
            return
        result_json, result_ref = await self._x.store_text(canonical_json(result))
        self._defer(
            AgentCallSettled,
            ordinal=ticket.ordinal,
            outcome=outcome,
            result_json=result_json,
            result_ref=result_ref,
            usage=_usage(self.exchange_tokens),
            replayed=False,
            miss_reason=ticket.miss,
            provider=self.provider,
            model=self.model,
            model_calls=self.exchange_calls,
        )

    async def settle_raised(self, ticket: AgentCallTicket, exc: BaseException, result: Any) -> None:
        """Settle a call whose turns raised ``exc``: failed, unless ``exc`` leaves it in flight
        for the resume to run on (a suspension or a stop, an error that ends the writer or the
        run); a branch stopped or a spent budget settles it (it did not finish)."""
        if isinstance(exc, SETTLING) or (
            isinstance(exc, Exception) and not isinstance(exc, ENDS_THE_RUN)
        ):
            await self.settle(ticket, "failed", result)

    def refuse(self, ticket: AgentCallTicket, miss: str | None) -> None:
        """Settle an admitted call that will not run (its panel was refused) as failed, and
        latch the replay there: nothing is left in flight, no later call is served."""
        if ticket.settled:
            return
        self._x.agent_calls.refuse(ticket.ordinal)
        self._defer(
            AgentCallSettled,
            ordinal=ticket.ordinal,
            outcome="failed",
            replayed=False,
            miss_reason=miss,
            provider=self.provider,
            model=self.model,
            model_calls=0,
        )

    def served_turn(self, ticket: AgentCallTicket, turn: int, request_hash: str) -> None:
        """A turn inside a call answered whole builds ``request_hash``: checked by the source."""
        with self._x.integrity:
            self.serving.served_turn(ticket.ordinal, turn, request_hash)

    # -- tool calls ----------------------------------------------------------------------

    async def tool_call(
        self,
        turn: int,
        call: ToolCallRequest,
        tool: Tool | None,
        live: dict[str, ToolCallRequest] | None = None,
        asked: tuple[ToolAsk, Served | Fresh] | None = None,
    ) -> str | None:
        """One tool call of ``turn``; returns the result's JSON, or the error's, for the model
        (``tool_call_outcome`` rendered)."""
        return (await self.tool_call_outcome(turn, call, tool, live, asked)).render()

    def ask_tool(
        self, turn: int, call: ToolCallRequest, tool: Tool | None = None
    ) -> tuple[ToolAsk, Served | Fresh]:
        """Where tool call ``call`` of ``turn`` (to ``tool``) is answered from (synchronous: a
        turn's calls are asked in the model's order before any runs, so each one's occurrence,
        which a full replay takes receipts by, never depends on timing)."""
        self._x.integrity.check()
        if tool is not None and tool.recorded_name is not None:
            call = replace(call, name=tool.recorded_name)  # an MCP tool: mcp:<server>/<tool>
        call_id = f"{turn}:{call.id}"
        # as recorded (redacted): the form a full replay finds its source's receipts by
        arguments_json = canonical_json(self.redacted("tool_arguments", call.arguments))
        counted = (call.name, arguments_json)
        occurrence = self._tool_calls.get(counted, 0)
        self._tool_calls[counted] = occurrence + 1
        key = f"{self._x.run_id}/{self._step.step_path}/{call_id}"  # derived: never change it
        ask = ToolAsk(turn, call_id, call.name, arguments_json, key, occurrence)
        return ask, self.serving.tool_call(ask)

    async def tool_call_outcome(
        self,
        turn: int,
        call: ToolCallRequest,
        tool: Tool | None,
        live: dict[str, ToolCallRequest] | None = None,
        asked: tuple[ToolAsk, Served | Fresh] | None = None,
    ) -> ToolOutcome:
        """One tool call of ``turn`` (as recorded: redacted) to ``tool`` (None: the model named
        no known tool, which fails as the tool's error). Answered from a record, or: approved
        if it must be, ``harness.tool_call.started`` acked (with the call's idempotency key),
        invoked (with the arguments the model asked for, ``live[call.id]``), and its outcome
        deferred. ``asked``: what ``ask_tool`` said of it already (a turn's calls run
        concurrently)."""
        if asked is None:
            asked = self.ask_tool(turn, call, tool)
        else:
            self._x.integrity.check()
        ask, answer = asked
        if call.name != ask.tool:  # recorded under the name the ask took (an MCP tool's)
            call = replace(call, name=ask.tool)
        call_id, arguments_json, key = ask.call_id, ask.arguments_json, ask.idempotency_key
        from_log = isinstance(answer, Served) and answer.source == OWN_LOG
        with self.spans.tool(call.name, call.id, call_id, turn, from_log, answer.again) as span:
            if isinstance(answer, Served) and from_log:  # recorded by this run: nothing to write
                return await self._served_tool_call(answer)
            arguments = (call if live is None else live.pop(call.id, call)).arguments
            self._step._check_group()
            if isinstance(answer, Served):  # another run's record, written into this run's
                tracing.set_attributes(
                    span,
                    little_replayed=answer.replayed,
                    little_replay_source_run_id=answer.source_run_id,
                )
                return await self._served_tool_call(answer)
            if tool is not None and self._needs_approval(tool, arguments):
                rejected = await self.approval(call_id, call.name, call.arguments)
                if rejected is not None:
                    return ToolOutcome(None, rejected, rejected=True)
            started = await self._emit(
                ToolCallStarted,
                call_id=call_id,
                tool=call.name,
                turn=turn,
                arguments_json=arguments_json,
                idempotency_key=key,
            )
            tracing.set_attributes(span, little_seq=started.seq, little_idempotency_key=key)
            return await self._invoke_tool(call, call_id, key, tool, arguments, answer, span)

    async def _invoke_tool(
        self,
        call: ToolCallRequest,
        call_id: str,
        key: str,
        tool: Tool | None,
        arguments: dict[str, Any],
        answer: Fresh,
        span: Any,
    ) -> ToolOutcome:
        try:
            if tool is None:
                raise ToolError(f"the model called unknown tool {call.name!r}")
            attempt = 2 if answer.again else 1
            ctx = ToolContext(self._x.run_id, self._step.step_path, call_id, key, attempt)
            result = await self._invoke(tool, arguments, ctx, self.ordinal)
        except RunInterrupt:  # a sub-run it started suspended or stopped: not its failure
            FAULTS.call_returned()
            raise
        except Exception as exc:
            FAULTS.call_returned()
            if isinstance(exc, ENDS_THE_RUN):  # the writer or the run ending: not the tool's
                raise
            error = f"{type(exc).__name__}: {self.redacted('tool_error', str(exc))}"
            tracing.set_error(span, type(exc).__name__)
            self._defer(
                ToolCallFailed,
                call_id=call_id,
                tool=call.name,
                error_type=type(exc).__name__,
                message=self.redacted("tool_error", str(exc)),
                retryable=False,
            )
            return ToolOutcome(None, error)
        FAULTS.call_returned()
        if is_content(result):  # images, documents: large bytes stored before the record
            result = await self.parts.tool_result(result, self._tool_where(call_id, call.name))
        result_text = canonical_json(result)
        if self._redact is not None:
            result_text = canonical_json(self._redact("tool_result", json.loads(result_text)))
        result_json, result_ref = await self._x.store_text(result_text)
        self._defer(
            ToolCallSucceeded,
            call_id=call_id,
            tool=call.name,
            result_json=result_json,
            result_ref=result_ref,
        )
        return ToolOutcome(result_text)

    async def _served_tool_call(self, served: Served) -> ToolOutcome:
        """Write what a served tool call writes (acked records first, then its answer is read,
        then the deferred ones) and return its answer."""
        for record in served.records:
            if record.ack:
                await self._emit(record.cls, **record.fields)
        outcome = ToolOutcome(None, served.error)
        if served.error is None:
            outcome = ToolOutcome(await self._x.load_text(served.text, served.ref))
        for record in served.records:
            if not record.ack:
                self._defer(record.cls, **record.fields)
        return outcome

    async def served_tool_calls(
        self,
        ticket: AgentCallTicket,
        turn: int,
        messages: list[dict[str, Any]],
        tools: Mapping[str, Tool],
    ) -> None:
        """The tool calls inside an agent call answered whole (``messages``, its turns numbered
        after ``turn``): each one its source asks for (a simulation: every one that can be) is
        run again and its result shown to the source, which raises on a difference. Nothing is
        written: the call stays served."""
        asked: dict[str, tuple[int, ToolCallRequest]] = {}
        for message in messages:
            if message.get("role") == "assistant":
                turn += 1
                for c in message.get("tool_calls") or ():
                    request = ToolCallRequest(
                        str(c["id"]), str(c["name"]), c.get("arguments") or {}
                    )
                    asked[request.id] = (turn, request)
                continue
            found = asked.get(str(message.get("tool_call_id")))
            if message.get("role") != "tool" or found is None:
                continue
            at, request = found
            call_id = f"{at}:{request.id}"
            tool = tools.get(request.name)
            recorded = tool_text(message.get("content"))  # parts: as their result recorded
            kept = self._kept(tool, request, recorded)
            # a simulation's difference is an integrity error: latched, whoever catches it
            with self._x.integrity:
                if self.serving.runs_served_tool(ticket.ordinal, call_id, request.name, kept):
                    got = await self._run_again(call_id, request, tool, ticket.ordinal)
                    self.serving.served_tool_result(
                        ticket.ordinal, call_id, request.name, recorded, got
                    )

    def _kept(self, tool: Tool | None, request: ToolCallRequest, recorded: Any) -> str | None:
        """Why a served tool call cannot run again to be compared (None: it can)."""
        if tool is not None and tool.side_effecting:
            return "side-effecting"
        if REDACTED in canonical_json(request.arguments) or REDACTED in str(recorded):
            return "redacted when recorded"  # the secret it saw is not in the record
        if tool is not None and self._needs_approval(tool, request.arguments):
            try:
                error = json.loads(str(recorded)).get("error")
            except (ValueError, AttributeError):
                error = None
            if isinstance(error, str) and error.startswith(REJECTED):
                return "rejected by a person when recorded"  # it never ran
            return "needs a person's approval"  # approved once; no one is asked again here
        return None

    async def _invoke(
        self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext, ordinal: int
    ) -> Any:
        """``tool.invoke``, the agent calls it admits (in this run and step) taking this tool
        call's scope, and the values, waits and sub-runs it makes through its step this tool
        call's (``ToolScope``): ``ordinal`` is the agent call the tool call is of."""
        scope, rank = self._x.agent_calls.place_of(ordinal) if ordinal >= 0 else ("", 0)
        entered = _INSIDE_TOOL.set(
            ToolScope(
                self._x,
                self._step.step_path,
                self._step.scope,
                f"{scope}#{rank}/{ctx.call_id}/",
                ctx.call_id,
            )
        )
        try:
            return await tool.invoke(arguments, ctx)
        finally:
            _INSIDE_TOOL.reset(entered)

    async def _run_again(
        self, call_id: str, request: ToolCallRequest, tool: Tool | None, ordinal: int
    ) -> str:
        """Invoke a served tool call of agent call ``ordinal`` again, as ``_invoke_tool`` does
        but writing nothing: its result's JSON, or its error's, as the model would see it."""
        key = f"{self._x.run_id}/{self._step.step_path}/{call_id}"
        try:
            if tool is None:
                raise ToolError(f"the model called unknown tool {request.name!r}")
            ctx = ToolContext(self._x.run_id, self._step.step_path, call_id, key, 1)
            result = await self._invoke(tool, request.arguments, ctx, ordinal)
        except RunInterrupt:
            raise
        except Exception as exc:
            if isinstance(exc, ENDS_THE_RUN):
                raise
            error = f"{type(exc).__name__}: {self.redacted('tool_error', str(exc))}"
            return canonical_json({"error": error})
        if is_content(result):  # as recorded: only the digest of large bytes (none stored)
            where = self._tool_where(call_id, request.name)
            result = {TOOL_PARTS: content_json(result, where, loose=True)[0]}
        text = canonical_json(result)
        if self._redact is not None:
            text = canonical_json(self._redact("tool_result", json.loads(text)))
        return text

    def _tool_where(self, call_id: str, tool: str) -> str:
        return f"run {self._x.run_id}: session {self.session_id}: tool {tool} (call {call_id})"

    def _needs_approval(self, tool: Tool, arguments: dict[str, Any]) -> bool:
        if tool.requires_approval:
            return True
        policy = self._approval
        return bool(policy(tool.name, arguments)) if callable(policy) else bool(policy)

    async def approval(self, call_id: str, tool: str, arguments: Any) -> str | None:
        """Record the approval request (tool, arguments, call id) and wait for the decision,
        durably; None if approved, else the rejection the model is told as the tool's error."""
        approval_id = f"{self.session_id}/{call_id}"
        details = {
            "tool": tool,
            "arguments": arguments,
            "call_id": approval_id,
            "session_id": self.session_id,
        }
        with self._x.integrity:  # a simulated wait that does not match latches
            wait = await self._x.waits.approval(self.session_id, approval_id, details)
        if wait.outcome == "approved":
            return None
        decision = None
        if wait.signal_id is not None:
            decision = json.loads(self._x.waits.signals[wait.signal_id].payload_json)
        reason = decision.get("reason") if isinstance(decision, dict) else None
        return f"{REJECTED}: {reason}" if reason else REJECTED


def _usage(totals: list[int]) -> Usage:
    return Usage(
        input_tokens=totals[0],
        output_tokens=totals[1],
        cached_input_tokens=totals[2],
        reasoning_tokens=totals[3],
    )
