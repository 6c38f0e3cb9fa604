"""Fresh Kafka topics for one test, with the configs of deploy/topics.yaml."""

from __future__ import annotations

from dataclasses import replace

from little.log import RUN_INDEX_TOPIC, RUNS_TOPIC, SNAPSHOTS_TOPIC, load_topic_specs


def create_kafka_topics(bootstrap: str, topic: str, index_topic: str, partitions: int) -> None:
    """A runs topic and its index topic."""
    from little.log.kafka import apply_topics

    specs = load_topic_specs()
    runs = replace(specs[RUNS_TOPIC], name=topic, partitions=partitions)
    index = replace(specs[RUN_INDEX_TOPIC], name=index_topic, partitions=partitions)
    apply_topics(bootstrap, [runs, index])


def create_snapshots_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A compacted snapshots topic."""
    from little.log.kafka import apply_topics

    spec = load_topic_specs()[SNAPSHOTS_TOPIC]
    apply_topics(bootstrap, [replace(spec, name=topic, partitions=partitions)])
