"""Agent sessions: a tool-calling loop whose every model and tool call is on the log.

Write-ahead: ``harness.model.called`` / ``harness.tool_call.started`` are acked before the
model or tool is invoked; the terminal event is written after. On resume the session is
rebuilt from the run's replayed state: responded turns and finished tool calls are served from
the log, and only a call with no terminal event is invoked again, with the same messages or
the same arguments and idempotency key.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from little import tracing
from little._canonical import canonical_hash, canonical_json, chain_hash, sha256_hex
from little.errors import CapabilityDriftError, ConfigurationError, RunInterrupt
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    SessionCompacted,
    SessionCompleted,
    SessionStarted,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
)
from little.harness import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    Tool,
    ToolCallRequest,
    ToolContext,
    ToolError,
)
from little.logs import get_logger
from little.replay import (
    AgentCall,
    SessionState,
    assert_harness_manifest_consistent,
    manifest_hash,
    price_usd,
)
from little.runtime._compaction import SUMMARY_ACK, SUMMARY_PREFIX, CompactionPolicy
from little.runtime._errors import (
    ENDS_THE_RUN,
    BranchStopped,
    BudgetExceededError,
    PanelMixedError,
    SessionDivergedError,
    SimulationDivergedError,
)
from little.runtime._faults import FAULTS
from little.runtime._groups import drain
from little.runtime._recorded import (
    MISS_CONFIG_CHANGED,
    MISS_KEY,
    MISS_PANEL_MIXED,
    MISS_RECORD_UNUSABLE,
    MISS_REQUEST_CHANGED,
    SIMULATING,
    Receipt,
)

log = get_logger("little.runtime")

if TYPE_CHECKING:
    from little.runtime._context import StepContext
    from little.runtime._execution import Execution

ApprovalPolicy = bool | Callable[[str, dict[str, Any]], bool]
"""A session's approval policy: True asks a person before every tool call, a function
``(tool name, arguments) -> bool`` before the calls it names; tools declared
``requires_approval=True`` are always asked for."""


class AgentSession:
    """``async with step.session(...) as agent: answer = await agent.run(prompt)``."""

    def __init__(
        self,
        execution: Execution,
        step: StepContext,
        session_id: str,
        name: str,
        model: Model,
        tools: list[Tool],
        system: str | None,
        manifest: Mapping[str, Any] | None,
        approval: ApprovalPolicy = False,
        compact: CompactionPolicy | None = None,
    ) -> None:
        self._x = execution
        self._approval = approval
        self._step = step
        self.session_id = session_id
        self.name = name
        self.model = model
        self.tools = {t.name: t for t in tools}
        self._redact = execution.world.redact
        self.system = self._redacted("system", system) if system is not None else None
        self._live_calls: dict[str, ToolCallRequest] = {}
        """The tool calls of the last model response as the model asked them (a redactor
        may have stripped secrets from the recorded ones): a live tool call gets these."""
        self._model_id = f"{model.provider}:{model.name}"
        self._specs = tuple(t.spec for t in tools)  # Tool.spec builds a new ToolSpec per access
        tools_json = [s.as_json() for s in self._specs]
        self.manifest: dict[str, Any] = {
            "model": self._model_id,
            "tools": tools_json,
            "system_prompt_hash": sha256_hex(system or ""),
            **dict(manifest or {}),
        }
        options = getattr(model, "request_options", None)
        if options:  # temperature, max tokens, ...: absent (not {}) for models without any
            self.manifest["model_options"] = _json_value(options)
        self._compaction = compact
        self._policy_hash = ""
        if compact is not None:  # absent (not null) without one: older manifests keep their hash
            policy = compact.as_json(self._model_id)
            summary_options = getattr(compact.summary_model, "request_options", None)
            if compact.summarize and summary_options:
                policy["summary_model_options"] = _json_value(summary_options)
            self.manifest["compaction"] = policy
            self._policy_hash = canonical_hash(policy)
        self._relinked = False  # the chain was relinked by a compaction (no "first request")
        self._recorded: SessionState | None = execution.replayed.session(session_id)
        self.turns = 0
        self._tokens = [0, 0, 0, 0]  # input, output, cached input, reasoning: this execution's
        self._tools_hash = canonical_hash(tools_json)
        # The request hash is a chain: the first link covers model, system prompt and tools;
        # each request extends the previous request's hash with the messages appended since.
        self._chain = canonical_hash(
            {"model": self._model_id, "system": system, "tools": tools_json}
        )
        self._hashed_messages = 0
        self._messages: list[Message] = []  # the conversation, across run() calls
        self._message_json: list[str] = []  # canonical JSON of each message, made once
        self._answer: str | None = None
        self._manifest_hash = manifest_hash(self.manifest)
        # a session holding a side-effecting tool is never answered from a record: replay
        # reuses answers, not effects
        self._side_effecting = any(t.side_effecting for t in tools)
        self._exchanges = 0  # run() calls so far: the occurrence of each agent call's node
        self._exchange_tokens = [0, 0, 0, 0]  # this exchange's usage, served turns included
        self._exchange_calls = 0  # this exchange's model calls, served turns included
        self._reserved = False  # a panel leg holding a budget reservation for its first call
        self._receipts_used: dict[tuple[str, str], int] = {}  # a full replay's, per call
        self._span: Any = None  # the session's span (tracing on): its calls' spans' parent

    async def __aenter__(self) -> AgentSession:
        if self._recorded is not None:
            assert_harness_manifest_consistent(self._x.replayed, self.session_id, self.manifest)
        else:
            # Deferred: nothing acts on it before the session's first write-ahead record, which
            # carries it; a crash before that leaves no session, and the resume starts it anew.
            # The system prompt is recorded (the manifest has its hash only), so every request
            # can be rebuilt from the log (``little export --format chat-jsonl``).
            system_json, system_ref = await self._x.store_text(canonical_json(self.system))
            self._defer(
                SessionStarted,
                session_name=self.name,
                model=self._model_id,
                manifest_json=canonical_json(self.manifest),
                manifest_hash=self._manifest_hash,
                system_json=system_json,
                system_ref=system_ref,
            )
        self._span = tracing.start_span(
            f"invoke_agent {self.name}",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.name,
                "gen_ai.agent.id": self.session_id,
                "gen_ai.request.model": self.model.name,
                "gen_ai.provider.name": self.model.provider,
                "little.run_id": self._x.run_id,
                "little.step": self._step.step_path,
                "little.session_id": self.session_id,
                "little.epoch": self._x.writer.epoch,
                "little.resumed": self._recorded is not None,
            },
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, self._span = self._span, None
        if span is not None:
            tracing.set_attributes(
                span,
                little_turns=self.turns,
                **{
                    "gen_ai.usage.input_tokens": self._tokens[0],
                    "gen_ai.usage.output_tokens": self._tokens[1],
                },
            )
            if exc is not None and not isinstance(exc, RunInterrupt):
                tracing.set_error(span, type(exc).__name__)
            span.end()
        if exc_type is not None:
            return  # not completed: a resume runs the session on from its log
        if self._recorded is None or self._recorded.status != "completed":
            # Deferred: it reaches the log with the step's next acked event. Every result of
            # the session is already durable (each run() flushes its last one).
            output_json, output_ref = await self._x.store_text(canonical_json(self._answer))
            self._defer(
                SessionCompleted,
                turns=self.turns,
                output_json=output_json,
                output_ref=output_ref,
                usage=_usage(self._tokens),
            )

    async def _emit(self, cls: Any, **fields: Any) -> Any:
        """Append and await the ack: write-ahead records, before the call they announce."""
        event, _ = await self._x.writer.emit(
            cls, step_path=self._step.step_path, session_id=self.session_id, **fields
        )
        return event

    def _defer(self, cls: Any, **fields: Any) -> Any:
        """A call's terminal record: it reaches the log with the next acked event."""
        return self._x.writer.defer(
            cls, step_path=self._step.step_path, session_id=self.session_id, **fields
        )

    # -- the loop ------------------------------------------------------------------------

    async def run(self, prompt: str, *, max_turns: int = 10) -> str | None:
        """Ask, call tools until the model answers without tool calls; return its text.

        Calling it again continues the same conversation (turn numbers go on from the last
        run's), so a session may hold several exchanges; ``max_turns`` bounds each call.

        Each call is an *agent call* (``agent.call.admitted`` / ``agent.call.settled``): in a
        run started with ``replay_from``, one whose ordinal and request match the recorded
        run's is answered from that record without invoking the model or any tool.
        """
        self._step._check_group()  # a branch stopped by a failed sibling admits nothing
        await self._compact_if_due()
        return await self._run_admitted(self._admit(prompt, max_turns), prompt, max_turns)

    # -- compaction of the history (little.runtime._compaction) ----------------------------

    async def _compact_if_due(self) -> None:
        """Before an exchange: compact the conversation if the session's policy says it is
        due, or reuse the compaction this run recorded here (a resume: no summary again)."""
        policy = self._compaction
        if policy is None:
            return
        exchange = self._exchanges
        conversation = self._json_of(0)
        recorded = self._recorded.compaction(exchange) if self._recorded is not None else None
        if recorded is not None:
            where = f"run {self._x.run_id}: session {self.session_id} exchange {exchange}"
            if recorded.policy_hash != self._policy_hash:
                raise CapabilityDriftError(
                    f"{where}: the history was compacted under policy "
                    f"{recorded.policy_hash[:12]}... but the session's is "
                    f"{self._policy_hash[:12]}... (changed: compaction): start a new run"
                )
            if recorded.replaced_hash != sha256_hex(conversation):
                raise SessionDivergedError(
                    f"{where}: the log compacted another conversation than the one rebuilt "
                    "now (non-deterministic code before this exchange?)"
                )
            text = await self._x.load_text(recorded.history_json, recorded.history_ref)
            self._install(json.loads(text or "[]"), recorded.history_hash)
            return
        if not self._messages or not policy.due(self._messages, conversation):
            return
        replaced = list(self._messages)
        cut = policy.cut(replaced)
        if cut == 0:
            return  # everything is to be kept: nothing to compact
        history: list[Message] = replaced[cut:]
        summary_session: str | None = None
        if policy.summarize:
            summary, summary_session = await self._summarize(exchange, replaced[:cut])
            history = [
                {"role": "user", "content": SUMMARY_PREFIX + (summary or "")},
                {"role": "assistant", "content": SUMMARY_ACK},
                *history,
            ]
        previous = self._chain if self._hashed_messages or self._relinked else None
        link = compaction_link(self._chain, self._policy_hash, history)
        history_json, history_ref = await self._x.store_text(canonical_json(history))
        # Deferred: the exchange's first write-ahead record carries it. A kill before loses it
        # with that record; the resume compacts again the same way (a trim is a function of
        # the conversation, and a summary is served from its own recorded agent call).
        self._defer(
            SessionCompacted,
            exchange=exchange,
            policy_json=canonical_json(self.manifest["compaction"]),
            policy_hash=self._policy_hash,
            replaced_messages=len(replaced),
            replaced_hash=sha256_hex(conversation),
            previous_request_hash=previous,
            history_json=history_json,
            history_ref=history_ref,
            history_hash=link,
            summary_session_id=summary_session,
        )
        self._install(history, link)

    async def _summarize(self, exchange: int, replaced: list[Message]) -> tuple[str | None, str]:
        """The summary of ``replaced``: an agent call of a session of its own, recorded (and on
        a resume or a replay served) like any other."""
        policy = self._compaction
        assert policy is not None
        name = f"{self.name}~compact{exchange}"
        session_id = f"{self.session_id}~compact{exchange}"
        if session_id in self._step._sessions:
            raise ConfigurationError(
                f"run {self._x.run_id}: step {self._step.step_path} already has a session "
                f"{session_id!r}; {self.name!r}'s compaction summary needs that name"
            )
        self._step._sessions.add(session_id)
        # a full replay asks its own model for every call, summaries included
        model = self._x.model or policy.summary_model or self.model
        summarizer = AgentSession(
            self._x, self._step, session_id, name, model, [], policy.summary_prompt, None
        )
        async with summarizer:
            summary = await summarizer.run(canonical_json(replaced), max_turns=1)
        return summary, session_id

    def _install(self, history: list[Message], link: str) -> None:
        """The compacted history replaces the conversation; the request hash chain goes on
        from the compaction's link, every message of the history counted as hashed."""
        self._messages[:] = history
        self._message_json[:] = [canonical_json(m) for m in history]
        self._hashed_messages = len(history)
        self._chain = link
        self._relinked = True

    async def _run_admitted(
        self, call: _AgentCallTicket, prompt: str, max_turns: int
    ) -> str | None:
        """Run an admitted agent call to its settlement: served, or fresh."""
        messages = self._messages
        start = len(messages)
        if call.served is not None:
            return await self._serve(call)
        messages.append({"role": "user", "content": self._redacted("prompt", prompt)})
        self._exchange_tokens = [0, 0, 0, 0]
        self._exchange_calls = 0
        answer: str | None = None
        try:
            for _ in range(max_turns):
                self.turns += 1
                turn = self.turns
                response = await self._model_turn(turn, messages)
                messages.append(response.as_message())
                if not response.tool_calls:
                    answer = response.content
                    break
                for call_request in response.tool_calls:
                    messages.append(await self._tool_call(turn, call_request))
        except RunInterrupt as exc:
            # a branch stopped between turns settles its call (it did not finish, and the
            # run is ending); a suspension or a stop leaves it in flight, for the resume
            if not call.settled and isinstance(exc, BranchStopped):
                await self._settle(call, "failed", None, messages[start:])
            raise
        except Exception as exc:
            # so does a spent budget; an error that ends the writer (or the run as itself)
            # leaves it in flight too
            ended = isinstance(exc, BudgetExceededError)
            if not call.settled and (ended or not isinstance(exc, ENDS_THE_RUN)):
                await self._settle(call, "failed", None, messages[start:])
            raise
        self._answer = answer
        if not call.settled:
            await self._settle(call, "succeeded", answer, messages[start:])
        # Inside the loop a result rides with the next write-ahead record, which follows at
        # once; the last one is made durable here, so work after the session never puts the
        # session's final answer at risk.
        await self._x.writer.flush()
        return answer

    # -- agent calls (recorded-call replay) ------------------------------------------------

    def _admit(self, prompt: str, max_turns: int) -> _AgentCallTicket:
        """Admit this exchange as an agent call: its ordinal, request key and node, and the
        record that answers it (this run's own, on a resume; the source run's, on a replay)."""
        calls = self._x.agent_calls
        occurrence = self._exchanges
        self._exchanges += 1
        label = self.session_id.split("#", 1)[1]  # the name, with @visit on later visits
        node = (self._step.step_path, label, occurrence)
        key = canonical_hash(
            {
                "manifest": self._manifest_hash,
                "node": list(node),
                "conversation": sha256_hex(self._json_of(0)),
                "prompt": prompt,
                "max_turns": max_turns,
            }
        )
        ordinal, place = calls.admit(node, self._step.scope)
        own = calls.own.get(ordinal)
        if own is not None and own.request_key != key:
            raise SessionDivergedError(
                f"run {self._x.run_id}: agent call {ordinal} ({self.session_id}) has request "
                f"{key[:12]}... but the log recorded {own.request_key[:12]}...: the workflow "
                "diverged from its log (non-deterministic code before this call?)"
            )
        ticket = _AgentCallTicket(ordinal)
        if own is not None and own.outcome == "succeeded":
            ticket.settled = True  # settled in this run's log before a crash: write nothing
            if own.replayed:
                ticket.served = own  # answered from the source run: no turns to fast-forward
            # else: its turns and tool calls are served from this run's log one by one, so
            # turn numbers and the request hash chain go on exactly as the first time
            return ticket
        try:
            served, miss = calls.decide(ordinal, place, key, node, self._side_effecting)
        except SimulationDivergedError as exc:
            if exc.miss_reason != MISS_KEY or self._configuration_miss() is None:
                raise
            # a simulation says why the request changed, as a replay's settlement does
            raise SimulationDivergedError(
                str(exc).removesuffix(MISS_KEY) + MISS_CONFIG_CHANGED,
                ordinal=exc.ordinal,
                miss_reason=MISS_CONFIG_CHANGED,
                place=exc.place,
            ) from None
        if miss == MISS_KEY:
            miss = self._configuration_miss() or miss
        ticket.miss = miss
        if own is None and ordinal not in calls.admitted:
            self._defer(
                AgentCallAdmitted,
                ordinal=ordinal,
                request_key=key,
                node_phase=node[0],
                node_label=node[1],
                node_occurrence=node[2],
                side_effecting=self._side_effecting,
                scope=place[0],
            )
        calls.admitted.add(ordinal)
        if served is not None:
            ticket.served = served
            ticket.source_run_id = calls.source.source_run_id if calls.source else None
        return ticket

    def _configuration_miss(self) -> str | None:
        """``configuration-changed`` when the source run's session of this id was configured
        otherwise (its manifest), naming what changed in the log; None when it was not."""
        source = self._x.agent_calls.source
        recorded = source.state.session(self.session_id) if source and source.state else None
        if recorded is None or recorded.manifest_hash == self._manifest_hash:
            return None
        try:
            then = json.loads(recorded.manifest_json)
        except ValueError:
            then = {}
        log.warning(
            "replay_session_configuration_changed",
            run_id=self._x.run_id,
            session_id=self.session_id,
            source_run_id=source.source_run_id if source else None,
            changed=sorted(
                k for k in {*then, *self.manifest} if then.get(k) != self.manifest.get(k)
            ),
        )
        return MISS_CONFIG_CHANGED

    async def _serve(self, ticket: _AgentCallTicket) -> str | None:
        """Answer an admitted call from a record: its answer, and its messages added to the
        conversation (so a later exchange sees what the model saw the first time)."""
        served = ticket.served
        assert served is not None
        try:
            text = await self._x.load_text(served.result_json, served.result_ref) or "{}"
            result = json.loads(text)
        except Exception as exc:
            if isinstance(exc, ENDS_THE_RUN):
                raise
            # a recorded answer that cannot be served ends the replay here, even if the
            # workflow catches the error: no later call may be answered from the record
            self._x.agent_calls.refuse(ticket.ordinal)
            if not ticket.settled:
                self._defer(
                    AgentCallSettled,
                    ordinal=ticket.ordinal,
                    outcome="failed",
                    replayed=False,
                    source_run_id=ticket.source_run_id,
                    miss_reason=MISS_RECORD_UNUSABLE,
                    provider=self.model.provider,
                    model=self.model.name,
                    model_calls=0,
                )
                await self._x.writer.flush()
            raise
        added: list[Message] = result.get("messages") or []
        self._advance_through(added, ticket.ordinal)
        answer: str | None = result.get("answer")
        self._answer = answer
        with tracing.span(
            f"chat {served.model or self.model.name}",
            self._model_attributes(
                served.provider or self.model.provider,
                served.model or self.model.name,
                served.usage,
            )
            | {
                "little.served_from_log": False,
                "little.replayed": True,
                "little.replay_source_run_id": ticket.source_run_id,
                "little.ordinal": ticket.ordinal,
                "little.model_calls": served.model_calls,
            },
            parent=tracing.in_span(self._span),
        ):
            pass
        if not ticket.settled:  # served from the source run: record that it was
            result_json, result_ref = await self._x.store_text(text)
            self._defer(
                AgentCallSettled,
                ordinal=ticket.ordinal,
                outcome="succeeded",
                result_json=result_json,
                result_ref=result_ref,
                # what the recorded call cost: counted as avoided, never billed
                usage=served.usage,
                replayed=True,
                source_run_id=ticket.source_run_id,
                provider=served.provider,
                model=served.model,
                model_calls=served.model_calls,
            )
            await self._x.writer.flush()
        return answer

    def _refuse(self, ticket: _AgentCallTicket, miss: str | None) -> None:
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
            provider=self.model.provider,
            model=self.model.name,
            model_calls=0,
        )

    async def _settle(
        self, ticket: _AgentCallTicket, outcome: str, answer: str | None, added: list[Message]
    ) -> None:
        result_json, result_ref = await self._x.store_text(
            canonical_json({"answer": answer, "messages": added})
        )
        self._defer(
            AgentCallSettled,
            ordinal=ticket.ordinal,
            outcome=outcome,
            result_json=result_json,
            result_ref=result_ref,
            usage=_usage(self._exchange_tokens),
            replayed=False,
            miss_reason=ticket.miss,
            provider=self.model.provider,
            model=self.model.name,
            model_calls=self._exchange_calls,
        )

    def _advance_through(self, added: list[Message], ordinal: int) -> None:
        """Add a served exchange's messages and advance the session as the recorded exchange
        did: one turn, and one link of the request hash chain, per model answer in it (the
        request of that turn being the conversation up to the answer). In a simulation each
        link is checked against the request hash the golden run recorded for that turn: a
        changed canonical JSON or chain would build requests a resume of a recorded run
        refuses (``SessionDivergedError``), so it is a divergence here."""
        simulating = SIMULATING.get()
        source = self._x.agent_calls.source_run_id
        for message in added:
            if message.get("role") == "assistant":
                self.turns += 1
                self._chain = chain_hash(self._chain, self._json_of(self._hashed_messages))
                self._hashed_messages = len(self._messages)
                if simulating is not None and source is not None:
                    recorded = simulating.requests.get((source, self.session_id, self.turns))
                    if recorded is not None and recorded != self._chain:
                        raise SimulationDivergedError(
                            f"agent call {ordinal} ({self.session_id}): turn {self.turns} "
                            f"builds request {self._chain[:12]}... but the golden run "
                            f"recorded {recorded[:12]}...: the request hash chain changed",
                            ordinal=ordinal,
                            miss_reason=MISS_REQUEST_CHANGED,
                            place=self._x.agent_calls.place_of(ordinal),
                        )
            self._messages.append(message)

    def _redacted(self, where: str, value: Any) -> Any:
        """What is recorded of ``value`` (``World.redact``; the value itself without one)."""
        return value if self._redact is None else self._redact(where, value)

    def _json_of(self, start: int) -> str:
        """``canonical_json(self._messages[start:])``, serialising each message once: the
        canonical JSON of a list is its items' joined by commas, so the text (and every hash of
        it) is the same, while a long conversation costs its new messages only."""
        parts = self._message_json
        for message in self._messages[len(parts) :]:
            parts.append(canonical_json(message))
        return "[" + ",".join(parts[start:]) + "]"

    async def _model_turn(self, turn: int, messages: list[Message]) -> ModelResponse:
        # serialised once: the same canonical JSON extends the hash chain and is recorded
        appended_text = self._json_of(self._hashed_messages)
        # None on turn 1 (a compaction relinks the chain: never a first request after one)
        previous_hash = self._chain if self._hashed_messages or self._relinked else None
        request_hash = chain_hash(self._chain, appended_text)
        self._chain = request_hash
        self._hashed_messages = len(messages)
        recorded = self._recorded.turn(turn) if self._recorded is not None else None
        if recorded is not None and recorded.request_hash != request_hash:
            raise SessionDivergedError(
                f"run {self._x.run_id}: session {self.session_id} turn {turn} builds request "
                f"{request_hash[:12]}... but the log recorded {recorded.request_hash[:12]}...: the "
                "conversation diverged from its log (non-deterministic code before this call?)"
            )
        if recorded is not None and recorded.status == "responded" and recorded.usage is not None:
            text = await self._x.load_text(recorded.response_json, recorded.response_ref)
            self._x.count_served()
            self._count_exchange(recorded.usage)
            with tracing.span(
                f"chat {self.model.name}",
                self._model_attributes(self.model.provider, self.model.name, recorded.usage)
                | {"little.turn": turn, "little.served_from_log": True, "little.replayed": False},
                parent=tracing.in_span(self._span),
            ):
                pass
            return ModelResponse.from_json(text or "{}", recorded.usage)
        with tracing.span(
            f"chat {self.model.name}",
            self._model_attributes(self.model.provider, self.model.name, None)
            | {
                "little.turn": turn,
                "little.served_from_log": False,
                "little.replayed": False,
                "little.reinvoked": recorded is not None and recorded.status == "called",
            },
            parent=tracing.in_span(self._span),
        ) as span:
            response = await self._fresh_turn(
                turn, messages, recorded, request_hash, previous_hash, appended_text, span
            )
            if span is not None and span.is_recording():
                span.set_attributes(
                    self._model_attributes(self.model.provider, self.model.name, response.usage)
                )
                if response.finish_reason:
                    span.set_attribute("gen_ai.response.finish_reasons", (response.finish_reason,))
            return response

    def _model_attributes(self, provider: str, model: str, usage: Usage | None) -> dict[str, Any]:
        """The GenAI semantic conventions of a model call's span, and little's own."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": provider,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "little.run_id": self._x.run_id,
            "little.step": self._step.step_path,
            "little.session_id": self.session_id,
            "little.epoch": self._x.writer.epoch,
        }
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            if tracing.enabled():
                price = price_usd(provider, model, usage, datetime.now(UTC))
                if price is not None:
                    attributes["little.cost_usd"] = float(price)
        return attributes

    async def _fresh_turn(
        self,
        turn: int,
        messages: list[Message],
        recorded: Any,
        request_hash: str,
        previous_hash: str | None,
        appended_text: str,
        span: Any,
    ) -> ModelResponse:
        self._step._check_group()
        self._x.check_budget(reserved=self._reserved)
        self._reserved = False
        if recorded is not None and recorded.status == "called":  # in flight at a stop
            self._x.count_reinvoked()
        appended_json, appended_ref = await self._x.store_text(appended_text)
        called = await self._emit(
            ModelCalled,
            turn=turn,
            provider=self.model.provider,
            model=self.model.name,
            request_hash=request_hash,
            previous_request_hash=previous_hash,
            appended_messages_json=appended_json,
            appended_messages_ref=appended_ref,
            message_count=len(messages),
            tools_hash=self._tools_hash,
        )
        tracing.set_attributes(span, little_seq=called.seq)
        request = ModelRequest(self.system, tuple(messages), self._specs)
        try:
            response = await self.model.complete(request)
        except Exception as exc:
            FAULTS.call_returned()
            await self._emit(
                ModelFailed,
                turn=turn,
                provider=self.model.provider,
                model=self.model.name,
                request_hash=request_hash,
                error_type=type(exc).__name__,
                message=self._redacted("model_error", str(exc)),
                retryable=True,
            )
            raise
        FAULTS.call_returned()
        text = response.to_json()  # canonical
        if self._redact is not None:
            # the conversation goes on with what is recorded, so a resume rebuilds the same
            # requests; a live tool call still gets the arguments the model asked for
            self._live_calls = {c.id: c for c in response.tool_calls}
            text = canonical_json(self._redacted("model_response", json.loads(text)))
            response = ModelResponse.from_json(text, response.usage)
        response_json, response_ref = await self._x.store_text(text)
        self._defer(
            ModelResponded,
            turn=turn,
            provider=self.model.provider,
            model=self.model.name,
            request_hash=request_hash,
            response_json=response_json,
            response_ref=response_ref,
            usage=response.usage,
            finish_reason=response.finish_reason,
        )
        self._x.billed(response.usage.input_tokens, response.usage.output_tokens)
        _add_usage(self._tokens, response.usage)
        self._count_exchange(response.usage)
        return response

    def _needs_approval(self, tool: Tool, arguments: dict[str, Any]) -> bool:
        if tool.requires_approval:
            return True
        policy = self._approval
        return bool(policy(tool.name, arguments)) if callable(policy) else bool(policy)

    async def _approval_of(self, call_id: str, call: ToolCallRequest) -> str | None:
        """Record the approval request (tool, arguments, call id) and wait for the decision,
        durably; None if approved, else the rejection the model is told as the tool's error."""
        approval_id = f"{self.session_id}/{call_id}"
        details = {
            "tool": call.name,
            "arguments": call.arguments,
            "call_id": approval_id,
            "session_id": self.session_id,
        }
        wait = await self._x.waits.approval(self.session_id, approval_id, details)
        if wait.outcome == "approved":
            return None
        decision = None
        if wait.signal_id is not None:
            decision = json.loads(self._x.waits.signals[wait.signal_id].payload_json)
        reason = decision.get("reason") if isinstance(decision, dict) else None
        return f"rejected by a person: {reason}" if reason else "rejected by a person"

    def _count_exchange(self, u: Usage) -> None:
        self._exchange_calls += 1
        _add_usage(self._exchange_tokens, u)

    async def _tool_call(self, turn: int, call: ToolCallRequest) -> Message:
        call_id = f"{turn}:{call.id}"
        recorded = self._recorded.tool_call(call_id) if self._recorded is not None else None
        served = recorded is not None and recorded.status in ("succeeded", "failed")
        with tracing.span(
            f"execute_tool {call.name}",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "little.run_id": self._x.run_id,
                "little.step": self._step.step_path,
                "little.session_id": self.session_id,
                "little.call_id": call_id,
                "little.turn": turn,
                "little.epoch": self._x.writer.epoch,
                "little.served_from_log": served,
                "little.replayed": False,
                "little.reinvoked": recorded is not None and not served,
            },
            parent=tracing.in_span(self._span),
        ) as span:
            return await self._tool_call_in(turn, call, call_id, recorded, span)

    async def _tool_call_in(
        self, turn: int, call: ToolCallRequest, call_id: str, recorded: Any, span: Any
    ) -> Message:
        # as recorded (redacted): the form a full replay finds its source's receipts by
        arguments_json = canonical_json(self._redacted("tool_arguments", call.arguments))
        receipt, from_receipts = self._x.receipt(
            self.session_id, call.name, arguments_json, self._receipts_used
        )
        if recorded is not None and recorded.status == "succeeded":
            text = await self._x.load_text(recorded.result_json, recorded.result_ref)
            return _tool_message(call.id, text)
        if recorded is not None and recorded.status == "failed":
            return _tool_message(call.id, canonical_json({"error": recorded.error}))
        key = f"{self._x.run_id}/{self._step.step_path}/{call_id}"
        live = self._live_calls.pop(call.id, call)
        tool = self.tools.get(call.name)
        attempt = 2 if recorded is not None else 1
        self._step._check_group()
        if from_receipts:  # a full replay: answered from the source run's receipt
            tracing.set_attributes(
                span,
                little_replayed=receipt is not None,
                little_replay_source_run_id=self._x.agent_calls.source_run_id,
            )
            return await self._served_tool_call(turn, call_id, call, arguments_json, key, receipt)
        if tool is not None and self._needs_approval(tool, live.arguments):
            rejected = await self._approval_of(call_id, call)
            if rejected is not None:
                return _tool_message(call.id, canonical_json({"error": rejected}))
        started = await self._emit(
            ToolCallStarted,
            call_id=call_id,
            tool=call.name,
            turn=turn,
            arguments_json=arguments_json,
            idempotency_key=key,
        )
        tracing.set_attributes(span, little_seq=started.seq, little_idempotency_key=key)
        try:
            if tool is None:
                raise ToolError(f"the model called unknown tool {call.name!r}")
            ctx = ToolContext(self._x.run_id, self._step.step_path, call_id, key, attempt)
            result = await tool.invoke(live.arguments, ctx)
        except RunInterrupt:  # a sub-run it started suspended or stopped: not its failure
            FAULTS.call_returned()
            raise
        except Exception as exc:
            FAULTS.call_returned()
            if isinstance(exc, ENDS_THE_RUN):
                raise
            error = f"{type(exc).__name__}: {self._redacted('tool_error', str(exc))}"
            tracing.set_error(span, type(exc).__name__)
            self._defer(
                ToolCallFailed,
                call_id=call_id,
                tool=call.name,
                error_type=type(exc).__name__,
                message=self._redacted("tool_error", str(exc)),
                retryable=False,
            )
            return _tool_message(call.id, canonical_json({"error": error}))
        FAULTS.call_returned()
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
        return _tool_message(call.id, result_text)

    async def _served_tool_call(
        self,
        turn: int,
        call_id: str,
        call: ToolCallRequest,
        arguments_json: str,
        key: str,
        receipt: Receipt | None,
    ) -> Message:
        """A full replay's tool call: answered from the source run's receipt of the same tool
        and arguments (its result, or its error), never invoked; without one it fails as the
        tool's error (the model sees it, the log records it), since a full replay runs no tool
        unless ``live_tools``."""
        source = self._x.agent_calls.source_run_id
        await self._emit(
            ToolCallStarted,
            call_id=call_id,
            tool=call.name,
            turn=turn,
            arguments_json=arguments_json,
            idempotency_key=key,
        )
        failure: tuple[str, str] | None = None
        if receipt is not None and receipt[2] is not None:  # it failed when recorded
            error_type, _, message = receipt[2].partition(": ")
            failure = (error_type, message)
        elif receipt is None:
            failure = (
                "ToolNotRecorded",
                f"{call.name}({arguments_json}) is not among the tool calls of session "
                f"{self.session_id} in recorded run {source} (or it was called more often "
                "here), and a full replay runs no tool unless live_tools is set",
            )
        if failure is not None:
            self._defer(
                ToolCallFailed,
                call_id=call_id,
                tool=call.name,
                error_type=failure[0],
                message=failure[1],
                retryable=False,
            )
            error = f"{failure[0]}: {failure[1]}"
            return _tool_message(call.id, canonical_json({"error": error}))
        assert receipt is not None
        result_json, result_ref, _ = receipt
        text = await self._x.load_text(result_json, result_ref)
        self._defer(
            ToolCallSucceeded,
            call_id=call_id,
            tool=call.name,
            result_json=result_json,
            result_ref=result_ref,
            replayed_from_run_id=source,
        )
        return _tool_message(call.id, text)


async def run_panel(
    step: StepContext, legs: Sequence[tuple[AgentSession, str]], max_turns: int
) -> list[str | None]:
    """``StepContext.panel``: admit every leg in list order, decide the panel as a whole
    (served, fresh, or a refused mix), reserve a fresh panel's calls, then run the legs at
    once and drain them."""
    x = step._x
    where = f"run {x.run_id}: step {step.step_path}"
    if isinstance(legs, str | bytes) or not legs:
        raise ConfigurationError(f"{where}: a panel needs a non-empty list of legs, not {legs!r}")
    sessions: list[AgentSession] = []
    for i, leg in enumerate(legs):
        if not (
            isinstance(leg, tuple)
            and len(leg) == 2
            and isinstance(leg[0], AgentSession)
            and isinstance(leg[1], str)
        ):
            raise ConfigurationError(
                f"{where}: panel leg {i} is {leg!r}, not a (session, prompt) pair"
            )
        session = leg[0]
        if session._step is not step:
            raise ConfigurationError(
                f"{where}: panel leg {i} uses session {session.session_id}, opened by another "
                "step: open each leg's session in the step that runs the panel"
            )
        if session in sessions:
            raise ConfigurationError(
                f"{where}: panel legs {sessions.index(session)} and {i} share session "
                f"{session.name!r}, which holds one conversation: give each leg its own session"
            )
        sessions.append(session)
    step._check_group()
    for session in sessions:  # each leg's history compacted first, in list order
        await session._compact_if_due()
    tickets = [s._admit(prompt, max_turns) for s, prompt in legs]  # in list order, no await
    recorded = [t.served is not None for t in tickets]
    if any(recorded) and not all(recorded):
        for session, ticket in zip(sessions, tickets, strict=True):
            session._refuse(ticket, ticket.miss or MISS_PANEL_MIXED)
        await x.writer.flush()
        legs_of = ", ".join(
            f"{i} {'recorded' if r else f'fresh ({t.miss})'}"
            for i, (r, t) in enumerate(zip(recorded, tickets, strict=True))
        )
        raise PanelMixedError(
            f"{where}: panel resume cannot mix recorded and fresh agent calls (legs: {legs_of}); "
            "edit the workflow so the panel's legs all change or none does, or run it without "
            "replay_from"
        )
    fresh = [i for i, t in enumerate(tickets) if t.served is None and not t.settled]
    if fresh:
        try:
            x.reserve_calls(len(fresh), step.step_path)
        except BudgetExceededError:
            for i in fresh:
                sessions[i]._refuse(tickets[i], tickets[i].miss)
            await x.writer.flush()
            raise
        for i in fresh:
            sessions[i]._reserved = True

    async def run_leg(i: int) -> str | None:
        session = sessions[i]
        try:
            return await session._run_admitted(tickets[i], legs[i][1], max_turns)
        finally:
            if session._reserved:  # ended without a fresh model call: give it back
                session._reserved = False
                x.release_call()

    tasks = [asyncio.ensure_future(run_leg(i)) for i in range(len(legs))]
    answers = await drain(tasks, [s.name for s in sessions], lambda _: None)
    return list(answers)


class _AgentCallTicket:
    """One admitted agent call on its way to settlement."""

    __slots__ = ("miss", "ordinal", "served", "settled", "source_run_id")

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self.served: AgentCall | None = None
        self.settled = False
        self.source_run_id: str | None = None
        self.miss: str | None = None


def compaction_link(previous: str, policy_hash: str, history: list[Message]) -> str:
    """The request hash chain's link after a compaction: the previous link extended with the
    policy and the history that replaces the conversation (``harness.session.compacted``'s
    ``history_hash``; ``little.chat`` checks it the same way)."""
    return chain_hash(previous, canonical_json({"compacted": policy_hash, "history": history}))


def _add_usage(totals: list[int], u: Usage) -> None:
    """Add ``u`` to ``[input, output, cached input, reasoning]`` token totals (ints: building a
    Usage per model call was a measurable share of the harness's own time)."""
    totals[0] += u.input_tokens
    totals[1] += u.output_tokens
    totals[2] += u.cached_input_tokens
    totals[3] += u.reasoning_tokens


def _usage(totals: list[int]) -> Usage:
    return Usage(
        input_tokens=totals[0],
        output_tokens=totals[1],
        cached_input_tokens=totals[2],
        reasoning_tokens=totals[3],
    )


def _tool_message(call_id: str, content: str | None) -> Message:
    """The message that gives the model a tool call's result (or error)."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _json_value(value: Any) -> Any:
    """``value`` as JSON data for a manifest: values JSON cannot hold (an SDK object, say) are
    named by their type, so the manifest stays hashable and stable across processes."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def workflow_tool(step: StepContext, name: str = "run_workflow") -> Tool:
    """A tool that runs a registered workflow as a sub-run: ``{"workflow": ..., "input": ...}``.

    The sub-run id is reserved per tool call before the sub-run starts; a re-invoked call gets
    the same id, and a sub-run whose own log is already complete is not executed again.
    """

    async def run_workflow(args: dict[str, Any], ctx: ToolContext) -> Any:
        return await step.start_workflow(args["workflow"], args.get("input"), call_id=ctx.call_id)

    return Tool(
        name,
        run_workflow,
        "Run a registered workflow as a durable sub-run and return its output.",
        {
            "type": "object",
            "properties": {"workflow": {"type": "string"}, "input": {}},
            "required": ["workflow"],
        },
    )
