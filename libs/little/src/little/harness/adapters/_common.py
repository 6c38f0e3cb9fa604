"""What the model adapters share: their SDK, imported when a model is constructed (never when
``little.harness`` is), its client made on first use with the SDK's own retries off, and the
recording kernel's retry policy over the SDK's errors."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from little.errors import ConfigurationError
from little.harness._retry import ProviderFailure, RetryPolicy, sdk_failure

__all__ = ["ProviderSDK", "SDKModel"]


class _Client(Protocol):
    """What an adapter asks of its SDK's client: its retries, and a copy without them."""

    max_retries: int

    def with_options(self, *, max_retries: int) -> Self: ...


ClientT = TypeVar("ClientT", bound=_Client)


@dataclass(frozen=True, slots=True)
class ProviderSDK:
    """A provider's SDK, by the names an adapter needs of it."""

    provider: str
    """The provider's name, as a recorded call names it (``openai``)."""
    module: str
    """The SDK's module (``openai``)."""
    title: str
    """The provider as people write it (``OpenAI``)."""
    extra: str
    """The ``little-workflow`` extra that installs the SDK."""
    client: str
    """The SDK's async client class (``AsyncOpenAI``)."""
    error: str
    """The base of the SDK's errors (``OpenAIError``)."""
    key_variable: str
    """The environment variable the SDK reads the API key from."""
    adapter: str
    """The adapter's class (``OpenAIModel``), as the error of a missing SDK names it."""

    def load(self) -> Any:
        """The SDK's module; a ``ConfigurationError`` naming the extra when it is missing."""
        try:
            return importlib.import_module(self.module)
        except ImportError as exc:
            raise ConfigurationError(
                f"{self.adapter} needs the {self.title} SDK: "
                f"pip install 'little-workflow[{self.extra}]'"
            ) from exc


class SDKModel(Generic[ClientT]):
    """A chat model served through its provider's SDK (``_provider_sdk``): the SDK is imported at
    construction, the client made on first use, and every attempt is the kernel's."""

    _provider_sdk: ClassVar[ProviderSDK]
    provider: str
    name: str

    def __init__(
        self,
        model: str,
        *,
        client: ClientT | None,
        api_key: str | None,
        max_retries: int | None,
        retry_delay: float | None,
        retry_max_delay: float | None,
        options: dict[str, Any],
    ) -> None:
        # a missing SDK is an error now; a missing key only when called
        self._sdk = self._provider_sdk.load()
        self._client: ClientT | None = client
        self._api_key = api_key
        self.provider = self._provider_sdk.provider
        self.name = model
        self.options: dict[str, Any] = dict(options)
        self.retry_policy = RetryPolicy.from_settings(
            self.failure,
            max_retries=max_retries,
            base_delay=retry_delay,
            max_delay=retry_max_delay,
        )
        """How the recording kernel retries a failed turn (each attempt recorded); the SDK
        client's own retries are off."""

    @property
    def client(self) -> ClientT:
        """The SDK client, made on first use: a resume or replay whose every call is served
        from the log needs no key and no network."""
        if self._client is None:
            make = getattr(self._sdk, self._provider_sdk.client)
            try:
                self._client = make(api_key=self._api_key, max_retries=0)
            except getattr(self._sdk, self._provider_sdk.error) as exc:
                raise ConfigurationError(
                    f"{self!r} cannot call its API: {exc} "
                    f"(set {self._provider_sdk.key_variable} or pass api_key=)"
                ) from exc
        elif self._client.max_retries != 0:
            # every attempt is the kernel's, recorded: one the SDK repeated unseen is not
            self._client = self._client.with_options(max_retries=0)
        return self._client

    def failure(self, exc: BaseException) -> ProviderFailure:
        """What a failed call says about another attempt: retryable for a rate limit (429),
        408, 409, a 5xx or no answer at all; not for any other 4xx."""
        return sdk_failure(self._sdk, exc)
