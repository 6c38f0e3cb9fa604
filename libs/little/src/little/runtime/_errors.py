"""Errors of the runtime (subclasses of little's root error; drawn in ``little.errors``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TypeVar

from little.errors import (
    ConfigurationError,
    LittleError,
    LogError,
    RunInterrupt,
    RuntimeIntegrityError,
)


class ClaimRejectedError(LittleError):
    """Another writer claimed the run first with an equal or higher epoch: back off. Retryable:
    once that writer ends or stalls, the next claim (a higher epoch) is accepted."""

    retryable = True


class RunNotStartedError(LittleError):
    """The run's log has no ``RunStarted`` (no events, or only a claim) and no workflow was
    given: there is no workflow or input to resume. Terminal: resuming it again changes
    nothing until someone starts it with its workflow and input (same run id)."""

    retryable = False

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class UnknownWorkflowError(ConfigurationError):
    """No workflow of this name is registered in this process. Terminal.

    A ``ConfigurationError`` (and so a ``ValueError``), as ``lookup`` raised before it had a
    class of its own: the log is fine and the run could execute, but this process was not
    configured with its code. The fix is registering the workflow (importing the module that
    declares it), not waiting. ``run_id`` is the run that needed it (None for a bare lookup).
    """

    def __init__(
        self,
        workflow: str,
        known: Iterable[str],
        *,
        run_id: str | None = None,
        where: str = "this process",
        hint: str = "import the module that declares it (its @workflow registers it)",
    ) -> None:
        self.workflow = workflow
        self.known = tuple(sorted(known))
        self.run_id = run_id
        run = f"run {run_id}; " if run_id is not None else ""
        super().__init__(
            f"workflow {workflow!r} is not registered in {where} "
            f"({run}known: {', '.join(self.known) or 'none'}); {hint}"
        )


class StepFailedError(LittleError):
    """A step failed after its last attempt. Terminal for that step."""

    retryable = False

    def __init__(self, step_path: str, error: BaseException) -> None:
        super().__init__(f"step {step_path} failed: {type(error).__name__}: {error}")
        self.step_path = step_path
        self.error = error


class SubRunFailedError(LittleError):
    """A sub-run ended without completing (``status`` failed or cancelled). Terminal: its end
    is in its own log, so executing it again returns the same end.

    ``run_id`` is the parent, ``sub_run_id`` the child, ``error`` the child's recorded error.
    """

    retryable = False

    def __init__(
        self, run_id: str, sub_run_id: str, workflow: str, status: str, error: str | None
    ) -> None:
        super().__init__(f"run {run_id}: sub-run {sub_run_id} ({workflow}) {status}: {error}")
        self.run_id = run_id
        self.sub_run_id = sub_run_id
        self.workflow = workflow
        self.status = status
        self.error = error


class BudgetExceededError(LittleError):
    """A run's cap on fresh agent calls or tokens would be exceeded. Terminal."""

    retryable = False


class PanelMixedError(LittleError):
    """A panel's legs, before the replay's divergence point, were some recorded and some
    fresh: one panel never mixes recorded and live answers, so the run ends, even if the
    workflow catches it (``INTEGRITY``). Terminal: the same record and the same workflow make
    the same mix."""

    retryable = False


class BranchStopped(RunInterrupt):
    """A parallel branch stopped at a recorded boundary because a sibling branch (of its
    group or of an enclosing one) failed: the group drains, and no branch starts new work.
    Never the error a run ends with (the group raises the sibling's). Terminal. An interrupt
    (``RunInterrupt``): a branch's ``except Exception`` does not catch it."""

    retryable = False

    def __init__(self, run_id: str, group_path: str, failed_branch: str) -> None:
        super().__init__(
            f"run {run_id}: stopped before new work: branch {failed_branch!r} of parallel "
            f"group {group_path} failed"
        )
        self.run_id = run_id
        self.group_path = group_path
        self.failed_branch = failed_branch


class OutputValidationError(LittleError):
    """An agent call asked for structured output (``output=``) and the model's answer did
    not validate, after every retry it was given (``output_retries``). Terminal: the call is
    recorded as failed; the workflow may catch it."""

    retryable = False

    def __init__(self, message: str, *, schema: str, error: str) -> None:
        super().__init__(message)
        self.schema = schema
        self.error = error


class LoopLimitError(LittleError):
    """A step was visited more often than its ``max_visits``. Terminal."""

    retryable = False


class SessionDivergedError(RuntimeIntegrityError):
    """A resumed session built a different request than the one its log recorded."""


class SimulationDivergedError(RuntimeIntegrityError):
    """A simulated run (``little.runtime.simulate``) needed what its golden run cannot serve:
    a model call (``miss_reason`` says why the record has none), a fresh value, a sub-run the
    golden run did not start, or a request built otherwise than it recorded.
    Raised before anything is invoked."""

    def __init__(
        self,
        message: str,
        *,
        ordinal: int | None,
        miss_reason: str | None,
        place: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.ordinal = ordinal
        self.miss_reason = miss_reason
        self.place = place
        """The call's scope and rank in it: where the golden run's call would be."""

    def inside(self, scope: str, call_id: str, label: str) -> SimulationDivergedError:
        """This divergence of a sub-run, as its parent sees it: said to be in the sub-run
        started at ``call_id`` from workflow scope ``scope``, its place in the sub-run's
        scope as the parent's trace names it (``sub_run_scope``)."""
        inner = self.place if self.place is not None else ("", 0)
        return SimulationDivergedError(
            f"{label}: {self}",
            ordinal=None,  # the sub-run's ordinals are not the parent's
            miss_reason=self.miss_reason,
            place=(sub_run_scope(scope, call_id) + inner[0], inner[1]),
        )


SUB_RUN = "\x1f"
"""Separates a sub-run's scopes from its parent's in a simulation's trace (a character no step
name or call id holds)."""


def sub_run_scope(scope: str, call_id: str) -> str:
    """The scope a sub-run started at ``call_id`` from workflow scope ``scope`` stands for in
    its parent's trace: its own scopes are written after it."""
    return f"{scope}{SUB_RUN}{call_id}{SUB_RUN}"


class WorkflowVersionError(RuntimeIntegrityError):
    """The run was started by a version of its workflow that is not the one given, and not
    registered in this process (or a new run found only ``resume_only`` versions).

    ``workflow`` and ``version`` are what the run needs (``version`` None: any version a new
    run may use), ``registered`` the versions of that name registered here, ``run_id`` the
    run (None for a bare lookup). Terminal here: the fix is deploying that version again.
    """

    def __init__(
        self,
        message: str,
        *,
        workflow: str | None = None,
        version: str | None = None,
        registered: Iterable[str] = (),
        run_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.workflow = workflow
        self.version = version
        self.registered = tuple(registered)
        self.run_id = run_id


class PatchDeprecatedError(LittleError):
    """A run recorded without a patch's marker reached ``deprecate_patch`` of that patch: it
    took the old path there, which the code no longer has. Terminal: the run fails (keep
    ``if ctx.patched(...)`` with the old path until such runs end)."""

    retryable = False

    def __init__(self, run_id: str, patch_id: str, scope: str) -> None:
        super().__init__(
            f"run {run_id} passed patch {patch_id!r} (in {scope}) before the patch existed, "
            f"so it took the old path there, and this code has only the new one "
            f"(deprecate_patch({patch_id!r})): keep `if ctx.patched({patch_id!r}): ... else: "
            "<the old path>` until the runs recorded without it have ended"
        )
        self.run_id = run_id
        self.patch_id = patch_id
        self.scope = scope


class ExecutionSuspended(RunInterrupt):
    """The execution let go of its run until a durable wait can end (a timer not due yet, a
    signal or an approval not sent yet): ``RunSuspended`` is recorded and the run is
    ``waiting``, held by nobody. Not a failure; retryable: executing the run again once a wait
    can end (``wake_at`` passed, a signal arrived) continues it. An interrupt
    (``RunInterrupt``): a workflow's ``except Exception`` does not catch it, so it cannot go on
    past a wait that never ended."""

    retryable = True

    def __init__(self, run_id: str, wake_at: datetime | None, waiting_for: tuple[str, ...]) -> None:
        due = f" until {wake_at.isoformat()}" if wake_at is not None else ""
        super().__init__(f"run {run_id} waits for {', '.join(waiting_for)}{due}")
        self.run_id = run_id
        self.wake_at = wake_at
        self.waiting_for = waiting_for

    @classmethod
    def merge(cls, run_id: str, suspended: Iterable[ExecutionSuspended]) -> ExecutionSuspended:
        """One suspension for waits of several branches: the earliest due time, every wait."""
        items = list(suspended)
        due = [s.wake_at for s in items if s.wake_at is not None]
        labels = tuple(dict.fromkeys(label for s in items for label in s.waiting_for))
        return cls(run_id, min(due) if due else None, labels)


class WaitTimeoutError(LittleError, TimeoutError):
    """A signal or an approval was not sent before the wait's timeout: the workflow may catch
    it. Terminal (the timeout is recorded: a resume raises it again)."""

    retryable = False

    def __init__(self, run_id: str, kind: str, name: str, scope: str | None) -> None:
        super().__init__(
            f"run {run_id}: {kind} {name!r} of {scope or 'the run'} was not sent before its timeout"
        )
        self.run_id = run_id
        self.kind = kind
        self.name = name


class SignalRefusedError(ConfigurationError):
    """A signal (or an approval decision) that cannot be delivered: an unknown or finished
    run, a malformed payload, an approval nobody asked for. Nothing was recorded. Terminal."""


ENDS_THE_WRITER: tuple[type[LittleError], ...] = (
    LogError,
    ClaimRejectedError,
    RuntimeIntegrityError,
)
"""Errors, not interrupts, after which an execution records nothing more and leaves the run as
its log says, for its next owner: the log failed (an append's outcome unknown), another writer
claimed the run (a sub-run's claim), the log cannot stand in for the run. They are failures
of the execution, which the resume coordinator retries or parks by ``retryable``, so they stay
``Exception``s; no step records them as its failure, and a draining group does not wait."""

ENDS_THE_RUN: tuple[type[LittleError], ...] = (
    *ENDS_THE_WRITER,
    BudgetExceededError,
    PanelMixedError,
    PatchDeprecatedError,
)
"""``ENDS_THE_WRITER``, and the errors that fail the run as themselves: a spent budget, a panel
mixing recorded and fresh legs, a run on a deprecated patch's old path. A step or a tool never
records one as its own failure, nor retries it: every attempt would meet the same one."""

INTEGRITY: tuple[type[LittleError], ...] = (RuntimeIntegrityError, PanelMixedError)
"""The errors that finish an execution whatever its workflow does with them: the log cannot
stand in for the run (a diverged session, a drifted manifest, a changed branch set, a damaged
artifact, ...), or a panel would mix recorded and fresh answers. The first one an execution
meets is latched on it (``Execution.integrity``): every later step, agent call, model turn,
tool call, wait, sub-run and recorded value refuses with it, its writer appends nothing more
but the run's end, and the run ends by it when the workflow returns, raises something else,
or waits. An ``except`` in the workflow can catch it, but cannot go on past it."""


_E = TypeVar("_E", bound=BaseException)


def raised_again(error: _E) -> _E:
    """A copy of the latched ``error`` to raise again (the same type, arguments and attributes;
    ``latched_error`` of it is ``error``): raising one object again and again grows its
    traceback by every raise. Raise it ``from error``, which keeps where it was first met."""
    copy = type(error).__new__(type(error), *error.args)
    copy.__dict__.update(error.__dict__)
    copy.__dict__["_little_latched"] = latched_error(error)
    return copy


def latched_error(error: BaseException) -> BaseException:
    """The error ``error`` is a copy of (``raised_again``), or ``error`` itself."""
    original = error.__dict__.get("_little_latched")
    return original if isinstance(original, BaseException) else error


CONTROL_ERRORS: tuple[type[LittleError], ...] = ENDS_THE_RUN
"""What an agent framework's own error handling (a fallback model, an ``on_*_error`` hook, a
tool error turned into a string) must never swallow: ``ENDS_THE_RUN`` (the divergences of a
resume or a simulation are integrity errors, among them). Interrupts (``RunInterrupt``) are
``BaseException``s and pass ``except Exception`` anyway."""
