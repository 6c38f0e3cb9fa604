"""A conversation's model turns recorded write-ahead and answered: the part of the recording
kernel (``_recording.Recorder``) that makes one model call, served from the log or a record, or
invoked with its attempts (provider retries) each recorded, or made by the caller itself inside
``live_turn`` (a stream it hands on as it arrives).

``TurnRecording`` is ``Recorder``'s base: it holds what a turn needs of the recording (the
execution, the step, the session's serving and spans, its token counts) and the two ways it
writes (``_emit``: appended and acked, write-ahead; ``_defer``: with the next acked event).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from little import tracing
from little._canonical import canonical_json
from little.errors import RunInterrupt, StreamStoppedError
from little.events import ArtifactRef, ModelCalled, ModelFailed, ModelResponded, Usage
from little.harness import RetryPolicy
from little.runtime._faults import FAULTS
from little.runtime._serving import Served, Serving
from little.runtime._spans import SessionSpans

if TYPE_CHECKING:
    from little.runtime._execution import Execution


class SessionStep(Protocol):
    """What the recording needs of the step its calls are made in (``StepContext`` is one)."""

    @property
    def step_path(self) -> str: ...

    @property
    def scope(self) -> str:
        """The workflow scope the step runs in: "" the run, else a parallel branch's path."""
        ...

    _sessions: set[str]
    """The session ids the step opened (each is one conversation)."""

    def _check_group(self) -> None:
        """Raise ``BranchStopped`` if the step's parallel group is draining."""


class Response(Protocol):
    """What the kernel reads of a model response: it records ``to_json()`` and its usage."""

    @property
    def usage(self) -> Usage: ...

    @property
    def finish_reason(self) -> str | None: ...

    def to_json(self) -> str: ...


R = TypeVar("R", bound=Response)


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """A model request as the log records it: its link in the session's request hash chain."""

    turn: int
    request_hash: str
    previous_hash: str | None
    """None on a session's first request (never after a compaction relinked the chain)."""
    appended_text: str
    """Canonical JSON of the messages appended since the previous request."""
    message_count: int
    tools_hash: str


class LiveTurn(Generic[R]):
    """A model turn made by the caller inside ``Recorder.live_turn``: ``served`` when the log
    answered it (nothing is called), else the caller sets ``response``; an attempt that failed
    before the caller handed anything of it on may be made again (``retry``)."""

    __slots__ = (
        "_appended",
        "_failed",
        "_recording",
        "_request",
        "_retries",
        "_retry",
        "_span",
        "response",
        "served",
    )

    def __init__(
        self,
        recording: TurnRecording,
        request: TurnRequest,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.served: R | None = None
        self.response: R | None = None
        self._recording = recording
        self._request = request
        self._retry = retry
        self._retries = 0
        self._appended: tuple[str | None, ArtifactRef | None] = (None, None)
        self._span: Any = None
        self._failed: BaseException | None = None
        """The failure ``retry`` recorded and said not to retry: the block raises it."""

    def retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a retryable failure, as the turn's retry policy classifies it
        (recorded so on ``harness.model.failed`` whether or not it is retried)."""
        retry = self._retry
        failure = retry.classify(exc) if retry is not None and isinstance(exc, Exception) else None
        return bool(failure.retryable if failure is not None else getattr(exc, "retryable", True))

    async def retry(self, exc: Exception) -> bool:
        """The attempt failed with ``exc`` before anything of it was handed on: recorded
        (``harness.model.failed``, acked, as ``model_turn`` records one). True: the failure is
        retryable under the turn's retry policy and not the last allowed, it was waited out
        and the next attempt is recorded (a new ``harness.model.called``): make the call
        again. False: the turn ends with ``exc`` (raise it)."""
        recording, request, retry = self._recording, self._request, self._retry
        failure = retry.classify(exc) if retry is not None else None
        retryable = failure.retryable if failure is not None else getattr(exc, "retryable", True)
        await recording._call_raised(request, exc, retryable=bool(retryable))
        if (
            retry is None
            or failure is None
            or not failure.retryable
            or self._retries >= retry.max_retries
        ):
            self._failed = exc
            return False
        self._retries += 1
        await retry.sleep(retry.delay(self._retries, failure))
        recording._step._check_group()  # a branch stopped meanwhile makes no new attempt
        await recording._emit_called(request, self._appended, self._span, self._retries + 1)
        return True


class TurnRecording:
    """The model turns of one conversation (``Recorder`` is the whole recording)."""

    _x: Execution
    _step: SessionStep
    _redact: Callable[[str, Any], Any] | None
    session_id: str
    provider: str
    model: str
    serving: Serving
    spans: SessionSpans
    tokens: list[int]
    exchange_tokens: list[int]
    exchange_calls: int
    ordinal: int
    reserved: bool

    def redacted(self, where: str, value: Any) -> Any:
        """What is recorded of ``value`` (``World.redact``; the value itself without one)."""
        return value if self._redact is None else self._redact(where, value)

    async def _emit(self, cls: Any, **fields: Any) -> Any:
        """Append and await the ack: write-ahead records, before the call they announce."""
        fields["step_path"] = self._step.step_path
        fields["session_id"] = self.session_id
        event, _ = await self._x.writer.emit_fields(cls, fields)  # this call's own dict
        return event

    def _defer(self, cls: Any, **fields: Any) -> Any:
        """A call's terminal record: it reaches the log with the next acked event."""
        fields["step_path"] = self._step.step_path
        fields["session_id"] = self.session_id
        return self._x.writer.defer_fields(cls, fields)  # this call's own dict

    async def model_turn(
        self,
        request: TurnRequest,
        invoke: Callable[[], Awaitable[R]],
        decode: Callable[[str, Usage], R],
        retry: RetryPolicy | None = None,
    ) -> R:
        """One model turn: answered from the log, or ``harness.model.called`` acked, then
        ``invoke()``, then ``harness.model.responded`` deferred (``harness.model.failed`` if
        it raised). ``decode`` rebuilds a response from its recorded JSON and usage.

        ``retry`` (the model's ``retry_policy``): a failure it calls retryable is recorded
        (``harness.model.failed``, ``retryable=true``, acked), waited out without blocking
        the loop, and the turn attempted again with a new ``harness.model.called``, at most
        ``max_retries`` times; any other failure ends the turn at once. Without one a
        failure ends the turn, recorded retryable unless the error says otherwise."""
        with self._x.integrity:
            answer = self.serving.turn(request.turn, request.request_hash)
        if isinstance(answer, Served):
            return await self._served_turn(request, answer, decode)
        with self.spans.chat(self.provider, self.model, request.turn, answer.again) as span:
            response = await self._fresh_turn(request, invoke, decode, answer.again, span, retry)
            self.spans.answered(
                span, self.provider, self.model, response.usage, response.finish_reason
            )
            return response

    async def _fresh_turn(
        self,
        request: TurnRequest,
        invoke: Callable[[], Awaitable[R]],
        decode: Callable[[str, Usage], R],
        again: bool,
        span: Any,
        retry: RetryPolicy | None,
    ) -> R:
        """A fresh model call: recorded write-ahead, invoked, answered; a failure ``retry``
        calls retryable is recorded (acked), waited out and attempted again, each attempt its
        own ``harness.model.called``."""
        attempts: LiveTurn[R] = LiveTurn(self, request, retry)
        attempts._appended = await self._call_recorded(request, again, span)
        attempts._span = span
        while True:  # one attempt per pass, each recorded write-ahead
            try:
                response = await invoke()
                break
            except Exception as exc:
                # recorded acked, not deferred: the wait before the next attempt may be long,
                # and a crash in it must find this attempt answered, not in flight
                if not await attempts.retry(exc):
                    raise
            except BaseException as exc:  # an interrupt leaves the call in flight
                await self._call_raised(request, exc)
                raise
        FAULTS.call_returned()
        return await self._responded(request, response, decode)

    @asynccontextmanager
    async def live_turn(
        self,
        request: TurnRequest,
        decode: Callable[[str, Usage], R],
        retry: RetryPolicy | None = None,
    ) -> AsyncIterator[LiveTurn[R]]:
        """``model_turn`` for a call the caller makes inside the block (a stream it hands on as
        it arrives)::

            async with recorder.live_turn(request, decode, retry) as live:
                if live.served is None:                   # called (acked): make the call
                    ...                                   # stream it through
                    live.response = response              # what the call answered
            answer = live.served or live.response         # (redacted, as recorded)

        A block that raises records ``harness.model.failed`` (a ``RunInterrupt`` leaves the call
        in flight); one that ends without a response records a failure too. ``retry``: an
        attempt that failed before the block handed anything of it on may be made again,
        inside the block, once ``await live.retry(exc)`` says so (it records the failure)."""
        live: LiveTurn[R] = LiveTurn(self, request, retry)
        with self._x.integrity:
            answer = self.serving.turn(request.turn, request.request_hash)
        if isinstance(answer, Served):
            live.served = await self._served_turn(request, answer, decode)
            yield live
            return
        with self.spans.chat(self.provider, self.model, request.turn, answer.again) as span:
            live._appended = await self._call_recorded(request, answer.again, span)
            live._span = span
            try:
                yield live
                if live.response is None:
                    raise StreamStoppedError(
                        f"run {self._x.run_id}: session {self.session_id} turn {request.turn} "
                        "ended without a response (its consumer stopped before the end?)"
                    )
            except BaseException as exc:
                if exc is not live._failed:  # recorded by ``live.retry`` already
                    await self._call_raised(request, exc, retryable=live.retryable(exc))
                raise
            FAULTS.call_returned()
            live.response = await self._responded(request, live.response, decode)
            self.spans.answered(
                span, self.provider, self.model, live.response.usage, live.response.finish_reason
            )

    async def _served_turn(
        self, request: TurnRequest, answer: Served, decode: Callable[[str, Usage], R]
    ) -> R:
        usage = answer.usage
        assert usage is not None
        text = await self._x.load_text(answer.text, answer.ref)
        self._x.count_served()
        self._count_exchange(usage)
        self.spans.served_turn(self.provider, self.model, usage, request.turn)
        return decode(text or "{}", usage)

    async def _call_recorded(
        self, request: TurnRequest, again: bool, span: Any
    ) -> tuple[str | None, ArtifactRef | None]:
        """Before a fresh model call: the group and the budget checked, then
        ``harness.model.called`` appended and acked (write-ahead)."""
        self._step._check_group()
        self._x.check_budget(self.ordinal, reserved=self.reserved)
        self.reserved = False
        if again:  # in flight at a stop: the provider may bill it twice
            self._x.count_reinvoked()
        appended_json, appended_ref = await self._x.store_text(request.appended_text)
        appended = (appended_json, appended_ref)
        await self._emit_called(request, appended, span, attempt=1)
        return appended

    async def _emit_called(
        self,
        request: TurnRequest,
        appended: tuple[str | None, ArtifactRef | None],
        span: Any,
        attempt: int,
    ) -> None:
        """``harness.model.called`` for one attempt of a turn, appended and acked."""
        appended_json, appended_ref = appended
        called = await self._emit(
            ModelCalled,
            turn=request.turn,
            provider=self.provider,
            model=self.model,
            request_hash=request.request_hash,
            previous_request_hash=request.previous_hash,
            appended_messages_json=appended_json,
            appended_messages_ref=appended_ref,
            message_count=request.message_count,
            tools_hash=request.tools_hash,
        )
        tracing.set_attributes(span, little_seq=called.seq, little_attempt=attempt)

    async def _call_raised(
        self, request: TurnRequest, exc: BaseException, *, retryable: bool = True
    ) -> None:
        """A fresh model call raised: ``harness.model.failed`` (an interrupt leaves the call
        unanswered and in flight, for the resume)."""
        if isinstance(exc, RunInterrupt):
            FAULTS.call_returned()
            return
        if not isinstance(exc, Exception):
            return  # a cancellation: as before, neither counted nor recorded
        FAULTS.call_returned()
        await self._emit(
            ModelFailed,
            turn=request.turn,
            provider=self.provider,
            model=self.model,
            request_hash=request.request_hash,
            error_type=type(exc).__name__,
            message=self.redacted("model_error", str(exc)),
            retryable=retryable,
        )

    async def _responded(
        self, request: TurnRequest, response: R, decode: Callable[[str, Usage], R]
    ) -> R:
        """A fresh model call answered: ``harness.model.responded`` deferred, usage billed."""
        text = response.to_json()  # canonical
        if self._redact is not None:
            # the conversation goes on with what is recorded, so a resume rebuilds the same
            # requests (the caller kept what the model asked, for the tools it calls)
            text = canonical_json(self._redact("model_response", json.loads(text)))
            response = decode(text, response.usage)
        response_json, response_ref = await self._x.store_text(text)
        self._defer(
            ModelResponded,
            turn=request.turn,
            provider=self.provider,
            model=self.model,
            request_hash=request.request_hash,
            response_json=response_json,
            response_ref=response_ref,
            usage=response.usage,
            finish_reason=response.finish_reason,
        )
        self._x.billed(response.usage.input_tokens, response.usage.output_tokens)
        _add_usage(self.tokens, response.usage)
        self._count_exchange(response.usage)
        return response

    def _count_exchange(self, u: Usage) -> None:
        self.exchange_calls += 1
        _add_usage(self.exchange_tokens, u)

    # -- tool calls ----------------------------------------------------------------------


def _add_usage(totals: list[int], u: Usage) -> None:
    """Add ``u`` to ``[input, output, cached input, reasoning]`` token totals (ints: building a
    Usage per model call was a measurable share of the harness's own time)."""
    totals[0] += u.input_tokens
    totals[1] += u.output_tokens
    totals[2] += u.cached_input_tokens
    totals[3] += u.reasoning_tokens
