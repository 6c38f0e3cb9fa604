"""Shared fixtures: a real Kafka broker, PostgreSQL and S3 (one each per session, stopped when\nthe session ends however it ends), the markers a test that needs a broker or a browser carries."""

from __future__ import annotations

import itertools
import os
import re
import signal
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from tests.kafka_broker import BOOTSTRAP_FILE, BrokerForWorkers, NoBrokerError, kafka_bootstrap
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
    if _controls_workers(config) and _selects_kafka(config):
        # one broker for all the workers, coming up while they collect and run the rest
        where = Path(tempfile.mkdtemp(prefix="little-test-kafka-")) / "bootstrap.json"
        config.stash[_BROKER] = BrokerForWorkers(where)
        os.environ[BOOTSTRAP_FILE] = str(where)


_BROKER = pytest.StashKey[BrokerForWorkers]()


def pytest_unconfigure(config: pytest.Config) -> None:
    broker = config.stash.get(_BROKER, None)
    if broker is not None:
        broker.stop()


def _controls_workers(config: pytest.Config) -> bool:
    """This process hands the tests to pytest-xdist workers (``-n N``, N > 0)."""
    workers = config.getoption("numprocesses", default=None)
    return bool(workers) and not hasattr(config, "workerinput")


def _selects_kafka(config: pytest.Config) -> bool:
    """A broker is needed: none given, and the ``-m`` expression can select a Kafka test,
    whatever other markers it carries (``-m "kafka and not browser"`` can, ``-m "not kafka"``
    cannot). ``-k`` is not looked at: a selection by name that holds no Kafka test still
    starts the broker."""
    if os.environ.get("LITTLE_TEST_KAFKA_BOOTSTRAP") or os.environ.get(BOOTSTRAP_FILE):
        return False
    expression = config.getoption("markexpr", default="")
    if not expression:
        return True
    compiled = Expression.compile(expression)
    others = sorted(set(re.findall(r"[A-Za-z_]\w*", expression)) - {"and", "or", "not", "kafka"})
    for values in itertools.product((False, True), repeat=len(others)):
        marked = dict(zip(others, values, strict=True), kafka=True)
        if compiled.evaluate(lambda name, marked=marked, **_: marked.get(name, False)):
            return True
    return False


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
