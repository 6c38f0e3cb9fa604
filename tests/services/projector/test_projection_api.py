"""The projector's HTTP API on a populated store (FastAPI TestClient, embedded world)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

import little
from little.log import OutgoingRecord
from little.replay import replay_envelope, replay_run
from little.report import report_data
from little_services.projection import (
    ProjectionConfig,
    ProjectorStatus,
    SqliteProjectionStore,
    create_projector,
)
from little_services.projector import ProjectorMetrics, create_app
from tests.projection_runs import run_events
from tests.sample_runs import first_writer

TOKEN = "s3cret"


class Populated:
    def __init__(self, root: Path) -> None:
        self.world = little.local_world(root / "w", partitions=3, synchronous="NORMAL")
        self.store = SqliteProjectionStore(root / "projection.sqlite3", synchronous="NORMAL")
        for i in range(9):
            wf = "research" if i % 3 else "triage"
            self.world.append(run_events(f"run-{i}", 30 + i, workflow=wf, complete=i % 2 == 0))
        self.world.append(first_writer("crashed"))
        self.world.append(run_events("sub~step/call", 12))
        self.world.append(run_events("broken", 20)[:5])
        self.world.log.append("broken", [OutgoingRecord(b"\x00\x00\x00\x00\x07junk")])
        self.registry = CollectorRegistry()
        self.metrics = ProjectorMetrics(self.registry, self.store)
        with create_projector(
            self.world, self.store, ProjectionConfig(batch_size=50), listener=self.metrics
        ) as projector:
            projector.run(until_caught_up=True)
        self.status = ProjectorStatus(
            assigned=(0, 1, 2), positions={0: 1}, lag={0: 0}, caught_up=True, consuming=True
        )

    def client(
        self,
        token: str | None = None,
        status: ProjectorStatus | None = None,
        metrics_open: bool = False,
        secure_cookie: bool | None = None,
        base_url: str = "http://testserver",
    ) -> TestClient:
        app = create_app(
            store=self.store,
            world=self.world,
            status=lambda: status or self.status,
            registry=self.registry,
            api_token=token,
            metrics_open=metrics_open,
            secure_cookie=secure_cookie,
        )
        return TestClient(app, base_url=base_url)

    def close(self) -> None:
        self.store.close()
        self.world.close()


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Populated]:
    p = Populated(tmp_path_factory.mktemp("api"))
    yield p
    p.close()


@pytest.fixture
def client(populated: Populated) -> TestClient:
    return populated.client()


def ids(body: dict[str, Any]) -> list[str]:
    return [r["run_id"] for r in body["runs"]]


def test_list_runs_with_filters(client: TestClient) -> None:
    everything = client.get("/runs").json()
    assert len(everything["runs"]) == 12
    assert everything["next_cursor"] is None
    completed = client.get("/runs", params={"status": "completed"}).json()
    assert sorted(ids(completed)) == ["run-0", "run-2", "run-4", "run-6", "run-8", "sub~step/call"]
    triage = client.get("/runs", params={"workflow": "triage"}).json()
    assert sorted(ids(triage)) == ["run-0", "run-3", "run-6"]
    both = client.get("/runs", params={"workflow": "triage", "status": "running"}).json()
    assert ids(both) == ["run-3"]
    broken = client.get("/runs", params={"status": "integrity_error"}).json()["runs"]
    assert [r["run_id"] for r in broken] == ["broken"]
    assert broken[0]["integrity"]["reason"] == "unknown-schema-id"
    newest = everything["runs"][0]["updated_at"]
    since = client.get("/runs", params={"updated_since": newest}).json()
    assert 1 <= len(since["runs"]) < 12
    assert client.get("/runs", params={"updated_since": "2999-01-01T00:00:00Z"}).json() == {
        "runs": [],
        "next_cursor": None,
    }


def test_list_runs_is_paginated(client: TestClient) -> None:
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 5}
    while True:
        body = client.get("/runs", params=params).json()
        seen += ids(body)
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]
    assert len(seen) == len(set(seen)) == 12
    assert client.get("/runs", params={"limit": 0}).status_code == 422
    bad = client.get("/runs", params={"cursor": "nonsense"})
    assert bad.status_code == 400
    assert bad.json()["error"] == "bad_request"


def test_run_state_is_the_materialized_run_state(populated: Populated, client: TestClient) -> None:
    body = client.get("/runs/run-4")
    assert body.status_code == 200
    assert body.headers["Little-Run-Status"] == "completed"
    expected = replay_run(populated.world, "run-4", use_snapshot=False).state
    got = body.json()
    assert got.pop("replay") == replay_envelope(expected).to_json()
    assert got == expected.model_dump(mode="json")
    nested = client.get("/runs/sub~step/call")  # sub-run ids hold a slash
    assert nested.status_code == 200
    assert nested.json()["run_id"] == "sub~step/call"
    assert client.get("/runs/broken").headers["Little-Run-Status"] == "integrity_error"


def test_unknown_runs_are_404_naming_the_run(client: TestClient) -> None:
    for path in ("/runs/nope", "/runs/nope/report", "/runs/nope/replay", "/runs/nope/events"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert r.json() == {
            "error": "run_not_found",
            "message": "run nope is not in the projection",
            "run_id": "nope",
        }
    assert client.get("/runs/nope/report", params={"source": "log"}).status_code == 404


def test_report_and_replay_plan(populated: Populated, client: TestClient) -> None:
    from_log = replay_run(populated.world, "crashed", use_snapshot=False)
    report = client.get("/runs/crashed/report").json()
    expected = report_data(from_log)
    for key in ("run_id", "status", "steps", "billed", "avoided", "epoch", "last_seq"):
        assert report[key] == expected[key], key
    assert report["from_snapshot"] == from_log.state.last_position.model_dump()  # type: ignore[union-attr]
    logged = client.get("/runs/crashed/report", params={"source": "log"}).json()
    assert logged["events_folded"] + (logged["from_snapshot"] is not None) > 0
    assert logged["steps"] == expected["steps"]

    plan = client.get("/runs/crashed/replay").json()
    assert [(s["step_path"], s["should_run"]) for s in plan["steps"]] == [
        ("plan", False),
        ("research", True),
    ]
    assert plan["pending_step_paths"] == ["research"]
    assert plan["source"] == "projection"
    assert plan["artifacts"] == []
    assert (
        client.get("/runs/crashed/replay", params={"source": "log"}).json()["steps"]
        == (plan["steps"])
    )


def test_events_are_decoded_and_paginated(populated: Populated, client: TestClient) -> None:
    first = client.get("/runs/run-1/events", params={"limit": 10}).json()
    assert [e["event"]["seq"] for e in first["events"]] == list(range(-1, 9))
    assert first["events"][0]["type"] == "RunClaimed"
    assert {"partition", "offset"} <= first["events"][0].keys()
    nxt = client.get(
        "/runs/run-1/events", params={"after_offset": first["next_after_offset"], "limit": 1000}
    ).json()
    assert len(first["events"]) + len(nxt["events"]) == 31
    assert nxt["next_after_offset"] is None
    broken = client.get("/runs/broken/events").json()["events"]
    assert broken[-1]["event"] is None
    assert broken[-1]["error"]["reason"] == "unknown-schema-id"


def test_health_readiness_and_metrics(populated: Populated, client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    waiting = populated.client(status=ProjectorStatus(consuming=True, caught_up=False))
    r = waiting.get("/readyz")
    assert r.status_code == 503
    assert r.json()["ready"] is False
    text = client.get("/metrics").text
    assert 'little_projector_runs{status="completed"} 6.0' in text
    assert 'little_projector_runs{status="integrity_error"} 1.0' in text
    assert "little_projector_events_folded_total 3" in text
    assert 'little_projector_dead_letters_total{reason="unknown-schema-id"} 1.0' in text
    assert "little_projector_fold_latency_seconds_count" in text
    assert "little_projector_caught_up 1.0" in text
    assert "little_projector_consumer_lag" in text  # per partition while assigned


def test_openapi_is_published(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/runs",
        "/runs/{run_id}",
        "/runs/{run_id}/report",
        "/runs/{run_id}/replay",
        "/runs/{run_id}/events",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in paths, sorted(paths)
    schemas = spec["components"]["schemas"]
    assert {"RunStateOut", "ReplayEnvelope", "RunSummaryOut"} <= set(schemas)
    assert {"agent_calls", "replay"} <= set(schemas["RunStateOut"]["properties"])
    assert "replay" in schemas["RunSummaryOut"]["required"]


def test_bearer_token_protects_everything_but_the_probes(populated: Populated) -> None:
    """/healthz and /readyz answer a kubelet's probe without the token (issue 17: /readyz
    was behind it, so a probe could not reach it); the rest needs it, and a refusal is
    logged with the path."""
    client = populated.client(token=TOKEN)
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    for path in ("/runs", "/runs/run-1", "/metrics", "/openapi.json"):
        with capture_logs() as logged:
            r = client.get(path)
        assert [(e["event"], e["path"], e["reason"]) for e in logged] == [
            ("http_unauthorized", path, "no bearer token")
        ]
        assert r.status_code == 401, path
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200, path


def test_metrics_can_be_left_open_beside_a_token(populated: Populated) -> None:
    client = populated.client(token=TOKEN, metrics_open=True)
    assert client.get("/metrics").status_code == 200
    assert client.get("/runs").status_code == 401


def test_runs_lists_a_parked_run_with_why() -> None:
    from datetime import UTC, datetime

    from little.replay import MaterializedRunState
    from little_services.projection import (
        MemoryProjectionStore,
        PartitionCursor,
        ProjectionWrite,
        RunRecord,
    )

    store = MemoryProjectionStore()
    state = MaterializedRunState(
        run_id="run-p", parked_reason="workflow 'x' is not registered in coordinator c1"
    )
    store.put(
        ProjectionWrite(
            "little.runs.v1",
            [RunRecord(state, 0, 0, 1, datetime(2026, 1, 1, tzinfo=UTC))],
            {0: PartitionCursor(2, 0)},
        )
    )
    app = create_app(store=store, world=None, status=ProjectorStatus, registry=CollectorRegistry())
    body = TestClient(app).get("/runs", params={"status": "parked"}).json()
    assert [(r["run_id"], r["status"], r["detail"]) for r in body["runs"]] == [
        ("run-p", "parked", "workflow 'x' is not registered in coordinator c1")
    ]
