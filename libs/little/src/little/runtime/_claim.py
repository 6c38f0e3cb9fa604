"""The fencing claim: a writer takes a run by appending ``RunClaimed`` with the next epoch.

The claim is accepted only if its epoch is above every claim accepted before it in the run's
stream; the state up to the claim is folded off the event loop, and the writer continues at the
last accepted seq + 1. It never runs a workflow (``_runner`` does).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket

from little._ids import new_uuid_hex
from little._world import World
from little.errors import RuntimeIntegrityError
from little.events import LoggedEvent, RunClaimed
from little.log import Position
from little.logging_setup import get_logger
from little.replay import MaterializedRunState, materialize_run_state_from_events
from little.runtime._errors import ClaimRejectedError
from little.runtime._execution import fold_run_off_loop
from little.runtime._faults import FAULTS
from little.runtime._writer import RunWriter, producer

log = get_logger("little.runtime")


def default_owner() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{new_uuid_hex()[:6]}"


async def claim(
    world: World,
    run_id: str,
    owner: str,
    state: MaterializedRunState | None = None,
    *,
    fresh: bool = False,
) -> tuple[MaterializedRunState, RunWriter]:
    """Append RunClaimed with the next epoch, then fold the run up to that claim.

    ``state`` is the run as the caller just folded it (folded here if not given). Returns the
    state as of the claim and a writer continuing at the last accepted seq + 1. Raises
    ClaimRejectedError if an earlier claim in the log holds an equal or higher epoch.
    ``fresh=True`` says the run id was made by the caller and never given out (a new uuid),
    so no other writer can know it: the claim is its first record and is accepted, and
    nothing is read back.
    """
    if state is None:
        state = (
            materialize_run_state_from_events([], run_id=run_id)
            if fresh
            else await fold_run_off_loop(world, run_id)
        )
    epoch = state.epoch + 1
    event = RunClaimed(
        run_id=run_id, epoch=epoch, owner=owner, observed_seq=state.last_seq, producer=producer()
    )
    (position,) = await world.submit([event])
    FAULTS.events_acked(1)
    if fresh:
        state = materialize_run_state_from_events(
            [LoggedEvent(event, position.partition, position.offset)], start=state
        )
        log.debug("run_claimed", run_id=run_id, epoch=epoch, owner=owner, fresh=True)
        return state, RunWriter(world, run_id, epoch, state.last_seq + 1)
    state = await asyncio.to_thread(_fold_up_to_claim, world, run_id, owner, state, position, epoch)
    log.debug("run_claimed", run_id=run_id, epoch=epoch, owner=owner, last_seq=state.last_seq)
    return state, RunWriter(world, run_id, epoch, state.last_seq + 1)


def _fold_up_to_claim(
    world: World,
    run_id: str,
    owner: str,
    state: MaterializedRunState,
    position: Position,
    epoch: int,
) -> MaterializedRunState:
    """Read the run after ``state`` up to our claim at ``position`` and fold it (a worker
    thread); raise ClaimRejectedError if the claim was not accepted."""
    after = (
        Position(state.last_position.partition, state.last_position.offset)
        if state.last_position is not None
        else None
    )
    upto = list(
        itertools.takewhile(
            lambda logged: logged.offset <= position.offset, world.read_run(run_id, after=after)
        )
    )
    if not upto or upto[-1].offset != position.offset:
        raise RuntimeIntegrityError(
            f"run {run_id}: the claim appended at offset {position.offset} is not in its stream"
        )
    # Accepted only if its epoch is above everything accepted before it: a claim of the same
    # epoch that landed first wins (comparing the epoch after the fold cannot tell them apart).
    before = materialize_run_state_from_events(upto[:-1], start=state)
    if before.epoch >= epoch:
        raise ClaimRejectedError(
            f"run {run_id}: claim at epoch {epoch} by {owner} was rejected; {before.owner} holds "
            f"epoch {before.epoch}"
        )
    return materialize_run_state_from_events(upto[-1:], start=before)
