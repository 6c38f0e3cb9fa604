"""What the browser tests check of a crashed-and-resumed run's page, on either world."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from playwright.sync_api import Page

from little.harness import count_invocations
from little.report import dollars
from tests.ui.conftest import MAIN, Projector, Runs


def run_url(projector: Projector, run_id: str) -> str:
    return f"{projector.url}/ui/runs/{quote(run_id, safe='')}"


def listed(page: Page) -> list[str]:
    return [
        str(page.locator("#runs tbody tr").nth(i).get_attribute("data-run"))
        for i in range(page.locator("#runs tbody tr[data-run]").count())
    ]


def timeline_rows(page: Page, key: str) -> list[str]:
    rows = page.locator(f'#timeline tr[data-key="{key}"]')
    return [" ".join(rows.nth(i).inner_text().split()) for i in range(rows.count())]


def check_the_crashed_and_resumed_run(page: Page, projector: Projector, runs: Runs) -> None:
    """MAIN's page shows the call in flight at the kill cut off and invoked again, the calls
    the resume served from the log, the fold's totals, and every event of the log."""
    page.goto(run_url(projector, MAIN))
    state = runs.fold(MAIN)
    assert state.accepted_claims == 2
    # the model's own log: turn 2 was invoked twice (in flight at the kill), the rest once
    invoked = count_invocations(runs.calls / "model.jsonl")
    again = [turn for turn, n in invoked.items() if n == 2]
    assert again == [2]
    session = "investigate#agent"
    first, second = timeline_rows(page, f"model {session} turn 2")
    assert first.split()[1] == "1"  # execution 1
    assert "cut off by a crash" in first
    assert second.split()[1] == "2"
    assert "invoked again" in second
    assert "responded" in second
    for turn in invoked:
        if turn not in again:
            (row,) = timeline_rows(page, f"model {session} turn {turn}")
            assert "invoked again" not in row
            assert ("served from the log" in row) == (turn == 1), row  # 3 ran after the resume
    (search,) = timeline_rows(page, f"tool {session} 1:c1")
    assert "served from the log" in search
    for call in ("2:c2", "2:c3"):
        (row,) = timeline_rows(page, f"tool {session} {call}")
        assert "fresh" in row
        assert "served from the log" not in row
    (plan,) = timeline_rows(page, "step plan#1")
    assert "output from the log" in plan  # completed before the kill: not run again
    # the totals are the fold's
    assert page.inner_text("#total-billed") == dollars(state.usage)
    assert page.inner_text("#total-avoided") == dollars(state.avoided_usage)
    assert state.interrupted_model_calls == 1
    assert "1 model call(s) cut off by a crash" in page.inner_text(".interrupted")
    investigate = state.step("investigate")
    assert investigate is not None
    step_row = " ".join(page.locator('#steps tr[data-step="investigate"]').inner_text().split())
    assert dollars(investigate.usage) in step_row
    assert dollars(investigate.avoided_usage) in step_row
    chart = page.locator("#chart")
    assert "investigate" in str(chart.text_content())  # the one step with model calls
    (billed_w, avoided_w) = (
        float(str(chart.locator(f"rect.bar-{kind}").get_attribute("width")))
        for kind in ("billed", "avoided")
    )
    ratio = investigate.avoided_usage.priced_cost_usd / investigate.usage.priced_cost_usd
    assert avoided_w / billed_w == pytest.approx(float(ratio), abs=0.01)
    # every event of the log, with its partition and offset
    events = runs.events(MAIN)
    shown = page.locator("#events tbody tr")
    assert shown.count() == len(events)
    for i in (0, len(events) - 1):
        cells = shown.nth(i).locator("td")
        assert (cells.nth(0).inner_text(), cells.nth(1).inner_text()) == (
            str(events[i].partition),
            str(events[i].offset),
        )
        assert cells.nth(4).inner_text() == events[i].event.type
