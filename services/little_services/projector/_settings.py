"""The projector service's settings: the library's projection settings plus HTTP."""

from __future__ import annotations

from little_services.projection import ProjectionSettings


class ProjectorServiceSettings(ProjectionSettings):
    """``LITTLE_*`` environment variables; with no ``LITTLE_KAFKA_BOOTSTRAP`` the embedded
    world under ``LITTLE_DATA_DIR`` is projected."""

    http_host: str = "127.0.0.1"
    http_port: int = 8080
    api_token: str | None = None
    """When set, every endpoint but /healthz needs ``Authorization: Bearer <token>``."""
