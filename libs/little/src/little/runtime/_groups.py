"""Parallel groups: one execution of ``ctx.parallel``'s branches, and how a group drains.

Once a branch fails, every branch of the group (and of the groups inside it) stops at its next
recorded boundary, and the group waits for all of them before it raises the first failure. It
records nothing itself and never imports the author API (``_context``) or the executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from little.runtime._control import ExecutionStopped
from little.runtime._errors import ENDS_THE_WRITER, BranchStopped, ExecutionSuspended


class _Group:
    """One execution of a parallel group: once a branch fails, every branch of it (and of
    the groups inside them) stops at its next recorded boundary (``check``)."""

    __slots__ = ("failed", "parent", "path")

    def __init__(self, path: str, parent: _Group | None) -> None:
        self.path = path
        self.parent = parent
        self.failed: str | None = None
        """The branch whose failure drains the group."""

    def check(self, run_id: str) -> None:
        """Before new work (a step, a group, a sub-run, an agent call, a model or tool call):
        raise ``BranchStopped`` if this group or an enclosing one is draining."""
        group: _Group | None = self
        while group is not None:
            if group.failed is not None:
                raise BranchStopped(run_id, group.path, group.failed)
            group = group.parent


async def drain(
    tasks: list[asyncio.Task[Any]], names: list[str], on_failure: Callable[[str], None]
) -> list[Any]:
    """Await ``tasks`` (one per name) to their end and return their results in order, or
    raise the first failure once every task ended: a failure calls ``on_failure(name)`` (the
    group tells its other branches to stop at their next boundary) and the rest are awaited,
    so whatever they had in flight settles and is logged before the caller goes on. A stop
    (``ExecutionStopped``) or an error that ends the writer (``ENDS_THE_WRITER``) cancels the
    rest at once instead: nothing more can be recorded, and a stop must be prompt. If the
    caller itself is cancelled, so are the tasks."""
    index = {task: i for i, task in enumerate(tasks)}
    first: BaseException | None = None
    suspended: list[ExecutionSuspended] = []
    pending: set[asyncio.Task[Any]] = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for task in sorted(done, key=index.__getitem__):
                exc = None if task.cancelled() else task.exception()
                if exc is None:
                    continue
                if isinstance(exc, (ExecutionStopped, *ENDS_THE_WRITER)):
                    raise exc
                if isinstance(exc, ExecutionSuspended):
                    suspended.append(exc)  # waits: the others go on until they end or wait too
                    continue
                if first is None or (
                    isinstance(first, BranchStopped) and not isinstance(exc, BranchStopped)
                ):
                    first = exc  # a real failure explains more than a stop it caused
                if not isinstance(exc, BranchStopped):
                    on_failure(names[index[task]])
    finally:
        if pending:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    if first is not None:
        raise first
    if suspended:
        raise ExecutionSuspended.merge(suspended[0].run_id, suspended)
    return [task.result() for task in tasks]
