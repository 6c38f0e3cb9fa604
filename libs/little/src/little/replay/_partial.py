"""Partial replay (seed 004): fold a run from a cursor, one event at a time, and say what each
event changed in the state. For debugging a failed session step by step; reads only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from little.events import LoggedEvent, RunClaimed, SignalSent
from little.replay._fold import materialize_run_state_from_events
from little.replay._state import MaterializedRunState

_KEYS: dict[str, tuple[str, ...]] = {
    "steps": ("step_path",),
    "sessions": ("session_id",),
    "turns": ("turn",),
    "tool_calls": ("call_id",),
    "parallel_groups": ("group_path",),
    "sub_runs": ("sub_run_id",),
    "values": ("step_path", "ordinal"),
    "artifacts": ("step_path", "name"),
    "agent_calls": ("ordinal",),
}
"""How the items of a state's collections are named in a diff (else by their index)."""
_QUIET = {"last_seq", "last_event_id", "last_position", "events_applied", "recent_event_ids"}
"""Fields every event moves: left out of a diff (the event's own line says them)."""


def accepted_events(events: Iterable[LoggedEvent]) -> list[LoggedEvent]:
    """A run's accepted events in log order: the claims that won, and the events of their
    writers (a fenced writer's events are not part of the run's history, nor a copy of an
    accepted event: the same ``event_id`` at the same seq), and the signals sent to it (outside
    the seq chain; one per signal id)."""
    epoch, out = 0, []
    ids: dict[int, str] = {}
    signals: set[str] = set()
    for item in events:
        e = item.event
        if isinstance(e, RunClaimed):
            if e.epoch > epoch:
                epoch = e.epoch
                out.append(item)
        elif isinstance(e, SignalSent):
            if e.signal_id not in signals:
                signals.add(e.signal_id)
                out.append(item)
        elif e.epoch >= epoch and ids.get(e.seq) != e.event_id:
            ids.setdefault(e.seq, e.event_id)
            out.append(item)
    return out


def _key(collection: str, item: Any, index: int) -> str:
    fields = _KEYS.get(collection.rsplit(".", 1)[-1].split("]")[-1].lstrip("."))
    if fields and isinstance(item, dict) and all(item.get(f) is not None for f in fields):
        return "/".join(str(item[f]) for f in fields)
    return str(index)


def _keyed(path: str, items: list[Any]) -> dict[str, Any]:
    """Items by key; by index when keys repeat (an artifact name committed on every visit)."""
    keys = [_key(path, item, i) for i, item in enumerate(items)]
    if len(set(keys)) < len(keys):
        keys = [str(i) for i in range(len(items))]
    return dict(zip(keys, items, strict=True))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _diff(path: str, before: Any, after: Any, out: list[str]) -> None:
    if before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for field in after.keys() | before.keys():
            if path == "" and field in _QUIET:
                continue
            _diff(f"{path}.{field}" if path else field, before.get(field), after.get(field), out)
        return
    if isinstance(before, list) and isinstance(after, list):
        old = _keyed(path, before)
        new = _keyed(path, after)
        for key in new:
            if key not in old:
                out.append(f"+ {path}[{key}]")
            else:
                _diff(f"{path}[{key}]", old[key], new[key], out)
        out.extend(f"- {path}[{key}]" for key in old if key not in new)
        return
    out.append(f"{path}: {_short(before)} -> {_short(after)}")


def state_changes(before: MaterializedRunState, after: MaterializedRunState) -> list[str]:
    """What changed from ``before`` to ``after``, one line each: ``field: old -> new``, ``+
    steps[path]`` for an item added (collections are keyed by their item's path, session,
    ordinal, turn or call id), nested as ``sessions[id].turns[2].status: ...``."""
    out: list[str] = []
    _diff("", before.model_dump(mode="json"), after.model_dump(mode="json"), out)
    return sorted(out, key=lambda line: line.lstrip("+- "))


@dataclass(frozen=True)
class AppliedEvent:
    """One event of a partial replay and what it changed."""

    event: LoggedEvent
    changes: tuple[str, ...]
    before: MaterializedRunState
    """The state before it."""
    state: MaterializedRunState
    """The state after it."""

    @property
    def accepted(self) -> bool:
        """A claim that won, or an event of the writer that holds the run (not a zombie's)."""
        e = self.event.event
        if e.seq == -1:
            return self.state.epoch != self.before.epoch
        return self.state.last_seq != self.before.last_seq


def step_through(
    events: Iterable[LoggedEvent],
    run_id: str,
    *,
    from_seq: int = 0,
    to_seq: int | None = None,
    start: MaterializedRunState | None = None,
    from_offset: int | None = None,
) -> Iterator[AppliedEvent]:
    """Fold ``events`` (one run's, in log order, after ``start`` if given: a snapshot's state
    and the events after it) in one go up to the accepted event ``from_seq``, then yield every
    event from it through the accepted event ``to_seq`` with the state change it caused.

    Only accepted events bound the range (a fenced writer's events inside it are yielded, with
    no change, but never start or end it); a claim inside the range is yielded too (it changes
    the epoch and the owner), one right after ``to_seq`` is not. ``from_offset`` (a partition
    offset: a run's events are all in its partition) starts at the first accepted event at or
    after that offset instead of at ``from_seq``."""
    state = start if start is not None else MaterializedRunState(run_id=run_id)
    prefix: list[LoggedEvent] = []
    stepping = False
    epoch = state.epoch
    for item in events:
        e = item.event
        accepted = e.epoch > epoch if e.seq == -1 else e.epoch >= epoch
        if e.seq == -1 and accepted:
            epoch = e.epoch
        if not stepping:
            begins = e.seq >= from_seq if from_offset is None else item.offset >= from_offset
            if not (accepted and e.seq >= 0 and begins):
                prefix.append(item)  # claims and zombies before the range's first event
                continue
            state = materialize_run_state_from_events(prefix, start=state) if prefix else state
            stepping = True
        after = materialize_run_state_from_events([item], start=state)
        yield AppliedEvent(item, tuple(state_changes(state, after)), state, after)
        state = after
        if to_seq is not None and accepted and e.seq >= to_seq:
            return
