"""Shared fixtures: a real Kafka broker (session-wide) and fresh topics per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.kafka_broker import NoBrokerError, kafka_bootstrap

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
