"""The run inspector in a real browser (headless Chromium): what a person sees of real runs.

A research run is killed with SIGKILL right after its model answered turn 2 (the answer never
reached the log) and resumed by another process; the page must show the call that was in
flight as cut off and invoked again, the calls the resume served from the log, and the totals
the log folds to. Expected values come from the logs (the fold, the model's invocation log),
never typed in. ``UI_SCREENSHOT=docs/run-inspector.png`` also saves the run page's picture
(``make screenshot``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from playwright.sync_api import BrowserContext, Dialog, Page

from little.report import dollars
from tests.ui.checks import check_the_crashed_and_resumed_run, listed, run_url, timeline_rows
from tests.ui.conftest import HOSTILE, HOSTILE_RUN, LEFT, MAIN, REPLAY, TOKEN, Projector, Runs

pytestmark = pytest.mark.browser


def test_the_pages_need_the_api_token(context: BrowserContext, projector: Projector) -> None:
    page = context.new_page()
    page.goto(f"{projector.url}/ui/runs/{MAIN}")
    assert page.url.startswith(f"{projector.url}/ui/login")  # sent to the form, nothing shown
    assert page.locator("#timeline, #events, #totals").count() == 0
    page.fill("#token", "not-the-token")
    page.click("button[type=submit]")
    assert "That is not the projector's API token." in page.inner_text("[role=alert]")
    assert context.cookies() == []
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(run_url(projector, MAIN))  # back where it was going
    assert page.inner_text("h1").startswith(MAIN)
    (cookie,) = context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
        "little_token",
        True,
        "Strict",
    )
    page.click("text=Log out")
    page.wait_for_url(f"{projector.url}/ui/login")
    page.goto(f"{projector.url}/ui")
    assert page.url.startswith(f"{projector.url}/ui/login")
    # the API's bearer header opens the pages too (curl, a proxy that adds it)
    with_header = context.browser.new_context(  # type: ignore[union-attr]
        extra_http_headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        other = with_header.new_page()
        other.goto(f"{projector.url}/ui")
        assert other.url == f"{projector.url}/ui"
        assert MAIN in listed(other)
    finally:
        with_header.close()
    # and the cookie is no bearer token for the JSON API
    request = urllib.request.Request(f"{projector.url}/runs", headers={"Cookie": cookie_of(TOKEN)})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401


def cookie_of(token: str) -> str:
    return f"little_token={token}"


def test_the_runs_list_shows_status_money_and_replays_and_filters(
    page: Page, projector: Projector, runs: Runs
) -> None:
    every = runs.all_run_ids()
    assert sorted(listed(page)) == sorted(every)
    main = runs.fold(MAIN)
    row = page.locator(f'#runs tr[data-run="{MAIN}"]')
    text = " ".join(row.inner_text().split())
    assert "completed" in text
    assert "research 1" in text
    assert row.locator(".billed").inner_text() == dollars(main.usage)
    assert row.locator(".avoided").inner_text() == dollars(main.avoided_usage)
    assert main.started_at is not None
    assert main.started_at.strftime("%Y-%m-%d %H:%M:%S UTC") in text
    replay = page.locator(f'#runs tr[data-run="{REPLAY}"] .replayed')
    assert f"replay of {MAIN}" in replay.inner_text()
    assert page.locator(f'#runs tr[data-run="{MAIN}"] .replayed').inner_text() == "no"

    page.select_option("select[name=status]", "running")
    page.click("text=Filter")
    submitted(page, status="running")
    assert listed(page) == [LEFT]  # the run killed and never resumed
    assert "status=running" in page.url
    page.select_option("select[name=status]", "")
    page.fill("input[name=workflow]", "summarise")
    page.click("text=Filter")
    submitted(page, status="", workflow="summarise")
    subs = listed(page)
    assert sorted(subs) == sorted(r for r in every if runs.fold(r).workflow == "summarise")
    assert subs  # the summarise sub-run of each research run that got that far
    page.fill("input[name=workflow]", "")
    page.fill("input[name=limit]", "2")
    page.click("text=Filter")
    submitted(page, workflow="", limit="2")
    seen = listed(page)
    while page.locator("a[rel=next]").count():
        href = page.get_attribute("a[rel=next]", "href")
        page.click("a[rel=next]")
        page.wait_for_url(f"{projector.url}{href}")
        seen += listed(page)
    assert sorted(seen) == sorted(every)  # every run once, two a page
    page.fill("input[name=updated_since]", "yesterday")
    page.click("text=Filter")
    submitted(page, updated_since="yesterday")
    assert "updated_since='yesterday' is not a date and time" in page.inner_text("[role=alert]")


def submitted(page: Page, **expected: str) -> None:
    """Wait for the page of the filter form's submission with these values."""

    def arrived(url: str) -> bool:
        query = parse_qs(urlsplit(url).query, keep_blank_values=True)
        return all(query.get(k, [""]) == [v] for k, v in expected.items())

    page.wait_for_url(arrived)


def test_the_crashed_and_resumed_run_shows_what_was_served_and_what_ran_again(
    page: Page, projector: Projector, runs: Runs
) -> None:
    check_the_crashed_and_resumed_run(page, projector, runs)
    if os.environ.get("UI_SCREENSHOT"):  # down to the end of the timeline
        box = page.locator("#timeline").bounding_box()
        assert box is not None
        page.screenshot(
            path=Path(os.environ["UI_SCREENSHOT"]),
            full_page=True,
            clip={"x": 0, "y": 0, "width": 1400, "height": box["y"] + box["height"] + 16},
        )


def test_sub_runs_and_parents_link_to_each_other(
    page: Page, projector: Projector, runs: Runs
) -> None:
    page.goto(run_url(projector, MAIN))
    (sub,) = runs.fold(MAIN).sub_runs
    page.click(f'#sub-runs a:text-is("{sub.sub_run_id}")')
    page.wait_for_url(run_url(projector, sub.sub_run_id))
    assert page.inner_text("h1").startswith(sub.sub_run_id)
    assert "summarise" in page.inner_text(".summary")
    page.click(".summary a.parent")
    page.wait_for_url(run_url(projector, MAIN))


def test_a_replayed_run_shows_its_calls_answered_from_the_recorded_run(
    page: Page, projector: Projector, runs: Runs
) -> None:
    page.goto(run_url(projector, REPLAY))
    state = runs.fold(REPLAY)
    assert f"replay of {MAIN}" in page.inner_text(".replay")
    (agent,) = timeline_rows(page, "agent #0")
    assert "replayed" in agent
    assert f"answered from {MAIN}" in agent
    assert page.inner_text("#total-billed") == dollars(state.usage)
    assert page.inner_text("#total-avoided") == dollars(state.avoided_usage)
    assert state.avoided_usage.calls > 0
    page.click(f'#timeline tr[data-key="agent #0"] a:text-is("{MAIN}")')
    page.wait_for_url(run_url(projector, MAIN))


def test_hostile_strings_are_shown_as_text_and_never_run(
    page: Page, projector: Projector, runs: Runs
) -> None:
    """The escaping is tested by the text coming back as typed and by no element coming out
    of the run's data (the counts of ``script`` and ``img``): the pages' CSP would stop an
    injected script from running anyway, so no dialog and no ``window.pwned`` only show that
    nothing got past both."""
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:  # an alert() a script that ran would raise
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(run_url(projector, HOSTILE_RUN))
    assert runs.fold(HOSTILE_RUN).status == "completed"
    as_json = json.dumps(HOSTILE, ensure_ascii=False)
    assert page.inner_text(".summary .input") == '{"topic": ' + as_json + "}"  # as typed
    assert as_json[:-1] + ': history"' in page.inner_text("#timeline")  # the plan's output
    assert page.locator("script").count() == 0  # no element came out of the run's data
    assert page.locator("img").count() == 0
    assert page.evaluate("window.pwned") is None
    page.goto(f"{projector.url}/ui?" + urlencode({"workflow": HOSTILE}))  # echoed in the form
    assert page.input_value("input[name=workflow]") == HOSTILE
    assert page.locator("script").count() == 0
    assert page.evaluate("window.pwned") is None
    assert dialogs == []
