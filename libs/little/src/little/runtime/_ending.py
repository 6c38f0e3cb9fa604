"""Ending a run its host cannot execute: parked for a host that can, or failed for good.

A host (the resume coordinator) that lacks a run's workflow or version records why through
``end_unrunnable``, which claims the run (fencing any writer) and appends ``RunParked`` or
``RunFailed``; a host never writes a run's ending events itself (a signal it delivers is
the client side's ``SignalSent``). It must never execute the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from little._world import World
from little.events import RunFailed, RunParked
from little.runtime._claim import claim
from little.runtime._execution import fold_run_off_loop

__all__ = ["FailRun", "ParkRun", "end_unrunnable"]


@dataclass(frozen=True)
class ParkRun:
    """Leave the run for a host that has its code (``RunParked``: not terminal)."""

    reason: str
    workflow: str | None = None
    workflow_version: str | None = None


@dataclass(frozen=True)
class FailRun:
    """End the run (``RunFailed``, not retryable): no host will have its code."""

    error_type: str
    message: str


async def end_unrunnable(world: World, run_id: str, owner: str, ending: ParkRun | FailRun) -> str:
    """Claim ``run_id`` as ``owner`` and record ``ending``. Returns ``"parked"`` or
    ``"failed"``, or the run's status if it had ended already (then nothing is written)."""
    state = await fold_run_off_loop(world, run_id)
    if state.terminal:
        return state.status
    state, writer = await claim(world, run_id, owner, state)
    if state.terminal:
        return state.status
    if isinstance(ending, ParkRun):
        await writer.emit(
            RunParked,
            reason=ending.reason,
            workflow=ending.workflow,
            workflow_version=ending.workflow_version,
        )
        return "parked"
    await writer.emit(
        RunFailed, error_type=ending.error_type, message=ending.message, retryable=False
    )
    return "failed"
