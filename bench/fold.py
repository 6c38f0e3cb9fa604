"""Fold throughput, replay from a snapshot, and the memory of a full replay (embedded world).

1. A run of realistic shape (steps, each with a harness session of a few model turns and tool
   calls; loops revisiting step paths with max_visits > 1; retries, failures, a resume with a
   fenced zombie write; decisions, values, agent calls, sub-runs, parallel groups) is encoded
   once. On the same bytes: decode only, then decode + fold (the decoded events fed to
   ``materialize_run_state_from_events`` as a generator). Best of ``--rounds``.
2. A much longer run of the same shape over a bounded set of step paths (an outer loop
   revisits them, so state grows with steps, not events) is written to the embedded log.
   ``replay_run`` of the whole log against ``replay_run`` from a snapshot taken 1,000 events
   before the end.
3. The peak RSS of that full replay, in a child process (``--child-replay``), read with
   ``getrusage(RUSAGE_CHILDREN)`` by a minimal launcher (see ``LAUNCHER``).

    .venv/bin/python bench/fold.py [--events 100000] [--big 1000000] [--paths 1000]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import little
from bench._common import machine, stamp, table, timed
from little._canonical import canonical_hash, canonical_json
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    ArtifactCommitted,
    ArtifactRef,
    DecisionRecorded,
    Event,
    EventCodec,
    LoggedEvent,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ParallelBranchScheduled,
    RunClaimed,
    RunStarted,
    SessionCompleted,
    SessionStarted,
    StepCompleted,
    StepFailed,
    StepStarted,
    SubRunReserved,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
    ValueRecorded,
)
from little.replay import (
    Snapshot,
    encode_snapshot,
    materialize_run_state_from_events,
    replay_run,
)

PROVIDER, MODEL = "openai", "gpt-4o-mini"  # priced by the bundled genai-prices table
MANIFEST = {"model": f"{PROVIDER}:{MODEL}", "tools": ["search", "fetch"], "system": "0" * 64}
TOOLS_HASH = canonical_hash(MANIFEST["tools"])
LOOP_EVERY = 10  # every 10th step path opens a loop ...
LOOP_LEN = 3  # ... of 3 step paths ...
LOOP_VISITS = 3  # ... visited 3 times (max_visits=3), a DecisionRecorded closing each pass
OUTER_MAX_VISITS = 1000  # the long run repeats its whole workflow (an outer loop)
RESUME_EVERY = 100_000  # a writer crash + RunClaimed of the next epoch + one fenced write
TAIL = 1_000  # the snapshot sits this many events before the end of the long run
BATCH = 10_000  # records per append when writing the long run
RSS_LIMIT_MB = 500
BASE_TIME = datetime(2025, 6, 1, tzinfo=UTC)
PROSE = (
    "Summarise what the retrieved documents say about partition leadership, consumer group "
    "rebalancing and idempotent producers; cite each source by its id. "
)


def _h(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


class RunWriter:
    """Generates one run's events: contiguous seq, epochs, claims, in log order."""

    def __init__(
        self,
        run_id: str,
        paths: int,
        *,
        repeat: bool,
        artifact: Callable[[int], ArtifactRef] | None = None,
    ) -> None:
        self.run_id = run_id
        self.paths = paths
        self.repeat = repeat  # outer loop over the whole workflow (the long run)
        self.artifact = artifact
        self.seq = -1
        self.epoch = 1
        self.emitted = 0
        self.next_resume = RESUME_EVERY // 2
        self.visits: collections.Counter[int] = collections.Counter()
        self.step_no = 0
        self.tool_no = 0
        self.ordinal = 0
        self.values = 0

    def _e(self, cls: type[Event], **fields: Any) -> Event:
        self.seq += 1
        self.emitted += 1
        return cls(
            run_id=self.run_id,
            seq=self.seq,
            epoch=self.epoch,
            occurred_at=BASE_TIME + timedelta(milliseconds=250 * self.emitted),
            producer=f"writer-{self.epoch}",
            **fields,
        )

    def _claim(self) -> Event:
        self.emitted += 1
        return RunClaimed(
            run_id=self.run_id,
            epoch=self.epoch,
            owner=f"writer-{self.epoch}",
            observed_seq=self.seq,
            occurred_at=BASE_TIME + timedelta(milliseconds=250 * self.emitted),
        )

    @staticmethod
    def path(j: int) -> str:
        return f"stage{j // 100:02d}/task{j % 100:02d}"

    def events(self) -> Iterator[Event]:
        yield self._claim()
        yield self._e(
            RunStarted,
            workflow="research-swarm",
            workflow_version="7",
            input_json=canonical_json({"topic": "Kafka internals", "depth": 3}),
            max_tokens=50_000_000_000,
        )
        cycle = 0
        while True:
            cycle += 1
            outer = OUTER_MAX_VISITS if self.repeat else 1
            j = 0
            while j < self.paths:
                if j % LOOP_EVERY == 0 and j + LOOP_LEN <= self.paths:
                    for v in range(LOOP_VISITS):
                        for k in range(j, j + LOOP_LEN):
                            tail = k == j + LOOP_LEN - 1
                            target = self.path(j) if v < LOOP_VISITS - 1 else self.path(k + 1)
                            yield from self.step(k, LOOP_VISITS * outer, target if tail else None)
                    j += LOOP_LEN
                else:
                    yield from self.step(j, outer, None)
                    j += 1
            if not self.repeat:
                return

    def step(self, j: int, max_visits: int, decision: str | None) -> Iterator[Event]:
        p = self.path(j)
        leaf = p.rsplit("/", 1)[-1]
        self.visits[j] += 1
        visit = self.visits[j]
        first = visit == 1
        n = self.step_no
        self.step_no += 1
        common = {"step_path": p, "step_id": leaf, "visit": visit}
        yield self._e(StepStarted, max_visits=max_visits, **common)
        if j % 5 == 4:  # a plain function step: no agent
            if first and j % 10 == 9:
                self.values += 1
                yield self._e(
                    ValueRecorded,
                    step_path=p,
                    kind="random" if j % 20 == 9 else "clock",
                    ordinal=self.values,
                    value_json=canonical_json(0.25 * j),
                )
        else:
            if n % 30 == 29:  # a failed attempt, retried
                yield from self.session(p, n, turns=1, fail=True)
                yield self._e(
                    StepFailed,
                    error_type="ProviderError",
                    message="model refused twice",
                    retryable=True,
                    will_retry=True,
                    **common,
                )
                yield self._e(StepStarted, max_visits=max_visits, attempt=2, **common)
            yield from self.session(p, n, turns=1 + n % 4, fail=False)
        if first and j % 20 == 0:
            yield from self.agent_call(p)
        if first and j % 100 == 50:
            branches = [f"{p}/branch-{b}" for b in range(3)]
            yield self._e(
                ParallelBranchScheduled,
                step_path=p,
                branches=tuple(branches),
                branch_set_hash=canonical_hash(branches),
            )
        if first and j % 100 == 0:
            yield self._e(
                SubRunReserved,
                step_path=p,
                sub_run_id=f"{self.run_id}.sub{j}",
                workflow="fetch-and-summarise",
                input_json=canonical_json({"stage": j // 100}),
                call_id=f"sub-{j}",
            )
        if first and j % 50 == 25 and self.artifact is not None:
            yield self._e(ArtifactCommitted, step_path=p, name=f"notes-{j}", ref=self.artifact(j))
        if decision is not None:
            yield self._e(
                DecisionRecorded,
                step_path=p,
                step_id=leaf,
                visit=visit,
                target=decision,
                output_json=canonical_json({"again": decision != self.path(j + 1)}),
            )
        out = canonical_json({"summary": PROSE[: 40 + n % 80], "sources": [n, n + 1]})
        yield self._e(StepCompleted, output_json=out, **common)

    def session(self, p: str, n: int, *, turns: int, fail: bool) -> Iterator[Event]:
        sid = f"{p}#agent"
        s = {"step_path": p, "session_id": sid}
        yield self._e(
            SessionStarted,
            session_name="agent",
            model=f"{PROVIDER}:{MODEL}",
            manifest_json=canonical_json(MANIFEST),
            manifest_hash=canonical_hash(MANIFEST),
            **s,
        )
        total = [0, 0, 0]
        prev: str | None = None
        messages = 1
        for t in range(1, turns + 1):
            req = _h(p, n, t)
            appended = [{"role": "user" if t == 1 else "tool", "content": PROSE[: 60 + 20 * t]}]
            call = {
                "turn": t,
                "provider": PROVIDER,
                "model": MODEL,
                "request_hash": req,
                "previous_request_hash": prev,
                "appended_messages_json": canonical_json(appended),
                "message_count": messages,
                "tools_hash": TOOLS_HASH,
                **s,
            }
            yield self._e(ModelCalled, **call)
            if fail or (t == 1 and n % 17 == 16):
                yield self._e(
                    ModelFailed,
                    turn=t,
                    provider=PROVIDER,
                    model=MODEL,
                    request_hash=req,
                    error_type="RateLimited" if not fail else "ContentFiltered",
                    message="429 Too Many Requests" if not fail else "refused",
                    retryable=not fail,
                    **s,
                )
                if fail:
                    return
                yield self._e(ModelCalled, **call)  # the retry
            if self.emitted >= self.next_resume:
                yield from self.resume(req, t, s)
            usage = Usage(
                input_tokens=900 + 700 * t,
                output_tokens=120 + (n * 7 + t * 13) % 300,
                cached_input_tokens=0 if t == 1 else 900 + 700 * (t - 1),
            )
            total[0] += usage.input_tokens
            total[1] += usage.output_tokens
            total[2] += usage.cached_input_tokens
            last = t == turns
            calls = [] if last else [f"c{t}-{c}" for c in range(1 + (n + t) % 2)]
            response: dict[str, Any] = (
                {"content": PROSE[: 100 + n % 60]}
                if last
                else {"tool_calls": [{"id": c, "name": "search"} for c in calls]}
            )
            yield self._e(
                ModelResponded,
                turn=t,
                provider=PROVIDER,
                model=MODEL,
                request_hash=req,
                response_json=canonical_json(response),
                usage=usage,
                finish_reason="stop" if last else "tool_calls",
                latency_ms=400 + (n * 31 + t) % 2000,
                **s,
            )
            for c in calls:
                self.tool_no += 1
                yield self._e(
                    ToolCallStarted,
                    call_id=c,
                    tool="search",
                    turn=t,
                    arguments_json=canonical_json({"q": f"kafka topic {n} {c}", "k": 5}),
                    idempotency_key=f"{self.run_id}/{p}/{c}",
                    **s,
                )
                if self.tool_no % 13 == 0:
                    yield self._e(
                        ToolCallFailed,
                        call_id=c,
                        tool="search",
                        error_type="TimeoutError",
                        message="search backend timed out after 10s",
                        retryable=True,
                        **s,
                    )
                else:
                    yield self._e(
                        ToolCallSucceeded,
                        call_id=c,
                        tool="search",
                        result_json=canonical_json([PROSE[:70], PROSE[70:130], f"doc-{n}"]),
                        **s,
                    )
            prev = req
            messages += 1 + len(calls)
        yield self._e(
            SessionCompleted,
            turns=turns,
            output_json=canonical_json(PROSE[: 100 + n % 60]),
            usage=Usage(
                input_tokens=total[0], output_tokens=total[1], cached_input_tokens=total[2]
            ),
            **s,
        )

    def resume(self, req: str, turn: int, s: dict[str, str]) -> Iterator[Event]:
        """The writer dies with a model call in flight; the next epoch claims the run, and a
        late write of the dead writer is fenced."""
        self.next_resume += RESUME_EVERY
        self.epoch += 1
        yield self._claim()
        self.emitted += 1
        yield ModelResponded(
            run_id=self.run_id,
            seq=self.seq + 1,
            epoch=self.epoch - 1,
            occurred_at=BASE_TIME + timedelta(milliseconds=250 * self.emitted),
            producer=f"writer-{self.epoch - 1}",
            turn=turn,
            provider=PROVIDER,
            model=MODEL,
            request_hash=req,
            response_json="{}",
            usage=Usage(input_tokens=1, output_tokens=1),
            **s,
        )

    def agent_call(self, p: str) -> Iterator[Event]:
        self.ordinal += 1
        o = self.ordinal
        yield self._e(
            AgentCallAdmitted,
            step_path=p,
            ordinal=o,
            request_key=_h("agent", o),
            node_phase="research",
            node_label=f"critic-{o}",
            node_occurrence=1,
        )
        yield self._e(
            AgentCallSettled,
            step_path=p,
            ordinal=o,
            outcome="ok",
            result_json=canonical_json({"verdict": "accept", "score": o % 10}),
            usage=Usage(input_tokens=2_000, output_tokens=300),
        )


def run_events(run_id: str, n: int, paths: int, *, repeat: bool, **kw: Any) -> Iterator[Event]:
    """Exactly ``n`` events of one run (the last step may be in progress, as after a crash)."""
    return itertools.islice(RunWriter(run_id, paths, repeat=repeat, **kw).events(), n)


# -- 1. decode vs decode + fold ----------------------------------------------------------------


def fold_throughput(n: int, rounds: int) -> dict[str, Any]:
    codec = EventCodec()
    paths = max(10, round(n / 24))  # one pass of the workflow is about n events
    payloads = [codec.encode(e) for e in run_events("run-fold", n, paths, repeat=True)]
    decode = codec.decode

    def decode_only() -> None:
        collections.deque((decode(p) for p in payloads), maxlen=0)

    state: list[Any] = []

    def decode_fold() -> None:
        state[:] = [materialize_run_state_from_events(decode(p) for p in payloads)]

    dec, fold = [], []
    for _ in range(rounds):  # interleaved, so drift on a shared machine hits both alike
        dec.append(n / timed(decode_only))
        fold.append(n / timed(decode_fold))
    types = collections.Counter(decode(p).type for p in payloads)
    st = state[0]
    return {
        "decode": max(dec),
        "fold": max(fold),
        "bytes": sum(map(len, payloads)) / n,
        "types": types,
        "paths": paths,
        "steps": len(st.steps),
        "visits": sum(s.visits for s in st.steps),
        "last_seq": st.last_seq,
        "fenced": st.fenced_events,
        "cost": st.usage.cost_usd,
    }


# -- 2. replay of a long run, full and from a snapshot -----------------------------------------


def write_long_run(world: little.World, run_id: str, n: int, paths: int) -> Any:
    """Write ``n`` events in big batches; fold the first ``n - TAIL`` as they are written
    (from the events just appended and their positions, so setup decodes nothing)."""
    artifacts = {}

    def artifact(j: int) -> ArtifactRef:
        if j not in artifacts:
            artifacts[j] = world.artifacts.put(run_id, f"notes of step {j}\n".encode() * 50)
        return artifacts[j]

    events = run_events(run_id, n, paths, repeat=True, artifact=artifact)
    cut = n - TAIL

    def written() -> Iterator[LoggedEvent]:
        done = 0
        while batch := list(itertools.islice(events, BATCH)):
            for e, pos in zip(batch, world.append(batch), strict=True):
                if done < cut:
                    yield LoggedEvent(e, pos.partition, pos.offset)
                done += 1

    return materialize_run_state_from_events(written())


def state_digest(state: Any) -> str:
    return hashlib.sha256(state.model_dump_json().encode()).hexdigest()[:16]


# ru_maxrss of a child includes the high-water RSS of the process it was forked from (Linux
# carries the old address space's peak across exec), so the replay child is started by a
# minimal interpreter and that launcher reports RUSAGE_CHILDREN for its only child.
LAUNCHER = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
sys.stdout.write(r.stdout)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""


def vm_hwm_kb() -> int:
    """Peak RSS of this process's own address space (Linux ``VmHWM``), 0 if unknown."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmHWM:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) if found else 0


def child_replay(data_dir: str, run_id: str) -> None:
    world = little.local_world(data_dir)
    base = vm_hwm_kb()
    start = time.perf_counter()
    result = replay_run(world, run_id, use_snapshot=False)
    seconds = time.perf_counter() - start
    world.close()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "events_folded": result.events_folded,
                "digest": state_digest(result.state),
                "base_kb": base,
                "hwm_kb": vm_hwm_kb(),
            }
        )
    )


def long_replay(n: int, paths: int) -> dict[str, Any]:
    run_id = "run-long"
    with tempfile.TemporaryDirectory() as d:
        world = little.local_world(d, synchronous="NORMAL")
        t0 = time.perf_counter()
        near = write_long_run(world, run_id, n, paths)
        setup = time.perf_counter() - t0
        snapshot = encode_snapshot(Snapshot.of(near))
        world.snapshots.put(run_id, snapshot)
        db_bytes = sum(f.stat().st_size for f in Path(d).glob("log.sqlite3*"))

        # full replay in a child: its wall time, and its peak RSS once it has exited
        replay_cmd = [sys.executable, __file__, "--child-replay", d, run_id]
        child = subprocess.run(
            [sys.executable, "-S", "-c", LAUNCHER, *replay_cmd],
            check=True,
            capture_output=True,
            text=True,
        )
        *_, report, rss_kb = child.stdout.strip().splitlines()
        full = json.loads(report)

        snap_s = []
        for _ in range(3):
            start = time.perf_counter()
            result = replay_run(world, run_id)
            snap_s.append(time.perf_counter() - start)
        assert result.from_snapshot is not None, "the snapshot was not used"
        assert result.events_folded == TAIL, result.events_folded
        assert full["events_folded"] == n, full
        assert state_digest(result.state) == full["digest"], "snapshot + tail != full fold"
        st = result.state
        world.close()
    return {
        "setup": setup,
        "full": full["seconds"],
        "snap": min(snap_s),
        "rss_mb": int(rss_kb) / 1024,
        "hwm_mb": full["hwm_kb"] / 1024,
        "base_mb": full["base_kb"] / 1024,
        "db_mb": db_bytes / 2**20,
        "snapshot_kb": len(snapshot) / 1024,
        "steps": len(st.steps),
        "sessions": len(st.sessions),
        "visits": sum(s.visits for s in st.steps),
        "claims": st.accepted_claims,
        "fenced": st.fenced_events,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--paths", type=int, default=1_000, help="distinct step paths of the long run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child-replay", nargs=2, metavar=("DATA_DIR", "RUN_ID"))
    args = ap.parse_args()
    if args.child_replay:
        child_replay(*args.child_replay)
        return
    if args.big <= TAIL:
        ap.error(
            f"--big must be more than {TAIL:,} (the snapshot sits {TAIL:,} events before the end)"
        )

    t0 = time.perf_counter()
    f = fold_throughput(args.events, args.rounds)
    t1 = time.perf_counter()
    r = long_replay(args.big, args.paths)
    t2 = time.perf_counter()

    ratio = f["fold"] / f["decode"]
    snap_ratio = r["snap"] / r["full"]

    def ok(good: bool) -> str:
        return "yes" if good else "**no**"

    rows = [
        [
            f"decode + fold, {args.events:,}-event run (events/s; raw = decode only)",
            f"{f['fold']:,.0f}",
            f"{f['decode']:,.0f}",
            f"{ratio:.2f}x",
            ">= 0.50x",
            ok(ratio >= 0.5),
        ],
        [
            f"replay_run from a snapshot {TAIL:,} events before the end of a "
            f"{args.big:,}-event run (s; raw = full replay)",
            f"{r['snap']:.3f}",
            f"{r['full']:.2f}",
            f"{snap_ratio:.2%}",
            "<= 2%",
            ok(snap_ratio <= 0.02),
        ],
        [
            f"peak RSS of the full replay of {args.big:,} events (MiB; limit)",
            f"{r['rss_mb']:,.0f}",
            f"{RSS_LIMIT_MB}",
            f"{r['rss_mb'] / RSS_LIMIT_MB:.2f}x",
            f"< {RSS_LIMIT_MB} MiB",
            ok(r["rss_mb"] < RSS_LIMIT_MB),
        ],
    ]
    print(
        table(
            f"Fold and replay, {stamp()}, {machine()}, embedded world (sqlite)",
            ["measure", "ours", "raw / limit", "ratio", "target", "met"],
            rows,
        )
    )
    mix = ", ".join(f"{t} {c / args.events:.1%}" for t, c in f["types"].most_common())
    print(
        f"\nRun 1: {args.events:,} events, {f['paths']:,} step paths, {f['visits']:,} step "
        f"visits, {f['bytes']:.0f} bytes/event on average; best of {args.rounds} rounds. "
        f"Mix: {mix}.\n"
        f"Run 2: {args.big:,} events over {r['steps']:,} step paths ({r['visits']:,} visits, "
        f"{r['sessions']:,} sessions in state, {r['claims']} accepted claims, {r['fenced']} "
        f"fenced events); log {r['db_mb']:,.0f} MiB, snapshot {r['snapshot_kb']:,.0f} KiB; "
        f"full replay {args.big / r['full']:,.0f} events/s; replay child: RSS "
        f"{r['base_mb']:,.0f} MiB before replaying, peak (VmHWM) {r['hwm_mb']:,.0f} MiB.\n"
        f"Wall time: run 1 {t1 - t0:.0f} s, run 2 {t2 - t1:.0f} s (setup, writing "
        f"{args.big:,} events and folding them, {r['setup']:.0f} s), total {t2 - t0:.0f} s."
    )


if __name__ == "__main__":
    main()
