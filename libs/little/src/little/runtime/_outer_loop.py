"""Outer loops (Layer B): cycles of a workflow, each cycle a run of its own.

The loop's manifest is kept in the world as the loop's own event stream (run id
``outer~<loop_id>``), so it survives the machine: each cycle is reserved (SubRunReserved with
the cycle's run id and the context hash) before it starts, and closed by StepCompleted
(finished) or StepFailed (abandoned). ``pending_cycle_run_id`` is the reserved cycle with
neither. On restart the pending cycle resumes through Layer A (its own log), unless the
loop's context changed since it was reserved: then it is abandoned and a fresh cycle starts,
because its planner's manifest (which carries ``outer_loop_context_hash``) no longer holds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from little._canonical import canonical_hash, canonical_json
from little._world import World
from little.events import RunCompleted, RunStarted, StepCompleted, StepFailed, SubRunReserved
from little.replay import MaterializedRunState, fold_run
from little.runtime._claim import claim, default_owner
from little.runtime._execution import RunResult, fold_run_off_loop, read_json, store_json
from little.runtime._registry import AnyWorkflow
from little.runtime._runner import execute

OUTER_LOOP_WORKFLOW = "little.outer_loop"


@dataclass(frozen=True)
class Cycle:
    number: int
    run_id: str
    context_hash: str
    status: str  # "pending" | "completed" | "abandoned"
    output: Any = None


@dataclass(frozen=True)
class OuterLoopManifest:
    loop_id: str
    cycles: tuple[Cycle, ...]

    @property
    def pending_cycle_run_id(self) -> str | None:
        for c in self.cycles:
            if c.status == "pending":
                return c.run_id
        return None

    @property
    def completed(self) -> int:
        return sum(1 for c in self.cycles if c.status == "completed")


def loop_run_id(loop_id: str) -> str:
    return f"outer~{loop_id}"


def manifest_from_state(
    world: World, loop_id: str, state: MaterializedRunState
) -> OuterLoopManifest:
    """The loop's manifest from its folded stream (reads cycle outputs kept as artifacts)."""
    cycles = []
    for reserved in state.sub_runs:
        n = int((reserved.call_id or "cycle-0").split("-")[-1])
        step = state.step(f"cycle-{n}")
        status = "pending"
        output = None
        if step is not None and step.status == "completed":
            status = "completed"
            output = read_json(world, step.output_json, step.output_ref)
        elif step is not None and step.status == "failed":
            status = "abandoned"
        context_hash = json.loads(reserved.input_json or "{}").get("outer_loop_context_hash", "")
        cycles.append(Cycle(n, reserved.sub_run_id, context_hash, status, output))
    return OuterLoopManifest(loop_id, tuple(cycles))


def load_manifest(world: World, loop_id: str) -> OuterLoopManifest:
    """The loop's manifest, folded from its stream in the world (blocking: tooling; the loop
    itself reads it off the event loop)."""
    state, _, _ = fold_run(world, loop_run_id(loop_id))
    return manifest_from_state(world, loop_id, state)


async def outer_loop(
    world: World,
    loop_id: str,
    cycle: AnyWorkflow,
    context: Mapping[str, Any],
    *,
    cycles: int,
) -> OuterLoopManifest:
    """Run ``cycles`` cycles of ``cycle`` with ``context``, resuming where the loop stopped.

    Each cycle gets ``{"context": ..., "cycle": n, "outer_loop_context_hash": h}`` as input;
    put the hash in the cycle planner's session manifest. Returns the final manifest. A loop
    that already completed is returned as it is, whatever ``cycles`` says now, and nothing is
    appended after its RunCompleted (a longer loop is a new loop id).
    """
    run_id = loop_run_id(loop_id)
    context_hash = canonical_hash(dict(context))
    state = await fold_run_off_loop(world, run_id)
    if state.terminal:
        # finished: its RunCompleted is its last record, so nothing is claimed or written
        return await asyncio.to_thread(manifest_from_state, world, loop_id, state)
    state, writer = await claim(world, run_id, default_owner(), state)
    if state.terminal:  # another process finished it between our fold and our claim
        return await asyncio.to_thread(manifest_from_state, world, loop_id, state)
    if state.workflow is None:
        await writer.emit(
            RunStarted,
            workflow=OUTER_LOOP_WORKFLOW,
            workflow_version="1",
            input_json=canonical_json({"cycle_workflow": cycle.name, "cycles": cycles}),
        )
    manifest = await asyncio.to_thread(manifest_from_state, world, loop_id, state)
    next_number = max((c.number for c in manifest.cycles), default=0) + 1

    async def close(number: int, result: RunResult) -> None:
        """Record a cycle's end in the loop's stream."""
        if result.status == "completed":
            output_json, output_ref = await store_json(world, run_id, result.output)
            await writer.emit(
                StepCompleted,
                step_path=f"cycle-{number}",
                step_id="cycle",
                output_json=output_json,
                output_ref=output_ref,
            )
        else:
            await writer.emit(
                StepFailed,
                step_path=f"cycle-{number}",
                step_id="cycle",
                error_type="CycleFailed",
                message=str(result.error),
                will_retry=False,
            )

    pending = next((c for c in manifest.cycles if c.status == "pending"), None)
    if pending is not None:
        if pending.context_hash == context_hash:
            # Layer A: the cycle resumes from its own log (input and workflow come from it)
            await close(pending.number, await execute(world, pending.run_id, cycle))
        else:
            await writer.emit(
                StepFailed,
                step_path=f"cycle-{pending.number}",
                step_id="cycle",
                error_type="OuterLoopContextDrift",
                message=f"context {pending.context_hash[:12]}... became {context_hash[:12]}...: "
                "abandoned, a fresh cycle starts",
                will_retry=False,
            )
    done = (await asyncio.to_thread(load_manifest, world, loop_id)).completed
    while done < cycles:
        number = next_number
        next_number += 1
        cycle_run_id = f"{run_id}~cycle-{number}"
        cycle_input = {
            "context": dict(context),
            "cycle": number,
            "outer_loop_context_hash": context_hash,
        }
        await writer.emit(
            SubRunReserved,
            sub_run_id=cycle_run_id,
            workflow=cycle.name,
            input_json=canonical_json(cycle_input),
            call_id=f"cycle-{number}",
        )
        result = await execute(world, cycle_run_id, cycle, cycle_input)
        await close(number, result)
        if result.status != "completed":
            break
        done += 1
    final = await asyncio.to_thread(load_manifest, world, loop_id)
    if final.completed >= cycles:
        outputs = [c.output for c in final.cycles if c.status == "completed"]
        output_json, output_ref = await store_json(world, run_id, outputs)
        await writer.emit(RunCompleted, output_json=output_json, output_ref=output_ref)
    await writer.settled()
    return final
