"""``little export <run> --golden FILE`` and ``little replay FILE --mode simulate`` as a user runs
them (issue 15 item 6), on the embedded world and on the broker: the file is written from
the world's log, then simulated with nothing but the file; a bad file is one error line
naming it, exit 1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import little
from little.examples import research
from little.runtime import run
from little_services.projection import open_world
from tests.cli import little_cli
from tests.projection_runs import fresh_topics, settings_of


@dataclass
class Recorded:
    run_id: str
    env: dict[str, str]
    world_args: list[str]


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def recorded(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[Recorded]:
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    if request.param == "embedded":
        with little.local_world(tmp_path / "w") as world:
            result = asyncio.run(run(world, research.research, {"topic": "Kafka"}))
        yield Recorded(result.run_id, env, ["--data-dir", str(tmp_path / "w")])
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap_servers")
    env = {
        **env,
        **fresh_topics(bootstrap, unique, partitions=3),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
    }
    with open_world(settings_of(env)) as world:  # type: ignore[arg-type]
        assert world.description.startswith("kafka:")
        result = asyncio.run(run(world, research.research, {"topic": "Kafka"}))
    yield Recorded(result.run_id, env, ["--bootstrap-servers", bootstrap])


def test_export_golden_then_simulate_the_file(recorded: Recorded, tmp_path: Path) -> None:
    report = little_cli("report", recorded.run_id, *recorded.world_args, env=recorded.env)
    assert report.returncode == 0, report.stderr
    out = tmp_path / "golden" / "research.avro"
    export = little_cli(
        "export", recorded.run_id, "--golden", str(out), *recorded.world_args, env=recorded.env
    )
    assert export.returncode == 0, export.stderr
    assert export.stdout.startswith(f"wrote {out}: ")
    assert "of 2 run(s) (the run and 1 sub-run(s)), 0 artifact(s)" in export.stdout

    # nothing but the file: no world, no broker
    alone = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "LITTLE_DATA_DIR": str(tmp_path / "x")}
    workflows = ["--workflows", "little.examples.research"]
    same = little_cli("replay", str(out), "--mode", "simulate", *workflows, env=alone)
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines() == [
        f"identical to {recorded.run_id} (golden file {out})",
        "3 tool call(s) ran again and returned what the golden run recorded",
    ]
    assert not (tmp_path / "x").exists()  # no world was opened

    brief = "little.examples.research:RESEARCH_BRIEF"
    edited = little_cli("replay", str(out), "--mode", "simulate", "--workflow", brief, env=alone)
    assert edited.returncode == 1
    assert f"diverged from {recorded.run_id} (golden file {out}) at trace entry 11:" in (
        edited.stdout
    )
    assert '  got:      completed with "BRIEF: ' in edited.stdout
    assert edited.stderr == (
        f"error: run {recorded.run_id} (golden file {out}): the simulation diverged at trace "
        "entry 11\n"
    )


def test_a_bad_golden_file_is_one_error_line(recorded: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "research.avro"
    assert (
        little_cli(
            "export", recorded.run_id, "--golden", str(out), *recorded.world_args, env=recorded.env
        ).returncode
        == 0
    )
    cut = tmp_path / "cut.avro"
    cut.write_bytes(out.read_bytes()[:-100])
    missing = tmp_path / "missing.avro"
    for bad, why in [
        (cut, f"error: golden file {cut}: record 0 cannot be read: the file is truncated or "),
        (missing, f"error: golden file {missing} cannot be read: No such file or directory"),
    ]:
        result = little_cli(
            "replay", str(bad), "--mode", "simulate", "--workflows", "little.examples.research"
        )
        assert result.returncode == 1
        assert result.stderr.startswith(why), result.stderr
        assert result.stderr.count("\n") == 1

    nothing = little_cli(
        "export",
        "run_none",
        "--golden",
        str(tmp_path / "none.avro"),
        *recorded.world_args,
        env=recorded.env,
    )
    assert nothing.returncode == 1
    assert nothing.stderr.startswith("error: run run_none has no events in ")
    assert not (tmp_path / "none.avro").exists()
    wrong = little_cli("replay", str(out), *recorded.world_args, env=recorded.env)
    assert wrong.returncode == 1
    assert wrong.stderr == f"error: {out} is a golden file: it is for --mode simulate\n"


def test_export_chat_jsonl_from_either_world(recorded: Recorded) -> None:
    """The research run's one session: three model calls, tool calls between them."""
    out = little_cli(
        "export", recorded.run_id, "--format", "chat-jsonl", *recorded.world_args, env=recorded.env
    )
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == len(research.SCRIPT)
    assert [len(line["messages"]) for line in lines] == [3, 5, 8]  # system, user, +tools...
    assert lines[0]["messages"][:2] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Answer: Kafka: history; Kafka: design"},
    ]
    assert [m["role"] for m in lines[2]["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "tool", "assistant",
    ]  # fmt: skip
    assert lines[2]["messages"][-1] == {"role": "assistant", "content": research.SCRIPT[2].content}
    assert [t["function"]["name"] for t in lines[0]["tools"]] == ["search", "fetch"]
