"""Agent sessions: the conversation loop of ``step.session(...)`` and its request hash chain.

A session asks the model, calls the tools it names and asks again until it answers without tool
calls; each request extends a hash chain over the conversation. Every agent call, model turn and
tool call goes through the recording kernel (``little.runtime._recording``): recorded
write-ahead, served from a record or invoked, settled. The session never asks where an answer
comes from, and imports nothing of the workflow context (its step is a ``SessionStep``).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel

from little._canonical import canonical_hash, canonical_json, chain_hash, sha256_hex
from little.errors import ConfigurationError, StreamStoppedError
from little.harness import (
    Content,
    McpServer,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    OutputSchema,
    Tool,
    ToolCallRequest,
)
from little.harness.content import tool_content
from little.replay import manifest_hash
from little.runtime._compaction import SUMMARY_ACK, SUMMARY_PREFIX, CompactionPolicy
from little.runtime._errors import ENDS_THE_RUN, OutputValidationError
from little.runtime._mcp_listing import list_mcp_server
from little.runtime._model_turns import SessionStep, TurnRequest
from little.runtime._output import (
    DEFAULT_OUTPUT_RETRIES,
    Output,
    OutputType,
    output_of,
    retry_prompt,
)
from little.runtime._recording import SETTLING, AgentCallTicket, ApprovalPolicy, Recorder
from little.runtime._streaming import AgentStream, OnDelta, TurnDeltas, drive, model_stream
from little.runtime._tool_calls import DEFAULT_MAX_PARALLEL_TOOLS, run_tool_calls

if TYPE_CHECKING:
    from little.runtime._execution import Execution

__all__ = ["AgentSession", "AgentStream", "ApprovalPolicy", "compaction_link"]

Plan = tuple[Output, int] | None
"""An agent call's structured output and how many retries it gets (None: free text)."""


T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class AgentSession(Generic[T]):
    """``async with step.session(...) as agent: answer = await agent.run(prompt)``; ``T`` is
    what ``run`` answers with (``str | None``, or the session's structured output)."""

    def __init__(
        self,
        execution: Execution,
        step: SessionStep,
        session_id: str,
        name: str,
        model: Model,
        tools: Sequence[Tool | McpServer],
        system: str | None,
        manifest: Mapping[str, Any] | None,
        approval: ApprovalPolicy = False,
        compact: CompactionPolicy | None = None,
        max_parallel_tools: int = DEFAULT_MAX_PARALLEL_TOOLS,
        output: OutputType | None = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
    ) -> None:
        where = f"run {execution.run_id}: session {session_id!r}"
        self._plan = (
            None if output is None else (output_of(output, where), _retries(output_retries, where))
        )
        """The session's structured output (``output=`` at open), every call's unless it
        names its own: part of the manifest."""
        self._where = where
        self._output_retries = _retries(output_retries, where)
        if (
            isinstance(max_parallel_tools, bool)
            or not isinstance(max_parallel_tools, int)
            or max_parallel_tools < 1
        ):
            raise ConfigurationError(
                f"run {execution.run_id}: session {session_id!r}: max_parallel_tools must be "
                f"a whole number of 1 or more (1: one tool call after the other), not "
                f"{max_parallel_tools!r}"
            )
        self.max_parallel_tools = max_parallel_tools
        """How many tool calls of one model turn run at once (not configuration: the answers
        go back in the model's order whatever it is, so it is in no key)."""
        self._x = execution
        self._step = step
        self.session_id = session_id
        self.name = name
        self.model = model
        self._approval = approval
        self._extra_manifest = manifest
        self._servers = [t for t in tools if isinstance(t, McpServer)]
        """MCP servers: listed (a recorded call) when the session opens, then configured."""
        self._compaction = compact
        self._system_given = system
        if not self._servers:
            self._configure([t for t in tools if isinstance(t, Tool)])
        else:
            self._plain = [t for t in tools if isinstance(t, Tool)]

    def _configure(self, tools: list[Tool]) -> None:
        """The session's tools, manifest, request hash chain and recorder (at once, or once its
        MCP servers are listed)."""
        execution, step, session_id = self._x, self._step, self.session_id
        model, system, compact = self.model, self._system_given, self._compaction
        approval, manifest = self._approval, self._extra_manifest
        self.tools = {t.name: t for t in tools}
        self._live_calls: dict[str, ToolCallRequest] = {}
        """The tool calls of the last model response as the model asked them (a redactor
        may have stripped secrets from the recorded ones): a live tool call gets these."""
        self._redacts = execution.world.redact is not None
        model_id = f"{model.provider}:{model.name}"
        self._specs = tuple(t.spec for t in tools)  # Tool.spec builds a new ToolSpec per access
        tools_json = [s.as_json() for s in self._specs]
        self.manifest: dict[str, Any] = {
            "model": model_id,
            "tools": tools_json,
            "system_prompt_hash": sha256_hex(system or ""),
            **dict(manifest or {}),
        }
        options = getattr(model, "request_options", None)
        if options:  # temperature, max tokens, ...: absent (not {}) for models without any
            self.manifest["model_options"] = _json_value(options)
        self._policy_hash = ""
        if compact is not None:  # absent (not null) without one: older manifests keep their hash
            policy = compact.as_json(model_id)
            summary_options = getattr(compact.summary_model, "request_options", None)
            if compact.summarize and summary_options:
                policy["summary_model_options"] = _json_value(summary_options)
            self.manifest["compaction"] = policy
            self._policy_hash = canonical_hash(policy)
        if self._plan is not None:  # absent (not null) without one: older manifests keep their hash
            self.manifest["output"] = self._plan[0].as_json()
        gates = approval_manifest(tools, approval)
        if gates is not None and not _recorded_before_approvals(
            execution, session_id, self.manifest
        ):
            # absent (not null) when nothing waits for a person: older manifests keep their hash
            self.manifest["approval"] = gates
        self._relinked = False  # the chain was relinked by a compaction (no "first request")
        self.turns = 0
        self._tools_hash = canonical_hash(tools_json)
        # The request hash is a chain: the first link covers model, system prompt and tools;
        # each request extends the previous request's hash with the messages appended since.
        self._chain = canonical_hash({"model": model_id, "system": system, "tools": tools_json})
        self._hashed_messages = 0
        self._messages: list[Message] = []  # the conversation, across run() calls
        self._message_json: list[str] = []  # canonical JSON of each message, made once
        self._conversation = hashlib.sha256()
        """sha256 fed with ``_json_of(0)`` but its closing bracket, message by message
        (``_conversation_hash``)."""
        self._conversation_fed = 0
        self._answer: str | None = None
        self._stream: AgentStream[Any] | None = None
        """The session's stream still open (``stream()``): closed, as stopped early, when the
        session ends or its next exchange starts."""
        self._recorder = Recorder(
            execution,
            step,
            session_id,
            model.provider,
            model.name,
            self.manifest,
            # a session holding a side-effecting tool is never answered from a record: replay
            # reuses answers, not effects
            any(t.side_effecting for t in tools),
            approval,
        )
        self.system = self._recorder.redacted("system", system) if system is not None else None

    async def __aenter__(self) -> AgentSession[T]:
        if self._servers:
            try:
                listed = [
                    await list_mcp_server(self._x, self._step, self.session_id, self.name, server)
                    for server in self._servers
                ]
            except BaseException:
                await self._close_servers()
                raise
            self._configure([*self._plain, *(t for tools in listed for t in tools)])
        await self._recorder.start(self.name, self.system)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._close_stream()  # a stream left unread: its consumer stopped early
            await self._recorder.finish(self.turns, self._answer, exc)
        finally:
            await self._close_servers()

    async def _close_servers(self) -> None:
        for server in self._servers:
            await server.aclose()

    # -- the loop ------------------------------------------------------------------------

    @overload
    async def run(
        self,
        prompt: Content,
        *,
        max_turns: int = ...,
        output: None = None,
        output_retries: int | None = ...,
        on_delta: OnDelta | None = ...,
    ) -> T: ...

    @overload
    async def run(
        self,
        prompt: Content,
        *,
        max_turns: int = ...,
        output: type[M],
        output_retries: int | None = ...,
        on_delta: OnDelta | None = ...,
    ) -> M: ...

    @overload
    async def run(
        self,
        prompt: Content,
        *,
        max_turns: int = ...,
        output: Mapping[str, Any],
        output_retries: int | None = ...,
        on_delta: OnDelta | None = ...,
    ) -> Any: ...

    async def run(
        self,
        prompt: Content,
        *,
        max_turns: int = 10,
        output: OutputType | None = None,
        output_retries: int | None = None,
        on_delta: OnDelta | None = None,
    ) -> Any:
        """Ask, call tools until the model answers without tool calls; return its text.

        ``output``: a pydantic model class or a JSON schema (default: the session's): the
        model is asked for that schema the provider's native way, the answer is validated and
        returned as the validated object (a model instance, or the parsed JSON); one that does
        not validate is sent back with its error, at most ``output_retries`` times (default
        2), each a recorded turn, then ``OutputValidationError``. The schema is part of the
        call's key, so a replay serves only a call that asked for the same one.

        ``on_delta``: the model's answers are streamed, and ``on_delta`` called with each
        text delta as it arrives (see ``stream``); an error it raises ends the turn as the
        model's failure (recorded) and is raised here.

        Calling it again continues the same conversation (turn numbers go on from the last
        run's), so a session may hold several exchanges; ``max_turns`` bounds each call.

        Each call is an *agent call* (``agent.call.admitted`` / ``agent.call.settled``): in a
        run started with ``replay_from``, one whose ordinal and request match the recorded
        run's is answered from that record without invoking the model or any tool.
        """
        plan = self._plan_of(output, output_retries)
        await self._close_stream()
        box: list[Any] = []
        deltas = self._exchange(prompt, max_turns, plan, box, streaming=on_delta is not None)
        if on_delta is None:
            async for _ in deltas:  # nothing is streamed: it yields nothing
                pass
        else:
            await drive(deltas, on_delta)
        return box[0]

    @overload
    def stream(
        self,
        prompt: Content,
        *,
        max_turns: int = ...,
        output: None = None,
        output_retries: int | None = ...,
    ) -> AgentStream[T]: ...

    @overload
    def stream(
        self,
        prompt: Content,
        *,
        max_turns: int = ...,
        output: type[M],
        output_retries: int | None = ...,
    ) -> AgentStream[M]: ...

    @overload
    def stream(
        self,
        prompt: Content,
        *,
        max_turns: int = ...,
        output: Mapping[str, Any],
        output_retries: int | None = ...,
    ) -> AgentStream[Any]: ...

    def stream(
        self,
        prompt: Content,
        *,
        max_turns: int = 10,
        output: OutputType | None = None,
        output_retries: int | None = None,
    ) -> AgentStream[Any]:
        """``run``, streamed: ``async for delta in agent.stream(prompt)`` yields the text of
        each model turn of the exchange as the model sends it; ``.answer`` is what ``run``
        would have returned, once the stream ended.

        Each model call is still recorded write-ahead (``harness.model.called`` acked before
        the model is asked) and its response recorded when its stream ends; tool calls run
        and are recorded as in ``run``. A turn answered from the log (a resume) or a record (a
        replay) yields its recorded text as one delta. A consumer that stops early (``break``
        then ``aclose()``, ``async with agent.stream(...) as s``, or the session's next
        exchange or end) records the turn in flight as failed (``StreamStoppedError``) and the
        exchange as failed: a resume asks the model again.
        """
        plan = self._plan_of(output, output_retries)
        box: list[Any] = []
        deltas = self._exchange(prompt, max_turns, plan, box, streaming=True)
        return AgentStream(self, deltas, box)

    def _plan_of(self, output: OutputType | None, output_retries: int | None) -> Plan:
        """An exchange's structured output: the session's, unless the call names its own."""
        plan = self._plan
        if output is not None or output_retries is not None:
            retries = self._output_retries if output_retries is None else output_retries
            if output is not None:
                plan = (output_of(output, self._where), _retries(retries, self._where))
            elif plan is not None:
                plan = (plan[0], _retries(retries, self._where))
        return plan

    async def _close_stream(self) -> None:
        """Close the session's stream still open, if any: its consumer stopped reading."""
        if self._stream is not None:
            await self._stream.aclose()

    def _admit(
        self, prompt: Any, max_turns: int, plan: Plan | Literal[True] = True
    ) -> AgentCallTicket:
        """Admit this exchange as an agent call; its request is the conversation so far, the
        prompt and ``max_turns`` (with the session's manifest and the call's node), and its
        structured output if any (``plan``; True: the session's)."""
        resolved: Plan = self._plan if plan is True else plan
        request: dict[str, Any] = {
            "conversation": self._conversation_hash(),
            "prompt": prompt,
            "max_turns": max_turns,
        }
        if not resolved:  # nothing added: the keys of calls without structured output are kept
            return self._recorder.admit(request)
        request["output"] = resolved[0].as_json()
        request["output_retries"] = resolved[1]
        return self._recorder.admit(request, _configuration(resolved))

    async def _run_admitted(
        self, call: AgentCallTicket, prompt: Any, max_turns: int, plan: Plan | Literal[True] = True
    ) -> Any:
        """Run an admitted agent call to its settlement: answered whole, or turn by turn."""
        box: list[Any] = []
        resolved: Plan = self._plan if plan is True else plan
        async for _ in self._exchange(prompt, max_turns, resolved, box, call=call):
            pass
        return box[0]

    async def _exchange(
        self,
        prompt: Any,
        max_turns: int,
        plan: Plan,
        box: list[Any],
        streaming: bool = False,
        call: AgentCallTicket | None = None,
    ) -> AsyncGenerator[str, None]:
        """One exchange (admitted here unless ``call`` is): its answer appended to ``box``;
        ``streaming``: each model turn streamed, its text deltas yielded as they arrive.

        One generator frame holds every yield (a consumer's stop, ``aclose``, reaches the turn
        it stopped in): a stop is raised in that turn as ``StreamStoppedError`` (recorded as
        the turn's failure and the call's), then ends the generator quietly."""
        try:
            if call is None:
                self._step._check_group()  # a branch stopped by a failed sibling admits nothing
                # parts as recorded (large bytes stored, named by digest): in the call's key
                prompt = await self._recorder.parts.prompt(prompt, self._where)
                await self._compact_if_due()
                call = self._admit(prompt, max_turns, plan)
            if call.served:
                start = len(self._messages)
                box.append(await self._serve(call, plan))
                if streaming:  # each recorded model answer's text, as one delta
                    for message in self._messages[start:]:
                        content = message.get("content") or None
                        if message.get("role") == "assistant" and isinstance(content, str):
                            yield content
                return
            messages = self._messages
            start = len(messages)
            messages.append({"role": "user", "content": self._recorder.redacted("prompt", prompt)})
            answer: str | None = None
            value: Any = None
            retries = plan[1] if plan else 0
            limit = max_turns
            done = False
            try:
                turns = 0
                while turns < limit:
                    turns += 1
                    self.turns += 1
                    turn = self.turns
                    if not streaming:
                        response = await self._model_turn(turn, messages, plan)
                    else:
                        async with self._streamed_turn(turn, messages, plan) as deltas:
                            async for delta in deltas:
                                yield delta
                        response = deltas.response
                    messages.append(response.as_message())
                    if not response.tool_calls:
                        answer = response.content
                        if not plan:
                            break
                        value, error = plan[0].check(answer)
                        if error is not None:
                            if retries == 0:
                                raise self._invalid(plan, error)
                            retries -= 1
                            limit += 1  # a retry is a turn more
                            text = retry_prompt(plan[0], error)
                            messages.append(
                                {"role": "user", "content": self._recorder.redacted("prompt", text)}
                            )
                            continue
                        done = True
                        break
                    calls = response.tool_calls
                    contents = await run_tool_calls(
                        self._recorder,
                        turn,
                        calls,
                        self.tools,
                        self._live_calls,
                        self.max_parallel_tools,
                    )
                    # in the order the model asked, whatever order they finished in
                    messages.extend(
                        {"role": "tool", "tool_call_id": c.id, "content": tool_content(content)}
                        for c, content in zip(calls, contents, strict=True)
                    )
                if plan and not done:
                    raise self._invalid(plan, f"no answer within max_turns={max_turns} turn(s)")
            except SETTLING:
                # a branch stopped between turns, or a spent budget, settles its call (it did
                # not finish, and the run is ending)
                await self._recorder.settle(call, "failed", _result(None, messages[start:], plan))
                raise
            except Exception as exc:
                # an error that ends the writer (or the run as itself) leaves it in flight, for
                # the resume to run on; so does a suspension or a stop (a RunInterrupt: no
                # clause)
                if not isinstance(exc, ENDS_THE_RUN):
                    await self._recorder.settle(
                        call, "failed", _result(None, messages[start:], plan)
                    )
                raise
            self._answer = answer
            await self._recorder.settle(call, "succeeded", _result(answer, messages[start:], plan))
            # Inside the loop a result rides with the next write-ahead record, which follows at
            # once; the last one is made durable here, so work after the session never puts
            # the session's final answer at risk.
            await self._recorder.flush()
            box.append(value if plan else answer)
        except StreamStoppedError as exc:
            if not isinstance(exc.__cause__, GeneratorExit):
                raise
            # the consumer stopped: recorded as the turn's failure and the call's; the
            # generator ends (its closing goes on)

    def _invalid(self, plan: tuple[Output, int], error: str) -> OutputValidationError:
        name = plan[0].spec.name
        return OutputValidationError(
            f"{self._where}: the model's answer does not match output schema {name!r} "
            f"after {plan[1]} retr{'y' if plan[1] == 1 else 'ies'}: {error}",
            schema=name,
            error=error,
        )

    async def _serve(self, call: AgentCallTicket, plan: Plan = None) -> Any:
        """An agent call answered whole from a record: its answer, and its messages added to
        the conversation (so a later exchange sees what the model saw the first time)."""
        result = await self._recorder.served_result(call)
        added: list[Message] = result.get("messages") or []
        turn = self.turns
        self._advance_through(added, call)
        await self._recorder.served_tool_calls(call, turn, added, self.tools)
        answer: str | None = result.get("answer")
        self._answer = answer
        await self._recorder.settle_served(call)
        if plan is None:
            return answer
        # the schema is in the call's key: the recorded answer validated when it was made
        value, error = plan[0].check(answer)
        if error is not None:  # a validator of the model class changed since
            raise self._invalid(plan, error)
        return value

    def _advance_through(self, added: list[Message], call: AgentCallTicket) -> None:
        """Add a served exchange's messages and advance the session as the recorded exchange
        did: one turn, and one link of the request hash chain, per model answer in it (the
        request of that turn being the conversation up to the answer), each link shown to the
        record that served it (a golden run checks it against the request it recorded)."""
        for message in added:
            if message.get("role") == "assistant":
                self.turns += 1
                self._chain = chain_hash(self._chain, self._json_of(self._hashed_messages))
                self._hashed_messages = len(self._messages)
                self._recorder.served_turn(call, self.turns, self._chain)
            self._messages.append(message)

    def _json_of(self, start: int) -> str:
        """``canonical_json(self._messages[start:])``, serialising each message once: the
        canonical JSON of a list is its items' joined by commas, so the text (and every hash of
        it) is the same, while a long conversation costs its new messages only."""
        parts = self._message_json
        if len(parts) < len(self._messages):
            for message in self._messages[len(parts) :]:
                parts.append(canonical_json(message))
        return "[" + ",".join(parts[start:]) + "]"

    def _conversation_hash(self) -> str:
        """``sha256_hex(self._json_of(0))``, the same digest, with each message's JSON fed to
        the hash once: a copy of the running hash takes the closing bracket, so an exchange
        costs its new messages only, whatever the session's length."""
        self._json_of(len(self._messages))  # the new messages' canonical JSON
        running, fed = self._conversation, self._conversation_fed
        for part in self._message_json[fed:]:
            running.update(b"," if fed else b"[")
            running.update(part.encode("utf-8"))
            fed += 1
        self._conversation_fed = fed
        digest = running.copy()
        digest.update(b"]" if fed else b"[]")
        return digest.hexdigest()

    def _turn_request(self, turn: int, messages: list[Message]) -> TurnRequest:
        """The next model request's link: the hash chain extended with the messages appended
        since the last request."""
        # serialised once: the same canonical JSON extends the hash chain and is recorded
        appended_text = self._json_of(self._hashed_messages)
        # None on turn 1 (a compaction relinks the chain: never a first request after one)
        previous_hash = self._chain if self._hashed_messages or self._relinked else None
        request_hash = chain_hash(self._chain, appended_text)
        self._chain = request_hash
        self._hashed_messages = len(messages)
        return TurnRequest(
            turn, request_hash, previous_hash, appended_text, len(messages), self._tools_hash
        )

    async def _model_turn(
        self, turn: int, messages: list[Message], plan: Plan = None
    ) -> ModelResponse:
        request = self._turn_request(turn, messages)
        output = None if plan is None else plan[0].spec
        return await self._recorder.model_turn(
            request,
            lambda: self._complete(messages, output),
            ModelResponse.from_json,
            getattr(self.model, "retry_policy", None),
        )

    async def _complete(
        self, messages: list[Message], output: OutputSchema | None = None
    ) -> ModelResponse:
        response = await self.model.complete(await self._request(messages, output))
        if self._redacts:  # the recorded response may differ: tools get what the model asked
            self._live_calls = {c.id: c for c in response.tool_calls}
        return response

    @asynccontextmanager
    async def _streamed_turn(
        self, turn: int, messages: list[Message], plan: Plan = None
    ) -> AsyncIterator[TurnDeltas]:
        """A model turn streamed through the recording kernel's ``live_turn``: served (its
        recorded text, one delta) or called write-ahead and streamed; the deltas are read
        inside the block, the response (as recorded) is ``deltas.response`` after it. A stop
        of the consumer (``GeneratorExit`` at its yield) fails the turn as
        ``StreamStoppedError``."""
        request = self._turn_request(turn, messages)
        output = None if plan is None else plan[0].spec
        asked = list(messages)
        retry = getattr(self.model, "retry_policy", None)
        async with self._recorder.live_turn(request, ModelResponse.from_json, retry) as live:
            opened = partial(model_stream, self.model, partial(self._request, asked, output))
            deltas = TurnDeltas(live, opened, self._where)
            try:
                yield deltas
            except GeneratorExit as stop:
                raise StreamStoppedError(
                    f"{self._where} turn {turn}: the stream's consumer stopped before its end"
                ) from stop
            finally:
                await deltas.aclose()
            if live.served is None:
                live.response = deltas.response
                if self._redacts:  # the recorded response may differ: tools get what was asked
                    self._live_calls = {c.id: c for c in deltas.response.tool_calls}
        deltas.response = live.served or live.response or deltas.response

    async def _request(self, messages: list[Message], output: OutputSchema | None) -> ModelRequest:
        """The model's request of ``messages``, their parts' bytes loaded."""
        handed = await self._recorder.parts.for_model(messages)
        return ModelRequest(self.system, handed, self._specs, output)

    # -- compaction of the history (little.runtime._compaction) ----------------------------

    async def _compact_if_due(self) -> None:
        """Before an exchange: compact the conversation if the session's policy says it is
        due, or reuse the compaction this run recorded here (a resume: no summary again)."""
        policy = self._compaction
        if policy is None:
            return
        exchange = self._recorder.exchanges
        conversation = self._json_of(0)
        recorded = await self._recorder.recorded_history(exchange, self._policy_hash, conversation)
        if recorded is not None:
            self._install(*recorded)
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
        await self._recorder.compacted(
            canonical_json(history),
            exchange=exchange,
            policy_json=canonical_json(self.manifest["compaction"]),
            policy_hash=self._policy_hash,
            replaced_messages=len(replaced),
            replaced_hash=sha256_hex(conversation),
            previous_request_hash=previous,
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
        # a full replay that names this session's model asks it for summaries too
        model = self._x.model_for(self.name) or policy.summary_model or self.model
        summarizer: AgentSession[str | None] = AgentSession(
            self._x, self._step, session_id, name, model, [], policy.summary_prompt, None
        )
        async with summarizer:
            summary = await summarizer.run(canonical_json(replaced), max_turns=1)
        return summary, session_id

    def _install(self, history: list[Message], link: str) -> None:
        """The compacted history replaces the conversation; the request hash chain goes on
        from the compaction's link, every message of the history counted as hashed."""
        self._messages[:] = history
        self._recorder.parts.reset()
        self._message_json[:] = [canonical_json(m) for m in history]
        self._conversation = hashlib.sha256()  # fed again from the history on the next hash
        self._conversation_fed = 0
        self._hashed_messages = len(history)
        self._chain = link
        self._relinked = True


def compaction_link(previous: str, policy_hash: str, history: list[Message]) -> str:
    """The request hash chain's link after a compaction: the previous link extended with the
    policy and the history that replaces the conversation (``harness.session.compacted``'s
    ``history_hash``; ``little.chat`` checks it the same way)."""
    return chain_hash(previous, canonical_json({"compacted": policy_hash, "history": history}))


def _result(answer: str | None, added: list[Message], plan: Plan = None) -> dict[str, Any]:
    """An agent call's recorded result: its answer and the messages it added (and with a
    structured output, the call's configuration: a replay names it when it changed)."""
    result: dict[str, Any] = {"answer": answer, "messages": added}
    if plan is not None:
        result["configuration"] = _configuration(plan)
    return result


def _configuration(plan: tuple[Output, int]) -> dict[str, Any]:
    """An agent call's own configuration, as its settled result records it."""
    return {"output": canonical_hash(plan[0].as_json()), "output_retries": plan[1]}


def _retries(value: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"{where}: output_retries must be a whole number of 0 or more, not {value!r}"
        )
    return value


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


def approval_manifest(tools: list[Tool], approval: ApprovalPolicy) -> dict[str, Any] | None:
    """What of a session may wait for a person, as its manifest holds it (so in every agent
    call's key): the tools declared ``requires_approval`` and the session's policy (True:
    every call; a function: named); None when nothing may. A call that may block on a person
    never shares a record with one that may not (seed 003)."""
    tools_gated = sorted(t.name for t in tools if t.requires_approval)
    if callable(approval):
        module = getattr(approval, "__module__", None) or "?"
        name = getattr(approval, "__qualname__", None) or type(approval).__qualname__
        policy: bool | str = f"{module}.{name}"
    else:
        policy = bool(approval)
    if not tools_gated and policy is False:
        return None
    return {"tools": tools_gated, "policy": policy}


def _recorded_before_approvals(
    execution: Execution, session_id: str, manifest: Mapping[str, Any]
) -> bool:
    """The run's own log started this session with this manifest, without an ``approval``
    part: written before approvals were part of it (or the approval is new in the code that
    resumes it). A resume keeps hashing it as recorded, so its agent calls keep their keys;
    its fresh tool calls still wait for the approval the code asks for."""
    recorded = execution.replayed.session(session_id)
    return recorded is not None and recorded.manifest_hash == manifest_hash(manifest)
