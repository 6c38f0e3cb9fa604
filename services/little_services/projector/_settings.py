"""The projector service's settings: the library's projection settings plus HTTP."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from little_services.projection import ProjectionSettings


class ProjectorServiceSettings(ProjectionSettings):
    """``LITTLE_*`` environment variables; with no ``LITTLE_KAFKA_BOOTSTRAP`` the embedded
    world under ``LITTLE_DATA_DIR`` is projected."""

    http_host: str = Field(
        "127.0.0.1", validation_alias=AliasChoices("LITTLE_PROJECTOR_HTTP_HOST", "LITTLE_HTTP_HOST")
    )
    """The address the HTTP API listens on (``0.0.0.0`` in a container)."""
    http_port: int = Field(
        8080, validation_alias=AliasChoices("LITTLE_PROJECTOR_HTTP_PORT", "LITTLE_HTTP_PORT")
    )
    """The HTTP API's port."""
    api_token: str | None = None
    """When set, every endpoint but the probes (/healthz, /readyz) needs ``Authorization:
    Bearer <token>``; /metrics too unless ``LITTLE_METRICS_OPEN``. The run inspector's pages
    (/ui) also take it from the cookie their login form sets."""
    metrics_open: bool = False
    """Serve /metrics without the API token (for a scraper inside the cluster)."""
    ui_secure_cookie: bool | None = None
    """Mark the run inspector's login cookie ``Secure`` (sent over HTTPS only): ``1`` always,
    ``0`` never (plain HTTP on another machine) [default: always, unless the page was asked
    for by a loopback address such as ``localhost``]. Behind a TLS-terminating proxy the
    default is right: the projector sees plain HTTP, the browser HTTPS."""
