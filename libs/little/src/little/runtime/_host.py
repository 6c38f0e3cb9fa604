"""The host loops: resuming waiting runs whenever one of their waits can end.

``follow`` resumes one run until it ends; ``Waker`` (``little worker``) reads the log as it
grows and resumes every waiting run whose wait can end now. Nothing is held between wake-ups:
a run lets go of itself when it suspends. These loops call the executor; nothing below them
(the run's waits, its execution) calls them.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from functools import partial

from little._world import World
from little.logging_setup import get_logger
from little.replay import MaterializedRunState, fold_run
from little.runtime._execution import RunResult, fold_run_off_loop
from little.runtime._registry import AnyWorkflow
from little.runtime._runner import resume
from little.runtime._waits import utcnow

log = get_logger("little.runtime")


def can_wake(world: World, state: MaterializedRunState, now: datetime) -> bool:
    """Whether a waiting run has a wait that can end now: its own, or a waiting sub-run's
    (a worker thread: sub-runs are folded from the log)."""
    if state.can_wake(now):
        return True
    if state.status != "waiting":
        return False
    for sub in state.sub_runs:  # suspended inside a sub-run: the sub-run is waiting too
        sub_state, _, _ = fold_run(world, sub.sub_run_id)
        if sub_state.status == "waiting" and can_wake(world, sub_state, now):
            return True
    return False


async def follow(
    world: World,
    run_id: str,
    workflow: AnyWorkflow | None = None,
    *,
    poll: float = 0.5,
    hold: float | None = None,
) -> RunResult:
    """Resume ``run_id`` whenever one of its waits can end, until it ends (or a failure):
    sleep until its next due time, and look for the signals it waits for every ``poll``
    seconds. Nothing is held meanwhile: this process may exit, and another (``little
    resume``, ``little worker``, the coordinator) takes the run up. A run another process is
    executing (a worker woke it) is left to it and watched until it ends or waits again; the
    first look resumes a run that is not waiting (to continue it here)."""
    first = True
    while True:
        state = await fold_run_off_loop(world, run_id)
        now = utcnow()
        waiting = state.status == "waiting"
        if (waiting and await asyncio.to_thread(can_wake, world, state, now)) or (
            first and not waiting
        ):
            result = await resume(world, run_id, workflow, hold=hold)
            if result.status != "waiting":
                return result
            first = False
            continue
        if state.terminal:
            return await resume(world, run_id, workflow, hold=hold)  # its outcome, from the log
        # waiting, or executed by another process (a worker that woke it): look again later
        first = False
        pause = poll
        if waiting and state.wake_at is not None:
            pause = min(poll, max(0.0, (state.wake_at - now).total_seconds()))
        await asyncio.sleep(pause)


class Waker:
    """Wakes the waiting runs of a world (``little worker``): reads the log as it grows,
    keeps the top-level runs whose last record says they wait (``RunSuspended``) or may have
    been woken (``SignalSent``), and resumes each one whose wait can end now."""

    def __init__(self, world: World, *, hold: float | None = None) -> None:
        self.world = world
        self.hold = hold
        self._next: dict[int, int] = {}
        self._candidates: set[str] = set()
        self._busy: dict[str, asyncio.Task[RunResult]] = {}

    def _scan(self) -> None:
        """Read what the log gained since the last scan (a worker thread)."""
        log_ = self.world.log
        for partition, end in sorted(log_.end_offsets().items()):
            offset = self._next.get(partition, 0)
            while offset < end:
                batch = log_.read_partition(partition, offset, limit=1000)
                for record in batch:
                    kind = record.header("little.type")
                    if kind in (b"RunSuspended", b"SignalSent"):
                        self._candidates.add(record.run_id.split("~", 1)[0])
                offset = batch[-1].offset + 1 if batch else offset + 1000
            self._next[partition] = max(offset, end)

    def _ready(self, now: datetime) -> tuple[list[str], datetime | None]:
        """The candidates that can go on now, and the earliest due time of the others."""
        self._scan()
        ready: list[str] = []
        next_due: datetime | None = None
        for run_id in sorted(self._candidates):
            state, _, _ = fold_run(self.world, run_id)
            if state.status != "waiting":
                if state.terminal:
                    self._candidates.discard(run_id)
                continue
            if can_wake(self.world, state, now):
                ready.append(run_id)
            elif state.wake_at is not None and (next_due is None or state.wake_at < next_due):
                next_due = state.wake_at
        return ready, next_due

    async def wake_ready(self) -> tuple[list[asyncio.Task[RunResult]], datetime | None]:
        """Resume every waiting run whose wait can end now, each in a task of its own (a run
        that works for an hour after its wake-up delays no other); returns the tasks started
        and the earliest due time among the runs still waiting. A run still executing from an
        earlier wake-up is not resumed again."""
        ready, next_due = await asyncio.to_thread(self._ready, utcnow())
        started: list[asyncio.Task[RunResult]] = []
        for run_id in ready:
            if run_id in self._busy:
                continue
            task = asyncio.ensure_future(resume(self.world, run_id, hold=self.hold))
            self._busy[run_id] = task
            task.add_done_callback(partial(self._woken, run_id))
            started.append(task)
        return started, next_due

    def _woken(self, run_id: str, task: asyncio.Task[RunResult]) -> None:
        self._busy.pop(run_id, None)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("wake_failed", run_id=run_id, error=f"{type(error).__name__}: {error}")
        else:
            log.info("run_woken", run_id=run_id, status=task.result().status)

    async def serve(self, stop: asyncio.Event, *, poll: float = 0.5) -> None:
        """Wake runs until ``stop`` is set: at each due time, and every ``poll`` seconds for
        signals."""
        while not stop.is_set():
            _, next_due = await self.wake_ready()
            pause = poll
            if next_due is not None:
                pause = min(poll, max(0.0, (next_due - utcnow()).total_seconds()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=pause)
        if self._busy:  # the runs it woke go on to their next boundary, then it leaves
            await asyncio.gather(*self._busy.values(), return_exceptions=True)
