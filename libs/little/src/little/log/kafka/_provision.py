"""Create topics from their specs, or report how existing ones drifted from them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from little.errors import ConfigurationError, LogError
from little.log._topics import TopicSpec
from little.log.kafka.client import client_config, connect_admin
from little.logging_setup import get_logger

log = get_logger("little.log.provision")


@dataclass(frozen=True)
class TopicReport:
    """What ``apply_topics`` found or did for one topic."""

    name: str
    status: str  # "created" | "ok" | "drift" | "fixed"
    drift: tuple[str, ...] = field(default=())
    """What differs from the spec (for "fixed": what was changed, and what could not be)."""
    notes: tuple[str, ...] = field(default=())
    """What was adapted to the cluster (a replication factor capped at the broker count)."""


def apply_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec],
    *,
    config: Mapping[str, Any] | None = None,
    create: bool = True,
    fix: bool = False,
    timeout: float = 30.0,
) -> list[TopicReport]:
    """Create missing topics (if ``create``) and report drift on existing ones; with ``fix``,
    set the drifted configs (retention, cleanup policy, min ISR, ...) to the spec's.

    A partition count is never changed: adding partitions moves runs to other partitions
    (murmur2 of the id modulo the count), so their events would be split across two. A
    replication factor above the broker count is capped to the broker count (with
    ``min.insync.replicas`` capped to match), so the same file provisions a one-node dev
    broker and a production cluster; the report says so.
    """
    admin = connect_admin(bootstrap_servers, config, timeout=timeout)
    metadata = admin.list_topics(timeout=timeout)
    brokers = max(1, len(metadata.brokers))
    reports: list[TopicReport] = []
    to_create: list[NewTopic] = []
    capped: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        rf = min(spec.replication_factor, brokers)
        wanted = dict(spec.config)
        notes: tuple[str, ...] = ()
        if rf < spec.replication_factor:
            notes = (
                f"replication factor {spec.replication_factor} capped at {rf}: the cluster has "
                f"{brokers} broker{'s' if brokers > 1 else ''}",
            )
        capped[spec.name] = notes
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
            drift.append(
                f"partitions: {len(existing.partitions)} (want {spec.partitions}; not changed: "
                "it would move runs to other partitions)"
            )
        resource = ConfigResource(ConfigResource.Type.TOPIC, spec.name)
        actual = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
        changes: dict[str, tuple[str | None, str]] = {}
        for key, value in wanted.items():
            have = actual.get(key)
            if have is None or str(have.value) != value:
                changes[key] = (None if have is None else str(have.value), value)
        if fix and changes:
            _alter(admin, spec.name, {k: v for k, (_, v) in changes.items()}, timeout)
            fixed = [f"{k}: {old} -> {new}" for k, (old, new) in changes.items()]
            status = "drift" if drift else "fixed"  # a partition count is left as it is
            reports.append(TopicReport(spec.name, status, (*fixed, *drift), notes))
            continue
        drift += [f"{k}: {old} (want {new})" for k, (old, new) in changes.items()]
        reports.append(TopicReport(spec.name, "drift" if drift else "ok", tuple(drift), notes))
    if to_create:
        futures = admin.create_topics(to_create, request_timeout=timeout)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS: another process won the race
                    raise LogError(f"cannot create topic {name}: {exc}") from exc
            log.info("topic_created", topic=name)
            reports.append(TopicReport(name, "created", notes=capped.get(name, ())))
        _wait_until_served(
            admin,
            [t.topic for t in to_create],
            timeout,
            client_config(bootstrap_servers, config),
        )
    return sorted(reports, key=lambda r: r.name)


def _alter(admin: Any, topic: str, configs: Mapping[str, str], timeout: float) -> None:
    """Set ``configs`` on ``topic`` (incrementally: the topic's other settings stay)."""
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    futures = admin.incremental_alter_configs([resource], request_timeout=timeout)
    try:
        futures[resource].result()
    except KafkaException as exc:
        raise LogError(f"cannot alter the config of topic {topic}: {exc}") from exc
    log.info("topic_config_fixed", topic=topic, configs=dict(configs))


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
