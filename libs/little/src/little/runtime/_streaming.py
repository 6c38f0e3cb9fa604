"""Streamed exchanges of an agent session (``agent.stream(prompt)``, ``agent.run(prompt,
on_delta=...)``): the stream a consumer reads (``AgentStream``), one model turn's deltas with
their attempts (``TurnDeltas``), and the drive of a callback. The session's loop yields the
deltas (``_session.AgentSession._exchange``); each turn is recorded through the kernel's
``live_turn``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from little.harness import Model, ModelRequest, ModelResponse, ModelStreamItem
from little.runtime._model_turns import LiveTurn

__all__ = [
    "AgentStream",
    "OnDelta",
    "StreamingSession",
    "TurnDeltas",
    "drive",
    "model_stream",
    "whole",
]

T = TypeVar("T")

OnDelta = Callable[[str], Awaitable[None] | None]
"""``agent.run(prompt, on_delta=...)``: called with each text delta (awaited if it returns an
awaitable)."""


class StreamingSession(Protocol):
    """What a stream needs of its session (``AgentSession`` is one)."""

    _stream: AgentStream[Any] | None
    _where: str

    async def _close_stream(self) -> None: ...


class AgentStream(Generic[T]):
    """``agent.stream(prompt)``: the exchange's text deltas as they arrive (``async for``),
    and ``answer`` once they ended. ``aclose()`` (or leaving ``async with``) before the end
    stops it: the turn in flight is recorded as failed (``StreamStoppedError``) and so is the
    exchange. A stream merely left unread is closed so when its session's next exchange
    starts, or the session ends."""

    def __init__(
        self, session: StreamingSession, deltas: AsyncGenerator[str, None], box: list[Any]
    ) -> None:
        self._session = session
        self._deltas = deltas
        self._box = box
        self._started = False
        self._ended = False

    def __aiter__(self) -> AgentStream[T]:
        return self

    async def __anext__(self) -> str:
        if self._ended:
            raise StopAsyncIteration
        if not self._started:  # the previous exchange's stream, left unread, is over
            self._started = True
            session = self._session
            await session._close_stream()
            session._stream = self
        try:
            return await self._deltas.__anext__()
        except BaseException:  # the end, or what ended it
            self._end()
            raise

    async def aclose(self) -> None:
        """Stop reading: a turn still streaming is recorded as failed, and the exchange."""
        if self._ended:
            return
        self._end()
        if self._started:
            await self._deltas.aclose()

    def _end(self) -> None:
        self._ended = True
        if self._session._stream is self:
            self._session._stream = None

    async def __aenter__(self) -> AgentStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def done(self) -> bool:
        """The exchange ended with an answer (``answer`` holds it)."""
        return bool(self._box)

    @property
    def answer(self) -> T:
        """What ``agent.run`` would have returned (text, or the validated structured output)."""
        if not self._box:
            raise RuntimeError(
                f"{self._session._where}: the stream has no answer (read it to its end first)"
            )
        value: T = self._box[0]
        return value


class TurnDeltas:
    """One streamed model turn's text deltas (``async for``): the recorded text of a served
    turn (one delta), or the model's stream of a called one. An attempt that fails before any
    delta was handed on is made again when the model's retry policy says so (the kernel
    records each); after one, the failure ends the turn (the consumer already has a part of
    this attempt's text). ``response``: the whole response, once the stream ended."""

    def __init__(
        self,
        live: LiveTurn[ModelResponse],
        open_stream: Callable[[], AsyncIterator[ModelStreamItem]],
        where: str,
    ) -> None:
        self._live = live
        self._open = open_stream
        self._where = where
        self._items: AsyncIterator[ModelStreamItem] | None = None
        self._delivered = False
        self._response: ModelResponse | None = None

    @property
    def response(self) -> ModelResponse:
        assert self._response is not None, "read to the end first"
        return self._response

    @response.setter
    def response(self, value: ModelResponse) -> None:
        self._response = value

    def __aiter__(self) -> TurnDeltas:
        return self

    async def __anext__(self) -> str:
        served = self._live.served
        if served is not None:
            self._response = served
            if self._delivered or not served.content:
                raise StopAsyncIteration
            self._delivered = True
            return served.content
        while True:
            if self._items is None:
                self._items = self._open()
            try:
                item = await self._items.__anext__()
            except StopAsyncIteration:
                await self.aclose()
                if self._response is None:
                    raise RuntimeError(
                        f"{self._where}: the model's stream ended without its response (a "
                        "StreamingModel yields the whole ModelResponse last)"
                    ) from None
                raise
            except Exception as exc:
                await self.aclose()
                if self._delivered or not await self._live.retry(exc):
                    raise
                continue  # the next attempt, recorded: the stream opened again
            if isinstance(item, ModelResponse):
                self._response = item
            elif item:
                self._delivered = True
                return item

    async def aclose(self) -> None:
        """Release the model's stream (its HTTP response), if open."""
        items, self._items = self._items, None
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


async def model_stream(
    model: Model, request: Callable[[], Awaitable[ModelRequest]]
) -> AsyncIterator[ModelStreamItem]:
    """``model``'s stream of the request ``request()`` makes (a session loads its parts'
    bytes there); a model without ``stream`` answers whole, its text one delta. Closed, it
    closes the model's stream (its HTTP response)."""
    asked = await request()
    stream = getattr(model, "stream", None)
    items: AsyncIterator[ModelStreamItem] = (
        stream(asked) if callable(stream) else whole(model, asked)
    )
    try:
        async for item in items:
            yield item
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


async def whole(model: Model, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
    """A model without ``stream``: its whole answer, the text as one delta."""
    response = await model.complete(request)
    if response.content:
        yield response.content
    yield response


async def drive(deltas: AsyncGenerator[str, None], on_delta: OnDelta) -> None:
    """Read ``deltas`` to the end, ``on_delta`` called with each; what it raises is raised in
    the exchange, where the delta was yielded (so the turn records it as its failure)."""
    try:
        delta = await deltas.__anext__()
        while True:
            try:
                handled = on_delta(delta)
                if inspect.isawaitable(handled):
                    await handled
            except (GeneratorExit, StopAsyncIteration) as exc:
                # the generator's own signals: thrown in as they are, they would read as the
                # consumer's stop or the stream's end, not as the callback's failure
                failure = RuntimeError(f"on_delta raised {type(exc).__name__}")
                failure.__cause__ = exc
                delta = await deltas.athrow(failure)
            except BaseException as exc:
                delta = await deltas.athrow(exc)
            else:
                delta = await deltas.__anext__()
    except StopAsyncIteration:
        return
