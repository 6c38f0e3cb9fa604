"""Workflow execution: steps, parallel groups, decisions, sub-runs, resume and fencing."""

from little.runtime._context import Retry, StepContext, WorkflowContext
from little.runtime._control import ExecutionStopped, RunControl
from little.runtime._errors import (
    BudgetExceededError,
    ClaimRejectedError,
    LoopLimitError,
    SessionDivergedError,
    StepFailedError,
    WorkflowVersionError,
)
from little.runtime._outer_loop import (
    OuterLoopManifest,
    load_manifest,
    outer_loop,
)
from little.runtime._registry import REGISTRY, Workflow, lookup, workflow
from little.runtime._runner import RunResult, claim, execute, resume, run

__all__ = [
    "REGISTRY",
    "BudgetExceededError",
    "ClaimRejectedError",
    "ExecutionStopped",
    "LoopLimitError",
    "OuterLoopManifest",
    "Retry",
    "RunControl",
    "RunResult",
    "SessionDivergedError",
    "StepContext",
    "StepFailedError",
    "Workflow",
    "WorkflowContext",
    "WorkflowVersionError",
    "claim",
    "execute",
    "load_manifest",
    "lookup",
    "outer_loop",
    "resume",
    "run",
    "workflow",
]
