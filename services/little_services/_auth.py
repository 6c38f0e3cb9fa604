"""Bearer-token guard shared by the services' HTTP servers; a refused request is logged (its
path and reason, never the token it carried). The comparison takes constant time
(``hmac.compare_digest``), so response times tell nothing about the token.

Web pages (the projector's run inspector under ``/ui``) take the same token from a cookie
that their login form sets, and send a browser without it to that form instead of a 401.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import quote

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

log = structlog.get_logger("little_services.http")

PROBES = frozenset({"/healthz", "/readyz"})

TOKEN_COOKIE = "little_token"
"""The cookie a page's login form sets: the API token itself (HttpOnly, SameSite=Strict)."""


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is ``token`` (constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it (``/ui``, ``/ui/...``, not ``/uix``)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def require_bearer(
    app: FastAPI,
    token: str,
    *,
    open_paths: Iterable[str],
    service: str,
    pages: str | None = None,
    open_pages: Iterable[str] = (),
) -> None:
    """Every path of ``app`` but ``open_paths`` needs ``Authorization: Bearer <token>``.

    Paths under ``pages`` (a prefix such as ``/ui``) also take the token from the
    ``little_token`` cookie; without either, a browser is redirected to ``<pages>/login``.
    ``open_pages`` (prefixes under ``pages``: the login form, the style sheet) need neither.
    """
    expected = f"Bearer {token}".encode()
    open_ = frozenset(open_paths)
    unguarded = tuple(open_pages)

    @app.middleware("http")
    async def _bearer(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        if path in open_ or any(under(path, p) for p in unguarded):
            return await call_next(request)
        given = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(given, expected):
            return await call_next(request)
        page = pages is not None and under(path, pages)
        cookie = request.cookies.get(TOKEN_COOKIE) if page else None
        if page and token_matches(cookie, token):
            return await call_next(request)
        reason = "no bearer token" if not given else "wrong bearer token"
        if page:
            reason = "wrong token cookie" if cookie else reason if given else "not logged in"
        log.warning(
            "http_unauthorized",
            service=service,
            path=path,
            client=request.client.host if request.client else None,
            reason=reason,
        )
        if page and pages is not None:
            target = path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(
                f"{pages.rstrip('/')}/login?next={quote(target, safe='')}", status_code=303
            )
        return JSONResponse(
            status_code=401,
            content={
                "error": "unauthorized",
                "message": "a valid bearer token is required",
            },
            headers={"WWW-Authenticate": "Bearer"},
        )
