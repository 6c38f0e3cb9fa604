"""Instructions per recorded call, counted by valgrind's callgrind: steady where CPU time is not.

On a shared machine the process CPU of ``bench/concurrent_runs.py`` moves by 1.4x between
rounds of the same code; the count of executed instructions does not (the machine's load
changes how long an instruction takes, not how many there are). This runs the same workload
(N runs started at once, each one session of K single-turn exchanges with a 10 ms model) in
a child under callgrind with instrumentation off; after warm rounds (imports, compiled
writers, caches) it is switched on (``callgrind_control -i on``) for the measured rounds only,
and off again before the world closes. Every thread of the process counts (the event loop,
the embedded committer or the Kafka delivery pump and librdkafka's threads, worker threads).
Kernel work (system calls, fsync) is not counted.

    .venv/bin/python bench/instructions.py [--worlds embedded,kafka] [--n 20] [--k 20]
        [--warm 2] [--rounds 2]

Needs ``valgrind`` (callgrind, callgrind_control); the Kafka world takes the broker of
``LITTLE_BENCH_KAFKA_BOOTSTRAP`` / ``LITTLE_TEST_KAFKA_BOOTSTRAP`` (or starts the local one).
A run takes a few minutes (callgrind runs the code ~50x slower).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, stamp


def _wait_for(path: Path, child: subprocess.Popen[bytes]) -> None:
    while not path.exists():
        if child.poll() is not None:
            raise RuntimeError(f"the measured child exited ({child.returncode}) before {path.name}")
        time.sleep(0.2)


def measure(world: str, args: argparse.Namespace) -> float:
    """Instructions per call of one child process (every thread, measured rounds only)."""
    with tempfile.TemporaryDirectory() as tmp:
        flags = Path(tmp)
        out = flags / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            world,
            "--flags",
            tmp,
            "--n",
            str(args.n),
            "--k",
            str(args.k),
            "--warm",
            str(args.warm),
            "--rounds",
            str(args.rounds),
        ]
        if world == "kafka":
            command += ["--bootstrap", bootstrap()]
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_for(flags / "ready", child)
            subprocess.run(
                ["callgrind_control", "-i", "on", str(child.pid)], check=True, capture_output=True
            )
            (flags / "go").touch()
            _wait_for(flags / "done", child)
            subprocess.run(
                ["callgrind_control", "-i", "off", str(child.pid)], check=True, capture_output=True
            )
            (flags / "stop").touch()
            _, err = child.communicate()
        finally:
            if child.poll() is None:
                child.kill()
        if child.returncode != 0:
            raise RuntimeError(f"the measured child failed: {err.decode()[-2000:]}")
        total = 0
        for line in out.read_text().splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
        return total / (args.n * args.k * args.rounds)


async def _child(args: argparse.Namespace) -> None:
    from bench.concurrent_runs import ours
    from little import tune_gc
    from little._world import kafka_world, local_world

    flags = Path(args.flags)

    def flagged(name: str) -> None:  # set by the parent process: waited for on a thread
        while not (flags / name).exists():
            time.sleep(0.05)

    async def wait(name: str) -> None:
        await asyncio.to_thread(flagged, name)

    tune_gc()
    with tempfile.TemporaryDirectory() as tmp:
        if args.child == "kafka":
            world = kafka_world(
                args.bootstrap,
                topic_prefix=f"bench.icount.{uuid.uuid4().hex[:8]}.",
                provision=True,
                artifacts_dir=f"{tmp}/a",
            )
        else:
            world = local_world(f"{tmp}/e")
        for _ in range(args.warm):
            await ours(world, args.n, args.k)
        (flags / "ready").touch()
        await wait("go")
        for _ in range(args.rounds):
            await ours(world, args.n, args.k)
        (flags / "done").touch()
        await wait("stop")
        world.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="embedded,kafka")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--flags", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        asyncio.run(_child(args))
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench/instructions.py needs valgrind (callgrind) installed")
    print(
        f"Instructions per recorded call ({stamp()}, {machine()}, Python "
        f"{sys.version.split()[0]}; N={args.n} runs x K={args.k} exchanges, {args.rounds} "
        f"rounds counted after {args.warm} warm)"
    )
    for world in args.worlds.split(","):
        print(f"{world}: {measure(world, args) / 1e6:.3f} M instructions per call", flush=True)


if __name__ == "__main__":
    main()
