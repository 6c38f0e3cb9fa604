"""/healthz, /readyz and /metrics, and the signal and approval endpoints, served by uvicorn on
a thread of its own.

On its own thread and loop the probes answer even while the coordinator's loop is busy
appending; they only read plain attributes of the coordinator. ``POST /runs/{id}/signals/{name}``
and ``POST /runs/{id}/approvals/{call}`` need the bearer token (refused when none is set) and
hand the signal to the coordinator's loop, which records it in the run's log.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any

import uvicorn
from fastapi import Body, FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from little.errors import ConfigurationError, LittleError
from little.runtime import SignalRefusedError
from little_services._auth import PROBES, require_bearer
from little_services.resume_coordinator._coordinator import Coordinator


def make_app(
    coordinator: Coordinator, *, api_token: str | None = None, metrics_open: bool = False
) -> FastAPI:
    """The probes are always open; with ``api_token``, /metrics needs it unless
    ``metrics_open``."""
    app = FastAPI(title="little resume coordinator", docs_url=None, redoc_url=None)
    if api_token:
        open_paths = PROBES | ({"/metrics"} if metrics_open else set())
        require_bearer(app, api_token, open_paths=open_paths, service="resume-coordinator")

    def log_status() -> dict[str, object]:
        stalled, waiting, oldest = coordinator.log_stalled()
        return {"stalled": stalled, "appends_waiting": waiting, "oldest_append_seconds": oldest}

    @app.get("/healthz")
    def healthz() -> Response:
        ok = coordinator.healthy()
        log_ = log_status()
        status = "unhealthy" if not ok else ("degraded" if log_["stalled"] else "ok")
        return JSONResponse(
            {"status": status, "owner": coordinator.owner, "log": log_},
            status_code=200 if ok else 503,
        )

    @app.get("/readyz")
    def readyz() -> Response:
        log_ = log_status()
        ready = (
            coordinator.ready
            and coordinator.tail_positioned()
            and not coordinator.stopping
            and coordinator.healthy()
            and not log_["stalled"]
        )
        return JSONResponse(
            {
                "ready": ready,
                "owner": coordinator.owner,
                "partitions": list(coordinator.owned_view),
                "adopting": coordinator.adopting > 0,
                "executing": coordinator.executing,
                "log": log_,
            },
            status_code=200 if ready else 503,
        )

    def deliver(run_id: str, name: str, payload: Any) -> Response:
        if not api_token:
            return JSONResponse(
                {"error": "signals over HTTP need the bearer token: set LITTLE_API_TOKEN"},
                status_code=403,
            )
        loop = coordinator.loop
        if loop is None or coordinator.stopping:
            return JSONResponse({"error": "the coordinator is not serving"}, status_code=503)
        future = asyncio.run_coroutine_threadsafe(
            coordinator.deliver_signal(run_id, name, payload), loop
        )
        try:
            event = future.result(timeout=30)
        except SignalRefusedError as exc:
            code = 404 if "unknown" in str(exc) else 409
            return JSONResponse({"error": str(exc)}, status_code=code)
        except (LittleError, TimeoutError) as exc:
            return JSONResponse({"error": f"not recorded: {exc}"}, status_code=503)
        return JSONResponse(
            {"run_id": run_id, "name": name, "signal_id": event.signal_id}, status_code=202
        )

    @app.post("/runs/{run_id:path}/signals/{name}")
    def signal(run_id: str, name: str, payload: Annotated[Any, Body()] = None) -> Response:
        """Deliver signal ``name``; the JSON body is its payload (202 once recorded)."""
        if name.startswith("approval:"):
            return JSONResponse(
                {"error": "approvals go to POST /runs/{id}/approvals/{call_id}"}, status_code=400
            )
        return deliver(run_id, name, payload)

    @app.post("/runs/{run_id:path}/approvals/{call_id:path}")
    def approval(run_id: str, call_id: str, decision: Annotated[Any, Body()]) -> Response:
        """Approve or reject a tool call: ``{"approved": true|false, "reason": "..."}``."""
        # (ids hold "/": a sub-run's id, a session's call id; both are path parameters)
        if not isinstance(decision, dict) or not isinstance(decision.get("approved"), bool):
            return JSONResponse(
                {"error": 'the body must be {"approved": true|false, "reason": "..."}'},
                status_code=400,
            )
        reason = decision.get("reason", "")
        payload = {"approved": decision["approved"], "reason": str(reason), "by": "http"}
        return deliver(run_id, f"approval:{call_id}", payload)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(
            generate_latest(coordinator.metrics.registry), media_type=CONTENT_TYPE_LATEST
        )

    return app


class HttpServer:
    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.address = f"{host}:{port}"
        self._thread = threading.Thread(target=self.server.run, name="http", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError(f"the HTTP server did not start on {self.address}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=5)
