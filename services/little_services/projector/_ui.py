"""The run inspector: server-rendered pages under ``/ui`` (Jinja2, autoescaped; no script).

``/ui`` lists runs with the filters of ``GET /runs``; ``/ui/runs/{run_id}`` shows one run: its
timeline (steps, sessions, agent, model and tool calls, and where each result came from), its
tokens and dollars per step (billed against avoided, as an SVG chart), its events with their
partitions and offsets, and links to its parent and sub-runs. Run states come from the
projection store, the timeline and events from the log (``world.read_run``), as
``GET /runs/{id}/events`` reads them. Every page is a GET and writes nothing; the login form
(with an API token configured) posts the token once and gets it back as an HttpOnly cookie.
"""

from __future__ import annotations

import ipaddress
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from little import RecordDecodeError, World
from little.errors import ConfigurationError
from little.events import LoggedEvent
from little.replay import accepted_events, replay_envelope
from little.report import dollars, interrupted_line, replay_line, tokens, waiting_line
from little_services._auth import TOKEN_COOKIE, token_matches, under
from little_services.projection import ProjectionStore, RunQuery
from little_services.projector._inspector import chart, duration, preview, timeline

PREFIX = "/ui"
STATIC = f"{PREFIX}/static"
LOGIN = f"{PREFIX}/login"
MAX_EVENTS = 10_000
"""Events read for one run page (a longer run's page says it stops there)."""
EVENTS_PAGE = 500
"""Events listed per page of a run's events table (the timeline has all of them)."""
MAX_LOGIN_FORM = 16_384
"""Bytes a login form may have (a token and a path, not a document)."""
STATUSES = (
    "pending",
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
    "parked",
    "integrity_error",
)
HEADERS = {
    # the pages run no script at all; whatever escaping missed could not run either
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
_HERE = Path(__file__).parent


def run_url(run_id: str) -> str:
    return f"{PREFIX}/runs/{quote(run_id, safe='')}"


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # every value is escaped; nothing in a template is marked safe
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(run_url=run_url, dollars=dollars, tokens=tokens)
    env.globals.update(prefix=PREFIX, static=STATIC, statuses=STATUSES)
    return Jinja2Templates(env=env)


def _time(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _when(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigurationError(
            f"{name}={value!r} is not a date and time (such as 2026-12-01T09:30:00Z)"
        ) from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def add_inspector(
    app: FastAPI,
    *,
    store: ProjectionStore,
    world: World | None,
    api_token: str | None,
    secure_cookie: bool | None = None,
) -> None:
    """Serve the run inspector's pages and style sheet under ``/ui`` of ``app``.

    ``secure_cookie`` marks the login cookie ``Secure``; None: unless the request's host is a
    loopback address (a TLS-terminating proxy in front is not loopback)."""
    templates = _templates()
    app.mount(STATIC, StaticFiles(directory=_HERE / "static"), name="inspector-static")

    def page(
        request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> HTMLResponse:
        context = {"logged_in": api_token is not None, **context}
        return templates.TemplateResponse(
            request, name, context, status_code=status_code, headers=HEADERS
        )

    @app.get(PREFIX, response_class=HTMLResponse, include_in_schema=False)
    def runs_page(
        request: Request,
        status: str | None = None,
        workflow: str | None = None,
        updated_since: str | None = None,
        updated_before: str | None = None,
        limit: str | None = None,
        cursor: str | None = None,
    ) -> HTMLResponse:
        filters = {
            "status": status or "",
            "workflow": workflow or "",
            "updated_since": updated_since or "",
            "updated_before": updated_before or "",
            "limit": limit or "50",
        }
        try:
            if not re.fullmatch(r"[0-9]+", filters["limit"]):
                raise ConfigurationError(f"limit={filters['limit']!r} is not a number")
            query = RunQuery(
                status=status or None,
                workflow=workflow or None,
                updated_since=_when(updated_since, "updated_since"),
                updated_before=_when(updated_before, "updated_before"),
                limit=int(filters["limit"]),
                cursor=cursor or None,
            )
            listing = store.list_runs(query)
        except ConfigurationError as exc:
            failed: dict[str, Any] = {
                "filters": filters,
                "rows": [],
                "error": str(exc),
                "next_url": None,
            }
            return page(request, "runs.html", failed, status_code=400)
        states = store.get_many(s.run_id for s in listing.runs)
        now = datetime.now(UTC)
        rows = []
        for s in listing.runs:
            record = states.get(s.run_id)
            state = record.state if record is not None else None
            rows.append(
                {
                    "run_id": s.run_id,
                    "status": s.status,
                    "workflow": s.workflow or "-",
                    "version": s.workflow_version or "",
                    "started": _time(state.started_at if state else None),
                    "duration": duration(
                        state.started_at if state else None,
                        (state.ended_at or (s.updated_at if state.terminal else None))
                        if state
                        else None,
                        now,
                    ),
                    "updated": _time(s.updated_at),
                    "billed": dollars(state.usage) if state else "-",
                    "avoided": dollars(state.avoided_usage) if state else "-",
                    "replayed": replay_line(s.replay),
                    "source_run_id": s.replay.source_run_id,
                    "parent_run_id": state.parent_run_id if state else None,
                    "detail": s.detail,
                    "stale": s.stale,
                }
            )
        next_url = None
        if listing.next_cursor is not None:
            kept = {k: v for k, v in filters.items() if v}
            next_url = f"{PREFIX}?" + urlencode({**kept, "cursor": listing.next_cursor})
        context = {"filters": filters, "rows": rows, "error": None, "next_url": next_url}
        return page(request, "runs.html", context)

    @app.get(LOGIN, response_class=HTMLResponse, include_in_schema=False)
    def login_form(request: Request, next: str = PREFIX) -> Response:
        if api_token is None:
            return RedirectResponse(PREFIX, status_code=303)
        return page(request, "login.html", {"next": _safe_next(next), "error": None})

    @app.post(LOGIN, response_class=HTMLResponse, include_in_schema=False)
    async def login(request: Request) -> Response:
        """Check the token once; a right one comes back as the ``little_token`` cookie."""
        if api_token is None:
            return RedirectResponse(PREFIX, status_code=303)
        body = await _small_body(request)
        if body is None:
            return Response("login form too large", status_code=413)
        form = parse_qs(body.decode("utf-8", "replace"))
        given = (form.get("token") or [""])[0]
        target = _safe_next((form.get("next") or [PREFIX])[0])
        if not token_matches(given, api_token):
            context = {"next": target, "error": "That is not the projector's API token."}
            return page(request, "login.html", context, status_code=401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            api_token,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=_secure(request, secure_cookie),
        )
        return response

    @app.get(f"{PREFIX}/logout", include_in_schema=False)
    def logout() -> Response:
        response = RedirectResponse(LOGIN, status_code=303)
        response.delete_cookie(TOKEN_COOKIE, path=PREFIX)
        return response

    @app.get(f"{PREFIX}/runs/{{run_id:path}}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(request: Request, run_id: str, events_page: str = "1") -> HTMLResponse:
        if not re.fullmatch(r"[0-9]{1,9}", events_page):
            message = f"events_page={events_page!r} is not a page number"
            return page(
                request,
                "missing.html",
                {"run_id": run_id, "message": message, "title": "Bad request"},
                status_code=400,
            )
        record = store.get(run_id)
        if record is None:
            return page(
                request,
                "missing.html",
                {"run_id": run_id, "message": f"run {run_id} is not in the projection"},
                status_code=404,
            )
        s = record.state
        events, undecodable, truncated = _read_events(world, run_id)
        accepted = {id(x) for x in accepted_events(events)}
        line = timeline(events)
        rows: list[LoggedEvent | dict[str, Any]] = sorted(
            [*events, *undecodable],
            key=lambda x: int(x["offset"]) if isinstance(x, dict) else x.offset,
        )
        number = max(int(events_page), 1)
        first = (number - 1) * EVENTS_PAGE
        shown = rows[first : first + EVENTS_PAGE]
        ended = s.ended_at or (record.updated_at if s.terminal else None)
        envelope = replay_envelope(s)
        context = {
            "run_id": run_id,
            "status": record.status,
            "stale": record.stale,
            "state": s,
            "started": _time(s.started_at),
            "ended": _time(s.ended_at),
            "duration": duration(s.started_at, ended, datetime.now(UTC)),
            "updated": _time(record.updated_at),
            "input": preview(s.input_json, 4000) if s.input_ref is None else "(artifact)",
            "output": preview(s.output_json, 4000) if s.output_ref is None else "(artifact)",
            "billed": dollars(s.usage),
            "avoided": dollars(s.avoided_usage),
            "billed_tokens": tokens(s.usage),
            "avoided_tokens": tokens(s.avoided_usage),
            "billed_calls": s.usage.calls,
            "avoided_calls": s.avoided_usage.calls,
            "interrupted": interrupted_line(s),
            "waiting": waiting_line(s),
            "replay": replay_line(envelope),
            "replay_source": envelope.source_run_id,
            "integrity": None if record.integrity is None else record.integrity.message,
            "bars": chart(s),
            "steps": s.steps,
            "timeline": line,
            "no_log": world is None,
            "events": [_event_row(x, id(x) in accepted) for x in shown],
            "events_total": len(rows),
            "events_first": first + 1,
            "events_prev": _events_url(run_id, number - 1) if number > 1 else None,
            "events_next": (
                _events_url(run_id, number + 1) if first + EVENTS_PAGE < len(rows) else None
            ),
            "truncated": truncated,
            "sub_runs": s.sub_runs,
        }
        return page(request, "run.html", context)


def _secure(request: Request, setting: bool | None) -> bool:
    if setting is not None:
        return setting
    if request.url.scheme == "https":
        return True
    host = (request.url.hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


async def _small_body(request: Request) -> bytes | None:
    """The request's body, or None past MAX_LOGIN_FORM bytes (read no further: the login form
    answers anyone, before any token is checked)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_LOGIN_FORM:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN_FORM:
            return None
    return bytes(body)


def _safe_next(target: str) -> str:
    """Where a login may send the browser: a page of the inspector (its query kept), nowhere
    else."""
    parts = urlsplit(target)
    path = parts.path
    if (
        not parts.scheme
        and not parts.netloc
        and path.startswith("/")
        and not path.startswith("//")
        and "\\" not in path
        and under(path, PREFIX)
    ):
        return urlunsplit(("", "", path, parts.query, ""))
    return PREFIX


def _read_events(
    world: World | None, run_id: str
) -> tuple[list[LoggedEvent], list[dict[str, Any]], bool]:
    """The run's decoded events (up to MAX_EVENTS), its undecodable records as rows, and
    whether it has more."""
    if world is None:
        return [], [], False
    events: list[LoggedEvent] = []
    bad: list[dict[str, Any]] = []
    for n, record in enumerate(world.log.read_run(run_id)):
        if n == MAX_EVENTS:
            return events, bad, True
        try:
            events.append(world.decode(record))
        except RecordDecodeError as exc:
            bad.append(
                {
                    "partition": record.partition,
                    "offset": record.offset,
                    "seq": "-",
                    "epoch": "-",
                    "type": (record.header("little.type") or b"").decode() or "?",
                    "step_path": "",
                    "accepted": False,
                    "note": f"does not decode: {exc}",
                    "json": "",
                }
            )
    return events, bad, False


def _events_url(run_id: str, number: int) -> str:
    return f"{run_url(run_id)}?events_page={number}#events"


def _event_row(item: LoggedEvent | dict[str, Any], accepted: bool) -> dict[str, Any]:
    if isinstance(item, dict):  # a record that does not decode
        return item
    e = item.event
    text = json.dumps(json.loads(e.model_dump_json()), indent=2, ensure_ascii=False)
    return {
        "partition": item.partition,
        "offset": item.offset,
        "seq": e.seq,
        "epoch": e.epoch,
        "type": e.type,
        "step_path": e.step_path or "",
        "accepted": accepted,
        "note": "" if accepted else "not in the run's history (fenced writer or copy)",
        "json": text if len(text) <= 20_000 else text[:20_000] + "\n…",
    }
