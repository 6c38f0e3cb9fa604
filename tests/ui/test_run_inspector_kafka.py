"""The run inspector of a projector on a real Kafka broker: the crashed-and-resumed run's page
in headless Chromium, its events read from the topic's partitions and offsets."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext

from tests.projection_runs import fresh_topics
from tests.ui.checks import check_the_crashed_and_resumed_run, listed
from tests.ui.conftest import MAIN, TOKEN, Projector, Runs, serve

pytestmark = [pytest.mark.kafka, pytest.mark.browser]


@pytest.fixture(scope="module")
def kafka_runs(kafka_bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    topics = fresh_topics(kafka_bootstrap_servers, f"ui{uuid.uuid4().hex[:10]}", partitions=3)
    runs = Runs(tmp_path_factory.mktemp("inspector-kafka"), kafka=topics)
    runs.crash_and_resume()
    return runs


@pytest.fixture(scope="module")
def kafka_projector(kafka_runs: Runs) -> Iterator[Projector]:
    yield from serve(kafka_runs)


def test_the_crashed_and_resumed_run_on_kafka(
    context: BrowserContext, kafka_projector: Projector, kafka_runs: Runs
) -> None:
    page = context.new_page()
    page.goto(f"{kafka_projector.url}/ui")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{kafka_projector.url}/ui")
    assert sorted(listed(page)) == sorted(kafka_runs.all_run_ids())
    assert MAIN in listed(page)
    check_the_crashed_and_resumed_run(page, kafka_projector, kafka_runs)
