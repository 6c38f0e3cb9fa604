"""The coordinator's intake and executions shells over a local world (no Kafka): a command
goes through the run table to a real execution, and its offset is settled exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little import World
from little.commands import StartRun, encode_command
from little.events import RunParked
from little.log import partition_for
from little.replay import fold_run
from little.runtime import WorkflowContext, workflow
from little_services.resume_coordinator._core import RunTable
from little_services.resume_coordinator._executions import Executions
from little_services.resume_coordinator._intake import Intake
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._scheduling import CommandRef
from little_services.resume_coordinator._settings import CoordinatorSettings
from little_services.resume_coordinator._world import OwnedSnapshots

PARTITIONS = 4


@workflow("shells.echo", version="1")
async def echo(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    return input


class _Store:
    """Where the snapshots would be written (the Kafka store's place)."""

    partitions = PARTITIONS

    def __init__(self) -> None:
        self.written: dict[str, bytes] = {}

    def put(self, run_id: str, payload: bytes) -> None:
        self.written[run_id] = payload


class _Shells:
    def __init__(self, world: World) -> None:
        self.settings = CoordinatorSettings(kafka_bootstrap=None)
        self.metrics = Metrics()
        self.table = RunTable(self.settings.lease_seconds, PARTITIONS)
        self.table.assign(range(PARTITIONS))
        self.settled: list[CommandRef] = []
        self.store = _Store()
        snapshots = OwnedSnapshots(self.store)  # type: ignore[arg-type]
        self.executions = Executions(
            self.settings, world, snapshots, self.metrics, self.table, self.settled.append
        )
        self.background: list[asyncio.Future[None]] = []
        self.intake = Intake(
            self.settings,
            world,
            self.metrics,
            self.table,
            self.executions,
            self.settled.append,
            lambda coro: self.background.append(asyncio.ensure_future(coro)),
        )

    async def command(self, run_id: str, value: bytes, offset: int) -> CommandRef:
        partition = partition_for(run_id, PARTITIONS)
        self.intake.on_command(partition, offset, value, run_id.encode(), [])
        entry = self.table.runs[run_id]
        assert entry.local is not None
        await self.executions.wait_stopped([entry.local])
        return partition, offset

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def test_a_start_run_executes_through_the_engine_and_its_command_is_settled_once(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        with little.local_world(tmp_path / "w", partitions=PARTITIONS) as world:
            shells = _Shells(world)
            value = encode_command(StartRun.of("echo-1", "shells.echo", {"a": 1}))
            ref = await shells.command("echo-1", value, 3)
            assert shells.settled == [ref]
            assert "echo-1" in shells.table.finished
            assert "echo-1" not in shells.table.runs
            assert shells.sample("little_coordinator_commands_total", type="StartRun") == 1
            assert (
                shells.sample("little_coordinator_executions_finished_total", outcome="completed")
                == 1
            )
            state, _, _ = fold_run(world, "echo-1")
            assert state.status == "completed"
            assert "echo-1" in shells.store.written  # snapshotted once running

    asyncio.run(main())


def test_a_start_run_of_a_workflow_not_registered_here_parks_the_run_in_its_log(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        with little.local_world(tmp_path / "w", partitions=PARTITIONS) as world:
            shells = _Shells(world)
            value = encode_command(StartRun.of("lost-1", "shells.nowhere", {}))
            await shells.command("lost-1", value, 8)
            assert shells.settled == []  # its StartRun waits for a coordinator that has it
            assert shells.table.parked == {"lost-1"}
            assert shells.sample("little_coordinator_runs_parked") == 1
            parked = [e.event for e in world.read_run("lost-1") if isinstance(e.event, RunParked)]
            assert len(parked) == 1
            assert parked[0].workflow == "shells.nowhere"

    asyncio.run(main())
