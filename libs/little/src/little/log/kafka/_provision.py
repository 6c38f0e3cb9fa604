"""Create topics from their specs, or report how existing ones drifted from them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from little.errors import ConfigurationError, LogError
from little.log._topics import TopicSpec
from little.log.kafka.client import client_config, connect_admin
from little.logs import get_logger

log = get_logger("little.log.provision")


@dataclass(frozen=True)
class TopicReport:
    """What ``apply_topics`` found or did for one topic."""

    name: str
    status: str  # "created" | "ok" | "drift"
    drift: tuple[str, ...] = field(default=())


def apply_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec],
    *,
    config: Mapping[str, Any] | None = None,
    create: bool = True,
    timeout: float = 30.0,
) -> list[TopicReport]:
    """Create missing topics (if ``create``) and report drift on existing ones.

    A replication factor above the broker count is capped to the broker count (with
    ``min.insync.replicas`` capped to match), so the same file provisions a one-node dev
    broker and a production cluster.
    """
    admin = connect_admin(bootstrap_servers, config, timeout=timeout)
    metadata = admin.list_topics(timeout=timeout)
    brokers = max(1, len(metadata.brokers))
    reports: list[TopicReport] = []
    to_create: list[NewTopic] = []
    for spec in specs:
        rf = min(spec.replication_factor, brokers)
        wanted = dict(spec.config)
        if "min.insync.replicas" in wanted:
            wanted["min.insync.replicas"] = str(min(int(wanted["min.insync.replicas"]), rf))
        existing = metadata.topics.get(spec.name)
        if existing is None or existing.error is not None:
            if create:
                to_create.append(NewTopic(spec.name, spec.partitions, rf, config=wanted))
            else:
                reports.append(TopicReport(spec.name, "drift", ("missing",)))
            continue
        drift: list[str] = []
        if len(existing.partitions) != spec.partitions:
            drift.append(f"partitions: {len(existing.partitions)} (want {spec.partitions})")
        resource = ConfigResource(ConfigResource.Type.TOPIC, spec.name)
        actual = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
        for key, value in wanted.items():
            have = actual.get(key)
            if have is None or str(have.value) != value:
                drift.append(f"{key}: {None if have is None else have.value} (want {value})")
        reports.append(TopicReport(spec.name, "drift" if drift else "ok", tuple(drift)))
    if to_create:
        futures = admin.create_topics(to_create, request_timeout=timeout)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS: another process won the race
                    raise LogError(f"cannot create topic {name}: {exc}") from exc
            log.info("topic_created", topic=name)
            reports.append(TopicReport(name, "created"))
        _wait_until_served(
            admin,
            [t.topic for t in to_create],
            timeout,
            client_config(bootstrap_servers, config),
        )
    return sorted(reports, key=lambda r: r.name)


def _wait_until_served(
    admin: Any, names: list[str], timeout: float, client_config: Mapping[str, Any]
) -> None:
    """Block until every partition of the new topics has a leader and answers a watermark
    request.

    CreateTopics returns before a (freshly started) broker serves the topic, so a client that
    opens it at once would see "does not exist", and a just-created partition may answer
    NOT_LEADER for a moment after the metadata names its leader."""
    deadline = time.monotonic() + timeout
    partitions: dict[str, list[int]] = {}
    pending = set(names)
    while pending:
        topics = admin.list_topics(timeout=timeout).topics
        for n in list(pending):
            meta = topics.get(n)
            if (
                meta is None
                or meta.error is not None
                or not meta.partitions
                or any(p.leader < 0 or p.error is not None for p in meta.partitions.values())
            ):
                continue
            partitions[n] = sorted(meta.partitions)
            pending.discard(n)
        if pending and time.monotonic() > deadline:
            raise LogError(f"created topics not served within {timeout:.0f}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
    consumer = Consumer({**client_config, "group.id": f"little-provision-{uuid.uuid4()}"})
    try:
        for n in names:
            for p in partitions[n]:
                while True:
                    try:
                        consumer.get_watermark_offsets(
                            TopicPartition(n, p), timeout=5, cached=False
                        )
                        break
                    except KafkaException as exc:
                        if time.monotonic() > deadline:
                            raise LogError(
                                f"created topic {n}[{p}] not served within {timeout:.0f}s: {exc}"
                            ) from exc
                        time.sleep(0.1)
    finally:
        consumer.close()


def require_no_drift(reports: Iterable[TopicReport]) -> None:
    bad = [r for r in reports if r.status == "drift"]
    if bad:
        raise ConfigurationError(
            "topics drifted from deploy/topics.yaml: "
            + "; ".join(f"{r.name}: {', '.join(r.drift)}" for r in bad)
        )
