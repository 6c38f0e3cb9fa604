"""Workflow execution: steps, parallel groups, decisions, agent sessions, sub-runs, resume
and fencing.

What a worker resuming a run does not use is imported on first use of its name (a module
``__getattr__``): the hosting loop (``follow``), signals, the outer loop, simulation and golden
files, workflow loading, ``workflow_tool`` and parking (``tests/test_public_api.py`` checks a
resume stays without them).
"""

from typing import TYPE_CHECKING

from little._lazy import lazy_exports as _lazy_exports
from little.runtime._claim import claim
from little.runtime._compaction import CompactionPolicy
from little.runtime._context import Retry, StepContext, WorkflowContext
from little.runtime._control import ExecutionStopped, RunControl
from little.runtime._errors import (
    CONTROL_ERRORS,
    ENDS_THE_RUN,
    BranchStopped,
    BudgetExceededError,
    ClaimRejectedError,
    ExecutionSuspended,
    LoopLimitError,
    OutputValidationError,
    PanelMixedError,
    PatchDeprecatedError,
    RunNotStartedError,
    SessionDivergedError,
    SignalRefusedError,
    SimulationDivergedError,
    StepFailedError,
    SubRunFailedError,
    UnknownWorkflowError,
    WaitTimeoutError,
    WorkflowVersionError,
)
from little.runtime._execution import RunResult, fold_run_off_loop
from little.runtime._model_turns import TurnRequest
from little.runtime._recorded import FullReplay
from little.runtime._recording import SETTLING, AgentCallTicket, Recorder, ToolOutcome
from little.runtime._registry import (
    Workflow,
    lookup,
    register,
    registered,
    versions,
    workflow,
)
from little.runtime._runner import execute, resume, run
from little.runtime._session import AgentSession, AgentStream

if TYPE_CHECKING:
    from little.runtime._client import (
        approval_decision,
        decide_approval,
        prepare_signal,
        send_signal,
    )
    from little.runtime._ending import FailRun, ParkRun, end_unrunnable
    from little.runtime._host import Waker, follow
    from little.runtime._loading import load_workflows
    from little.runtime._outer_loop import OuterLoopManifest, load_manifest, outer_loop
    from little.runtime._simulate import Divergence, Simulation, simulate
    from little.runtime._workflow_tool import workflow_tool

_LAZY = {
    "approval_decision": "little.runtime._client",
    "decide_approval": "little.runtime._client",
    "prepare_signal": "little.runtime._client",
    "send_signal": "little.runtime._client",
    "FailRun": "little.runtime._ending",
    "ParkRun": "little.runtime._ending",
    "end_unrunnable": "little.runtime._ending",
    "Waker": "little.runtime._host",
    "follow": "little.runtime._host",
    "load_workflows": "little.runtime._loading",
    "OuterLoopManifest": "little.runtime._outer_loop",
    "load_manifest": "little.runtime._outer_loop",
    "outer_loop": "little.runtime._outer_loop",
    "Divergence": "little.runtime._simulate",
    "Simulation": "little.runtime._simulate",
    "simulate": "little.runtime._simulate",
    "workflow_tool": "little.runtime._workflow_tool",
}


__all__ = [
    "CONTROL_ERRORS",
    "ENDS_THE_RUN",
    "SETTLING",
    "AgentCallTicket",
    "AgentSession",
    "AgentStream",
    "BranchStopped",
    "BudgetExceededError",
    "ClaimRejectedError",
    "CompactionPolicy",
    "Divergence",
    "ExecutionStopped",
    "ExecutionSuspended",
    "FailRun",
    "FullReplay",
    "LoopLimitError",
    "OuterLoopManifest",
    "OutputValidationError",
    "PanelMixedError",
    "ParkRun",
    "PatchDeprecatedError",
    "Recorder",
    "Retry",
    "RunControl",
    "RunNotStartedError",
    "RunResult",
    "SessionDivergedError",
    "SignalRefusedError",
    "Simulation",
    "SimulationDivergedError",
    "StepContext",
    "StepFailedError",
    "SubRunFailedError",
    "ToolOutcome",
    "TurnRequest",
    "UnknownWorkflowError",
    "WaitTimeoutError",
    "Waker",
    "Workflow",
    "WorkflowContext",
    "WorkflowVersionError",
    "approval_decision",
    "claim",
    "decide_approval",
    "end_unrunnable",
    "execute",
    "fold_run_off_loop",
    "follow",
    "load_manifest",
    "load_workflows",
    "lookup",
    "outer_loop",
    "prepare_signal",
    "register",
    "registered",
    "resume",
    "run",
    "send_signal",
    "simulate",
    "versions",
    "workflow",
    "workflow_tool",
]


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _LAZY, __all__)
