"""Workflow execution: steps, parallel groups, decisions, agent sessions, sub-runs, resume
and fencing."""

from little.runtime._context import Retry, StepContext, WorkflowContext
from little.runtime._control import ExecutionStopped, RunControl
from little.runtime._errors import (
    BranchStopped,
    BudgetExceededError,
    ClaimRejectedError,
    LoopLimitError,
    PanelMixedError,
    PatchDeprecatedError,
    RunNotStartedError,
    SessionDivergedError,
    SimulationDivergedError,
    StepFailedError,
    SubRunFailedError,
    UnknownWorkflowError,
    WorkflowVersionError,
)
from little.runtime._loading import load_workflows
from little.runtime._outer_loop import (
    OuterLoopManifest,
    load_manifest,
    outer_loop,
)
from little.runtime._registry import (
    Workflow,
    lookup,
    register,
    registered,
    versions,
    workflow,
)
from little.runtime._runner import RunResult, claim, execute, fold_run_off_loop, resume, run
from little.runtime._session import AgentSession, workflow_tool
from little.runtime._simulate import Divergence, Simulation, simulate

__all__ = [
    "AgentSession",
    "BranchStopped",
    "BudgetExceededError",
    "ClaimRejectedError",
    "Divergence",
    "ExecutionStopped",
    "LoopLimitError",
    "OuterLoopManifest",
    "PanelMixedError",
    "PatchDeprecatedError",
    "Retry",
    "RunControl",
    "RunNotStartedError",
    "RunResult",
    "SessionDivergedError",
    "Simulation",
    "SimulationDivergedError",
    "StepContext",
    "StepFailedError",
    "SubRunFailedError",
    "UnknownWorkflowError",
    "Workflow",
    "WorkflowContext",
    "WorkflowVersionError",
    "claim",
    "execute",
    "fold_run_off_loop",
    "load_manifest",
    "load_workflows",
    "lookup",
    "outer_loop",
    "register",
    "registered",
    "resume",
    "run",
    "simulate",
    "versions",
    "workflow",
    "workflow_tool",
]
