"""The projector process: the projection loop in the main thread, HTTP in another.

SIGTERM or SIGINT stops consuming; the batch in progress is folded, stored and committed;
clients are closed; the process exits 0. Any other failure is logged and exits 1 (a fenced
instance, a broker that stays away): the supervisor restarts it and it resumes from its
committed offsets.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from types import FrameType

import structlog
import uvicorn
from prometheus_client import CollectorRegistry

from little.errors import LittleError
from little_services.projection import (
    ProjectorFencedError,
    ProjectorStalledError,
    ProjectorTotals,
    open_store,
    open_world,
    projector_from_settings,
    tune_gc,
)
from little_services.projector._api import create_app
from little_services.projector._metrics import ProjectorMetrics
from little_services.projector._settings import ProjectorServiceSettings

EXIT_STALLED = 75
"""The exit code of a projector whose transaction got stuck in librdkafka
(``ProjectorStalledError``): restart it (EX_TEMPFAIL)."""

log = structlog.get_logger("little.projector")


def serve(settings: ProjectorServiceSettings) -> int:
    """Run the projector until SIGTERM; returns the process exit code."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("shutdown_requested", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        world = open_world(settings)
    except LittleError as exc:  # no broker, missing topics, bad settings: one line, exit 1
        log.error("projector_failed_to_start", error=str(exc))
        return 1
    try:
        store = open_store(settings)
    except LittleError as exc:  # an unreachable or foreign projection database
        log.error("projector_failed_to_start", error=str(exc))
        world.close()
        return 1
    registry = CollectorRegistry()
    metrics = ProjectorMetrics(registry, store)
    try:
        projector = projector_from_settings(settings, world, store, listener=metrics)
    except LittleError as exc:
        log.error("projector_failed_to_start", error=str(exc))
        store.close()
        world.close()
        return 1
    app = create_app(
        store=store,
        world=world,
        status=projector.status,
        registry=registry,
        api_token=settings.api_token,
        metrics_open=settings.metrics_open,
        secure_cookie=settings.ui_secure_cookie,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.http_host,
            port=settings.http_port,
            log_config=None,
            log_level="warning",
            access_log=False,
        )
    )
    http = threading.Thread(target=server.run, name="projector-http", daemon=True)
    http.start()
    code = 0
    totals: ProjectorTotals | None = None
    try:
        deadline = time.monotonic() + 30
        while not server.started and http.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not server.started:
            log.error("http_not_started", host=settings.http_host, port=settings.http_port)
            return 1
        if not settings.kafka_bootstrap and sum(world.log.end_offsets().values()) == 0:
            log.warning(
                "projector_world_empty",
                world=world.description,
                hint="no LITTLE_KAFKA_BOOTSTRAP: this projects the embedded world under "
                "LITTLE_DATA_DIR, which has no events yet; set LITTLE_KAFKA_BOOTSTRAP to "
                "project a Kafka cluster",
            )
        log.info(
            "projector_started",
            world=world.description,
            store=settings.store_description(),
            group=settings.projector_group,
            topic=settings.runs_topic,
            http=f"http://{settings.http_host}:{settings.http_port}",
        )
        tune_gc()
        totals = projector.run(stop)
    except ProjectorStalledError as exc:
        # A librdkafka thread is stuck for good: closing would wait for it forever. The
        # store and the group's offsets are crash-safe (a kill -9 leaves the same state).
        log.error("projector_stalled", error=str(exc), exit_code=EXIT_STALLED)
        sys.stderr.flush()
        os._exit(EXIT_STALLED)
    except ProjectorFencedError as exc:
        log.error("projector_fenced", error=str(exc))
        code = 1
    except Exception as exc:
        log.exception("projector_failed", error=f"{type(exc).__name__}: {exc}")
        code = 1
    finally:
        try:
            projector.close()
        finally:
            server.should_exit = True
            http.join(timeout=10)
            store.close()
            world.close()
    if totals is not None:
        log.info("projector_stopped", **asdict(totals))
    return code
