"""No model provider key in the log, the artifacts or a process's logs and errors: a real
workflow process calls the real OpenAI adapter against a local server that refuses the key
the way the API does (401), at debug level; the key is looked for everywhere afterwards."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

import little
from little.events import ModelFailed
from tests.faults.support import child_env, spawn_runner

KEY = "sk-proj-SECRET-KEY-1f8e2d7c6b5a"


class _Refuses(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        _Refuses.seen.append(self.headers.get("Authorization", ""))
        body = json.dumps(
            {
                "error": {
                    "message": "Incorrect API key provided.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def test_a_refused_provider_key_is_in_no_log_and_no_error(provider: str, tmp_path: Path) -> None:
    env = child_env(
        {"LITTLE_DATA_DIR": str(tmp_path / "data"), "LITTLE_LOG_LEVEL": "debug"},
        OPENAI_API_KEY=KEY,
        OPENAI_BASE_URL=provider,
    )
    log = tmp_path / "writer.log"
    proc = spawn_runner(["run", "r1", "faults.provider", "{}"], env, log)
    out, _ = proc.communicate(timeout=120)
    assert _Refuses.seen == [f"Bearer {KEY}"], "the key was not really sent"
    with little.local_world(tmp_path / "data") as world:
        failed = [e.event for e in world.read_run("r1") if isinstance(e.event, ModelFailed)]
    assert [f.error_type for f in failed] == ["AuthenticationError"]
    assert "Incorrect API key" in failed[0].message
    texts = {"stdout": out, "stderr": log.read_text(errors="replace")}
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            texts[str(path)] = path.read_bytes().decode(errors="replace")
    for name, text in texts.items():
        assert KEY not in text, f"{name} holds the provider key"
        assert KEY[-8:] not in text, f"{name} holds the end of the provider key"
