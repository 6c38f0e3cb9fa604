"""The projector's read-only HTTP API (FastAPI; OpenAPI at /openapi.json).

Runs, run states, reports and replay plans come from the projection store (no log read);
``?source=log`` replays the run from the log instead, and ``/events`` always reads the log.
Nothing here writes. With a token configured, everything but /healthz needs it. The run
inspector's pages are under /ui (``little_services.projector._ui``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel

from little import RecordDecodeError, World
from little.errors import ConfigurationError, LittleError, RuntimeIntegrityError
from little.events import ArtifactRef
from little.log import Position
from little.replay import (
    LogPosition,
    MaterializedRunState,
    ReplayEnvelope,
    ReplayPlanStep,
    ReplayResult,
    replay_envelope,
    replay_run,
)
from little.report import report_data
from little_services._auth import PROBES, require_bearer
from little_services.projection import (
    ProjectionStore,
    ProjectorStatus,
    RunQuery,
    RunSummary,
    replay_from_state,
)
from little_services.projector._ui import LOGIN as UI_LOGIN
from little_services.projector._ui import PREFIX as UI_PREFIX
from little_services.projector._ui import STATIC as UI_STATIC
from little_services.projector._ui import add_inspector

Source = Literal["projection", "log"]


class ErrorOut(BaseModel):
    error: str
    message: str
    run_id: str | None = None


class IntegrityOut(BaseModel):
    reason: str
    message: str
    partition: int
    offset: int
    skipped: int
    last_skipped_offset: int


class RunSummaryOut(BaseModel):
    run_id: str
    status: str
    workflow: str | None
    workflow_version: str | None
    updated_at: datetime
    partition: int
    first_offset: int
    last_offset: int
    last_seq: int
    events_applied: int
    epoch: int
    stale: bool
    integrity: IntegrityOut | None
    detail: str | None = None
    """Why it is parked, its integrity mark's message, or its error."""
    replay: ReplayEnvelope
    """Recorded-call replay of the run (every run has one; ``source_run_id`` null for a run
    that is not a replay)."""

    @classmethod
    def of(cls, s: RunSummary) -> RunSummaryOut:
        return cls.model_validate(s, from_attributes=True)


class RunStateOut(MaterializedRunState):
    """The run's MaterializedRunState, and its replay envelope beside the fields."""

    replay: ReplayEnvelope


class RunPageOut(BaseModel):
    runs: list[RunSummaryOut]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""


class ArtifactOut(BaseModel):
    name: str
    step_path: str | None
    ref: ArtifactRef


class ReplayPlanOut(BaseModel):
    run_id: str
    source: Source
    status: str
    steps: list[ReplayPlanStep]
    completed_step_paths: list[str]
    pending_step_paths: list[str]
    from_snapshot: LogPosition | None
    events_folded: int
    artifacts: list[ArtifactOut]
    """Hydrated and hash-checked artifacts (``source=log`` only)."""


class EventOut(BaseModel):
    partition: int
    offset: int
    type: str | None
    event: dict[str, Any] | None
    error: dict[str, str] | None = None
    """Set instead of ``event`` for a record that does not decode."""


class EventsPageOut(BaseModel):
    run_id: str
    events: list[EventOut]
    next_after_offset: int | None


class StatusOut(BaseModel):
    ready: bool
    consuming: bool
    caught_up: bool
    assigned: list[int]
    positions: dict[int, int]
    lag: dict[int, int]


def _error(status: int, error: str, message: str, run_id: str | None = None) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content=ErrorOut(error=error, message=message, run_id=run_id).model_dump(),
    )


def _not_found(run_id: str) -> JSONResponse:
    return _error(404, "run_not_found", f"run {run_id} is not in the projection", run_id)


_RUN_404: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "The run is not in the projection"}
}


def create_app(
    *,
    store: ProjectionStore,
    world: World | None,
    status: Callable[[], ProjectorStatus],
    registry: CollectorRegistry,
    api_token: str | None = None,
    metrics_open: bool = False,
    secure_cookie: bool | None = None,
) -> FastAPI:
    """The API over a projection store (and the world, for ``/events`` and ``source=log``)."""
    app = FastAPI(
        title="little projector",
        version="1",
        description="Read-only run states folded from little.runs.v1 (DESIGN §6).",
    )

    if api_token:
        open_paths = PROBES | ({"/metrics"} if metrics_open else set())
        require_bearer(
            app,
            api_token,
            open_paths=open_paths,
            service="projector",
            pages=UI_PREFIX,
            open_pages=(UI_LOGIN, UI_STATIC),
        )
    add_inspector(app, store=store, world=world, api_token=api_token, secure_cookie=secure_cookie)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str]:
        """Liveness: the process serves HTTP."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["ops"],
        response_model=StatusOut,
        responses={503: {"model": StatusOut, "description": "Not caught up yet"}},
    )
    def readyz() -> JSONResponse:
        """Ready once partitions are assigned and folded up to where they ended at assignment."""
        s = status()
        body = StatusOut(
            ready=s.ready,
            consuming=s.consuming,
            caught_up=s.caught_up,
            assigned=list(s.assigned),
            positions=dict(s.positions),
            lag=dict(s.lag),
        )
        return JSONResponse(status_code=200 if s.ready else 503, content=body.model_dump())

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        """Prometheus text format."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get(
        "/runs",
        tags=["runs"],
        response_model=RunPageOut,
        responses={400: {"model": ErrorOut}},
    )
    def list_runs(
        status: Annotated[
            str | None,
            Query(
                description="pending, running, completed, failed, cancelled, parked or "
                "integrity_error"
            ),
        ] = None,
        workflow: str | None = None,
        updated_since: Annotated[
            datetime | None, Query(description="Runs whose last record is at or after this")
        ] = None,
        updated_before: datetime | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
    ) -> Any:
        """Runs, newest first (by the log time of their last record), one page at a time."""
        try:
            page = store.list_runs(
                RunQuery(
                    status=status,
                    workflow=workflow,
                    updated_since=_utc(updated_since),
                    updated_before=_utc(updated_before),
                    limit=limit,
                    cursor=cursor,
                )
            )
        except ConfigurationError as exc:
            return _error(400, "bad_request", str(exc))
        return RunPageOut(
            runs=[RunSummaryOut.of(s) for s in page.runs], next_cursor=page.next_cursor
        )

    def _replay(run_id: str, source: Source) -> ReplayResult | JSONResponse:
        if source == "log":
            if world is None:
                return _error(503, "no_log", "this projector serves no log")
            try:
                result = replay_run(world, run_id)
            except RuntimeIntegrityError as exc:
                return _error(409, "integrity_error", str(exc), run_id)
            except LittleError as exc:
                return _error(500, "replay_failed", str(exc), run_id)
            if not result.found:
                return _not_found(run_id)
            return result
        record = store.get(run_id)
        if record is None:
            return _not_found(run_id)
        return replay_from_state(record.state)

    @app.get(
        "/runs/{run_id:path}/report",
        tags=["runs"],
        response_model=dict[str, Any],
        responses={**_RUN_404, 409: {"model": ErrorOut}},
    )
    def run_report(run_id: str, source: Source = "projection") -> Any:
        """``little report --json`` of the run: steps, visits, tokens, billed and avoided dollars."""
        result = _replay(run_id, source)
        if isinstance(result, JSONResponse):
            return result
        return report_data(result)

    @app.get(
        "/runs/{run_id:path}/replay",
        tags=["runs"],
        response_model=ReplayPlanOut,
        responses={**_RUN_404, 409: {"model": ErrorOut}},
    )
    def replay_in_mode(run_id: str, source: Source = "projection") -> Any:
        """The replay plan: each step's status and whether a resume would run it."""
        result = _replay(run_id, source)
        if isinstance(result, JSONResponse):
            return result
        return ReplayPlanOut(
            run_id=result.run_id,
            source=source,
            status=result.state.status,
            steps=list(result.steps),
            completed_step_paths=list(result.completed_step_paths),
            pending_step_paths=list(result.pending_step_paths),
            from_snapshot=result.from_snapshot,
            events_folded=result.events_folded,
            artifacts=[
                ArtifactOut(name=a.name, step_path=a.step_path, ref=a.ref) for a in result.artifacts
            ],
        )

    @app.get(
        "/runs/{run_id:path}/events",
        tags=["runs"],
        response_model=EventsPageOut,
        responses=_RUN_404,
    )
    def run_events(
        run_id: str,
        after_offset: Annotated[
            int | None, Query(description="next_after_offset of the previous page")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> Any:
        """The run's events from the log, decoded, in log order, with partition and offset."""
        if world is None:
            return _error(503, "no_log", "this projector serves no log")
        after = None
        if after_offset is not None:
            after = Position(world.log.partition_for(run_id), after_offset)
        out: list[EventOut] = []
        more = False
        for record in world.log.read_run(run_id, after=after):
            if len(out) == limit:
                more = True
                break
            try:
                logged = world.decode(record)
            except RecordDecodeError as exc:
                out.append(
                    EventOut(
                        partition=record.partition,
                        offset=record.offset,
                        type=(record.header("little.type") or b"").decode() or None,
                        event=None,
                        error={"reason": exc.cause.reason, "message": str(exc)},
                    )
                )
                continue
            out.append(
                EventOut(
                    partition=logged.partition,
                    offset=logged.offset,
                    type=logged.event.type,
                    event=json.loads(logged.event.model_dump_json()),
                )
            )
        if not out and after is None and store.get(run_id) is None:
            return _not_found(run_id)
        return EventsPageOut(
            run_id=run_id, events=out, next_after_offset=out[-1].offset if more else None
        )

    @app.get(
        "/runs/{run_id:path}",
        tags=["runs"],
        response_model=RunStateOut,
        responses=_RUN_404,
    )
    def get_run(run_id: str) -> Any:
        """The run's MaterializedRunState as the projection holds it, with its replay envelope
        (``replay``, as in ``GET /runs``).

        Header ``Little-Run-Status`` is ``integrity_error`` for a run whose stream broke (see
        ``integrity`` in ``GET /runs``) and ``Little-Stale: 1`` for one awaiting a refold.
        """
        record = store.get(run_id)
        if record is None:
            return _not_found(run_id)
        # the state is valid already: dumped as is, not validated again into a RunStateOut
        body = record.state.model_dump(mode="json")
        body["replay"] = replay_envelope(record.state).to_json()
        headers = {"Little-Run-Status": record.status}
        if record.stale:
            headers["Little-Stale"] = "1"
        return JSONResponse(body, headers=headers)

    return app


def _utc(t: datetime | None) -> datetime | None:
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=UTC)
