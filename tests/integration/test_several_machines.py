"""A several-machine deployment simulated on one box, with nothing on a shared disk.

Three ``little-resume-coordinator`` processes and two ``little-projector`` processes, each
with a data directory of its own; artifacts in an S3-compatible server (moto standalone on
127.0.0.1), the projection in one PostgreSQL database, everything else on the broker. 500
runs whose outputs exceed the inline limit (so every run writes artifacts); one coordinator
and one projector are SIGKILLed in the middle, and the projector comes back as a replaced
host would (a new, empty data directory). Then: every run completed exactly once by the
fold's account, every artifact its events name verifies (hash and size) and holds what the
run computed, and both projector APIs list the same 500 runs, equal to a fresh fold.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from little.artifacts import S3ArtifactStore
from little.commands import CommandPublisher, StartRun
from little.events import ArtifactRef, RunCompleted, StepCompleted
from little.log import load_topic_specs
from little.log.kafka import apply_topics
from little_services.projection import open_world
from tests.integration.coordinator_support import (
    CoordinatorProcess,
    RunsWatcher,
    accepted,
    claims,
    make_topics,
    spawn_coordinator,
    topic_env,
    wait_ready,
)
from tests.integration.machines_flow import report_text
from tests.integration.projector_process import ProjectorProcess, split_between, wait_for
from tests.postgres_server import PostgresServer
from tests.projection_runs import clean_fold, settings_of
from tests.s3_server import S3Server

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]

RUNS = 500
PARTITIONS = 12
WORKFLOWS = "tests.integration.machines_flow"


@pytest.fixture
def coordinators() -> Iterator[list[CoordinatorProcess]]:
    started: list[CoordinatorProcess] = []
    yield started
    for c in started:
        c.stop()


@pytest.fixture
def projectors() -> Iterator[list[ProjectorProcess]]:
    started: list[ProjectorProcess] = []
    yield started
    for p in started:
        p.stop()


def test_three_coordinators_two_projectors_no_shared_disk(
    kafka_bootstrap_servers: str,
    unique: str,
    tmp_path: Path,
    s3: S3Server,
    postgres: PostgresServer,
    coordinators: list[CoordinatorProcess],
    projectors: list[ProjectorProcess],
) -> None:
    bootstrap = kafka_bootstrap_servers
    topics = make_topics(bootstrap, unique, PARTITIONS)
    dlq = f"test.{unique}.dlq"
    apply_topics(
        bootstrap,
        [replace(load_topic_specs()["little.runs.dlq.v1"], name=dlq, partitions=PARTITIONS)],
    )
    bucket = s3.new_bucket()
    shared = {  # what every host is told: the broker, the bucket, the database
        **topic_env(bootstrap, topics),
        "LITTLE_DLQ_TOPIC": dlq,
        "LITTLE_ARTIFACTS_URL": f"s3://{bucket}/little",
        **s3.env(),
    }
    projector_env = {
        **shared,
        "LITTLE_PROJECTOR_GROUP": f"projectors-{unique}",
        "LITTLE_PROJECTION_STORE": postgres.new_database(),
    }

    for name in ("c1", "c2", "c3"):
        (tmp_path / name).mkdir()
        coordinators.append(
            spawn_coordinator(
                f"{name}-{unique}",
                bootstrap=bootstrap,
                topics=topics,
                group=f"coordinators-{unique}",
                workdir=tmp_path / name,  # its own data directory, nothing else
                lease_seconds=20.0,
                session_timeout_ms=6000,
                extra_env={**shared, "LITTLE_WORKFLOWS": WORKFLOWS},
            )
        )
    for name in ("p1", "p2"):
        projectors.append(ProjectorProcess(projector_env, tmp_path / name / "data", name))
    wait_ready(coordinators, PARTITIONS, timeout=120)
    wait_for(
        "the projectors to split the partitions",
        lambda: split_between(projectors, PARTITIONS),
        projectors,
    )

    run_ids = [f"m-{unique}-{i:03d}" for i in range(RUNS)]
    with CommandPublisher(bootstrap, topic=topics["commands"]) as publisher:
        publisher.send(
            [
                StartRun.of(r, "machines.report", {"n": i, "latency": 0.2 + (i % 4) * 0.05})
                for i, r in enumerate(run_ids)
            ]
        )
    watcher = RunsWatcher(bootstrap, topics["runs"])

    def completed(w: RunsWatcher) -> int:
        return sum(
            1 for r in run_ids if any(isinstance(e.event, RunCompleted) for e in w.runs.get(r, []))
        )

    # SIGKILL one coordinator and one projector in the middle
    watcher.wait(lambda w: completed(w) >= RUNS // 4, 300, f"{RUNS // 4} completed runs")
    c1, p1 = coordinators[0], projectors[0]
    c1.proc.send_signal(signal.SIGKILL)
    p1.proc.send_signal(signal.SIGKILL)
    c1.proc.wait(timeout=30)
    p1.proc.wait(timeout=30)
    at_kill = completed(watcher)
    assert at_kill < RUNS, "every run was done before the kill: the test proved nothing"

    watcher.wait(lambda w: completed(w) == RUNS, 600, "every run to complete")
    watcher.catch_up()  # every record acked by now (a late zombie's too) is seen

    # exactly once by the fold's account; every artifact verifies and holds the run's output
    store = S3ArtifactStore(bucket, "little", client=s3.client())
    refs: list[ArtifactRef] = []
    taken_over = 0
    for i, run_id in enumerate(run_ids):
        events = watcher.runs[run_id]
        state = watcher.state(run_id)  # raises on a seq gap or a duplicate accepted event
        assert state.status == "completed", (run_id, state.status, state.error)
        ends = [e for e in accepted(events) if isinstance(e, RunCompleted)]
        assert len(ends) == 1, f"{run_id}: {len(ends)} accepted RunCompleted"
        (end,) = ends
        owners = [c.owner for c in claims(events)]
        if c1.name in owners and owners[-1] != c1.name:
            taken_over += 1  # c1 had claimed it and died; another coordinator finished it
        assert end.output_json is None, "the output is inline, not in the store"
        assert end.output_ref is not None
        assert json.loads(store.get(end.output_ref)) == report_text(run_id, i)
        refs += [
            e.output_ref for e in accepted(events) if isinstance(e, StepCompleted) and e.output_ref
        ]
        refs.append(end.output_ref)
    assert taken_over, "no run was in flight on c1 when it died: the test proved nothing"
    for ref in refs:
        store.verify(ref)
    assert len({r.sha256 for r in refs}) >= RUNS

    # the killed projector's host comes back with an empty data directory
    p1.stop()
    projectors[0] = ProjectorProcess(projector_env, tmp_path / "p1-replaced" / "data", "p1b")
    with open_world(
        settings_of({**projector_env, "LITTLE_DATA_DIR": str(tmp_path / "reader")})
    ) as world:  # type: ignore[arg-type]
        ends_at = world.log.end_offsets()
        group = projector_env["LITTLE_PROJECTOR_GROUP"]
        wait_for(
            "both projectors to hold partitions, be ready and commit every offset",
            lambda: (
                split_between(projectors, PARTITIONS)
                and all((p.status() or {}).get("ready") for p in projectors)
                and all(world.cursors.committed(group).get(p, 0) >= o for p, o in ends_at.items())
            ),
            projectors,
            timeout=300,
        )
        expected = clean_fold(world)
    assert set(expected) == set(run_ids)
    listings = [p.all_runs() for p in projectors]
    assert set(listings[0]) == set(listings[1]) == set(run_ids)
    assert listings[0] == listings[1]
    for run_id in run_ids:
        for p in projectors:
            assert p.state(run_id) == expected[run_id], (p.url, run_id)
    # a projector reads the runs' artifacts from the bucket: a replay plan from the log
    # hydrates and hash-checks them
    for run_id in run_ids[:3]:
        r = httpx.get(f"{projectors[1].url}/runs/{run_id}/replay?source=log", timeout=30)
        assert r.status_code == 200, r.text
        assert {a["ref"]["sha256"] for a in r.json()["artifacts"]} <= {x.sha256 for x in refs}
        assert r.json()["artifacts"]
    print(
        f"\n{RUNS} runs over 3 coordinators and 2 projectors; c1 and p1 SIGKILLed with "
        f"{at_kill} runs completed, {taken_over} of c1's runs finished by another; "
        f"{len(refs)} artifacts verified in s3://{bucket}/little"
    )
    watcher.close()
