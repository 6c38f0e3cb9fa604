"""Executions of runs in this process: start, watch and end each one the run table decides on.

Every execution goes through ``little.runtime.execute``: claim with the next epoch, replay,
continue. A run this coordinator cannot execute (its workflow or version is not registered
here) is parked or failed through ``little.runtime.end_unrunnable``. It never decides which
run executes or which command is settled: ``RunTable`` does, and this carries out its effects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import structlog

from little import World, tracing
from little.commands import StartRun
from little.errors import LittleError, RunInterrupt
from little.replay import MaterializedRunState, Snapshot, SnapshotError, encode_snapshot
from little.runtime import (
    ExecutionStopped,
    FailRun,
    ParkRun,
    UnknownWorkflowError,
    WorkflowVersionError,
    end_unrunnable,
    execute,
    fold_run_off_loop,
    registered,
    versions,
)
from little_services.resume_coordinator._core import Effects, LocalRun, RunTable, Tracked
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._scheduling import CommandRef
from little_services.resume_coordinator._settings import CoordinatorSettings
from little_services.resume_coordinator._world import OwnedSnapshots

log = structlog.get_logger("little.coordinator")


class Executions:
    """The live executions of this process, as asyncio tasks bounded by ``max_runs``."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        world: World,
        snapshots: OwnedSnapshots,
        metrics: Metrics,
        table: RunTable,
        settle: Callable[[CommandRef], None],
    ) -> None:
        self.settings = settings
        self.world = world
        self.snapshots = snapshots
        self.metrics = metrics
        self.table = table
        self.owner = settings.owner()
        self._settle = settle
        self._tasks: dict[LocalRun, asyncio.Task[None]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._snapshot_pool = ThreadPoolExecutor(1, thread_name_prefix="snapshots")
        self.count = 0
        """Executions in this process (read by the HTTP thread, so a plain int)."""
        metrics.parked.set_function(lambda: len(table.parked))  # read at scrape time

    def apply(self, effects: Effects) -> None:
        """Carry out what the run table decided."""
        for entry in effects.stalled:
            self.metrics.stalls.inc()
            log.warning(
                "run_stalled",
                run_id=entry.run_id,
                lease_seconds=self.table.lease,
                last_epoch=entry.epoch,
            )
        for run_id, epoch, ours in effects.fenced:
            self.metrics.fenced.inc()
            log.warning("run_fenced", run_id=run_id, epoch=epoch, ours=ours)
        for ref in effects.settle:
            self._settle(ref)
        for run_id in effects.dropped:
            self.snapshots.drop(run_id)
        for entry, local in effects.started:
            self._tasks[local] = asyncio.ensure_future(self._drive(entry, local, entry.start))
            self.metrics.resumed.labels(local.reason).inc()
            self._count(+1)

    def _count(self, delta: int) -> None:
        self.count += delta
        self.metrics.executing.set(self.count)

    async def wait_stopped(self, locals_: list[LocalRun]) -> None:
        """Wait for these executions to stop (each was asked to); past the grace, abandon
        them (the in-flight call is cancelled, the next owner redoes it)."""
        tasks = [t for t in map(self._tasks.get, locals_) if t is not None and not t.done()]
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=self.settings.stop_grace_seconds)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.warning("runs_abandoned", runs=len(pending), grace=self.settings.stop_grace_seconds)

    def close(self) -> None:
        self._snapshot_pool.shutdown(wait=True)

    # -- one execution -----------------------------------------------------------------------

    async def _drive(self, entry: Tracked, local: LocalRun, start: StartRun | None) -> None:
        outcome = "error"
        known, local.known = local.known, None
        try:
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.settings.max_runs)
            async with self._slots:
                outcome = await self._execute(entry, local, start, known)
        except asyncio.CancelledError:
            outcome = "abandoned"
        except ExecutionStopped as exc:  # asked for (a command, a fence, a revocation): no error
            outcome = "cancelled" if exc.cancelled else ("fenced" if local.fenced else "stopped")
        except (Exception, RunInterrupt) as exc:
            # an interrupt no execution asks for (a BranchStopped raised by a workflow at its
            # top level) is an error of the run's code: parked like any other
            outcome = self.table.failed(entry, exc)
        finally:
            self._tasks.pop(local, None)
            self._finish(entry, local, outcome)

    def _finish(self, entry: Tracked, local: LocalRun, outcome: str) -> None:
        self.metrics.finished.labels(outcome).inc()
        # however it ended (stopped, fenced, failed), sub-runs included: they share the control
        self.metrics.reinvoked.inc(local.control.reinvoked_calls)
        self.metrics.served.inc(local.control.served_calls)
        self._count(-1)
        now = time.monotonic()
        log.info(
            "run_execution_ended",
            run_id=entry.run_id,
            outcome=outcome,
            reason=local.reason,
            seconds=round(now - local.started_at, 3),
        )
        self.apply(self.table.ended(entry, local, outcome, now))

    async def _execute(
        self,
        entry: Tracked,
        local: LocalRun,
        start: StartRun | None,
        known: MaterializedRunState | None,
    ) -> str:
        run_id = entry.run_id
        control = local.control
        if control.requested and not control.cancelled:
            raise control.stopped(run_id)  # stopped before it began: do not claim just to stop
        state = known
        # A StartRun of a registered workflow goes straight to execute (which resumes the run
        # if it exists); anything else needs to know what the log says first.
        if (start is None and (state is None or state.workflow is None)) or (
            start is not None and start.workflow not in registered()
        ):
            state = await fold_run_off_loop(self.world, run_id)
            if state.last_position is None and start is None:
                log.warning("run_unknown", run_id=run_id, reason=local.reason)
                return "unknown_run"
        if state is not None:
            if state.workflow is not None:
                entry.start = None  # started: its log holds the input, not only the StartRun
            if state.terminal:
                return state.status
            if state.parent_run_id is not None and not control.cancelled:
                log.info("sub_run_skipped", run_id=run_id, parent_run_id=state.parent_run_id)
                return "sub_run"  # executed inline by its parent's execution, never on its own
        name = state.workflow if state is not None and state.workflow else None
        started = name is not None
        if name is None and start is not None:
            name = start.workflow
        # a new run takes the version a new run uses; a started one, the version its log names
        # (``execute`` finds it among the name's registered versions)
        workflow = registered().get(name) if name is not None else None
        if name is None and not control.cancelled:
            log.warning("run_not_started", run_id=run_id, hint="no RunStarted and no StartRun")
            return "not_started"
        if name is not None and not versions(name) and not control.cancelled:
            # No version of it here: a deployment that forgot a module, most likely. Parked,
            # so a coordinator that has it takes the run up.
            error: LittleError = UnknownWorkflowError(
                name,
                registered(),
                run_id=run_id,
                where=f"resume coordinator {self.owner}",
                hint="register it through the little.workflows entry point group or "
                "LITTLE_WORKFLOWS=module[:attr]",
            )
            version = state.workflow_version if state is not None else None
            return await self._park(entry, error, workflow=name, version=version)
        if workflow is None and not started and not control.cancelled:
            # a new run of a name registered here only in resume_only versions
            assert name is not None
            error = WorkflowVersionError(
                f"workflow {name} has only resume_only versions in resume coordinator "
                f"{self.owner} ({', '.join(versions(name))}): a new run needs a version "
                "registered without resume_only",
                workflow=name,
                registered=versions(name),
                run_id=run_id,
            )
            return await self._park(entry, error, workflow=name, version=None)
        try:
            with tracing.use_headers(entry.trace):
                result = await execute(
                    self.world,
                    run_id,
                    workflow,
                    start.input if start is not None else None,
                    owner=self.owner,
                    max_agent_calls=start.budgets.max_agent_calls if start is not None else None,
                    max_tokens=start.budgets.max_tokens if start is not None else None,
                    replay_from=start.replay_from if start is not None else None,
                    replay_mode=(start.replay_mode if start is not None else None) or "repairable",
                    control=control,
                    on_running=partial(self._running, entry, local),
                )
                if result.status == "waiting":
                    entry.wake_at = result.wake_at
        except WorkflowVersionError as exc:
            if start is None and exc.run_id == run_id:
                # The version the run started on is not registered here.
                return await self._version_missing(entry, exc)
            if start is None:  # a sub-run's: parked with its parent, as integrity errors are
                raise
            # A StartRun of a run that exists already (naming another workflow, or a version
            # of its workflow it did not start on): the StartRun means "resume it", with the
            # workflow and version its log names.
            state = await fold_run_off_loop(self.world, run_id)
            log.warning("start_run_of_existing_run", run_id=run_id, workflow=start.workflow)
            return await self._execute(entry, local, None, state)
        return result.status

    async def _park(
        self,
        entry: Tracked,
        error: LittleError,
        *,
        workflow: str | None,
        version: str | None,
    ) -> str:
        """This coordinator cannot run ``entry``'s run (a workflow or version it lacks): it is
        parked (``RunParked`` with why, so the log, the projection and ``little status`` show
        it) and not resumed here until a ResumeRun. Not failed: a coordinator that has the
        workflow takes it up with its next claim (a run that never started needs its
        StartRun, which stays unsettled, so that coordinator reads it again)."""
        ending = ParkRun(str(error), workflow=workflow, workflow_version=version)
        status = await end_unrunnable(self.world, entry.run_id, self.owner, ending)
        if status != "parked":
            return status
        self.table.set_parked(entry, f"{type(error).__name__}: {error}")
        log.warning(
            "run_parked",
            run_id=entry.run_id,
            outcome="parked",
            workflow=workflow,
            workflow_version=version,
            error=str(error),
        )
        return "parked"

    async def _version_missing(self, entry: Tracked, exc: WorkflowVersionError) -> str:
        """The run started on a version of its workflow that is not registered here, though
        the workflow is. By ``LITTLE_MISSING_VERSION``: ``fail`` (the default) ends it with
        ``RunFailed`` naming the version and what is registered (its code is gone: a
        coordinator fleet runs one configuration, so no other member has it either, and
        retrying would loop); ``park`` leaves it, recorded, for a coordinator that has that
        version (a fleet mid-way through a deploy, a canary)."""
        where = f"resume coordinator {self.owner}"
        message = (
            f"run {entry.run_id} was started by workflow {exc.workflow} v{exc.version}, which "
            f"is not registered in {where} (registered versions: "
            f"{', '.join(exc.registered) or 'none'}): the code it started on is gone. Keep that "
            f"version registered (@workflow({exc.workflow!r}, version={exc.version!r}, "
            "resume_only=True)) until its runs end"
        )
        if self.settings.missing_version == "park":
            error = WorkflowVersionError(
                f"{message}; parked (LITTLE_MISSING_VERSION=park) for a coordinator that has it",
                workflow=exc.workflow,
                version=exc.version,
                registered=exc.registered,
                run_id=entry.run_id,
            )
            return await self._park(entry, error, workflow=exc.workflow, version=exc.version)
        ending = FailRun(
            "WorkflowVersionError",
            f"{message} (LITTLE_MISSING_VERSION=park parks such runs instead)",
        )
        status = await end_unrunnable(self.world, entry.run_id, self.owner, ending)
        if status != "failed":
            return status
        self.metrics.version_missing.inc()
        log.error(
            "run_failed",
            run_id=entry.run_id,
            outcome="version_missing",
            workflow=exc.workflow,
            workflow_version=exc.version,
            registered=list(exc.registered),
        )
        return "failed"

    # -- claimed: snapshot, then settle ------------------------------------------------------

    def _running(self, entry: Tracked, local: LocalRun, state: MaterializedRunState) -> None:
        """Called by execute once the run is claimed and started: snapshot it, then settle."""
        self.table.running(entry, local, state.epoch)
        self.metrics.time_to_running.observe(time.monotonic() - local.started_at)
        log.info(
            "run_claimed",
            run_id=state.run_id,
            epoch=state.epoch,
            reason=local.reason,
            resumed_from_seq=state.last_seq,
        )
        try:
            payload = encode_snapshot(Snapshot.of(state))
        except SnapshotError:
            self._settle_running(local)
            return
        loop = asyncio.get_running_loop()
        future = self._snapshot_pool.submit(self.snapshots.put, state.run_id, payload)
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(self._snapshotted, local, f))

    def _snapshotted(self, local: LocalRun, future: Future[None]) -> None:
        if local.run_id not in self.table.runs:
            self.snapshots.drop(local.run_id)  # it ended before its snapshot was acknowledged
        error = future.exception()
        if error is not None:  # the commands stay unsettled until the execution ends
            log.warning("snapshot_not_written", run_id=local.run_id, error=str(error))
            return
        self._settle_running(local)

    def _settle_running(self, local: LocalRun) -> None:
        while local.until_running:
            self._settle(local.until_running.pop())
