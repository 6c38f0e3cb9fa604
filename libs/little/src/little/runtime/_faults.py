"""Crash hooks: real crashes (SIGKILL) at named points, for crash-testing a workflow.

One object, ``FAULTS``, read from the environment once; the writer calls it when appends are
acked (a claim's too) and the recording code when a model or tool invocation returns. Unset,
each point costs one comparison. It imports nothing of the runtime and never writes anything.
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
        self.after_event = _env_int("LITTLE_CRASH_AFTER_EVENT")
        self.after_call = _env_int("LITTLE_CRASH_AFTER_CALL")
        self.events = 0
        self.calls = 0

    def events_acked(self, count: int) -> None:
        """``count`` events this process appended were acked (a batch, or a claim)."""
        after = self.after_event
        if after is not None and self.events <= after < self.events + count:
            os.kill(os.getpid(), signal.SIGKILL)
        self.events += count

    def call_returned(self) -> None:
        """A model or tool invocation returned (or raised), before its outcome is recorded."""
        if self.after_call is not None and self.calls == self.after_call:
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls += 1


FAULTS = FaultInjection()
"""The process's crash hooks (``LITTLE_CRASH_AFTER_EVENT``, ``LITTLE_CRASH_AFTER_CALL``)."""
