"""The GenAI spans of agent sessions: ``invoke_agent`` per session, ``chat`` per model call and
``execute_tool`` per tool call, with the OpenTelemetry GenAI attributes and little's own.

It only describes calls to the tracer: it records nothing on the log, and with tracing off
(``little.tracing.enabled()`` false) it builds no attributes and opens no span.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from little import tracing
from little.errors import RunInterrupt
from little.events import Usage
from little.replay import price_usd


class SessionSpans:
    """The spans of one agent session: its own, and its calls' (children of it)."""

    __slots__ = ("epoch", "run_id", "session", "session_id", "step_path")

    def __init__(self, run_id: str, step_path: str, session_id: str, epoch: int) -> None:
        self.run_id = run_id
        self.step_path = step_path
        self.session_id = session_id
        self.epoch = epoch
        self.session: Any = None
        """The session's span while it is open (tracing on): its calls' spans' parent."""

    def open(self, name: str, provider: str, model: str, resumed: bool) -> None:
        if not tracing.enabled():
            return
        self.session = tracing.start_span(
            f"invoke_agent {name}",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": name,
                "gen_ai.agent.id": self.session_id,
                "gen_ai.request.model": model,
                "gen_ai.provider.name": provider,
                "little.run_id": self.run_id,
                "little.step": self.step_path,
                "little.session_id": self.session_id,
                "little.epoch": self.epoch,
                "little.resumed": resumed,
            },
        )

    def close(self, turns: int, tokens: list[int], exc: BaseException | None) -> None:
        span, self.session = self.session, None
        if span is None:
            return
        tracing.set_attributes(
            span,
            little_turns=turns,
            **{"gen_ai.usage.input_tokens": tokens[0], "gen_ai.usage.output_tokens": tokens[1]},
        )
        if exc is not None and not isinstance(exc, RunInterrupt):
            tracing.set_error(span, type(exc).__name__)
        span.end()

    def model(self, provider: str, model: str, usage: Usage | None) -> dict[str, Any]:
        """The GenAI semantic conventions of a model call's span, and little's own."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": provider,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "little.run_id": self.run_id,
            "little.step": self.step_path,
            "little.session_id": self.session_id,
            "little.epoch": self.epoch,
        }
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
            price = price_usd(provider, model, usage, datetime.now(UTC))
            if price is not None:
                attributes["little.cost_usd"] = float(price)
        return attributes

    def served(self, provider: str, model: str, usage: Usage | None) -> dict[str, Any]:
        """The attributes of a call answered from a record: the model's, and what the record
        saved as ``little.avoided_*`` (never ``gen_ai.usage.*`` nor ``little.cost_usd``: the
        call that was paid has its span already, and a GenAI cost dashboard sums those)."""
        attributes = self.model(provider, model, None)
        if usage is not None:
            attributes["little.avoided_input_tokens"] = usage.input_tokens
            attributes["little.avoided_output_tokens"] = usage.output_tokens
            price = price_usd(provider, model, usage, datetime.now(UTC))
            if price is not None:
                attributes["little.avoided_cost_usd"] = float(price)
        return attributes

    def replayed_exchange(
        self,
        provider: str,
        model: str,
        usage: Usage | None,
        source_run_id: str | None,
        ordinal: int,
        model_calls: int | None,
    ) -> None:
        """The span of an agent call answered whole from a record (no model call is made)."""
        if not tracing.enabled():
            return
        attributes = self.served(provider, model, usage) | {
            "little.served_from_log": False,
            "little.replayed": True,
            "little.replay_source_run_id": source_run_id,
            "little.ordinal": ordinal,
            "little.model_calls": model_calls,
        }
        with tracing.span(f"chat {model}", attributes, parent=tracing.in_span(self.session)):
            pass

    def served_turn(self, provider: str, model: str, usage: Usage, turn: int) -> None:
        """The span of a model turn answered from the run's own log (no model call is made)."""
        if not tracing.enabled():
            return
        attributes = self.served(provider, model, usage) | {
            "little.turn": turn,
            "little.served_from_log": True,
            "little.replayed": False,
        }
        with tracing.span(f"chat {model}", attributes, parent=tracing.in_span(self.session)):
            pass

    @contextmanager
    def chat(self, provider: str, model: str, turn: int, reinvoked: bool) -> Iterator[Any]:
        """The span of a model call made now (None with tracing off)."""
        if not tracing.enabled():
            yield None
            return
        attributes = self.model(provider, model, None) | {
            "little.turn": turn,
            "little.served_from_log": False,
            "little.replayed": False,
            "little.reinvoked": reinvoked,
        }
        with tracing.span(
            f"chat {model}", attributes, parent=tracing.in_span(self.session)
        ) as span:
            yield span

    def answered(
        self, span: Any, provider: str, model: str, usage: Usage, finish_reason: str | None
    ) -> None:
        """A model call's span once it answered: its usage, its cost, why it finished."""
        if span is not None and span.is_recording():
            span.set_attributes(self.model(provider, model, usage))
            if finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", (finish_reason,))

    @contextmanager
    def tool(
        self, tool: str, model_call_id: str, call_id: str, turn: int, served: bool, again: bool
    ) -> Iterator[Any]:
        """The span of a tool call (None with tracing off); an interrupt does not fail it."""
        if not tracing.enabled():
            yield None
            return
        with tracing.span(
            f"execute_tool {tool}",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": model_call_id,
                "little.run_id": self.run_id,
                "little.step": self.step_path,
                "little.session_id": self.session_id,
                "little.call_id": call_id,
                "little.turn": turn,
                "little.epoch": self.epoch,
                "little.served_from_log": served,
                "little.replayed": False,
                "little.reinvoked": again,
            },
            parent=tracing.in_span(self.session),
        ) as span:
            yield span
