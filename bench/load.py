"""Load with a fault (issue 13 item 4): 1,000 concurrent runs through two coordinators and a
projector on the local broker, one coordinator SIGKILLed in the middle; every run's final
state checked by the fold, from the log alone.

Two real coordinator processes (the Dockerfile's command) share a fresh group and fresh topics;
a projector process (``python -m little_services.projector``) folds the runs topic into its
store. ``--runs`` StartRuns are submitted at once, each one agent session of ``--k`` (20)
single-turn exchanges with a ``--latency`` (10 ms) scripted model. Once ``--kill-at`` (30%) of
the runs have completed by the projector's count, one coordinator is SIGKILLed; the survivor
takes its partitions over. The round ends when the projector counts every run completed, or
fails after ``--timeout`` seconds. Everything talks to 127.0.0.1 only, and the generator stops
by itself.

Then every event of the runs topic is read and each run folded: it must be completed, with
exactly one accepted RunCompleted, ``k`` agent calls each settled once, and no integrity
error (the fold refuses a gap or a duplicate seq in the accepted stream). Reported:

* recorded calls/s: runs x k over the wall time from submit to the projector's last count,
  beside the raw engine (the same number of asyncio tasks, each k times a 10 ms wait then one
  acked record on a plain idempotent producer) in the same round;
* write-ahead wait per model call, p50 and p99: ``ModelResponded.occurred_at`` less
  ``ModelCalled.occurred_at`` less the model's latency: the ack of the write-ahead record the
  call waited for, plus the scheduling of ~1,000 runs on one event loop per coordinator;
* projector lag: the largest consumer lag the projector reported while the runs went on, and
  how long after the last RunCompleted was written it counted every run completed;
* the calls in flight at the kill (asked again by the survivor: the provider may bill them).

    .venv/bin/python bench/load.py [--runs 1000] [--k 20] [--latency 0.01] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, stamp, table
from bench.concurrent_runs import raw_kafka
from little.commands import CommandPublisher, StartRun
from little.events import AgentCallSettled, ModelCalled, ModelResponded, RunCompleted
from little.log import RUNS_TOPIC, load_topic_specs
from little.log.kafka import apply_topics
from tests.integration.coordinator_support import (
    RunsWatcher,
    accepted,
    make_topics,
    metric_value,
    pythonpath,
    spawn_coordinator,
    topic_env,
    wait_ready,
)

PARTITIONS = 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_projector(
    bs: str, topics: dict[str, str], work: Path, tag: str
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": pythonpath(),
        **topic_env(bs, topics),
        "LITTLE_PROJECTOR_GROUP": f"load-proj-{tag}",
        "LITTLE_DATA_DIR": str(work / "projector"),
        "LITTLE_HTTP_HOST": "127.0.0.1",
        "LITTLE_HTTP_PORT": str(port),
        "LITTLE_LOG_LEVEL": "warning",
    }
    with (work / "projector.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "little_services.projector"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
        )
    return proc, port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return r.read().decode()


def lag_of(text: str) -> float:
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("little_projector_consumer_lag{")
    )


def one_round(
    bs: str, runs: int, k: int, latency: float, kill_at: float, timeout: float
) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    topics = make_topics(bs, f"load{tag}", PARTITIONS)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        coordinators = [
            spawn_coordinator(
                f"load-{tag}-{name}",
                bootstrap=bs,
                topics=topics,
                group=f"load-{tag}",
                workdir=work,
                lease_seconds=30.0,
                extra_env={"LITTLE_MAX_RUNS": str(max(runs, 1000)), "LITTLE_LOG_LEVEL": "warning"},
            )
            for name in ("a", "b")
        ]
        projector, port = spawn_projector(bs, topics, work, tag)
        try:
            wait_ready(coordinators, PARTITIONS)
            run_ids = [f"load-{tag}-{i:04d}" for i in range(runs)]
            sent = time.monotonic()
            with CommandPublisher(bs, topic=topics["commands"]) as publisher:
                publisher.send(
                    [
                        StartRun.of(r, "coordinator.exchanges", {"k": k, "latency": latency})
                        for r in run_ids
                    ]
                )
            killed_at: float | None = None
            max_lag = 0.0
            while True:
                try:
                    text = scrape(port)
                except OSError:
                    text = ""
                try:
                    done = metric_value(text, "little_projector_runs", status="completed")
                except AssertionError:  # no run completed yet: no sample
                    done = 0.0
                max_lag = max(max_lag, lag_of(text))
                if killed_at is None and done >= kill_at * runs:
                    coordinators[0].signal(signal.SIGKILL)
                    killed_at = time.monotonic() - sent
                if done >= runs:
                    counted_at = time.time()
                    break
                if projector.poll() is not None:
                    raise RuntimeError("the projector exited")
                if time.monotonic() - sent > timeout:
                    raise RuntimeError(
                        f"only {done:.0f} of {runs} runs completed in {timeout:.0f} s"
                    )
                time.sleep(0.2)
            wall = time.monotonic() - sent
        finally:
            for c in coordinators:
                c.stop()
            projector.send_signal(signal.SIGTERM)
            projector.wait(timeout=30)
        checked = check(bs, topics, run_ids, k, latency)
        return {
            "wall": wall,
            "killed_at": killed_at or 0.0,
            "max_lag": max_lag,
            "catch_up": counted_at - checked["last_completed"],
            **checked,
        }


def check(
    bs: str, topics: dict[str, str], run_ids: list[str], k: int, latency: float
) -> dict[str, float]:
    """Every run from the log alone: completed once, k calls settled once, no integrity error."""
    watcher = RunsWatcher(bs, topics["runs"])
    try:
        total = sum(1 for _ in run_ids)
        watcher.wait(
            lambda w: (
                sum(
                    1
                    for r in run_ids
                    if any(isinstance(e.event, RunCompleted) for e in w.runs.get(r, []))
                )
                >= total
            ),
            600,
            "every RunCompleted on the topic",
        )
        watcher.poll(1.0)
        waits: list[float] = []
        in_flight = 0
        last_completed = 0.0
        for r in run_ids:
            state = watcher.state(r)  # raises on a gap, a duplicate seq or a broken stream
            assert state.status == "completed", f"{r}: {state.status}"
            events = accepted(watcher.runs[r])
            completed = [e for e in events if isinstance(e, RunCompleted)]
            assert len(completed) == 1, f"{r}: {len(completed)} accepted RunCompleted"
            settled = [e.ordinal for e in events if isinstance(e, AgentCallSettled)]
            assert sorted(settled) == list(range(k)), f"{r}: agent calls settled {sorted(settled)}"
            in_flight += state.interrupted_model_calls
            called: dict[tuple[str | None, int], float] = {}
            for e in events:
                if isinstance(e, ModelCalled):
                    called[(e.session_id, e.turn)] = e.occurred_at.timestamp()
                elif isinstance(e, ModelResponded) and (e.session_id, e.turn) in called:
                    waits.append(
                        e.occurred_at.timestamp() - called[(e.session_id, e.turn)] - latency
                    )
            last_completed = max(last_completed, completed[0].occurred_at.timestamp())
        p = statistics.quantiles(waits, n=100, method="inclusive")
        return {
            "p50": p[49],
            "p99": p[98],
            "in_flight": float(in_flight),
            "calls": float(len(waits)),
            "last_completed": last_completed,
        }
    finally:
        watcher.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--latency", type=float, default=0.01)
    ap.add_argument("--kill-at", type=float, default=0.3, help="share completed at the SIGKILL")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    bs = bootstrap()
    if not bs.startswith("127.0.0.1"):
        raise SystemExit(f"the load generator talks to 127.0.0.1 only, not {bs}")
    tag = uuid.uuid4().hex[:8]
    raw_topic = f"raw{tag}.{RUNS_TOPIC}"
    apply_topics(
        bs, [replace(load_topic_specs()[RUNS_TOPIC], name=raw_topic, partitions=PARTITIONS)]
    )
    rows = []
    for i in range(args.rounds):
        raw = asyncio.run(raw_kafka(bs, raw_topic, PARTITIONS, args.runs, args.k))
        r = one_round(bs, args.runs, args.k, args.latency, args.kill_at, args.timeout)
        rate = args.runs * args.k / r["wall"]
        rows.append(
            [
                str(i + 1),
                f"{raw.rate:,.0f}",
                f"{rate:,.0f}",
                f"{rate / raw.rate:.2f}x",
                f"{r['wall']:.1f}",
                f"{r['killed_at']:.1f}",
                f"{r['p50'] * 1000:.1f} / {r['p99'] * 1000:.1f}",
                f"{r['max_lag']:,.0f} / {r['catch_up']:.2f}",
                f"{r['in_flight']:.0f}",
                f"{args.runs} of {args.runs}",
            ]
        )
    print(
        table(
            f"Load with a SIGKILL, {stamp()}, {machine()}: {args.runs} runs x {args.k} single-turn "
            f"exchanges, {args.latency * 1000:.0f} ms model, two coordinators and a projector, "
            "local Kafka 4.1.1 (1 node)",
            [
                "round",
                "raw records/s (same shape)",
                "recorded calls/s",
                "ratio",
                "wall s",
                "SIGKILL at s",
                "write-ahead wait p50 / p99 ms",
                "projector: max lag (records) / counted all s after the last RunCompleted",
                "calls in flight at the kill",
                "runs completed exactly once (fold)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
