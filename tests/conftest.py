"""Shared fixtures: a real Kafka broker, PostgreSQL and S3 (one each per session, stopped when\nthe session ends however it ends), the markers a test that needs a broker or a browser carries."""

from __future__ import annotations

import signal
import threading
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


NEEDS_MARKER = {"kafka_bootstrap_servers": "kafka", "browser": "browser"}
"""A fixture that needs a Kafka broker or Chromium, and the marker a test using it carries."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs a broker carries the ``kafka`` marker, one that needs Chromium the
    ``browser`` marker (so ``-m "not kafka and not browser"``, ``make test-fast``, selects what
    runs without them, and nothing that needs one hides among them): one that asks for the
    fixture, directly or through another fixture, without the marker fails collection."""
    unmarked = [
        f"{item.nodeid} (@pytest.mark.{marker})"
        for item in items
        for fixture, marker in NEEDS_MARKER.items()
        if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "tests that use the Kafka broker or the browser without their marker: "
            + ", ".join(unmarked)
        )


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM and SIGHUP (a CI job or a terminal ending the run) stop the run as Ctrl-C does:
    pytest then tears down every fixture, so the servers the session started are stopped."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, interrupt)


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """A real S3-compatible server (moto standalone) on 127.0.0.1, one per session."""
    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (initdb + postgres in a temp dir, a child of this process) on 127.0.0.1, one per session."""
    try:
        cm = postgres_server()
        server = cm.__enter__()
    except NoPostgresError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        cm.__exit__(None, None, None)
