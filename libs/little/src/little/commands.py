"""Commands to the resume coordinator: StartRun, ResumeRun, CancelRun and SignalRun on
little.commands.v1.

Commands are requests, not facts about a run, so they stay out of the event catalog: their
schemas live in ``schemas/commands/<Command>/v<N>.avsc`` and they use Avro single-object
framing (``C3 01`` + CRC-64-AVRO fingerprint) like snapshots. Encoding and decoding are pure;
``CommandPublisher`` sends them keyed by run id and imports the Kafka client only when built.
"""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Literal

from fastavro import schemaless_reader, schemaless_writer
from pydantic import BaseModel, ConfigDict, Field, field_validator

from little._canonical import canonical_json
from little._uuid_prefix import starts_like_a_uuid_string
from little.errors import ConfigurationError, LittleError
from little.events import SINGLE_OBJECT_MAGIC, SchemaCatalog, load_catalog
from little.log import COMMANDS_TOPIC, Position

__all__ = [
    "Budgets",
    "CancelRun",
    "Command",
    "CommandDecodeError",
    "CommandPublisher",
    "ResumeRun",
    "SignalRun",
    "StartRun",
    "command_headers",
    "decode_command",
    "encode_command",
]


def _issuer() -> str:
    return f"{os.environ.get('USER', 'user')}@{socket.gethostname()}"


class CommandDecodeError(LittleError, ValueError):
    """Bytes on the commands topic that are not a known command. Terminal for that record.

    ``reason`` is stable for matching, metrics and the dead-letter header, with the same names
    as ``EventDecodeError``'s where the failure is the same (a record that is an event or a
    snapshot, not a command, has an ``unknown-fingerprint``)."""

    NOT_AVRO_FRAMING = "not-avro-framing"
    UNKNOWN_FINGERPRINT = "unknown-fingerprint"
    TRUNCATED = "truncated-body"
    MALFORMED = "malformed-body"
    INVALID = "invalid-command"

    retryable = False

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"cannot decode command ({reason}): {detail}")
        self.reason = reason


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Budgets(_Frozen):
    """Caps on fresh work, recorded on RunStarted; calls served from the log never count."""

    max_agent_calls: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)


class _Command(_Frozen):
    command_type: ClassVar[str] = ""

    run_id: str = Field(min_length=1)
    command_id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    issued_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    issued_by: str = Field(default_factory=_issuer)

    @property
    def type(self) -> str:
        return self.command_type


class StartRun(_Command):
    """Start ``workflow`` as run ``run_id`` (resume it instead if the run already exists)."""

    command_type: ClassVar[str] = "StartRun"
    workflow: str = Field(min_length=1)
    input_json: str = "null"
    budgets: Budgets = Budgets()
    replay_from: str | None = None
    """A recorded run whose agent calls the new run may reuse (``run(..., replay_from=)``)."""
    replay_mode: Literal["repairable", "strict"] | None = None
    """How the replay treats a changed source (``run(..., replay_mode=)``); None is
    ``repairable``. StartRun v3."""

    @field_validator("input_json")
    @classmethod
    def _is_json(cls, value: str) -> str:
        try:
            json.loads(value)
        except ValueError as exc:
            raise ValueError(f"input_json is not JSON: {exc}") from exc
        return value

    @classmethod
    def of(
        cls,
        run_id: str,
        workflow: str,
        input: Any = None,
        *,
        budgets: Budgets | None = None,
        replay_from: str | None = None,
        replay_mode: Literal["repairable", "strict"] | None = None,
    ) -> StartRun:
        """A StartRun whose input is ``input`` as canonical JSON."""
        return cls(
            run_id=run_id,
            workflow=workflow,
            input_json=canonical_json(input),
            budgets=budgets or Budgets(),
            replay_from=replay_from,
            replay_mode=replay_mode,
        )

    @property
    def input(self) -> Any:
        return json.loads(self.input_json)


class ResumeRun(_Command):
    """Resume ``run_id`` now: claim it with the next epoch and continue from its log."""

    command_type: ClassVar[str] = "ResumeRun"


class CancelRun(_Command):
    """Cancel ``run_id``: stop it at its next event boundary and record RunCancelled."""

    command_type: ClassVar[str] = "CancelRun"
    reason: str = ""


class SignalRun(_Command):
    """Deliver signal ``name`` with ``payload_json`` to ``run_id`` (``little signal``; an
    approval decision is the signal ``approval:<call id>``): the coordinator that owns the run
    appends ``SignalSent`` to its log, and wakes it if it waits for that signal."""

    command_type: ClassVar[str] = "SignalRun"
    name: str = Field(min_length=1)
    payload_json: str = "null"
    signal_id: str = Field(default_factory=lambda: str(uuid.uuid4()), min_length=1)

    @field_validator("payload_json")
    @classmethod
    def _is_json(cls, value: str) -> str:
        try:
            json.loads(value)
        except ValueError as exc:
            raise ValueError(f"payload_json is not JSON: {exc}") from exc
        return value

    @property
    def payload(self) -> Any:
        return json.loads(self.payload_json)


Command = StartRun | ResumeRun | CancelRun | SignalRun
_COMMAND_TYPES: Mapping[str, type[StartRun | ResumeRun | CancelRun | SignalRun]] = {
    c.command_type: c for c in (StartRun, ResumeRun, CancelRun, SignalRun)
}


# -- schemas ---------------------------------------------------------------------------------


@cache
def _schemas() -> SchemaCatalog:
    """Every version of every command schema; writers use the newest, readers resolve any."""
    base = resources.files("little") / "schemas" / "commands"
    catalog = load_catalog(base)
    for name in _COMMAND_TYPES:
        if name not in catalog.event_types:
            raise ConfigurationError(f"no schema for command {name} under {base / name}")
    return catalog


def encode_command(command: Command) -> bytes:
    """Avro single-object bytes of the command, in the newest schema of its type."""
    schema = _schemas().latest(command.command_type)
    record = command.model_dump(mode="python")
    out = io.BytesIO()
    out.write(schema.single_object_header)
    schemaless_writer(out, schema.parsed, record)
    return out.getvalue()


def decode_command(data: bytes) -> Command:
    """Decode a command of any known version; raises ``CommandDecodeError`` saying why not,
    and nothing else whatever the bytes."""
    try:
        return _decode_command(data)
    except CommandDecodeError:
        raise
    except Exception as exc:  # a defect in a dependency must not escape as anything else
        raise CommandDecodeError(
            CommandDecodeError.MALFORMED, f"{type(exc).__name__}: {exc}"
        ) from exc


def _decode_command(data: bytes) -> Command:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CommandDecodeError(
            CommandDecodeError.NOT_AVRO_FRAMING, f"expected bytes, got {type(data).__name__}"
        )
    schemas = _schemas()
    if data[:2] != SINGLE_OBJECT_MAGIC:
        raise CommandDecodeError(
            CommandDecodeError.NOT_AVRO_FRAMING,
            f"not a command: starts with {bytes(data[:2]).hex() or 'nothing'}, not the Avro "
            "single-object header c301",
        )
    if len(data) < 10:
        raise CommandDecodeError(
            CommandDecodeError.TRUNCATED, f"single-object header needs 10 bytes, got {len(data)}"
        )
    writer = schemas.by_fingerprint(bytes(data[2:10]))
    if writer is None:
        raise CommandDecodeError(
            CommandDecodeError.UNKNOWN_FINGERPRINT,
            f"no command schema has fingerprint {bytes(data[2:10]).hex()} (an event or a "
            "snapshot on the commands topic?)",
        )
    reader = schemas.latest(writer.event_type)
    payload = bytes(data[10:])
    if not starts_like_a_uuid_string(payload):  # every command starts with its command id
        raise CommandDecodeError(
            CommandDecodeError.MALFORMED,
            f"{writer.event_type} v{writer.version}: the body does not start with a command id",
        )
    body = io.BytesIO(payload)
    try:
        record: Any = schemaless_reader(body, writer.read_parsed, reader.read_parsed)
    except (EOFError, StopIteration, struct.error, IndexError) as exc:
        if isinstance(exc, IndexError) and body.tell() < len(payload):
            raise CommandDecodeError(
                CommandDecodeError.MALFORMED,
                f"{writer.event_type} v{writer.version} body does not decode: {exc}",
            ) from exc
        raise CommandDecodeError(
            CommandDecodeError.TRUNCATED,
            f"{writer.event_type} v{writer.version} body ends early ({type(exc).__name__})",
        ) from exc
    except Exception as exc:
        raise CommandDecodeError(
            CommandDecodeError.MALFORMED,
            f"{writer.event_type} v{writer.version} body does not decode: {exc}",
        ) from exc
    if body.tell() != len(payload):
        raise CommandDecodeError(
            CommandDecodeError.MALFORMED, f"trailing bytes after the {writer.event_type} record"
        )
    try:
        return _COMMAND_TYPES[writer.event_type].model_validate(record)
    except ValueError as exc:
        raise CommandDecodeError(
            CommandDecodeError.INVALID, f"invalid {writer.event_type}: {exc}".replace("\n", " ")
        ) from exc


def command_headers(command: Command) -> list[tuple[str, bytes]]:
    """Type and run id as Kafka headers, for routing and tooling without decoding, and the
    W3C ``traceparent`` of the span the command is sent in (the run it starts continues that
    trace)."""
    from little.tracing import trace_headers

    return [
        ("little.command", command.command_type.encode()),
        ("little.run_id", command.run_id.encode()),
        ("little.command_id", command.command_id.encode()),
        *trace_headers(),
    ]


# -- publishing ------------------------------------------------------------------------------


class CommandPublisher:
    """Sends commands to the commands topic, keyed and partitioned by run id, acks=all.

    The partition is Kafka's default partitioner over the run id, computed here, so a run's
    commands land in the partition whose number is the run's partition of the runs topic.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = COMMANDS_TOPIC,
        config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        from confluent_kafka import Producer

        from little.log.kafka.client import client_config, connect_admin, topic_partitions

        self.topic = topic
        self.timeout = timeout
        self.partitions = topic_partitions(connect_admin(bootstrap_servers, config), topic)
        self._producer = Producer(
            {
                **client_config(bootstrap_servers, config),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "delivery.timeout.ms": int(timeout * 1000),
            }
        )

    def send(self, commands: Sequence[Command]) -> list[Position]:
        """Send and wait for every ack; returns where each command landed.

        A run's commands are sent together, in order; runs one after another.
        """
        from little.log import partition_for
        from little.log.kafka.client import produce_and_wait

        by_run: dict[str, list[int]] = {}
        for i, command in enumerate(commands):
            by_run.setdefault(command.run_id, []).append(i)
        positions: list[Position | None] = [None] * len(commands)
        for run_id, indices in by_run.items():
            landed = produce_and_wait(
                self._producer,
                self.topic,
                partition_for(run_id, self.partitions),
                run_id,
                [(encode_command(commands[i]), command_headers(commands[i])) for i in indices],
                self.timeout,
            )
            for i, position in zip(indices, landed, strict=True):
                positions[i] = position
        return [p for p in positions if p is not None]

    def close(self) -> None:
        self._producer.flush(self.timeout)

    def __enter__(self) -> CommandPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
