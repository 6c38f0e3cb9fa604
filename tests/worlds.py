"""A world for a test parametrised over the two worlds (``params=["embedded",
pytest.param("kafka", marks=pytest.mark.kafka)]``): the embedded world in the test's
directory, or a Kafka world of fresh topics on the session's broker, its artifacts beside it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import little


@contextmanager
def world_of_param(
    request: pytest.FixtureRequest, tmp_path: Path, topic_prefix: str, data_dir: str = "world"
) -> Iterator[little.World]:
    if request.param == "embedded":
        with little.local_world(tmp_path / data_dir) as w:
            yield w
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap_servers")
    with little.kafka_world(
        bootstrap,
        topic_prefix=topic_prefix,
        provision=True,
        artifacts_dir=str(tmp_path / "artifacts"),
    ) as w:
        yield w
