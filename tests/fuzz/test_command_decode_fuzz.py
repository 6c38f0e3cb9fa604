"""Fuzzing the command decoder: whatever the bytes on the commands topic, ``decode_command``
returns a command or raises ``CommandDecodeError`` with one of its stable reasons, never
anything else (the coordinator must be able to dead-letter any record and carry on).

Inputs are random bytes, random bodies behind every command header, and valid encodings of
every command type with random mutations (and events, which are no commands). Bounded and
derandomized for CI.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little.commands import (
    Budgets,
    CancelRun,
    Command,
    CommandDecodeError,
    ResumeRun,
    SignalRun,
    StartRun,
    decode_command,
    encode_command,
)
from tests.fuzz import examples as fuzz_examples
from tests.fuzz.test_decode_fuzz import SINGLE, _mutate
from tests.strategies import texts

REASONS = {v for k, v in vars(CommandDecodeError).items() if k.isupper() and isinstance(v, str)}

FUZZ = settings(
    max_examples=fuzz_examples(1000),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

run_ids = texts(min_size=1, max_size=20)
commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(
        StartRun.of,
        run_ids,
        texts(min_size=1),
        st.none() | st.integers() | st.dictionaries(texts(), st.integers(), max_size=3),
        budgets=st.builds(Budgets, max_agent_calls=st.none() | st.integers(0, 100)),
    ),
    st.builds(ResumeRun, run_id=run_ids),
    st.builds(CancelRun, run_id=run_ids, reason=texts()),
    st.builds(SignalRun, run_id=run_ids, name=texts(min_size=1)),
)
ENCODED = [encode_command(c) for c in (StartRun.of("r", "wf", {"a": 1}), ResumeRun(run_id="r"))]
HEADERS = sorted({e[:10] for e in ENCODED} | {encode_command(CancelRun(run_id="r"))[:10]})


def _decodes_or_raises_command_decode_error(data: bytes) -> None:
    reason: str | None = None
    try:
        command = decode_command(data)
    except CommandDecodeError as exc:  # anything else fails the test with the input
        reason, message = exc.reason, str(exc)
    else:
        assert isinstance(command, StartRun | ResumeRun | CancelRun | SignalRun)
        return
    assert reason in REASONS, reason
    assert message.startswith(f"cannot decode command ({reason})")


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _decodes_or_raises_command_decode_error(data)


@FUZZ
@given(st.sampled_from(HEADERS), st.binary(max_size=300))
def test_random_body_behind_a_command_header(header: bytes, body: bytes) -> None:
    _decodes_or_raises_command_decode_error(header + body)


@FUZZ
@given(commands.map(encode_command).flatmap(_mutate))
def test_mutated_commands_of_every_type(data: bytes) -> None:
    _decodes_or_raises_command_decode_error(data)


@FUZZ
@given(st.sampled_from(SINGLE).flatmap(_mutate))
def test_events_and_mutated_events_are_no_commands(data: bytes) -> None:
    """Events share the framing, not the catalog: never a command, always a clear error."""
    with pytest.raises(CommandDecodeError) as info:
        decode_command(data)
    assert info.value.reason in REASONS


@FUZZ
@given(commands)
def test_every_command_round_trips(command: Command) -> None:
    assert decode_command(encode_command(command)) == command
