"""Every replay mode from the one command, on the embedded world and on the broker (issue 15
item 1), and ``little runs`` listing what they left (item 10): inference-skipping, partial
from a partition offset, projection-only, full (a new linked run) and simulate. Only full
writes: a run of its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import little
from little.runtime import run
from little_services.projection import open_world
from tests.cli import little_cli
from tests.little.runtime import full_replay_workflows as fw
from tests.projection_runs import fresh_topics, settings_of

MODEL = "tests.little.runtime.full_replay_workflows:same_calls"
FLOWS = ["--workflows", "tests.little.runtime.full_replay_workflows"]


@dataclass
class Recorded:
    run_id: str
    env: dict[str, str]
    world_args: list[str]
    world: str


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def recorded(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[Recorded]:
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    if request.param == "embedded":
        with little.local_world(tmp_path / "w") as world:
            result = asyncio.run(run(world, fw.research, "kafka"))
        yield Recorded(result.run_id, env, ["--data-dir", str(tmp_path / "w")], "embedded")
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap_servers")
    env = {
        **env,
        **fresh_topics(bootstrap, unique, partitions=3),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
    }
    with open_world(settings_of(env)) as world:  # type: ignore[arg-type]
        assert world.description.startswith("kafka:")
        result = asyncio.run(run(world, fw.research, "kafka"))
    yield Recorded(result.run_id, env, ["--bootstrap-servers", bootstrap], "kafka")


def cli(recorded: Recorded, *args: str) -> tuple[int, str, str]:
    done = little_cli(*args, *recorded.world_args, env=recorded.env)
    return done.returncode, done.stdout, done.stderr


def runs(recorded: Recorded) -> dict[str, dict[str, object]]:
    code, out, err = cli(recorded, "runs", "--json")
    assert code == 0, err
    return {row["run_id"]: row for row in map(json.loads, out.splitlines())}


def test_every_mode_from_one_command(recorded: Recorded) -> None:
    source = recorded.run_id
    listed = runs(recorded)
    assert list(listed) == [source]
    assert listed[source]["status"] == "completed"
    assert listed[source]["workflow"] == fw.NAME

    code, out, err = cli(recorded, "replay", source)
    assert code == 0, err
    assert out.startswith("inference-skipping: rebuilt from the log; no model or tool was invoked")
    assert "status completed" in out

    code, out, err = cli(recorded, "events", source, "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    responded = next(r for r in rows if r["type"] == "harness.model.responded")
    code, out, err = cli(
        recorded, "replay", source, "--mode", "partial", "--from-offset", str(responded["offset"]),
        "--step",
    )  # fmt: skip
    assert code == 0, err
    first = out.splitlines()[0]
    assert first == (
        f"seq {responded['seq']} harness.model.responded "
        f"({responded['partition']}:{responded['offset']})"
    )

    code, out, err = cli(recorded, "replay", source, "--mode", "projection-only")
    assert code == 0, err
    assert out.startswith("projection-only: folded from the log; nothing was executed")

    code, out, err = cli(recorded, "replay", source, "--mode", "simulate", *FLOWS)
    assert code == 0, err
    assert out.splitlines() == [
        f"identical to {source}",
        "1 tool call(s) ran again and returned what the golden run recorded",
    ]

    code, out, err = cli(
        recorded, "replay", source, "--mode", "full", "--model", MODEL, *FLOWS, "--json"
    )
    assert code == 0, err
    full = json.loads(out)
    assert full["status"] == "completed"
    assert full["replay"]["source_run_id"] == source
    assert full["replay"]["mode"] == "full"

    listed = runs(recorded)  # the full replay is the one run that was written
    assert set(listed) == {source, full["run_id"]}
    assert listed[full["run_id"]]["replay_source_run_id"] == source
    code, out, err = cli(recorded, "report", full["run_id"])
    assert code == 0, err
    assert (
        f"full replay of {source} with {MODEL}: 1 agent call(s) asked live, tool results "
        "served from its receipts"
    ) in out
