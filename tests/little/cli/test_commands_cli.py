"""``little submit / resume / cancel / status`` without a broker: one-line errors, and status
against a real HTTP server that answers like the projector's ``GET /runs``."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.cli import little_cli

RUNS = [
    {
        "run_id": "run-a",
        "workflow": "research",
        "status": "running",
        "updated_at": "2025-01-02T03:04:05Z",
    },
    {
        "run_id": "run-b",
        "workflow": "research",
        "status": "completed",
        "updated_at": "2025-01-02T03:04:06Z",
    },
]


def little(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return little_cli(
        *args, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", **(env or {})}, timeout=60
    )


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


class Projector:
    """A real HTTP server on a free port, answering GET /runs like the projector."""

    def __init__(self, status: int = 200, body: Any = None, token: str | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, dict(self.headers)))
                if token and self.headers.get("Authorization") != f"Bearer {token}":
                    self._send(401, {"error": "unauthorized", "message": "bad token"})
                    return
                query = parse_qs(urlparse(self.path).query)
                wanted = query.get("status", [None])[0]
                runs = [r for r in RUNS if wanted is None or r["status"] == wanted]
                self._send(
                    status, body if body is not None else {"runs": runs, "next_cursor": None}
                )

            def _send(self, code: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def projector() -> Iterator[Projector]:
    p = Projector()
    yield p
    p.close()


def test_status_lists_runs_from_the_projector(projector: Projector) -> None:
    out = little("status", "--projector-url", projector.url)
    assert out.returncode == 0, out.stderr
    assert "run-a" in out.stdout
    assert "run-b" in out.stdout
    assert "completed" in out.stdout
    assert projector.requests[0][0] == "/runs?limit=100"


def test_status_filters_by_status_and_reads_the_url_from_the_environment(
    projector: Projector,
) -> None:
    out = little(
        "status", "--status", "running", "--json", env={"LITTLE_PROJECTOR_URL": projector.url}
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["run_id"] for r in rows] == ["run-a"]
    assert "status=running" in projector.requests[0][0]


def test_status_sends_the_api_token() -> None:
    p = Projector(token="s3cret")
    try:
        ok = little("status", "--projector-url", p.url, env={"LITTLE_API_TOKEN": "s3cret"})
        assert ok.returncode == 0, ok.stderr
        refused = little("status", "--projector-url", p.url)
        assert "answered 401" in one_line_error(refused)
    finally:
        p.close()


def test_status_when_the_projector_is_unreachable_is_one_line() -> None:
    line = one_line_error(
        little("status", "--projector-url", "http://127.0.0.1:1", "--timeout", "2")
    )
    assert "projector at http://127.0.0.1:1 is unreachable" in line
    assert "LITTLE_PROJECTOR_URL" in line


@pytest.mark.parametrize("body", [b"<html>", {"runs": "nope"}])
def test_status_when_the_projector_answers_nonsense_is_one_line(body: Any) -> None:
    p = Projector(body=body)
    try:
        line = one_line_error(little("status", "--projector-url", p.url))
        assert f"projector at {p.url}" in line
    finally:
        p.close()


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "research", "--input", "{}"],
        ["cancel", "run-1", "--reason", "x"],
    ],
)
def test_commands_need_kafka(args: list[str]) -> None:
    line = one_line_error(little(*args))
    assert "LITTLE_KAFKA_BOOTSTRAP" in line


def test_submit_rejects_input_that_is_not_json(tmp_path: Path) -> None:
    line = one_line_error(little("submit", "research", "--input", "{oops"))
    assert "--input is not JSON" in line


def test_status_refuses_a_row_with_an_invalid_replay_envelope_in_one_line() -> None:
    bad = {**RUNS[1], "replay": {"replayed": True, "replayed_calls": "many"}}
    p = Projector(body={"runs": [RUNS[0], bad], "next_cursor": None})
    try:
        line = one_line_error(little("status", "--projector-url", p.url))
    finally:
        p.close()
    assert "run 'run-b' in GET /runs has an invalid replay envelope" in line


def test_status_of_a_projector_without_envelopes_lists_runs_unmarked(projector: Projector) -> None:
    out = little("status", "--projector-url", projector.url)  # RUNS carry no "replay"
    assert out.returncode == 0, out.stderr
    assert "replayed=" not in out.stdout
    assert "reused a recorded run" not in out.stdout


def test_submit_replay_mode_needs_a_run_to_replay() -> None:
    line = one_line_error(little("submit", "research", "--replay-mode", "strict"))
    assert "--replay-mode needs --replay-from" in line


def test_submit_replay_mode_is_repairable_or_strict() -> None:
    out = little("submit", "research", "--replay-from", "r0", "--replay-mode", "exact")
    assert out.returncode != 0
    assert "'exact' is not one of 'repairable', 'strict'" in out.stderr
