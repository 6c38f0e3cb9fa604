"""Settings of the resume coordinator, from ``LITTLE_*`` environment variables."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Literal

from pydantic import AliasChoices, Field

from little.errors import ConfigurationError
from little.settings import LittleSettings

GROUP = "little-resume-coordinator"


class CoordinatorSettings(LittleSettings):
    """Every knob of the coordinator, besides the world's (``LittleSettings``: topics,
    artifacts)."""

    coordinator_group: str = GROUP
    """The consumer group on the commands topic (its own per deployment when topics are
    prefixed)."""
    coordinator_id: str | None = None
    """Owner name written on claims; default ``coordinator/<host>/<pid>/<random>``."""
    workflows: str = ""
    """``module[:attr],...`` imported at start (as well as the ``little.workflows`` entry points)."""

    missing_version: Literal["fail", "park"] = "fail"
    """A run whose workflow is registered here but not in the version it started on: ``fail``
    ends it with ``RunFailed`` naming the version (its code is gone); ``park`` records
    ``RunParked`` and leaves it for a coordinator that has that version (a fleet whose
    members run different configurations, mid-deploy). A workflow not registered here at all
    is always parked."""

    lease_seconds: float = 30.0
    """A run with no new event and no live local execution for this long is resumed."""
    session_timeout_ms: int = 10_000
    """The group's session timeout: a member silent this long loses its partitions."""
    heartbeat_interval_ms: int | None = None
    """Default: a sixth of the session timeout (at least 500 ms), so a dead member is noticed fast."""
    stop_grace_seconds: float = 10.0
    """On revocation or SIGTERM, how long runs get to reach an event boundary before their
    tasks are cancelled (an in-flight call is then abandoned and re-invoked by the next owner)."""
    max_runs: int = 1000
    """Executions at once in this process; more wait (and are not counted as stalled)."""
    append_stall_seconds: float = 5.0
    """An append unacknowledged for this long marks the log stalled: /readyz says 503 and
    why, /healthz stays 200 (the process is fine; restarting it would not bring the broker
    back), runs wait for their acks and carry on when the broker answers."""

    http_host: str = Field(
        "127.0.0.1",
        validation_alias=AliasChoices("LITTLE_COORDINATOR_HTTP_HOST", "LITTLE_HTTP_HOST"),
    )
    """The address /healthz, /readyz and /metrics listen on (``0.0.0.0`` in a container)."""
    http_port: int = Field(
        8081, validation_alias=AliasChoices("LITTLE_COORDINATOR_HTTP_PORT", "LITTLE_HTTP_PORT")
    )
    """The port of /healthz, /readyz and /metrics."""
    api_token: str | None = None
    """When set, /metrics needs ``Authorization: Bearer <token>`` unless
    ``LITTLE_METRICS_OPEN``; the probes stay open."""
    metrics_open: bool = False
    """Serve /metrics without the API token."""
    provision_topics: bool = False
    """Create missing topics (from the bundled topics.yaml, under the configured names)."""

    def bootstrap(self) -> str:
        if not self.kafka_bootstrap:
            raise ConfigurationError(
                "the resume coordinator needs Kafka: set LITTLE_KAFKA_BOOTSTRAP=host:port"
            )
        return self.kafka_bootstrap

    def owner(self) -> str:
        return self.coordinator_id or (
            f"coordinator/{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
        )

    def heartbeat_ms(self) -> int:
        if self.heartbeat_interval_ms is not None:
            return self.heartbeat_interval_ms
        return max(500, self.session_timeout_ms // 6)
