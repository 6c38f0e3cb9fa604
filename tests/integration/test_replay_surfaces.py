"""A replayed run is marked on every surface (seed 003, issue 16 item 11), on a REAL replay:
a recorded run of the three-stage pipeline, then a run of it with its last stage edited and
``replay_from`` the recorded one (stages 1-2 served, 3 fresh), projected by the projector from
the world both ran on. ``RunResult.replay``, ``little report --json``, ``GET /runs``, ``GET
/runs/{id}`` and ``/report`` give the one envelope; ``little status`` (against the real API
over HTTP) and ``little events`` say it in text. On the embedded world and on the broker."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

import little
from little.events import AgentCallSettled
from little.replay import ReplayEnvelope, replay_envelope, replay_run
from little.runtime import RunResult, run
from little_services.projection import (
    ProjectionConfig,
    ProjectorStatus,
    SqliteProjectionStore,
    create_projector,
    open_world,
)
from little_services.projector import create_app
from tests.cli import little_cli
from tests.little.runtime import replay_workflows as rw
from tests.projection_runs import fresh_topics, settings_of

EDITED = "Rewrite from scratch: "


@dataclass
class Runs:
    world: little.World
    cli_env: dict[str, str]
    """Environment and world options for ``little`` on the same world."""
    cli_world: list[str]
    source: RunResult
    replay: RunResult
    refused: RunResult


def run_all(world: little.World, tag: str) -> tuple[RunResult, RunResult, RunResult]:
    rw.MODELS.clear()
    source = asyncio.run(run(world, rw.version(f"{tag}-1"), "Kafka"))
    edited = rw.version(f"{tag}-2", write=EDITED)
    replay = asyncio.run(run(world, edited, "Kafka", replay_from=source.run_id))
    # a replay from a run of another workflow is refused, and the run executes fresh
    refused = asyncio.run(run(world, rw.fanned(f"{tag}-3"), "Kafka", replay_from=source.run_id))
    return source, replay, refused


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def runs(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[Runs]:
    if request.param == "embedded":
        with little.local_world(tmp_path / "w") as world:
            env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
            yield Runs(world, env, ["--data-dir", str(tmp_path / "w")], *run_all(world, unique))
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap_servers")
    env = {
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "200",
        **fresh_topics(bootstrap, unique, partitions=3),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
    }
    with open_world(settings_of(env)) as world:  # type: ignore[arg-type]
        yield Runs(world, env, ["--bootstrap-servers", bootstrap], *run_all(world, unique))


def test_the_runs_are_what_the_surfaces_will_describe(runs: Runs) -> None:
    """The replay served stages 1-2 and ran 3 fresh (the models' own invocation counts)."""
    assert (runs.source.status, runs.replay.status, runs.refused.status) == ("completed",) * 3
    assert {s: rw.invocations(s) for s in ("research", "outline", "write")} == {
        "research": 1,
        "outline": 1,
        "write": 2,
    }
    assert runs.replay.replay == ReplayEnvelope(
        replayed=True,
        recorded=True,
        source_run_id=runs.source.run_id,
        not_recorded_reason=None,
        replayed_calls=2,
        fresh_calls=1,
        diverged_at_call=2,
        diverged_at_node=("write", "write", 0),
        miss_reason="key-mismatch",
        mode="repairable",
    )
    assert runs.source.replay == ReplayEnvelope(
        recorded=True, not_recorded_reason=None, fresh_calls=3
    )
    refused = runs.refused.replay
    assert refused is not None
    assert (refused.refused_reason, refused.replayed, refused.replayed_calls) == (
        "target-changed",
        False,
        0,
    )
    # the runtime's envelope (no read, no fold) is the fold's, for each run
    for result in (runs.source, runs.replay, runs.refused):
        assert result.replay == replay_envelope(replay_run(runs.world, result.run_id).state)


def project(runs: Runs, path: Path) -> SqliteProjectionStore:
    store = SqliteProjectionStore(path)
    config = ProjectionConfig(batch_size=50)
    bootstrap = runs.cli_env.get("LITTLE_KAFKA_BOOTSTRAP")
    if bootstrap is not None:
        config = settings_of(runs.cli_env).projection_config()  # type: ignore[attr-defined]
    with create_projector(runs.world, store, config, bootstrap_servers=bootstrap) as projector:
        projector.run(until_caught_up=True)
    return store


def app_of(runs: Runs, store: SqliteProjectionStore) -> Any:
    status = ProjectorStatus(assigned=(0, 1, 2), positions={}, lag={}, caught_up=True)
    return create_app(
        store=store, world=runs.world, status=lambda: status, registry=CollectorRegistry()
    )


def test_the_projector_serves_the_envelope_in_the_list_the_run_and_the_report(
    runs: Runs, tmp_path: Path
) -> None:
    with project(runs, tmp_path / "p.sqlite3") as store:
        client = TestClient(app_of(runs, store))
        rows = {r["run_id"]: r for r in client.get("/runs").json()["runs"]}
        for result in (runs.source, runs.replay, runs.refused):
            assert result.replay is not None
            expected = result.replay.to_json()
            assert rows[result.run_id]["replay"] == expected
            body = client.get(f"/runs/{result.run_id}").json()
            assert body["replay"] == expected
            assert body["run_id"] == result.run_id  # the state's fields stand beside it
            assert client.get(f"/runs/{result.run_id}/report").json()["replay"] == expected
            logged = client.get(f"/runs/{result.run_id}/report", params={"source": "log"})
            assert logged.json()["replay"] == expected
        assert rows[runs.replay.run_id]["replay"]["diverged_at_node"] == ["write", "write", 0]


class Served:
    """The projector's API over real HTTP (uvicorn on a thread), for ``little status``. The
    socket listens before the server starts, so a request made at once waits in its backlog."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def test_little_status_marks_the_replay_run(runs: Runs, tmp_path: Path) -> None:
    with project(runs, tmp_path / "p.sqlite3") as store:
        served = Served(app_of(runs, store))
        try:
            out = little_cli("status", "--projector-url", served.url, env=runs.cli_env)
            as_json = little_cli(
                "status", "--projector-url", served.url, "--json", env=runs.cli_env
            )
        finally:
            served.close()
    assert out.returncode == 0, out.stderr
    table = [line for line in out.stdout.splitlines() if "│" in line]
    marked = [line for line in table if "replayed=" in line]
    assert len(marked) == 2, out.stdout  # the replay and the refused replay, not the source
    assert any("replayed=2" in line for line in marked), out.stdout
    assert any("replayed=0" in line for line in marked), out.stdout
    lines = out.stdout.splitlines()
    assert (
        f"{runs.replay.run_id}: replay of {runs.source.run_id}: 2/3 agent call(s) reused a "
        "recorded run (not fresh evidence); diverged at call 2 (write/write#0): key-mismatch"
    ) in lines
    assert (
        f"{runs.refused.run_id}: replay of {runs.source.run_id} refused: target-changed; ran fresh"
    ) in lines
    assert not any(line.startswith(f"{runs.source.run_id}:") for line in lines)
    rows = {r["run_id"]: r for r in map(json.loads, as_json.stdout.splitlines())}
    assert runs.replay.replay is not None
    assert rows[runs.replay.run_id]["replay"] == runs.replay.replay.to_json()


def test_little_events_marks_served_calls_and_report_json_has_the_envelope(
    runs: Runs,
) -> None:
    out = little_cli("events", runs.replay.run_id, *runs.cli_world, env=runs.cli_env)
    assert out.returncode == 0, out.stderr
    marked = [line for line in out.stdout.splitlines() if "[replayed]" in line]
    settled = [
        e
        for x in runs.world.read_run(runs.replay.run_id)
        if isinstance(e := x.event, AgentCallSettled)
    ]
    assert [e.replayed for e in settled] == [True, True, False]
    assert len(marked) == 2, out.stdout  # the two served settlements, and nothing else
    assert all("agent.call.settled [replayed]" in line for line in marked)
    source = little_cli("events", runs.source.run_id, *runs.cli_world, env=runs.cli_env)
    assert source.returncode == 0, source.stderr
    assert "[replayed]" not in source.stdout

    report = little_cli("report", runs.replay.run_id, "--json", *runs.cli_world, env=runs.cli_env)
    assert report.returncode == 0, report.stderr
    assert runs.replay.replay is not None
    assert json.loads(report.stdout)["replay"] == runs.replay.replay.to_json()
    text = little_cli("report", runs.replay.run_id, *runs.cli_world, env=runs.cli_env)
    assert "2/3 agent call(s) reused a recorded run (not fresh evidence)" in text.stdout
