"""The services' bearer-token guard: required when configured, compared in constant time
(``hmac.compare_digest`` on every request), and a refusal is logged without the token."""

from __future__ import annotations

import hmac

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from little_services import _auth

TOKEN = "svc-TOKEN-a81f3c"


def guarded() -> TestClient:
    app = FastAPI()

    @app.get("/runs")
    def runs() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"ok": "yes"}

    _auth.require_bearer(app, TOKEN, open_paths={"/healthz"}, service="test")
    return TestClient(app)


def test_the_token_is_required_and_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(_auth.hmac, "compare_digest", spy)
    client = guarded()
    assert client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/runs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/runs").status_code == 401
    assert client.get("/healthz").status_code == 200
    expected = f"Bearer {TOKEN}".encode()
    assert compared == [
        (expected, expected),
        (b"Bearer nope", expected),
        (b"", expected),
    ]


def test_a_refusal_is_logged_without_the_token_it_carried() -> None:
    wrong = "wrong-TOKEN-0d99e1"
    client = guarded()
    with capture_logs() as logs:
        response = client.get("/runs", headers={"Authorization": f"Bearer {wrong}"})
    assert response.status_code == 401
    assert [entry["reason"] for entry in logs] == ["wrong bearer token"]
    for text in (repr(logs), response.text):
        assert wrong not in text
        assert TOKEN not in text
