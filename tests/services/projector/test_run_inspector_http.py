"""The run inspector's HTTP surface (the pages themselves are tested in Chromium, tests/ui):
the token by header or login cookie, where a login may send the browser, read-only methods,
its error pages and headers."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

import little
from little_services.projection import (
    ProjectionConfig,
    ProjectorStatus,
    SqliteProjectionStore,
    create_projector,
)
from little_services.projector import create_app
from tests.projection_runs import run_events
from tests.services.projector.test_projection_api import TOKEN, Populated, populated

__all__ = ["populated"]  # the module fixture, shared


@pytest.fixture
def guarded(populated: Populated) -> TestClient:
    return populated.client(token=TOKEN)


def test_without_a_token_configured_the_pages_are_open(populated: Populated) -> None:
    client = populated.client()
    page = client.get("/ui")
    assert page.status_code == 200
    assert "run-4" in page.text
    assert client.get("/ui/login", follow_redirects=False).headers["location"] == "/ui"


def test_a_browser_without_the_token_is_sent_to_the_login_form(guarded: TestClient) -> None:
    r = guarded.get("/ui/runs/run-4", params={"x": "1"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/login?next=%2Fui%2Fruns%2Frun-4%3Fx%3D1"
    assert guarded.get("/ui/login").status_code == 200
    assert guarded.get("/ui/static/inspector.css").status_code == 200
    assert guarded.get("/runs").status_code == 401  # the API still answers JSON 401
    header = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/ui", headers=header).status_code == 200


def test_the_login_form_sets_the_token_cookie_and_refuses_a_wrong_token(
    guarded: TestClient,
) -> None:
    wrong = guarded.post("/ui/login", data={"token": "nope", "next": "/ui"})
    assert wrong.status_code == 401
    assert "not the projector&#39;s API token" in wrong.text
    assert "set-cookie" not in wrong.headers
    right = guarded.post(
        "/ui/login", data={"token": TOKEN, "next": "/ui/runs/run-4"}, follow_redirects=False
    )
    assert right.status_code == 303
    assert right.headers["location"] == "/ui/runs/run-4"
    cookie = right.headers["set-cookie"]
    assert cookie.startswith(f"little_token={TOKEN};")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/ui" in cookie
    assert guarded.post("/ui/login", data={"token": "x" * 20_000}).status_code == 413
    assert guarded.get("/ui/runs/run-4").status_code == 200  # the client keeps the cookie
    assert guarded.get("/runs").status_code == 401  # the cookie is for the pages only
    guarded.cookies.set("little_token", "forged")
    assert guarded.get("/ui", follow_redirects=False).status_code == 303


def test_a_big_login_form_is_refused_before_it_is_read(guarded: TestClient) -> None:
    """Anyone may post the login form: past 16 KB the projector stops reading it. Driven at
    the ASGI level (the test client would buffer the whole body first)."""
    received = 0
    answered: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * 8_192, "more_body": received < 1_000}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/ui/login",
        "raw_path": b"/ui/login",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"content-type", b"text/plain")],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    asyncio.run(guarded.app(scope, receive, send))
    assert answered == [413]
    assert received < 10  # it stopped reading past the limit, not at the end
    declared = guarded.post(
        "/ui/login",
        content=b"token=x",
        headers={"Content-Length": "100000000", "Content-Type": "text/plain"},
    )
    assert declared.status_code == 413


@pytest.mark.parametrize(
    ("base_url", "setting", "secure"),
    [
        ("http://projector.example.com", None, True),  # behind a TLS-terminating proxy
        ("http://10.0.0.7:8080", None, True),
        ("https://127.0.0.1", None, True),
        ("http://127.0.0.1:8080", None, False),
        ("http://localhost:8080", None, False),
        ("http://[::1]:8080", None, False),
        ("http://10.0.0.7:8080", False, False),  # plain HTTP on another machine, said so
        ("http://127.0.0.1:8080", True, True),
    ],
)
def test_the_login_cookie_is_secure_unless_asked_for_on_loopback(
    populated: Populated, base_url: str, setting: bool | None, secure: bool
) -> None:
    client = populated.client(token=TOKEN, secure_cookie=setting, base_url=base_url)
    r = client.post("/ui/login", data={"token": TOKEN, "next": "/ui"}, follow_redirects=False)
    assert r.status_code == 303
    assert ("Secure" in r.headers["set-cookie"]) is secure, r.headers["set-cookie"]


@pytest.mark.parametrize(
    "target", ["/ui?status=failed", "/ui/runs/run-4?events_page=2", "/ui/runs/a%2Fb?x=1&y=2"]
)
def test_a_login_keeps_the_query_of_its_target(guarded: TestClient, target: str) -> None:
    r = guarded.post("/ui/login", data={"token": TOKEN, "next": target}, follow_redirects=False)
    assert r.headers["location"] == target
    form = guarded.get("/ui/login", params={"next": target})
    assert f'value="{html.escape(target)}"' in form.text


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/ui",
        "/runs",
        "ui",
        "/runs?x=/ui",
        "/\\evil.example/ui",
        "https://evil.example/ui?x=1",
    ],
)
def test_a_login_sends_the_browser_nowhere_but_the_inspector(
    guarded: TestClient, target: str
) -> None:
    r = guarded.post("/ui/login", data={"token": TOKEN, "next": target}, follow_redirects=False)
    assert r.headers["location"] == "/ui"


def test_the_pages_are_read_only(populated: Populated) -> None:
    client = populated.client()
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/ui", "/ui/runs/run-4"):
            assert client.request(method, path).status_code == 405, (method, path)


def test_pages_say_what_is_wrong_and_forbid_scripts(populated: Populated) -> None:
    client = populated.client()
    missing = client.get("/ui/runs/nope")
    assert missing.status_code == 404
    assert "run nope is not in the projection" in missing.text
    bad = client.get("/ui", params={"status": "completed", "limit": "lots"})
    assert bad.status_code == 400
    assert "limit=&#39;lots&#39; is not a number" in bad.text
    cursor = client.get("/ui", params={"cursor": "nonsense"})
    assert cursor.status_code == 400
    superscript = client.get("/ui", params={"limit": "\u00b2"})  # isdigit() says yes
    assert superscript.status_code == 400
    assert "is not a number" in superscript.text
    for number in ("abc", "-1", "1e3", "\u00b2"):
        events = client.get("/ui/runs/run-4", params={"events_page": number})
        assert events.status_code == 400, number
        assert events.headers["content-type"].startswith("text/html")
        assert "is not a page number" in events.text
    page = client.get("/ui/runs/sub~step/call")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp  # none at all
    assert page.headers["cache-control"] == "no-store"


def test_a_run_whose_stream_broke_shows_its_mark_and_the_record_that_does_not_decode(
    populated: Populated,
) -> None:
    page = populated.client().get("/ui/runs/broken")
    assert page.status_code == 200
    assert "status-integrity_error" in page.text
    assert "does not decode" in page.text


def test_a_long_run_lists_its_events_a_page_at_a_time(tmp_path: Path) -> None:
    world = little.local_world(tmp_path / "w", partitions=2, synchronous="NORMAL")
    store = SqliteProjectionStore(tmp_path / "p.sqlite3", synchronous="NORMAL")
    try:
        world.append(run_events("long", 1_100))
        with create_projector(world, store, ProjectionConfig(batch_size=500)) as projector:
            projector.run(until_caught_up=True)
        app = create_app(
            store=store,
            world=world,
            status=lambda: ProjectorStatus(caught_up=True, consuming=True),
            registry=CollectorRegistry(),
        )
        client = TestClient(app)
        logged = list(world.read_run("long"))
        seen: list[int] = []
        page = client.get("/ui/runs/long")
        while True:
            assert page.status_code == 200
            offsets = [int(o) for o in re.findall(r'<tr[^>]* data-offset="(\d+)"', page.text)]
            assert 0 < len(offsets) <= 500
            seen += offsets
            later = re.search(r'<a rel="next" href="([^"]+)"', page.text)
            if later is None:
                break
            page = client.get(html.unescape(later.group(1)))
        assert seen == [x.offset for x in logged]  # every event once, in log order
        timeline_rows = page.text.count('<tr class="kind-')
        assert timeline_rows > 500  # the timeline is never paged
    finally:
        store.close()
        world.close()


def test_a_stale_run_says_so_on_its_page_and_in_the_list(tmp_path: Path) -> None:
    world = little.local_world(tmp_path / "w", partitions=1, synchronous="NORMAL")
    store = SqliteProjectionStore(tmp_path / "p.sqlite3", synchronous="NORMAL")
    try:
        world.append(run_events("fresh-run", 5))
        with create_projector(world, store, ProjectionConfig()) as projector:
            projector.run(until_caught_up=True)
        app = create_app(
            store=store,
            world=world,
            status=lambda: ProjectorStatus(caught_up=True, consuming=True),
            registry=CollectorRegistry(),
        )
        client = TestClient(app)
        assert "status-stale" not in client.get("/ui/runs/fresh-run").text
        assert "status-stale" not in client.get("/ui").text
        topic = ProjectionConfig().topic
        cursor = store.cursors(topic)[0]
        assert store.reset_partition(topic, 0, cursor, stale_from=0) == (0, 1)
        page = client.get("/ui/runs/fresh-run")
        assert '<span class="status status-stale"' in page.text
        listing = client.get("/ui")
        row = re.search(r'<tr data-run="fresh-run">.*?</tr>', listing.text, re.S)
        assert row is not None
        assert "status-stale" in row.group(0)
    finally:
        store.close()
        world.close()
