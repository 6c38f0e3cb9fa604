"""Supervising an execution from outside: stop or cancel it at its next event boundary.

A supervisor (the resume coordinator) hands a ``RunControl`` to ``execute``. Once a stop is
requested, the next event the run appends still lands (so a model or tool result that was in
flight is recorded and never paid for again), then the execution raises ``ExecutionStopped``
and appends nothing more; a cancel records ``RunCancelled`` first. Without a control, or until
something is requested, nothing changes.
"""

from __future__ import annotations

from little.errors import RunInterrupt


class ExecutionStopped(RunInterrupt):
    """An execution stopped at an event boundary because its supervisor asked.

    Not a failure: the run stays as its log says, for its next owner to resume, unless the
    stop was a cancel (``cancelled``), in which case ``RunCancelled`` was recorded first.
    Retryable: executing the run again continues it (or, after a cancel, finds it cancelled).
    An interrupt (``RunInterrupt``), so a workflow's ``except Exception`` does not catch it.
    """

    retryable = True

    def __init__(self, run_id: str, reason: str, *, cancelled: bool) -> None:
        kind = "cancelled" if cancelled else "stopped"
        super().__init__(f"run {run_id} {kind} at an event boundary: {reason}")
        self.run_id = run_id
        self.reason = reason
        self.cancelled = cancelled


class RunControl:
    """Stop/cancel requests for one execution (and the sub-runs it executes inline).

    Thread-safe enough for its use: flags are set from the supervisor's event loop and read by
    the run's writer on the same loop between appends.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self.cancelled = False
        self.halted = False
        """Set once the execution reached its boundary: every later append is refused."""
        self.served_calls = 0
        """Model calls the execution (and its sub-runs) answered from the log, so far."""
        self.reinvoked_calls = 0
        """Model calls it invoked again because the log held their request and no answer
        (in flight when the previous writer stopped), so far: counted however it ends."""

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def stop(self, reason: str) -> None:
        """Stop at the next event boundary and leave the run for its next owner."""
        if self.reason is None:
            self.reason = reason

    def cancel(self, reason: str) -> None:
        """Stop at the next event boundary and record ``RunCancelled``."""
        self.cancelled = True
        self.reason = reason

    def stopped(self, run_id: str) -> ExecutionStopped:
        return ExecutionStopped(run_id, self.reason or "", cancelled=self.cancelled)
