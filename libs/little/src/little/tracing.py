"""OpenTelemetry traces of runs: spans through the API's global tracer provider, and W3C trace
context carried in record and command headers.

The library only emits: spans go to whatever tracer provider the application set up (none: the
API's no-op). ``configure_from_env`` is for the processes little ships (the CLI, the services):
it sets up the SDK from the standard ``OTEL_*`` variables. Without the ``otel`` extra (no
``opentelemetry`` API importable) every function here is a no-op and nothing is imported.

The API itself is imported on first need (a fresh process resuming a run does not pay for it): once
the application has imported ``opentelemetry.trace`` (a tracer provider, or a span to continue, can
only have been set through it), once ``OTEL_PYTHON_TRACER_PROVIDER`` names a provider (read at the
first need), or once a record's headers carry a ``traceparent`` to continue. Until then there is no
span and no provider, and every function answers as the API's no-op would (no span: None).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from little.errors import RunInterrupt

_trace: Any = None
"""``opentelemetry.trace`` once imported (``_api``); the SDK is imported only by
``configure_from_env``."""
_context: Any = None
"""``opentelemetry.context`` once imported."""
_missing = False
"""The API is not installed: tracing is off, nothing more is imported."""


def _api() -> bool:
    """Import the OpenTelemetry API now if it is not yet; False when it is not installed."""
    global _trace, _context, _missing
    if _trace is not None:
        return True
    if _missing:
        return False
    try:
        from opentelemetry import context, trace
    except ImportError:
        _missing = True
        return False
    _trace, _context = trace, context
    return True


_provider_named: bool | None = None
"""Whether ``OTEL_PYTHON_TRACER_PROVIDER`` is set: read at the first need, once (as the SDK
reads its ``OTEL_*`` variables once), and again in a forked child; an ``os.environ`` lookup
per record was ~1% of a recorded call's CPU."""


def _forget_provider_named() -> None:
    global _provider_named
    _provider_named = None


os.register_at_fork(after_in_child=_forget_provider_named)


def _in_use() -> bool:
    """True when a span or a tracer provider can be in effect (the API is imported then): the
    API is imported here or by the application, or the environment names a provider."""
    global _provider_named
    if _trace is not None:
        return True
    if "opentelemetry.trace" in sys.modules:
        return _api()
    if _provider_named is None:
        _provider_named = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
    return _provider_named and _api()


if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

__all__ = [
    "TRACEPARENT",
    "TRACER_NAME",
    "TRACE_HEADERS",
    "available",
    "configure_from_env",
    "context_from_headers",
    "current_context",
    "current_span",
    "enabled",
    "in_span",
    "set_attributes",
    "set_error",
    "span",
    "start_span",
    "trace_headers",
    "use_headers",
]

TRACER_NAME = "little"
TRACEPARENT = "traceparent"
"""The W3C header every record and command written inside a span carries (with
``tracestate`` when the context has one)."""

TRACE_HEADERS = (TRACEPARENT, "tracestate")
"""The headers W3C trace context travels in."""


def available() -> bool:
    """True when the OpenTelemetry API is importable (the ``otel`` extra, or a dependency)."""
    return _api()


def enabled() -> bool:
    """True when spans are recorded: the API is there and an SDK tracer provider is set."""
    if not _in_use():
        return False
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider)


_tracers: dict[int, Any] = {}


def _tracer() -> Any:
    """little's tracer of the global provider now (made once per provider: ``get_tracer``
    costs more than a span)."""
    assert _trace is not None
    provider = _trace.get_tracer_provider()
    tracer = _tracers.get(id(provider))
    if tracer is None:
        _tracers.clear()  # a provider set since: the old one's tracer is never used again
        tracer = _tracers[id(provider)] = (provider, _trace.get_tracer(TRACER_NAME))
    return tracer[1]


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    parent: Context | None = None,
    links: Sequence[Context] = (),
    kind: str = "internal",
) -> Iterator[Span | None]:
    """A span made current for the block (None without the API). ``parent``: a context (from
    ``context_from_headers``) to parent it to instead of the current one; ``links``: contexts
    it is linked to. An exception escaping the block is recorded and sets the status to error,
    unless it is a ``RunInterrupt``: a run suspending on a durable wait, a supervisor's stop or
    cancel, a branch stopped because a sibling failed (whose own span has the failure) fail
    nothing. With no SDK set
    up, no span is made at all (the API's would record nothing and cost ~10 us each)."""
    if not enabled():
        yield None
        return
    link_list = []
    for ctx in links:
        linked = _trace.get_current_span(ctx).get_span_context()
        if linked.is_valid:
            link_list.append(_trace.Link(linked))
    with _tracer().start_as_current_span(
        name,
        context=parent,
        kind=_trace.SpanKind[kind.upper()],
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        links=link_list,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            status = getattr(current, "status", None)  # the SDK's span has one
            already = status is not None and status.status_code == _trace.StatusCode.ERROR
            if not isinstance(exc, RunInterrupt) and not already:  # (a cause set inside wins)
                set_error(current, type(exc).__name__)
            raise


def start_span(
    name: str, attributes: Mapping[str, Any] | None = None, *, parent: Context | None = None
) -> Span | None:
    """A span that is not made current, for a scope that is not one block (an agent session
    entered and left by ``async with``); the caller ends it (None without the API)."""
    if not enabled():
        return None
    return _tracer().start_span(  # type: ignore[no-any-return]
        name,
        context=parent,
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
    )


def current_span() -> Span | None:
    """The current span (None without the API, or before anything of it is in use)."""
    return _trace.get_current_span() if _in_use() else None


def current_context() -> Context | None:
    """The current context (None without the API, or before anything of it is in use)."""
    return _context.get_current() if _in_use() else None


def in_span(parent: Span | None) -> Context | None:
    """A context whose current span is ``parent`` (to parent a span to an object's own span,
    whatever the current one is)."""
    if parent is None or not _in_use():
        return None
    return _trace.set_span_in_context(parent)  # type: ignore[no-any-return]


def set_attributes(target: Span | None, **attributes: Any) -> None:
    """Set the attributes that are not None (``little_x`` names become ``little.x``)."""
    if target is None:
        return
    for key, value in attributes.items():
        if value is not None:
            target.set_attribute(
                key.replace("_", ".", 1) if key.startswith("little_") else key, value
            )


def set_error(target: Span | None, error_type: str) -> None:
    """Mark the span failed (a run that ended failed, a call that raised) with the error's
    type only, as ``error.type`` and the status description: an error's message may quote
    what the world's redactor keeps out of the log (a provider's error quoting a key), and a
    span leaves the deployment for a tracing backend. The message is in the run's log."""
    if target is None or not _in_use() or not target.is_recording():
        return
    target.set_attribute("error.type", error_type)
    target.set_status(_trace.Status(_trace.StatusCode.ERROR, error_type))


def trace_headers() -> tuple[tuple[str, bytes], ...]:
    """The current span's W3C context as record headers (empty when there is none)."""
    if not _in_use() or not _trace.get_current_span().get_span_context().is_valid:
        return ()
    from opentelemetry import propagate  # on first use: its import loads the propagators

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple((k, carrier[k].encode()) for k in TRACE_HEADERS if k in carrier)


def context_from_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | None,
) -> Context | None:
    """The W3C context a record's headers carry, or None (no API, no valid ``traceparent``)."""
    if not headers:
        return None
    carrier: dict[str, str] = {}
    for key, value in headers:
        if key in TRACE_HEADERS and value is not None:
            carrier[key] = value.decode() if isinstance(value, bytes) else value
    if TRACEPARENT not in carrier or not _api():  # a context to continue: the API is needed
        return None
    from opentelemetry import propagate  # on first use: its import loads the propagators

    ctx = propagate.extract(carrier)
    return ctx if _trace.get_current_span(ctx).get_span_context().is_valid else None


@contextmanager
def use_headers(headers: Sequence[tuple[str, str | bytes | None]] | None) -> Iterator[None]:
    """Make the context a record's headers carry current for the block (a command's: what it
    starts becomes a child of the span that sent it)."""
    ctx = context_from_headers(headers)
    if ctx is None or _context is None:
        yield
        return
    token = _context.attach(ctx)
    try:
        yield
    finally:
        _context.detach(token)


_EXPORTER_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def configure_from_env(service_name: str) -> bool:
    """Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables, for little's own
    processes; True if it did.

    Nothing happens unless the SDK is installed (the ``otel`` extra), one of
    ``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, ``OTEL_SDK_DISABLED`` is not ``true`` and no
    tracer provider is set already. ``OTEL_TRACES_EXPORTER`` is a comma list of ``otlp``
    (OTLP/HTTP protobuf, the default), ``console`` and ``none``; the exporter reads its
    endpoint, headers and timeout from the usual variables, the resource its attributes from
    ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` (default ``service_name``), and the
    batch processor its delays from ``OTEL_BSP_*``. Spans are flushed when the process exits.
    """
    if not _api() or enabled():
        return False
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if not any(os.environ.get(name) for name in _EXPORTER_VARS):
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:  # the API came with another package, the SDK did not
        return False
    from little.errors import ConfigurationError

    names = [
        n.strip().lower()
        for n in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")
        if n.strip()
    ]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError as exc:
                raise ConfigurationError(
                    "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http: "
                    "pip install 'little-workflow[otel]'"
                ) from exc
            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            raise ConfigurationError(
                f"OTEL_TRACES_EXPORTER={os.environ.get('OTEL_TRACES_EXPORTER')!r}: little "
                f"knows otlp, console and none, not {name!r}"
            )
    if not exporters:
        return False
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)  # shuts down (flushes) at exit
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _trace.set_tracer_provider(provider)
    return True
