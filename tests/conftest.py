"""Shared fixtures: a real Kafka broker (session-wide) and fresh topics per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.kafka_broker import NoBrokerError, kafka_bootstrap
from tests.postgres_server import NoPostgresError, PostgresServer, postgres_server
from tests.s3_server import S3Server, s3_server

# The conformance suites' asserts live in the library: rewrite them as a test module's are.
pytest.register_assert_rewrite("little.testing")


@pytest.fixture(scope="session")
def kafka_bootstrap_servers() -> Iterator[str]:
    try:
        cm = kafka_bootstrap()
        bootstrap = cm.__enter__()
    except NoBrokerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield bootstrap
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topic, run and group names."""
    return uuid.uuid4().hex[:10]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs a broker carries the ``kafka`` marker (so ``-m "not kafka"`` selects
    what runs without one, and nothing that needs one hides among them): one that asks for the
    broker fixture, directly or through another fixture, without the marker fails collection."""
    unmarked = [
        item.nodeid
        for item in items
        if "kafka_bootstrap_servers" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("kafka") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "tests that use the Kafka broker without @pytest.mark.kafka: " + ", ".join(unmarked)
        )


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A real S3-compatible server (moto standalone) on 127.0.0.1, one per session."""
    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (initdb + pg_ctl in a temp dir) on 127.0.0.1, one per session."""
    try:
        cm = postgres_server()
        server = cm.__enter__()
    except NoPostgresError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        cm.__exit__(None, None, None)
