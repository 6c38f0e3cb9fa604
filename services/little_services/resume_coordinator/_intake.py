"""Commands in: decode, route to the run table, dead-letter what is not acted on, record signals.

A record that is no command, or sits in another partition than its run's, or is keyed with
another run id, is dead-lettered (``_deadletters``) and settled. A StartRun, ResumeRun or
CancelRun asks the run table for an execution; a SignalRun is recorded in its run's log. It
never executes a run or decides a commit point itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from little import World, tracing
from little.commands import (
    CancelRun,
    Command,
    CommandDecodeError,
    ResumeRun,
    SignalRun,
    StartRun,
    decode_command,
)
from little.errors import LittleError
from little.events import SignalSent
from little.log import partition_for
from little.runtime import SignalRefusedError, fold_run_off_loop, prepare_signal
from little_services.resume_coordinator._core import RunTable
from little_services.resume_coordinator._deadletters import DeadLetterProducer, dead_letter_headers
from little_services.resume_coordinator._executions import Executions
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._scheduling import CommandRef
from little_services.resume_coordinator._settings import CoordinatorSettings

log = structlog.get_logger("little.coordinator")


@dataclass(frozen=True)
class Refused:
    """A commands record not acted on: dead-lettered with ``reason`` and ``message``."""

    reason: str
    message: str
    command: Command | None = None
    """The command, if the record decoded to one."""
    expected: int | None = None
    """The partition its run id belongs in (a misrouted command)."""


def route(
    partition: int, value: bytes | None, key: bytes | None, partitions: int
) -> Command | Refused:
    """The command a record holds, if this partition's owner should act on it."""
    try:
        command = decode_command(value or b"")
    except CommandDecodeError as exc:
        return Refused(exc.reason, str(exc))
    expected = partition_for(command.run_id, partitions)
    if expected != partition:
        return Refused(
            "misrouted",
            f"{command.type} of run {command.run_id} is in partition {partition} but "
            f"belongs in partition {expected}: produce commands keyed by run id with "
            "Kafka's default partitioner (murmur2; librdkafka: partitioner=murmur2_random)",
            command,
            expected,
        )
    if key is not None and key != command.run_id.encode():
        return Refused(
            "key-mismatch",
            f"{command.type} of run {command.run_id} is keyed {key[:200]!r}: a command's key "
            "is its run id; not acted on",
            command,
        )
    return command


class Intake:
    """Acts on the commands of owned partitions, on the coordinator's loop."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        world: World,
        metrics: Metrics,
        table: RunTable,
        executions: Executions,
        settle: Callable[[CommandRef], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.settings = settings
        self.world = world
        self.metrics = metrics
        self.table = table
        self.executions = executions
        self.owner = settings.owner()
        self._settle = settle
        self._spawn = spawn
        self._signals = asyncio.Lock()
        self._publisher: Any = None
        """A CommandPublisher, made on first use (a signal to a sub-run owned elsewhere)."""
        self._dead_letters: DeadLetterProducer | None = None

    def on_command(
        self,
        partition: int,
        offset: int,
        value: bytes | None,
        key: bytes | None = None,
        headers: Any = None,
    ) -> None:
        ref = (partition, offset)
        command = route(partition, value, key, self.table.partitions)
        if isinstance(command, Refused):
            self._refused(ref, key, value, command)
            return
        self.metrics.commands.labels(command.type).inc()
        log.info("command_received", type=command.type, run_id=command.run_id, offset=offset)
        now = time.monotonic()
        trace = tuple(
            (k, v) for k, v in headers or () if k in tracing.TRACE_HEADERS and v is not None
        )
        if trace and isinstance(command, StartRun | ResumeRun | CancelRun):
            # the execution it causes continues the sender's trace (``little.tracing``)
            self.table.track(command.run_id, partition, now).trace = trace
        table, run_id = self.table, command.run_id
        if isinstance(command, StartRun):
            effects = table.ensure(run_id, partition, "start", now, start=command, command=ref)
        elif isinstance(command, ResumeRun):
            effects = table.ensure(run_id, partition, "resume", now, command=ref)
        elif isinstance(command, CancelRun):
            reason = command.reason or "cancelled on request"
            effects = table.ensure(run_id, partition, "cancel", now, command=ref, cancel=reason)
        else:
            assert isinstance(command, SignalRun)
            self._spawn(self._signal_command(command, ref))
            return
        self.executions.apply(effects)

    def _refused(
        self, ref: CommandRef, key: bytes | None, value: bytes | None, refused: Refused
    ) -> None:
        partition, offset = ref
        command = refused.command
        self.metrics.commands.labels("invalid" if command is None else command.type).inc()
        if command is None:
            log.warning(
                "command_invalid",
                partition=partition,
                offset=offset,
                reason=refused.reason,
                error=refused.message,
            )
        elif refused.expected is not None:
            log.error(
                "command_misrouted",
                run_id=command.run_id,
                partition=partition,
                expected=refused.expected,
                hint="produce commands with Kafka's default partitioner over the run id",
            )
        else:
            log.error(
                "command_key_mismatch", run_id=command.run_id, offset=offset, error=refused.message
            )
        self._dead_letter(ref, key, value, refused)

    def _dead_letter(
        self, ref: CommandRef, key: bytes | None, value: bytes | None, refused: Refused
    ) -> None:
        """Send a commands record the coordinator will not act on to the dead-letter topic,
        then settle it (whether or not the send worked: it is logged either way)."""
        reason = refused.reason
        self.metrics.dead_letters.labels(reason).inc()
        headers = dead_letter_headers(reason, refused.message, self.settings.commands_topic, *ref)
        if self._dead_letters is None:
            self._dead_letters = DeadLetterProducer(
                self.settings.bootstrap(), self.settings.dlq_topic
            )
        producer = self._dead_letters

        async def send() -> None:
            try:
                await asyncio.to_thread(producer.send, key, value, headers)
                log.info("command_dead_lettered", partition=ref[0], offset=ref[1], reason=reason)
            except Exception as exc:
                log.error(
                    "dead_letter_failed",
                    partition=ref[0],
                    offset=ref[1],
                    reason=reason,
                    error=f"{type(exc).__name__}: {exc}",
                )
            finally:
                self._settle(ref)

        self._spawn(send())

    # -- signals -----------------------------------------------------------------------------

    async def _signal_command(self, command: SignalRun, ref: CommandRef) -> None:
        """Record the command's signal in its run's log (once however often the command is
        read: the signal id), then settle it; a refused signal is logged and settled. A run
        whose StartRun is still being executed here is waited for (a SignalRun sent right
        after its StartRun would otherwise find no run yet)."""
        try:
            for _ in range(120):
                try:
                    await self.deliver_signal(
                        command.run_id,
                        command.name,
                        command.payload,
                        signal_id=command.signal_id,
                        by=command.issued_by,
                    )
                    break
                except SignalRefusedError:
                    entry = self.table.runs.get(command.run_id)
                    if entry is None or entry.start is None or self.table.stopping:
                        raise
                    await asyncio.sleep(0.25)  # its StartRun is executing here: not started yet
        except SignalRefusedError as exc:
            self.metrics.commands.labels("refused").inc()
            log.warning("signal_refused", run_id=command.run_id, name=command.name, error=str(exc))
        except LittleError as exc:  # the log failed: read the command again after a restart
            log.error("signal_not_recorded", run_id=command.run_id, error=str(exc))
            return
        self._settle(ref)

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        *,
        signal_id: str | None = None,
        by: str | None = None,
    ) -> SignalSent:
        """Append ``SignalSent`` to the run's log (any run, owned here or not: the owner's
        runs tail sees it and wakes the run) after checking the run can take it
        (``SignalRefusedError`` otherwise, nothing recorded)."""
        async with self._signals:  # one at a time: a re-delivery finds the first in the log
            state = await fold_run_off_loop(self.world, run_id)
            where = f"resume coordinator {self.owner}"
            event = prepare_signal(
                state, run_id, name, payload, where=where, signal_id=signal_id, by=by or self.owner
            )
            if not any(s.signal_id == event.signal_id for s in state.signals):
                await self.world.submit([event])
        log.info("signal_recorded", run_id=run_id, name=name, signal_id=event.signal_id)
        top = run_id.split("~", 1)[0]
        if top != run_id and partition_for(top, self.table.partitions) not in self.table.owned:
            # a sub-run executes inside its top-level run, owned elsewhere: wake that one
            await asyncio.to_thread(self._publish_resume, top)
        self.executions.apply(self.table.wake(run_id, "signal", time.monotonic()))
        return event

    def _publish_resume(self, run_id: str) -> None:
        """Send ``ResumeRun(run_id)`` to the coordinator that owns it (a worker thread)."""
        from little.commands import CommandPublisher

        if self._publisher is None:
            self._publisher = CommandPublisher(
                self.settings.bootstrap(), topic=self.settings.commands_topic
            )
        self._publisher.send([ResumeRun(run_id=run_id, issued_by=self.owner)])

    def close(self) -> None:
        """Flush the producers (a worker thread)."""
        if self._publisher is not None:
            self._publisher.close()
        if self._dead_letters is not None:
            self._dead_letters.close()
