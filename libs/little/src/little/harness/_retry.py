"""Provider errors: which failures of a model call are worth another attempt, and how long to
wait before it.

The recording kernel retries a model turn itself, each attempt a recorded call (a
``harness.model.failed`` with ``retryable=true``, then a new ``harness.model.called``), so the
provider SDK's own retries are turned off by the adapters: an attempt the SDK repeated out of
sight would be billed and never recorded. This module is pure: it classifies an exception and
computes a delay; the kernel waits (``RetryPolicy.sleep``, ``asyncio.sleep`` unless a test
injects another) without blocking the loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_RETRY_MAX_DELAY",
    "ProviderFailure",
    "RetryPolicy",
    "failure_of_status",
    "sdk_failure",
]

DEFAULT_MAX_RETRIES = 2
"""Retries of a model turn after its first attempt (the provider SDKs' own default)."""
DEFAULT_RETRY_DELAY = 0.5
"""Seconds before the first retry; each later one waits twice as long as the one before."""
DEFAULT_RETRY_MAX_DELAY = 30.0
"""No wait between attempts is longer, whatever the provider's ``retry-after`` asks."""

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses worth another attempt besides every 5xx (timeout, lock conflict, rate
limit): the set the OpenAI and Anthropic SDKs retry on."""

RETRYABLE_STREAM_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
"""Error types of an ``error`` event inside a stream answered ``200`` (Anthropic's server-sent
events) worth another attempt: the provider's 529, 5xx, 429 and 408 as an event."""


@dataclass(frozen=True)
class ProviderFailure:
    """What a failed model call says about another attempt."""

    retryable: bool
    """The same request, sent again later, can succeed (a rate limit, a 5xx, a dropped
    connection); False for a request the provider refused as it is (a 4xx)."""
    retry_after: float | None = None
    """Seconds the provider asked to wait (``retry-after-ms`` / ``retry-after``), if any."""


def failure_of_status(status: int, headers: Mapping[str, str] | None = None) -> ProviderFailure:
    """A failed HTTP answer: retryable for 408, 409, 429 and 5xx, unless the provider says
    otherwise (``x-should-retry``); with the wait it asked for."""
    headers = headers or {}
    should = headers.get("x-should-retry")
    if should in ("true", "false"):
        retryable = should == "true"
    else:
        retryable = status in RETRYABLE_STATUS or status >= 500
    return ProviderFailure(retryable, _retry_after(headers))


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue  # an HTTP date: the exponential backoff decides
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _not_retryable(exc: BaseException) -> ProviderFailure:
    return ProviderFailure(False)


@dataclass(frozen=True)
class RetryPolicy:
    """How a model's failed turns are attempted again: at most ``max_retries`` more attempts
    when ``classify`` calls the failure retryable, waiting ``base_delay * 2**(n-1)`` seconds
    before the n-th retry (at least what the provider asked for), never more than
    ``max_delay``. ``sleep`` waits (``asyncio.sleep``: the loop goes on meanwhile); a test may
    inject another to record the waits instead of taking them."""

    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay: float = DEFAULT_RETRY_DELAY
    max_delay: float = DEFAULT_RETRY_MAX_DELAY
    classify: Callable[[BaseException], ProviderFailure] = field(
        default=_not_retryable, compare=False
    )
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.base_delay < 0 or self.max_delay < 0:
            from little.errors import ConfigurationError

            raise ConfigurationError(
                f"retry policy: max_retries, base_delay and max_delay must not be negative "
                f"(got {self.max_retries}, {self.base_delay}, {self.max_delay})"
            )

    def delay(self, retry: int, failure: ProviderFailure) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        backoff = self.base_delay * 2.0 ** (retry - 1)
        return min(self.max_delay, max(backoff, failure.retry_after or 0.0))

    @classmethod
    def from_settings(
        cls,
        classify: Callable[[BaseException], ProviderFailure],
        *,
        max_retries: int | None = None,
        base_delay: float | None = None,
        max_delay: float | None = None,
    ) -> RetryPolicy:
        """A policy from the arguments given, the rest from ``LITTLE_MODEL_MAX_RETRIES``,
        ``LITTLE_MODEL_RETRY_DELAY`` and ``LITTLE_MODEL_RETRY_MAX_DELAY`` (read now)."""
        from little.settings import LittleSettings

        settings = LittleSettings()
        return cls(
            max_retries=settings.model_max_retries if max_retries is None else max_retries,
            base_delay=settings.model_retry_delay if base_delay is None else base_delay,
            max_delay=settings.model_retry_max_delay if max_delay is None else max_delay,
            classify=classify,
        )


def _error_type(body: object) -> str | None:
    """``error.type`` of an error body (``{"type": "error", "error": {"type": ...}}``)."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def sdk_failure(sdk: Any, exc: BaseException) -> ProviderFailure:
    """A failure raised by the OpenAI or Anthropic SDK (both raise ``APIStatusError`` with
    the HTTP response for an answer that is an error, ``APIConnectionError`` (timeouts
    included) when no answer came): the status decides (for an ``error`` event inside a
    stream answered 200, its error type: overloaded, a server error, a rate limit or a
    timeout are retryable); no answer is worth another attempt; anything else (a bug, a
    response that does not parse) is not."""
    if isinstance(exc, sdk.APIStatusError):
        if exc.status_code < 300:  # an error event inside a stream that began well
            return ProviderFailure(_error_type(exc.body) in RETRYABLE_STREAM_ERRORS)
        return failure_of_status(exc.status_code, exc.response.headers)
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderFailure(True)
    return ProviderFailure(False)
