"""Fuzzing the fold: whatever a partition holds for a run, ``materialize_run_state_from_events``
returns a state or raises ``StreamIntegrityError``, never anything else (the projector
dead-letters the one and folds on; anything else would be a fold bug it can only call
``fold-failed``). And it decides the same folded in one go or resumed from any snapshot.

Inputs are valid streams of one run (``tests.strategies.run_streams``: steps, sessions,
claims, a fenced zombie...) with hostile mutations an operator's tool or a broken writer can
leave: records dropped, copied, moved, re-sequenced, re-epoched, given to another run, or
foreign events inserted. Bounded and derandomized for CI.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little.events import Event, LoggedEvent
from little.replay import MaterializedRunState, StreamIntegrityError
from little.replay import materialize_run_state_from_events as fold
from tests.fuzz import examples as fuzz_examples
from tests.strategies import events, run_streams

FUZZ = settings(
    max_examples=fuzz_examples(400),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _with(event: Event, **update: object) -> Event:
    return event.model_copy(update=update)


@st.composite
def hostile_streams(draw: st.DrawFn) -> list[LoggedEvent]:
    stream = list(draw(run_streams()))
    run_id = stream[0].event.run_id
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["drop", "copy", "move", "seq", "epoch", "other-run", "foreign", "swap"]
            )
        )
        i = draw(st.integers(0, len(stream) - 1))
        item = stream[i]
        if kind == "drop" and len(stream) > 1:
            del stream[i]
        elif kind == "copy":
            stream.insert(draw(st.integers(i, len(stream))), item)
        elif kind == "move":
            del stream[i]
            stream.insert(draw(st.integers(0, len(stream))), item)
        elif kind == "swap" and len(stream) > 1:
            j = draw(st.integers(0, len(stream) - 1))
            stream[i], stream[j] = stream[j], stream[i]
        elif kind == "seq":
            seq = draw(st.integers(-2, item.event.seq + 5))
            stream[i] = replace(item, event=_with(item.event, seq=seq))
        elif kind == "epoch":
            epoch = draw(st.integers(0, item.event.epoch + 3))
            stream[i] = replace(item, event=_with(item.event, epoch=epoch))
        elif kind == "other-run":
            stream[i] = replace(item, event=_with(item.event, run_id=run_id + "-other"))
        elif kind == "foreign":  # any valid event of this run, at any seq and epoch
            event = _with(draw(events()), run_id=run_id)
            stream.insert(i, LoggedEvent(event, item.partition, item.offset))
    # offsets stay increasing, as a partition's are
    return [replace(e, offset=n) for n, e in enumerate(stream)]


def _outcome(events: list[LoggedEvent], **kw: object) -> MaterializedRunState | str:
    try:
        return fold(events, **kw)  # type: ignore[arg-type]
    except StreamIntegrityError as exc:  # anything else fails the test with the input
        return f"integrity: {exc}"


@FUZZ
@given(hostile_streams())
def test_a_hostile_stream_folds_or_is_an_integrity_error(stream: list[LoggedEvent]) -> None:
    run_id = stream[0].event.run_id
    result = _outcome(stream, run_id=run_id)
    if isinstance(result, MaterializedRunState):
        assert result.run_id == run_id
        assert result.events_applied <= len(stream)


@FUZZ
@given(hostile_streams(), st.data())
def test_resuming_a_hostile_stream_from_a_state_decides_the_same(
    stream: list[LoggedEvent], data: st.DataObject
) -> None:
    """Folding a prefix, then the rest from its state, gives the same state or the same
    verdict (the projector folds batch by batch from stored states)."""
    run_id = stream[0].event.run_id
    whole = _outcome(stream, run_id=run_id)
    cut = data.draw(st.integers(0, len(stream)))
    head = _outcome(stream[:cut], run_id=run_id)
    if not isinstance(head, MaterializedRunState):
        assert not isinstance(whole, MaterializedRunState)  # broken early: broken whole
        return
    rest = _outcome(stream[cut:], run_id=run_id, start=head)
    if isinstance(whole, MaterializedRunState):
        assert rest == whole
    else:
        assert not isinstance(rest, MaterializedRunState)
