"""A ``little-projector`` process for the tests: its own data directory and HTTP port, its
API read over HTTP (``GET /readyz``, ``GET /runs`` paged, ``GET /runs/{id}``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from little.replay import MaterializedRunState


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProjectorProcess:
    """One projector process: its own data directory and HTTP port."""

    def __init__(self, env: dict[str, str], data_dir: Path, name: str, batch: int = 200) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
        full.update(
            {
                **env,
                "LITTLE_DATA_DIR": str(data_dir),
                "LITTLE_HTTP_PORT": str(self.port),
                "LITTLE_PROJECTOR_SESSION_TIMEOUT_MS": "6000",
                "LITTLE_PROJECTOR_BATCH": str(batch),
            }
        )
        data_dir.mkdir(parents=True)
        self.log = (data_dir.parent / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "little_services.projector"],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )

    def status(self) -> dict[str, Any] | None:
        try:
            r = httpx.get(f"{self.url}/readyz", timeout=5)
        except httpx.HTTPError:
            return None
        body: dict[str, Any] = r.json()
        return body

    def all_runs(self) -> dict[str, dict[str, Any]]:
        """Every run the API lists, paging through ``GET /runs`` 7 at a time."""
        out: dict[str, dict[str, Any]] = {}
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 7}
            if cursor:
                params["cursor"] = cursor
            page = httpx.get(f"{self.url}/runs", params=params, timeout=10).json()
            for s in page["runs"]:
                assert s["run_id"] not in out, "a page repeated a run"
                out[s["run_id"]] = s
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    def state(self, run_id: str) -> MaterializedRunState:
        body = httpx.get(f"{self.url}/runs/{run_id}", timeout=10).json()
        body.pop("replay")
        return MaterializedRunState.model_validate(body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait_for(what: str, check: Any, instances: list[ProjectorProcess], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for i in instances:
            assert i.proc.poll() is None, f"{i.url} exited: {Path(i.log.name).read_text()}"
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def split_between(instances: list[ProjectorProcess], partitions: int) -> bool:
    """Every partition held, by exactly one instance, and every instance holds some."""
    held = [set((i.status() or {}).get("assigned") or []) for i in instances]
    union = set().union(*held)
    return all(held) and union == set(range(partitions)) and sum(map(len, held)) == partitions
