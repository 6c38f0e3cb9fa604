"""The client side of waits: signals and approval decisions sent to a run from outside it.

``SignalSent`` stands outside the run's seq chain, like a claim, and is kept in the run's log
until a wait of that name takes it (the oldest first). A signal is checked against the run as
its log folds (an unknown or finished run, a payload that is not JSON, an approval nobody asked
for is refused, with nothing recorded). It never runs or resumes a run (``_host`` does).
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

from little._canonical import canonical_json
from little._world import World
from little.events import SignalSent
from little.logging_setup import get_logger
from little.replay import MaterializedRunState
from little.runtime._errors import SignalRefusedError
from little.runtime._execution import fold_run_off_loop

log = get_logger("little.runtime")


def sender() -> str:
    return f"{os.environ.get('USER', 'user')}@{socket.gethostname()}"


def check_signal(state: MaterializedRunState, run_id: str, name: str, where: str) -> None:
    """Refuse a signal to a run that cannot take it (``SignalRefusedError``)."""
    if state.last_position is None or state.workflow is None:
        raise SignalRefusedError(f"run {run_id} is unknown in {where}: no signal was recorded")
    if state.terminal:
        raise SignalRefusedError(
            f"run {run_id} has already ended ({state.status}) in {where}: no signal was recorded"
        )
    if not name or name == "approval:":
        raise SignalRefusedError(f"run {run_id}: a signal needs a name")


def check_approval(state: MaterializedRunState, run_id: str, call_id: str, where: str) -> None:
    """Refuse a decision on an approval the run never asked for, or already has."""
    check_signal(state, run_id, f"approval:{call_id}", where)
    asked = [w for w in state.waits if w.kind == "approval" and w.name == call_id]
    if not asked:
        raise SignalRefusedError(
            f"run {run_id} asked for no approval of call {call_id!r} in {where}: "
            "nothing was recorded"
        )
    if all(w.outcome is not None for w in asked) or state.kept_signal(f"approval:{call_id}"):
        raise SignalRefusedError(
            f"run {run_id}: call {call_id!r} was already decided: nothing was recorded"
        )


def payload_json(data: Any) -> str:
    """A signal's payload as canonical JSON (``SignalRefusedError`` if it is not JSON)."""
    try:
        return canonical_json(data)
    except (TypeError, ValueError) as exc:
        raise SignalRefusedError(f"a signal's payload must be JSON: {exc}") from exc


def signal_event(
    run_id: str, name: str, data: Any, *, signal_id: str | None = None, by: str | None = None
) -> SignalSent:
    return SignalSent(
        run_id=run_id,
        name=name,
        payload_json=payload_json(data),
        signal_id=signal_id or str(uuid.uuid4()),
        sender=by or sender(),
    )


def check_decision(run_id: str, name: str, data: Any) -> None:
    """An approval decision is ``{"approved": true|false, ...}``: anything else is refused
    (a payload ``"false"`` or ``{"approved": "no"}`` would otherwise be read one way or the
    other)."""
    if not isinstance(data, dict) or not isinstance(data.get("approved"), bool):
        raise SignalRefusedError(
            f'run {run_id}: {name} needs a decision {{"approved": true|false, "reason": '
            f"...}}, not {payload_json(data)[:80]}: nothing was recorded"
        )


def prepare_signal(
    state: MaterializedRunState,
    run_id: str,
    name: str,
    data: Any = None,
    *,
    where: str,
    signal_id: str | None = None,
    by: str | None = None,
) -> SignalSent:
    """The ``SignalSent`` that delivers ``name`` with ``data`` to the run ``state`` folds, once
    checked: ``SignalRefusedError`` (naming ``where`` the run was looked for) for an unknown or
    finished run, a payload that is not JSON, or an approval (``approval:<call id>``) the run
    never asked for or already has."""
    event = signal_event(run_id, name, data, signal_id=signal_id, by=by)
    if name.startswith("approval:"):
        check_decision(run_id, name, data)
        check_approval(state, run_id, name[len("approval:") :], where)
    else:
        check_signal(state, run_id, name, where)
    return event


async def send_signal(
    world: World,
    run_id: str,
    name: str,
    data: Any = None,
    *,
    signal_id: str | None = None,
    by: str | None = None,
) -> SignalSent:
    """Deliver signal ``name`` with JSON ``data`` to ``run_id``: appended to its log (kept
    until a wait takes it; a run waiting for it can be woken). Raises ``SignalRefusedError``
    for an unknown or finished run or a payload that is not JSON; nothing is recorded then.
    The same ``signal_id`` sent twice is recorded once (the second is ignored by the fold)."""
    state = await fold_run_off_loop(world, run_id)
    event = prepare_signal(
        state, run_id, name, data, where=world.description, signal_id=signal_id, by=by
    )
    await world.submit([event])
    log.info("signal_sent", run_id=run_id, name=name, signal_id=event.signal_id)
    return event


def approval_decision(approved: bool, reason: str = "", by: str | None = None) -> dict[str, Any]:
    """The payload of the signal ``approval:<call id>`` that answers an approval."""
    return {"approved": approved, "reason": reason, "by": by or sender()}


async def decide_approval(
    world: World,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str = "",
    by: str | None = None,
) -> SignalSent:
    """Approve or reject the tool call ``call_id`` a run waits on (``little approve`` /
    ``little reject``): a signal ``approval:<call_id>`` whose payload is the decision."""
    decision = approval_decision(approved, reason, by)
    return await send_signal(world, run_id, f"approval:{call_id}", decision, by=by)
