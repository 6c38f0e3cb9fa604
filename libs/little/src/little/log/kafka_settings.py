"""How little's Kafka clients connect: librdkafka's security settings from ``LITTLE_KAFKA_*``.

The log layer owns these (``little.log.kafka.client`` reads them for every client it makes);
``little.settings`` re-exports the class for users. Importing this module must never import
confluent-kafka, so it sits beside the backend, not inside ``little.log.kafka``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["KafkaClientSettings"]


class KafkaClientSettings(BaseSettings):
    """How every Kafka client little makes connects (the world's log, cursors and snapshots,
    the projector, the coordinator, ``little`` commands): librdkafka's security settings,
    from ``LITTLE_KAFKA_*``. Settings a caller passes in code (``kafka_world(**config)``)
    win over these."""

    model_config = SettingsConfigDict(
        env_prefix="LITTLE_KAFKA_", extra="ignore", use_attribute_docstrings=True
    )

    security_protocol: str | None = None
    """librdkafka ``security.protocol``: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or
    ``SASL_SSL`` [default: librdkafka's, ``PLAINTEXT``]."""
    sasl_mechanism: str | None = None
    """``sasl.mechanism``, e.g. ``SCRAM-SHA-512``."""
    sasl_username: str | None = None
    """``sasl.username``."""
    sasl_password: SecretStr | None = None
    """``sasl.password`` (never logged, never in an error message)."""
    ssl_ca_location: str | None = None
    """``ssl.ca.location``: the PEM file of the CA that signed the brokers' certificates."""
    client_config: dict[str, str] = {}
    """Any other librdkafka settings, as a JSON object (``{"ssl.endpoint.identification.algorithm": "none"}``)."""

    @field_validator("client_config", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = json.loads(value) if value.strip() else {}
        if not isinstance(value, dict):
            raise ValueError("LITTLE_KAFKA_CLIENT_CONFIG must be a JSON object")
        return {str(k): str(v) for k, v in value.items()}

    def librdkafka(self) -> dict[str, str]:
        """The librdkafka settings these name (only the ones set)."""
        found = dict(self.client_config)
        for key, value in (
            ("security.protocol", self.security_protocol),
            ("sasl.mechanism", self.sasl_mechanism),
            ("sasl.username", self.sasl_username),
            (
                "sasl.password",
                self.sasl_password.get_secret_value() if self.sasl_password else None,
            ),
            ("ssl.ca.location", self.ssl_ca_location),
        ):
            if value:
                found[key] = value
        return found
