"""Dead letters of the commands topic: records the coordinator will not act on.

A record that is no command (``CommandDecodeError``: its reason), a command in another
partition than its run's (``misrouted``) or one keyed with another run id than its body names
(``key-mismatch``) goes to the deployment's dead-letter topic (``LITTLE_DLQ_TOPIC``, shared with
the projector) with its own key and value and the projector's ``little.dlq.*`` headers (its
own headers are not carried: the source offset finds them); ``little.dlq.source.topic`` tells
the two sources apart. A value too large to send again is left out, as the projector does
(``little.dlq.value_omitted`` gives its size). Sends block, on a worker thread, never on the
loop.
"""

from __future__ import annotations

from typing import Any

from little.log.kafka.client import client_config
from little_services.projection import (
    DLQ_MAX_VALUE,
    DLQ_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC_HEADER,
    DLQ_VALUE_OMITTED,
)

__all__ = ["DeadLetterProducer", "dead_letter_headers"]


def dead_letter_headers(
    reason: str, message: str, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    return [
        (DLQ_REASON, reason.encode()),
        (DLQ_MESSAGE, message[:4000].encode()),
        (DLQ_TOPIC_HEADER, topic.encode()),
        (DLQ_PARTITION, str(partition).encode()),
        (DLQ_OFFSET, str(offset).encode()),
    ]


class DeadLetterProducer:
    """An idempotent producer (acks=all) to the dead-letter topic, made on first use."""

    def __init__(self, bootstrap_servers: str, topic: str, config: dict[str, Any] | None = None):
        self.topic = topic
        self._config = client_config(bootstrap_servers, config)
        self._producer: Any = None

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        timeout: float = 30.0,
    ) -> None:
        """Send one dead letter and wait for its ack; raises ``RuntimeError`` naming why not."""
        from confluent_kafka import KafkaError, Message, Producer

        if self._producer is None:
            self._producer = Producer(
                {**self._config, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
            )
        out = list(headers)
        if value is not None and len(value) > DLQ_MAX_VALUE:
            out.append((DLQ_VALUE_OMITTED, str(len(value)).encode()))
            value = b""
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err)

        self._producer.produce(self.topic, key=key, value=value, headers=out, on_delivery=delivered)
        if self._producer.flush(timeout) != 0:
            raise RuntimeError(f"dead letter to {self.topic} not acknowledged in {timeout:.0f}s")
        if failures:
            raise RuntimeError(f"dead letter to {self.topic} failed: {failures[0]}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
