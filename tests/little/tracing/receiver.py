"""A small OTLP/HTTP trace receiver on 127.0.0.1: decodes each ``ExportTraceServiceRequest``
(protobuf) posted to ``/v1/traces`` and keeps its spans, for tests to read."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return None if kind is None else getattr(v, kind)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    status_message: str
    links: tuple[tuple[str, str], ...] = field(default=())

    def __getitem__(self, key: str) -> Any:
        return self.attributes[key]


class Receiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ok = self.path == "/v1/traces"
                if ok:
                    receiver._add(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        ReceivedSpan(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex() or None,
                            {a.key: _value(a.value) for a in s.attributes},
                            resource,
                            s.status.code,
                            s.status.message,
                            tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                        )
                    )
        with self._lock:
            self.spans.extend(spans)
            self.requests += 1

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[ReceivedSpan]:
        """Poll until some received span satisfies ``predicate``; returns those that do."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [s for s in self.received() if predicate(s)]
            if found:
                return found
            time.sleep(0.02)
        names = sorted({s.name for s in self.received()})
        raise AssertionError(f"no such span in {timeout}s; received: {names}")

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
