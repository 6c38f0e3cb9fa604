"""Hypothesis strategies for little's values, in one module (as attrs keeps them).

``events()`` draws valid events of every type (or of the ``types`` given); ``usage()`` draws
token counts. Strategies are derived from each model's fields, with integer widths taken from
the newest Avro schema, so a new field or a new event type is covered without editing this file.

``run_streams()`` draws whole, valid streams of one run (claims, crashes, resumes, fenced
writers included) as ``LoggedEvent`` lists; ``generated_runs()`` draws the same with what the
generator knows about them (which events were fenced, which claims resumed or were rejected).
"""

from __future__ import annotations

import random
import types as _types
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Union, get_args, get_origin

import annotated_types
from hypothesis import strategies as st

from little._canonical import canonical_hash, canonical_json
from little.events import (
    EVENT_TYPES,
    AgentCallAdmitted,
    AgentCallSettled,
    ArtifactCommitted,
    ArtifactRef,
    DecisionRecorded,
    Event,
    LoggedEvent,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ParallelBranchScheduled,
    PatchMarked,
    RunCancelled,
    RunClaimed,
    RunCompleted,
    RunFailed,
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
    default_catalog,
)
from little.events._catalog import schema_json

__all__ = [
    "GeneratedRun",
    "artifact_refs",
    "events",
    "generated_runs",
    "json_texts",
    "run_streams",
    "run_usage",
    "texts",
    "usage",
]

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

MIN_TIME = datetime(2000, 1, 1)
MAX_TIME = datetime(2100, 1, 1)


def texts(min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[str]:
    """Short unicode strings (no surrogates, so always valid UTF-8)."""
    return st.text(min_size=min_size, max_size=max_size)


def json_texts() -> st.SearchStrategy[str]:
    """Small JSON documents as canonical JSON text, as the ``*_json`` fields carry them."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | texts(max_size=6)
    )
    values = st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(texts(max_size=4), inner, max_size=3)
        ),
        max_leaves=5,
    )
    return values.map(canonical_json)


def occurred_at() -> st.SearchStrategy[datetime]:
    """UTC instants with microsecond precision, within 2000-2100."""
    return st.datetimes(min_value=MIN_TIME, max_value=MAX_TIME, timezones=st.just(UTC))


def usage() -> st.SearchStrategy[Usage]:
    """Any valid usage: cached input tokens are part of the input tokens."""
    count = st.integers(0, INT64[1])

    @st.composite
    def build(draw: st.DrawFn) -> Usage:
        input_tokens = draw(count)
        return Usage(
            input_tokens=input_tokens,
            output_tokens=draw(count),
            cached_input_tokens=draw(st.integers(0, input_tokens)),
            reasoning_tokens=draw(count),
        )

    return build()


def artifact_refs() -> st.SearchStrategy[ArtifactRef]:
    return st.builds(
        ArtifactRef,
        run_id=texts(min_size=1),
        sha256=st.binary(min_size=32, max_size=32).map(bytes.hex),
        size=st.integers(0, INT64[1]),
        media_type=st.sampled_from(["application/json", "text/plain", "application/octet-stream"]),
    )


def _avro_int_widths(event_type: str) -> dict[str, tuple[int, int]]:
    """Field name -> bounds of its Avro integer type (``int`` or ``long``, maybe nullable)."""
    widths: dict[str, tuple[int, int]] = {}
    for f in schema_json(default_catalog().latest(event_type))["fields"]:
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        if "int" in branches:
            widths[f["name"]] = INT32
        elif "long" in branches:
            widths[f["name"]] = INT64
    return widths


def _for_annotation(
    name: str, annotation: Any, metadata: list[Any], bounds: tuple[int, int]
) -> st.SearchStrategy[Any]:
    origin = get_origin(annotation)
    if origin in (Union, _types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        (only,) = inner
        return st.none() | _for_annotation(name, only, metadata, bounds)
    if origin is tuple:
        item, _ellipsis = get_args(annotation)
        return st.lists(_for_annotation(name, item, [], bounds), max_size=3).map(tuple)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        lo, hi = bounds
        for m in metadata:
            if isinstance(m, annotated_types.Ge):
                lo = max(lo, int(m.ge))  # type: ignore[call-overload]
        return st.integers(lo, hi)
    if annotation is str:
        if name.endswith("_json"):
            return json_texts()
        min_len = max(
            (m.min_length for m in metadata if isinstance(m, annotated_types.MinLen)), default=0
        )
        return texts(min_size=min_len)
    if annotation is datetime:
        return occurred_at()
    if annotation is ArtifactRef:
        return artifact_refs()
    if annotation is Usage:
        return usage()
    raise TypeError(f"no strategy for field {name}: {annotation!r}")  # a new field type: add it


@cache
def _event_strategy(cls: type[Event]) -> st.SearchStrategy[Event]:
    widths = _avro_int_widths(cls.event_type)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in cls.model_fields.items():
        fields[name] = _for_annotation(
            name, info.annotation, info.metadata, widths.get(name, INT64)
        )
    fields["event_id"] = st.uuids().map(str)
    fields["seq"] = st.just(-1) if cls.event_type == "RunClaimed" else st.integers(0, INT64[1])
    return st.builds(cls, **fields)


def events(types: Iterable[str | type[Event]] | None = None) -> st.SearchStrategy[Event]:
    """Valid events of the given types (wire names or classes); all types when ``None``."""
    classes = (
        list(EVENT_TYPES.values())
        if types is None
        else [EVENT_TYPES[t] if isinstance(t, str) else t for t in types]
    )
    return st.one_of([_event_strategy(cls) for cls in classes])


# -- whole runs ------------------------------------------------------------------------------
#
# ``run_streams()`` draws the log of one run as a writer (and its crashes) would leave it: a
# program of blocks (steps, retries, loops, parallel groups, decisions, harness sessions,
# artifacts, sub-runs, recorded values, agent calls) written by epoch 1, with crashes after
# which a new claimer (epoch + 1) continues at the last accepted seq + 1 while the fenced
# writer may still land a few events with its old epoch.

PRICED_MODELS: tuple[tuple[str, str], ...] = (
    ("openai", "gpt-4o"),
    ("openai", "gpt-4o-mini"),
    ("anthropic", "claude-sonnet-4-5"),
    ("google", "gemini-2.5-pro"),  # tiered: > 200k input tokens cost more
)
UNPRICED_MODELS: tuple[tuple[str, str], ...] = (("scripted", "echo"), ("scripted", "planner"))
RUN_TIME_MIN = datetime(2024, 1, 1, tzinfo=UTC)
RUN_TIME_MAX = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)
MAX_PROGRAM_EVENTS = 46
"""Accepted events of the run's program (the claims and a fenced writer's events come on top)."""

# Built once: hypothesis validates a strategy the first time it is drawn from.
_MODELS = st.sampled_from(PRICED_MODELS + UNPRICED_MODELS)
_TURNS = st.sampled_from([1, 2, 0, 3])
_OUTCOMES = st.sampled_from(["responded", "responded", "replayed", "failed"])
_TOOLS = st.sampled_from(["search", "write_file"])
_EXTRAS = st.lists(
    st.sampled_from(["session", "session", "artifact", "value", "sub_run", "agent_call", "patch"]),
    max_size=2,
)
_VALUE_KINDS = st.sampled_from(["now", "random", "uuid"])
_BRANCHES = st.sampled_from([("a", "b"), ("a", "b", "c")])
_BLOCKS = st.lists(
    st.sampled_from(["step", "step", "loop", "parallel", "planner"]), min_size=2, max_size=5
)
_RUN_ENDS = st.sampled_from(["completed", "completed", "running", "cancelled"])
_CUT_SHORT = st.sampled_from([False, False, False, True])
_SIZES = st.sampled_from([1_000, 0, 30_000, 199_000, 200_001])
_LONG_SIZES = st.sampled_from([200_001, 1_000, 260_000])

_Spec = tuple[type[Event], dict[str, Any]]
"""An event the run's program writes, without its envelope (run, seq, epoch, id, time)."""


@dataclass(frozen=True)
class GeneratedRun:
    """A drawn run stream and the facts its generator knows, for tests to check the fold with.

    ``zombie_event_ids`` are events a fenced writer landed after a newer claim;
    ``resume_claim_ids`` the accepted claims after the first; ``rejected_claim_ids`` claims
    whose epoch was not above the accepted one.
    """

    run_id: str
    events: tuple[LoggedEvent, ...]
    zombie_event_ids: frozenset[str]
    resume_claim_ids: frozenset[str]
    rejected_claim_ids: frozenset[str]
    final_epoch: int


def run_usage(*, long_context: bool = False) -> st.SearchStrategy[Usage]:
    """Realistic token counts of one call: cached <= input, reasoning <= output, input up to
    ~260k so tiered prices cross their 200k threshold (mostly, with ``long_context``)."""
    sizes = _LONG_SIZES if long_context else _SIZES

    @st.composite
    def draw_usage(draw: st.DrawFn) -> Usage:
        size = draw(sizes)
        i = size + draw(st.integers(0, 999))
        o = draw(st.integers(0, 20_000))
        return Usage(
            input_tokens=i,
            output_tokens=o,
            cached_input_tokens=draw(st.integers(0, i)),
            reasoning_tokens=draw(st.integers(0, o)),
        )

    return draw_usage()


class _Program:
    """Draws the specs of one run's program; ids are counters, so every run is self-consistent."""

    def __init__(self, draw: st.DrawFn, run_id: str, other_run_id: str) -> None:
        self.draw = draw
        self.run_id = run_id
        self.other_run_id = other_run_id
        self.sessions = 0
        self.ordinals = 0
        self.values = 0
        self.sub_runs = 0
        self.artifacts = 0

    def session(self, step_path: str | None, name: str) -> list[_Spec]:
        draw = self.draw
        sid = f"{self.run_id}/session-{self.sessions}"
        self.sessions += 1
        first_provider, first_model = draw(_MODELS)
        manifest = canonical_json({"name": name, "model": first_model, "tools": ["search"]})
        env = {"step_path": step_path, "session_id": sid}
        specs: list[_Spec] = [
            (
                SessionStarted,
                {
                    **env,
                    "session_name": name,
                    "model": f"{first_provider}:{first_model}",
                    "manifest_json": manifest,
                    "manifest_hash": canonical_hash(manifest),
                },
            )
        ]
        rollup = Usage(input_tokens=0, output_tokens=0)
        previous: str | None = None
        turns = draw(_TURNS)
        for turn in range(turns):
            provider, model = draw(_MODELS)
            request_hash = canonical_hash([sid, turn])
            call = {"turn": turn, "provider": provider, "model": model}
            specs.append(
                (
                    ModelCalled,
                    {
                        **env,
                        **call,
                        "request_hash": request_hash,
                        "previous_request_hash": previous,
                        "appended_messages_json": canonical_json([{"role": "user", "n": turn}]),
                        "message_count": 2 * turn + 1,
                    },
                )
            )
            previous = request_hash
            outcome = draw(_OUTCOMES)
            if outcome == "failed":
                specs.append(
                    (
                        ModelFailed,
                        {
                            **env,
                            **call,
                            "request_hash": request_hash,
                            "error_type": "RateLimited",
                            "message": "429",
                            "retryable": True,
                        },
                    )
                )
                continue
            used = draw(run_usage(long_context=model == "gemini-2.5-pro"))
            rollup = Usage(
                input_tokens=rollup.input_tokens + used.input_tokens,
                output_tokens=rollup.output_tokens + used.output_tokens,
                cached_input_tokens=rollup.cached_input_tokens + used.cached_input_tokens,
                reasoning_tokens=rollup.reasoning_tokens + used.reasoning_tokens,
            )
            specs.append(
                (
                    ModelResponded,
                    {
                        **env,
                        **call,
                        "request_hash": request_hash,
                        "response_json": canonical_json({"text": f"answer {turn}"}),
                        "usage": used,
                        "replayed_from_run_id": (
                            self.other_run_id if outcome == "replayed" else None
                        ),
                        "finish_reason": "tool_calls",
                    },
                )
            )
            for n in range(draw(st.integers(0, 1))):
                call_id = f"call-{turn}-{n}"
                tool = draw(_TOOLS)
                specs.append(
                    (
                        ToolCallStarted,
                        {
                            **env,
                            "call_id": call_id,
                            "tool": tool,
                            "turn": turn,
                            "arguments_json": canonical_json({"q": n}),
                            "idempotency_key": f"{self.run_id}/{step_path}/{call_id}",
                        },
                    )
                )
                if draw(st.booleans()):
                    specs.append(
                        (
                            ToolCallSucceeded,
                            {**env, "call_id": call_id, "tool": tool, "result_json": '"ok"'},
                        )
                    )
                else:
                    specs.append(
                        (
                            ToolCallFailed,
                            {
                                **env,
                                "call_id": call_id,
                                "tool": tool,
                                "error_type": "ToolError",
                                "message": "boom",
                            },
                        )
                    )
        if draw(st.booleans()):
            specs.append(
                (
                    SessionCompleted,
                    {**env, "turns": turns, "output_json": '"done"', "usage": rollup},
                )
            )
        return specs

    def extras(self, step_path: str) -> list[_Spec]:
        """What a step body may record besides its sessions."""
        draw = self.draw
        specs: list[_Spec] = []
        kinds = draw(_EXTRAS)
        for kind in kinds:
            if kind == "session":
                specs += self.session(step_path, "worker")
            elif kind == "artifact":
                self.artifacts += 1
                ref = ArtifactRef(
                    run_id=self.run_id,
                    sha256=canonical_hash([self.run_id, self.artifacts]),
                    size=self.artifacts * 10,
                    media_type="application/json",
                )
                specs.append(
                    (
                        ArtifactCommitted,
                        {"step_path": step_path, "name": f"out-{self.artifacts}", "ref": ref},
                    )
                )
            elif kind == "value":
                specs.append(
                    (
                        ValueRecorded,
                        {
                            "step_path": step_path,
                            "kind": draw(_VALUE_KINDS),
                            "ordinal": self.values,
                            "value_json": canonical_json(self.values * 7),
                        },
                    )
                )
                self.values += 1
            elif kind == "patch":  # a patch asked inside the step (twice: one mark is kept)
                patch = {"step_path": step_path, "patch_id": "p", "scope": "", "visit": 1}
                specs += [(PatchMarked, patch), (PatchMarked, patch)]
            elif kind == "sub_run":
                specs.append(
                    (
                        SubRunReserved,
                        {
                            "step_path": step_path,
                            "sub_run_id": f"{self.run_id}.sub-{self.sub_runs}",
                            "workflow": "child",
                            "input_json": canonical_json({"n": self.sub_runs}),
                            "call_id": f"sub-{self.sub_runs}",
                        },
                    )
                )
                self.sub_runs += 1
            else:
                ordinal = self.ordinals
                self.ordinals += 1
                replayed = draw(st.booleans())
                specs.append(
                    (
                        AgentCallAdmitted,
                        {
                            "step_path": step_path,
                            "ordinal": ordinal,
                            "request_key": canonical_hash(["agent", ordinal]),
                            "node_phase": "act",
                            "node_label": step_path,
                            "node_occurrence": 0,
                            "side_effecting": draw(st.booleans()),
                        },
                    )
                )
                if draw(st.booleans()):
                    specs.append(
                        (
                            AgentCallSettled,
                            {
                                "step_path": step_path,
                                "ordinal": ordinal,
                                "outcome": "ok",
                                "result_json": '"agent result"',
                                "usage": None if replayed else draw(run_usage()),
                                "replayed": replayed,
                                "source_run_id": self.other_run_id if replayed else None,
                            },
                        )
                    )
        return specs

    def step(
        self,
        step_path: str,
        *,
        branch_path: str | None = None,
        visit: int = 1,
        max_visits: int = 1,
        decision_target: str | None = None,
        may_fail: bool = False,
    ) -> tuple[list[_Spec], bool]:
        """One step, retried after a retryable failure; returns (specs, failed for good)."""
        step_id = step_path.rsplit("/", 1)[-1]
        where = {"step_path": step_path, "step_id": step_id, "visit": visit}
        specs: list[_Spec] = []
        for attempt in (1, 2):
            specs.append(
                (
                    StepStarted,
                    {
                        **where,
                        "attempt": attempt,
                        "max_visits": max_visits,
                        "branch_path": branch_path,
                    },
                )
            )
            specs += self.extras(step_path)
            if decision_target is not None:
                specs.append(
                    (
                        DecisionRecorded,
                        {
                            **where,
                            "target": decision_target,
                            "output_json": canonical_json({"next": decision_target}),
                        },
                    )
                )
            ending = ["completed"] * 3 + ["retry"] if attempt == 1 else ["completed"]
            if may_fail:
                ending.append("failed")
            end = self.draw(st.sampled_from(ending))
            if end == "completed":
                refs = tuple(
                    s[1]["ref"]
                    for s in specs
                    if s[0] is ArtifactCommitted and s[1]["step_path"] == step_path
                )
                specs.append(
                    (
                        StepCompleted,
                        {
                            **where,
                            "attempt": attempt,
                            "branch_path": branch_path,
                            "output_json": canonical_json({"step": step_id, "visit": visit}),
                            "artifact_refs": refs,
                        },
                    )
                )
                return specs, False
            specs.append(
                (
                    StepFailed,
                    {
                        **where,
                        "attempt": attempt,
                        "branch_path": branch_path,
                        "error_type": "StepError",
                        "message": f"attempt {attempt} failed",
                        "retryable": end == "retry",
                        "will_retry": end == "retry",
                    },
                )
            )
            if end == "failed":
                return specs, True
        raise AssertionError("unreachable: the second attempt always ends")

    def parallel(self, group: str) -> list[_Spec]:
        draw = self.draw
        branches = tuple(draw(_BRANCHES))
        specs: list[_Spec] = [
            (
                ParallelBranchScheduled,
                {
                    "step_path": group,
                    "branches": branches,
                    "branch_set_hash": canonical_hash(list(branches)),
                },
            )
        ]
        queues = [self.step(f"{group}/{b}", branch_path=b)[0] for b in branches]
        while any(queues):  # the branches run concurrently: interleave their events
            live = [q for q in queues if q]
            specs.append(draw(st.sampled_from(live)).pop(0))
        return specs

    def loop(self, path: str, after: str) -> list[_Spec]:
        draw = self.draw
        max_visits = draw(st.integers(2, 3))
        visits = draw(st.integers(2, max_visits))
        specs: list[_Spec] = []
        for visit in range(1, visits + 1):
            target = path if visit < visits else after
            specs += self.step(path, visit=visit, max_visits=max_visits, decision_target=target)[0]
        return specs

    def run(self) -> list[_Spec]:
        draw = self.draw
        specs: list[_Spec] = [
            (
                RunStarted,
                {
                    "workflow": "research",
                    "workflow_version": "1.0.0",
                    "input_json": canonical_json({"topic": "kafka"}),
                    "max_agent_calls": draw(st.none() | st.integers(1, 100)),
                    "max_tokens": draw(st.none() | st.integers(1_000, 10_000_000)),
                },
            )
        ]
        blocks = draw(_BLOCKS)
        failed = False
        for n, block in enumerate(blocks):
            if block == "step":
                step_specs, failed = self.step(f"main/step-{n}", may_fail=True)
                specs += step_specs
            elif block == "loop":
                specs += self.loop(f"main/review-{n}", after=f"main/step-{n + 1}")
            elif block == "parallel":
                specs += self.parallel(f"main/fanout-{n}")
            else:
                specs += self.session(None, "planner")  # a run-level session: no step
            if failed or len(specs) >= MAX_PROGRAM_EVENTS:
                break
        if failed:
            specs.append((RunFailed, {"error_type": "StepError", "message": "gave up"}))
        else:
            end = draw(_RUN_ENDS)
            if end == "completed":
                specs.append((RunCompleted, {"output_json": canonical_json({"ok": True})}))
            elif end == "cancelled":
                specs.append((RunCancelled, {"reason": "user asked"}))
        return specs[:MAX_PROGRAM_EVENTS]


@st.composite
def generated_runs(draw: st.DrawFn) -> GeneratedRun:
    """A valid stream of one run (see ``run_streams``) with what its generator knows."""
    run_number = draw(st.integers(0, 2**32 - 1))
    run_id = f"run-{run_number:08x}"
    program = _Program(draw, run_id, other_run_id=f"run-{run_number ^ 0xFFFF:08x}").run()
    # Keep the whole program most of the time; else the run was cut short by a crash nobody
    # resumed (a prefix of a valid run is valid).
    if draw(_CUT_SHORT):
        program = program[: draw(st.integers(1, len(program)))]

    # (cls, fields, seq, epoch, kind); kind: event | claim | resume | rejected | zombie
    records: list[tuple[type[Event], dict[str, Any], int, int, str]] = []
    owner = {"owner": "worker-1", "observed_seq": -1}
    records.append((RunClaimed, owner, -1, 1, "claim"))
    crashes = sorted(set(draw(st.lists(st.integers(0, len(program) - 1), max_size=2))))
    epoch = 1
    position = 0
    zombies: list[tuple[type[Event], dict[str, Any], int, int, str]] = []
    for cut in [*crashes, len(program)]:
        live = [
            (cls, fields, position + i, epoch, "event")
            for i, (cls, fields) in enumerate(program[position:cut])
        ]
        # A fenced writer's events land interleaved with the new writer's.
        while zombies or live:
            take_zombie = bool(zombies) and (not live or draw(st.booleans()))
            records.append(zombies.pop(0) if take_zombie else live.pop(0))
        position = cut
        if cut == len(program):
            break
        # The writer of ``epoch`` stalls; a claimer takes over at the last accepted seq + 1.
        epoch += 1
        records.append(
            (RunClaimed, {"owner": f"worker-{epoch}", "observed_seq": cut - 1}, -1, epoch, "resume")
        )
        # The stalled writer wakes up and lands some of its next events, with its old epoch
        # and its own continuation of the seq chain.
        zombies = [
            (cls, fields, cut + i, epoch - 1, "zombie")
            for i, (cls, fields) in enumerate(
                program[cut : cut + draw(st.integers(0, min(3, len(program) - cut)))]
            )
        ]
    if draw(st.booleans()):
        # A late claimer whose epoch is not above the accepted one: rejected, so it backs off
        # and writes nothing.
        where = draw(st.integers(1, len(records)))
        seen = [r[3] for r in records[:where] if r[4] in ("claim", "resume")]
        last_seq = max((r[2] for r in records[:where] if r[4] == "event"), default=-1)
        records.insert(
            where,
            (
                RunClaimed,
                {"owner": "worker-late", "observed_seq": last_seq},
                -1,
                draw(st.integers(1, max(seen))),
                "rejected",
            ),
        )

    # Where and when: cosmetic, so one seeded Random rather than a draw per event.
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    partition = rng.randrange(12)
    offset = rng.randrange(1_000_000)
    at = draw(
        st.datetimes(
            min_value=RUN_TIME_MIN.replace(tzinfo=None),
            max_value=datetime(2026, 6, 30),
            timezones=st.just(UTC),
        )
    )
    logged: list[LoggedEvent] = []
    kinds: dict[str, set[str]] = {"zombie": set(), "resume": set(), "rejected": set()}
    for index, (cls, fields, seq, epoch_of, kind) in enumerate(records):
        event_id = str(uuid.UUID(int=(run_number << 64) | index))
        event = cls(
            run_id=run_id,
            seq=seq,
            epoch=epoch_of,
            event_id=event_id,
            occurred_at=at,
            producer=f"worker-{epoch_of}",
            **fields,
        )
        logged.append(LoggedEvent(event=event, partition=partition, offset=offset))
        kinds.get(kind, set()).add(event_id)
        # other runs' records of the same partition land between this run's
        offset += 1 + rng.choice([0, 0, 0, 1, 4])
        at += timedelta(milliseconds=rng.randint(1, 120_000))
    assert at <= RUN_TIME_MAX
    return GeneratedRun(
        run_id=run_id,
        events=tuple(logged),
        zombie_event_ids=frozenset(kinds["zombie"]),
        resume_claim_ids=frozenset(kinds["resume"]),
        rejected_claim_ids=frozenset(kinds["rejected"]),
        final_epoch=epoch,
    )


def run_streams() -> st.SearchStrategy[list[LoggedEvent]]:
    """Valid streams of one run as its partition holds them: ``LoggedEvent``s in log order,
    one partition, increasing offsets with gaps where other runs' records sit.

    The run is claimed (epoch 1), started, runs steps (with retries, loops revisiting a step
    path, parallel branches, decisions, artifacts, sub-run reservations, recorded values,
    harness sessions with priced and unpriced model calls, tool calls, agent calls) and may
    crash and be resumed by a higher-epoch claim, after which the fenced writer may still land
    a few events; a late claim with an epoch not above the accepted one may be rejected.
    At most ~60 events.
    """
    return generated_runs().map(lambda run: list(run.events))
