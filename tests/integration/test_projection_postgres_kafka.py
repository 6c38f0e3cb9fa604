"""Several projector instances in one consumer group writing one PostgreSQL database, on a
real broker: the API of any instance serves every run, equal to a fresh fold, through a
SIGKILL of one instance; a rebuild's worker processes write the same database.

Each instance is a real ``little-projector`` process with its own data directory (nothing on
a shared disk): the broker and the database are all they share.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.log import ResetTo
from little_services.projection import (
    PostgresProjectionStore,
    RunQuery,
    open_world,
    rebuild,
)
from tests.cli import little_cli
from tests.integration.projector_process import ProjectorProcess, split_between, wait_for
from tests.postgres_server import PostgresServer
from tests.projection_runs import (
    clean_fold,
    fresh_topics,
    run_events,
    settings_of,
    write_interleaved,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4


@pytest.fixture
def env(kafka_bootstrap_servers: str, unique: str, postgres: PostgresServer) -> dict[str, str]:
    return {
        **fresh_topics(kafka_bootstrap_servers, unique, partitions=PARTITIONS),
        "LITTLE_PROJECTION_STORE": postgres.new_database(),
        "LITTLE_PRODUCER_PROFILE": "throughput",
    }


@pytest.fixture
def world(env: dict[str, str], tmp_path: Path) -> Iterator[little.World]:
    with open_world(settings_of({**env, "LITTLE_DATA_DIR": str(tmp_path / "writer")})) as w:  # type: ignore[arg-type]
        yield w


def test_two_projector_processes_share_one_database_and_either_api_serves_every_run(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    group = env["LITTLE_PROJECTOR_GROUP"]
    a = ProjectorProcess(env, tmp_path / "a" / "data", "a")
    b = ProjectorProcess(env, tmp_path / "b" / "data", "b")
    instances = [a, b]
    try:
        wait_for(
            "the group to split the partitions",
            lambda: split_between(instances, PARTITIONS),
            instances,
        )
        runs = {f"r{i:02d}": run_events(f"r{i:02d}", 30 + i % 7) for i in range(48)}
        write_interleaved(world, runs, chunk=9)
        world.append(run_events("open", 11, complete=False))
        ends = world.log.end_offsets()
        wait_for(
            "every offset committed", lambda: world.cursors.committed(group) == ends, instances
        )
        expected = clean_fold(world)
        assert len(expected) == 49
        owner = {p: i for i in instances for p in (i.status() or {})["assigned"]}
        for api in instances:
            listed = api.all_runs()
            assert set(listed) == set(expected)
            for run_id, s in listed.items():
                want = expected[run_id]
                assert (s["status"], s["last_seq"], s["events_applied"]) == (
                    want.status,  # type: ignore[attr-defined]
                    want.last_seq,  # type: ignore[attr-defined]
                    want.events_applied,  # type: ignore[attr-defined]
                )
            # runs folded by the other instance are served whole, too
            others = [r for r, s in listed.items() if owner[s["partition"]] is not api]
            assert others
            for run_id in others[:5]:
                assert api.state(run_id) == expected[run_id]

        # SIGKILL one instance mid-stream: the other takes its partitions over, refolds what
        # was uncommitted, and still serves every run (none lost, none doubled)
        more = {f"s{i:02d}": run_events(f"s{i:02d}", 40) for i in range(24)}
        half = {r: ev[:20] for r, ev in more.items()}
        write_interleaved(world, half, chunk=5)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(30)
        write_interleaved(world, {r: ev[20:] for r, ev in more.items()}, chunk=5)
        world.append(run_events("open", 30, complete=False)[11:])
        ends = world.log.end_offsets()
        wait_for(
            "the survivor to commit every offset",
            lambda: world.cursors.committed(group) == ends,
            [b],
        )
        expected = clean_fold(world)
        listed = b.all_runs()
        assert set(listed) == set(expected)
        for run_id in listed:
            assert b.state(run_id) == expected[run_id]
        assert sorted((b.status() or {})["assigned"]) == list(range(PARTITIONS))
    finally:
        for i in instances:
            if i.proc.poll() is None:
                i.stop()
            elif not i.log.closed:
                i.log.close()


def test_a_rebuild_with_two_worker_processes_writes_the_database(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    runs = {f"r{i:02d}": run_events(f"r{i:02d}", 40 + i) for i in range(40)}
    write_interleaved(world, runs, chunk=7)
    expected = clean_fold(world)
    settings: Any = settings_of(
        {**env, "LITTLE_DATA_DIR": str(tmp_path / "rebuild"), "LITTLE_PROJECTOR_BATCH": "200"}
    )
    with PostgresProjectionStore(env["LITTLE_PROJECTION_STORE"]) as store:
        result = rebuild(
            world,
            store,
            settings.projection_config(),
            ResetTo(earliest=True),
            bootstrap_servers=settings.kafka_bootstrap,
            workers=2,
            settings=settings,
        )
        assert result.workers == 2
        assert result.totals.consumed == sum(world.log.end_offsets().values())
        held = store.list_runs(RunQuery(limit=1000)).runs
        assert {s.run_id for s in held} == set(expected)
        states = {r: rec.state for r, rec in store.get_many(expected).items()}
    assert states == expected
    # the operator's view of the database, from any host: `little projections status --store`
    cli = little_cli(
        "projections",
        "status",
        "--store",
        env["LITTLE_PROJECTION_STORE"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}, **env},
    )
    assert cli.returncode == 0, cli.stderr
    assert "runs: 40 completed" in " ".join(cli.stdout.split())
