"""Crash hooks: real crashes (SIGKILL) at named points, for crash-testing a workflow.

One object, ``FAULTS``, read from the environment at its first use (not when ``little`` is
imported: a process forked after the import, or one that sets the variables before its first
run, crashes as it asks) and again in a forked child, which counts from zero; the writer calls
it when appends are acked (a claim's too) and the recording code when a model or tool
invocation returns. Unset, each point costs one comparison. It imports nothing of the runtime
and never writes anything.
"""

from __future__ import annotations

import os
import signal


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


class FaultInjection:
    """Real crashes for crash tests: SIGKILL this process at a chosen point.

    ``LITTLE_CRASH_AFTER_EVENT=k``: right after the k-th event (0-based) this process appends
    is acked (counted over every run of the process, in ack order). ``LITTLE_CRASH_AFTER_CALL=n``:
    right after the n-th model or tool invocation (0-based) returns, before its terminal event
    is written. Unset in normal use.
    """

    def __init__(self) -> None:
        self._read = False
        self.after_event: int | None = None
        self.after_call: int | None = None
        self.events = 0
        self.calls = 0

    def reset(self) -> None:
        """Forget what was read and counted: the next point reads the environment again."""
        self._read = False
        self.events = self.calls = 0

    def _read_environment(self) -> None:
        self.after_event = _env_int("LITTLE_CRASH_AFTER_EVENT")
        self.after_call = _env_int("LITTLE_CRASH_AFTER_CALL")
        self._read = True

    def events_acked(self, count: int) -> None:
        """``count`` events this process appended were acked (a batch, or a claim)."""
        if not self._read:
            self._read_environment()
        after = self.after_event
        if after is not None and self.events <= after < self.events + count:
            os.kill(os.getpid(), signal.SIGKILL)
        self.events += count

    def call_returned(self) -> None:
        """A model or tool invocation returned (or raised), before its outcome is recorded."""
        if not self._read:
            self._read_environment()
        if self.after_call is not None and self.calls == self.after_call:
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls += 1


FAULTS = FaultInjection()
"""The process's crash hooks (``LITTLE_CRASH_AFTER_EVENT``, ``LITTLE_CRASH_AFTER_CALL``)."""
os.register_at_fork(after_in_child=FAULTS.reset)
