"""One API for every replay mode of seed 004: ``await little.replay_in_mode(world, run_id, mode=...)``.

=====================  =====================================================================
mode                   what it does
=====================  =====================================================================
inference-skipping     the run's state, sessions and artifacts rebuilt from its recorded
                       responses: no model, tool, network or key (``ReplayResult``)
partial                the fold from a cursor (a seq, a partition offset, or the run's
                       snapshot) to the end or a target seq, each event with the state change
                       it caused (``PartialReplay``)
projection-only        the run's projection folded from its log, or every run's
                       (``ProjectionReplay``); the projector's own rebuild is
                       ``little projections rebuild`` (little-services)
full                   a NEW run of the workflow against the recorded one, with its input and
                       budgets: every model call live, each session asking its own model
                       unless ``model`` names another (for every session, or by session
                       name: ``["researcher=anthropic:<id>"]``), every tool call answered
                       from the recorded run's receipts unless ``live_tools`` (``RunResult``)
simulate               the workflow re-executed with every model call served from a golden
                       run (a run id or a golden file) and every tool call that is not
                       side-effecting run again, compared with it (``Simulation``)
=====================  =====================================================================

Only ``full`` writes (its new run); the others read the log. The name is not
``little.replay``: that is the package of the pure fold, which does no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from little.errors import ConfigurationError, LittleError
from little.events import LoggedEvent
from little.replay import (
    AppliedEvent,
    MaterializedRunState,
    ReplayResult,
    load_snapshot,
    materialize_run_state_from_events,
    replay_run,
    step_through,
)

if TYPE_CHECKING:
    from little._world import World
    from little.golden import GoldenRun
    from little.runtime import RunResult, Simulation, Workflow

    AnyWorkflow = Workflow[..., Any]

__all__ = ["REPLAY_MODES", "PartialReplay", "ProjectionReplay", "ReplayMode", "replay_in_mode"]

ReplayMode = Literal["inference-skipping", "partial", "projection-only", "full", "simulate"]
REPLAY_MODES: tuple[ReplayMode, ...] = (
    "inference-skipping",
    "partial",
    "projection-only",
    "full",
    "simulate",
)


@dataclass(frozen=True)
class PartialReplay:
    """``mode="partial"``: the events applied from the cursor, each with its state change."""

    run_id: str
    applied: tuple[AppliedEvent, ...]
    cursor: str
    """Where the fold began: ``seq N``, ``offset P:O`` or ``snapshot at P:O``."""

    @property
    def state(self) -> MaterializedRunState | None:
        """The state after the last event applied (None when none was)."""
        return self.applied[-1].state if self.applied else None


@dataclass(frozen=True)
class ProjectionReplay:
    """``mode="projection-only"``: run states folded from the log, with nothing executed."""

    states: tuple[MaterializedRunState, ...]
    unreadable: tuple[tuple[str, str], ...] = ()
    """``(run id, why)`` of each run whose log could not be folded (the others still were)."""
    events_folded: int = 0


@overload
async def replay_in_mode(
    world: World,
    run_id: str,
    *,
    mode: Literal["inference-skipping"] = ...,
    use_snapshot: bool | None = ...,
) -> ReplayResult: ...


@overload
async def replay_in_mode(
    world: World,
    run_id: str,
    *,
    mode: Literal["partial"],
    from_seq: int = ...,
    from_offset: int | None = ...,
    from_snapshot: bool = ...,
    to_seq: int | None = ...,
) -> PartialReplay: ...


@overload
async def replay_in_mode(
    world: World,
    run_id: str | None,
    *,
    mode: Literal["projection-only"],
    use_snapshot: bool | None = ...,
) -> ProjectionReplay: ...


@overload
async def replay_in_mode(
    world: World,
    run_id: str,
    *,
    mode: Literal["full"],
    model: str | Sequence[str] | Mapping[str, str] | None = ...,
    workflow: AnyWorkflow | None = ...,
    live_tools: bool = ...,
    new_run_id: str | None = ...,
) -> RunResult: ...


@overload
async def replay_in_mode(
    world: World | None,
    run_id: str | Path | GoldenRun,
    *,
    mode: Literal["simulate"],
    workflow: AnyWorkflow | None = ...,
) -> Simulation: ...


async def replay_in_mode(
    world: World | None,
    run_id: str | Path | GoldenRun | None,
    *,
    mode: ReplayMode = "inference-skipping",
    use_snapshot: bool | None = None,
    from_seq: int = 0,
    from_offset: int | None = None,
    from_snapshot: bool = False,
    to_seq: int | None = None,
    model: str | Sequence[str] | Mapping[str, str] | None = None,
    workflow: AnyWorkflow | None = None,
    live_tools: bool = False,
    new_run_id: str | None = None,
) -> ReplayResult | PartialReplay | ProjectionReplay | RunResult | Simulation:
    """Replay ``run_id`` of ``world`` in ``mode`` (see the module's table). Every fold runs
    off the event loop. Options that belong to another mode are refused
    (``ConfigurationError``), never ignored."""
    if mode not in REPLAY_MODES:
        raise ConfigurationError(f"replay mode {mode!r} is not one of {', '.join(REPLAY_MODES)}")
    if use_snapshot is not None and mode not in ("inference-skipping", "projection-only"):
        raise ConfigurationError("use_snapshot is for modes inference-skipping and projection-only")
    snapshot = True if use_snapshot is None else use_snapshot
    _only(
        mode,
        partial=bool(from_seq) or from_offset is not None or from_snapshot or to_seq is not None,
        full=model is not None or live_tools or new_run_id is not None,
        workflow=workflow is not None,
    )
    if mode == "simulate":
        from little.runtime import simulate

        if workflow is None:
            workflow = await asyncio.to_thread(_workflow_of, world, run_id)
        if world is None and isinstance(run_id, str) and not _is_file(run_id):
            raise ConfigurationError(f"simulate {run_id!r}: a run id needs a world to read it from")
        return await simulate(world, workflow, run_id)  # type: ignore[arg-type]
    if world is None:
        raise ConfigurationError(f"replay mode {mode} reads a world: none was given")
    if mode == "projection-only":
        if run_id is not None and not isinstance(run_id, str):
            raise ConfigurationError("projection-only replays a run id, or every run (None)")
        return await asyncio.to_thread(_projections, world, run_id, snapshot)
    if not isinstance(run_id, str):
        raise ConfigurationError(f"replay mode {mode} replays a run id, not {run_id!r}")
    if mode == "inference-skipping":
        result = await asyncio.to_thread(replay_run, world, run_id, use_snapshot=snapshot)
        if not result.found:
            raise LittleError(f"run {run_id} has no events in {world.description}")
        return result
    if mode == "partial":
        return await asyncio.to_thread(
            _partial, world, run_id, from_seq, from_offset, from_snapshot, to_seq
        )
    # full
    from little.runtime import FullReplay, run

    full = FullReplay(model, live_tools=live_tools)  # a malformed model is refused first
    if workflow is None:
        workflow = await asyncio.to_thread(_workflow_of, world, run_id)
    return await run(world, workflow, run_id=new_run_id, replay_from=run_id, full_replay=full)


def _only(mode: ReplayMode, *, partial: bool, full: bool, workflow: bool) -> None:
    if partial and mode != "partial":
        raise ConfigurationError(
            "from_seq, from_offset, from_snapshot and to_seq are for mode partial"
        )
    if full and mode != "full":
        raise ConfigurationError("model, live_tools and new_run_id are for mode full")
    if workflow and mode not in ("full", "simulate"):
        raise ConfigurationError("workflow is for modes full and simulate")


def _is_file(name: str) -> bool:
    return name.endswith(".avro") or Path(name).is_file()


def _workflow_of(world: World | None, source: object) -> AnyWorkflow:
    """The registered workflow (and version) the recorded run started on."""
    from little.runtime import lookup

    if isinstance(source, str) and not _is_file(source):
        if world is None:
            raise ConfigurationError(f"run {source}: no world to read it from")
        from little.replay import fold_run

        state, _, _ = fold_run(world, source)
        if state.workflow is None:
            raise LittleError(f"run {source} has no RunStarted in {world.description}")
        return lookup(state.workflow, state.workflow_version, run_id=source)
    from little.golden import GoldenRun, read_golden

    golden = source if isinstance(source, GoldenRun) else read_golden(Path(str(source)))
    if golden.workflow is None:
        raise LittleError(f"golden run {golden.run_id} has no RunStarted: nothing to simulate")
    return lookup(golden.workflow, golden.workflow_version, run_id=golden.run_id)


def _partial(
    world: World,
    run_id: str,
    from_seq: int,
    from_offset: int | None,
    from_snapshot: bool,
    to_seq: int | None,
) -> PartialReplay:
    if sum((bool(from_seq), from_offset is not None, from_snapshot)) > 1:
        raise ConfigurationError("choose one cursor: from_seq, from_offset or from_snapshot")
    if to_seq is not None and to_seq < from_seq:
        raise ConfigurationError(f"to_seq {to_seq} is before from_seq {from_seq}")
    start: MaterializedRunState | None = None
    cursor = f"offset {from_offset}" if from_offset is not None else f"seq {from_seq}"
    if from_snapshot:
        snapshot = load_snapshot(world, run_id)
        if snapshot is None:
            raise LittleError(f"run {run_id} has no usable snapshot in {world.description}")
        pos = snapshot.position
        from little.log import Position

        rows: Sequence[LoggedEvent] = list(
            world.read_run(run_id, after=Position(partition=pos.partition, offset=pos.offset))
        )
        start = snapshot.state
        cursor = f"snapshot at {pos.partition}:{pos.offset} (seq {snapshot.state.last_seq})"
        if to_seq is not None and to_seq <= snapshot.state.last_seq:
            raise ConfigurationError(
                f"to_seq {to_seq} is at or before run {run_id}'s snapshot (seq "
                f"{snapshot.state.last_seq})"
            )
    else:
        rows = list(world.read_run(run_id))
        if not rows:
            raise LittleError(f"run {run_id} has no events in {world.description}")
    applied = tuple(
        step_through(
            rows, run_id, from_seq=from_seq, to_seq=to_seq, start=start, from_offset=from_offset
        )
    )
    if not applied and not from_snapshot:
        final = materialize_run_state_from_events(rows, run_id=run_id).last_seq
        raise LittleError(f"run {run_id}: no event from {cursor} (its last is seq {final})")
    return PartialReplay(run_id, applied, cursor)


def _projections(world: World, run_id: str | None, use_snapshot: bool) -> ProjectionReplay:
    from little.replay import fold_run

    if run_id is not None:
        state, _, folded = fold_run(world, run_id, use_snapshot=use_snapshot)
        if state.last_position is None:
            raise LittleError(f"run {run_id} has no events in {world.description}")
        return ProjectionReplay((state,), events_folded=folded)
    states: list[MaterializedRunState] = []
    unreadable: list[tuple[str, str]] = []
    total = 0
    for rid in world.run_ids():
        try:
            state, _, folded = fold_run(world, rid, use_snapshot=use_snapshot)
        except LittleError as exc:  # one broken run does not hide the others
            unreadable.append((rid, str(exc)))
            continue
        states.append(state)
        total += folded
    return ProjectionReplay(tuple(states), tuple(unreadable), total)
