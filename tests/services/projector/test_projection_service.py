"""The projector as a process and the CLI on the embedded world: no broker needed.

``little-projector`` with ``LITTLE_KAFKA_BOOTSTRAP`` unset projects ``local_world
(LITTLE_DATA_DIR)``; SIGTERM ends it with exit 0 after committing. ``little projections
rebuild`` refolds in-process. The package's public API is curated.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import little
from little_services.projection import SqliteProjectionStore
from tests.cli import little_cli
from tests.projection_runs import clean_fold, run_events


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env.update({"LITTLE_DATA_DIR": str(data_dir), "LITTLE_PARTITIONS": "3", **extra})
    return env


def spawn_projector(data_dir: Path, port: int) -> subprocess.Popen[str]:
    """``little-projector`` on the embedded world in ``data_dir``, as a process."""
    return subprocess.Popen(
        [sys.executable, "-m", "little_services.projector"],
        env=env_for(data_dir, LITTLE_HTTP_PORT=str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(port: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("the projector did not become ready")


def test_projector_process_on_the_embedded_world_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with little.local_world(data, partitions=3) as world:
        for i in range(20):
            world.append(run_events(f"run-{i}", 40))
    port = free_port()
    proc = spawn_projector(data, port)
    try:
        wait_ready(port, proc)
        runs = httpx.get(f"http://127.0.0.1:{port}/runs", params={"limit": 100}).json()["runs"]
        assert len(runs) == 20
        with little.local_world(data, partitions=3) as world:  # keeps following the log
            world.append(run_events("late", 10))
        deadline = time.monotonic() + 30
        while httpx.get(f"http://127.0.0.1:{port}/runs/late").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert names[0] == "projector_started", names
    assert names[-1] == "projector_stopped", names
    assert any(e.get("signal") == "SIGTERM" for e in events)
    with little.local_world(data, partitions=3) as world:
        assert world.cursors.committed("little-projector") == world.log.end_offsets()
        expected = clean_fold(world)
    with SqliteProjectionStore(data / "projection.sqlite3") as store:
        assert {r: rec.state for r, rec in store.get_many(expected).items()} == expected


def cli(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    return little_cli(*args, env=env_for(data))


def test_a_projector_of_an_empty_embedded_world_says_which_world_it_serves(
    tmp_path: Path,
) -> None:
    """No LITTLE_KAFKA_BOOTSTRAP and nothing under LITTLE_DATA_DIR is most often a forgotten
    variable: the first lines say so, and name the world."""
    data = tmp_path / "empty"
    port = free_port()
    proc = spawn_projector(data, port)
    try:
        wait_ready(port, proc)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events[:2]] == ["projector_world_empty", "projector_started"]
    assert events[0]["world"] == f"embedded:{data}"
    assert "LITTLE_KAFKA_BOOTSTRAP" in events[0]["hint"]
    assert events[1]["world"] == f"embedded:{data}"


def test_cli_rebuild_and_status_on_the_embedded_world(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with little.local_world(data, partitions=3) as world:
        for i in range(6):
            world.append(run_events(f"run-{i}", 25, complete=i != 0))
        world.log.append("run-0", [little.log.OutgoingRecord(b"junk")])
        ends = world.log.end_offsets()
    out = cli("projections", "rebuild", "--data-dir", str(data), data=data)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "projection rebuilt from the earliest offsets" in text
    assert "5 completed, 1 integrity_error" in text
    assert f"{sum(ends.values())}/{sum(ends.values())} records" in text
    again = cli("projections", "rebuild", "--to-offset", "0:3", "--data-dir", str(data), data=data)
    assert again.returncode == 0, again.stderr
    assert "projection rebuilt from 0:3" in again.stdout
    status = cli("projections", "status", "--data-dir", str(data), data=data)
    assert status.returncode == 0, status.stderr
    assert "runs: 5 completed, 1 integrity_error" in status.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to-offset", "three"], "--to-offset wants PARTITION:OFFSET"),
        (["--to-earliest", "--to-datetime", "2025-01-01"], "choose one of"),
        (["--to-datetime", "yesterday"], "--to-datetime wants an ISO 8601 time"),
        (["--workers", "2"], "rebuild workers need Kafka"),
    ],
)
def test_cli_rebuild_argument_errors_are_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = cli("projections", "rebuild", *args, "--data-dir", str(tmp_path), data=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith(f"error: {message}"), out.stderr
    assert out.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("name", ["little_services.projection", "little_services.projector"])
def test_public_api_is_curated(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol} is in __all__ but missing"
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and not isinstance(v, type(importlib))
    }
    assert public <= set(exported), sorted(public - set(exported))


def test_importing_the_projection_does_not_import_the_kafka_client() -> None:
    code = "import sys, little_services.projection; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_unreachable_projection_database_is_one_line_without_its_password(
    tmp_path: Path,
) -> None:
    """Nothing listens on the database's port: the projector says so in one line, naming the
    database but not its password, and exits non-zero (no traceback)."""
    url = f"postgresql://little:s3cret-pw@127.0.0.1:{free_port()}/little"
    out = subprocess.run(
        [sys.executable, "-m", "little_services.projector"],
        env=env_for(
            tmp_path / "data", LITTLE_HTTP_PORT=str(free_port()), LITTLE_PROJECTION_STORE=url
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "s3cret-pw" not in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    lines = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    failed = [e for e in lines if e["event"] == "projector_failed_to_start"]
    assert len(failed) == 1, out.stderr
    assert "127.0.0.1" in failed[0]["error"]
