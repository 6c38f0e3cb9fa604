"""Bearer-token guard shared by the services' HTTP servers; a refused request is logged (its
path and reason, never the token it carried). The comparison takes constant time
(``hmac.compare_digest``), so response times tell nothing about the token."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

log = structlog.get_logger("little_services.http")

PROBES = frozenset({"/healthz", "/readyz"})


def require_bearer(app: FastAPI, token: str, *, open_paths: Iterable[str], service: str) -> None:
    """Every path of ``app`` but ``open_paths`` needs ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token}".encode()
    open_ = frozenset(open_paths)

    @app.middleware("http")
    async def _bearer(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.url.path not in open_:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                log.warning(
                    "http_unauthorized",
                    service=service,
                    path=request.url.path,
                    client=request.client.host if request.client else None,
                    reason="no bearer token" if not given else "wrong bearer token",
                )
                return JSONResponse(
                    status_code=401,
                    content={
                        "error": "unauthorized",
                        "message": "a valid bearer token is required",
                    },
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return await call_next(request)
