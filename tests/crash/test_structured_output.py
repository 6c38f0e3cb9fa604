"""A crash inside a structured-output retry (issue 28 item 3): the model's first answer does
not validate, so the session asks again with the error; the process is SIGKILLed right after
that retry's model call returned, before its answer was recorded. The resume, in a new
process, serves the first turn from the log, rebuilds the same retry request (the error text
included: its request hash matches the logged one), asks the retry again, validates it and
the step returns the validated object."""

from __future__ import annotations

from pathlib import Path

from little.events import AgentCallSettled, ModelCalled, ModelResponded
from tests.crash.support import Scenario, check_integrity

RUN = "run_structured"


def test_a_kill_in_the_retry_turn_resumes_with_one_new_retry_and_the_validated_object(
    tmp_path: Path,
) -> None:
    sc = Scenario(tmp_path)
    # model invocations 0 (the invalid answer) and 1 (the retry): killed after 1 returned
    first = sc.start(RUN, "structured", None, LITTLE_CRASH_AFTER_CALL=1)
    assert first.killed, first.describe()
    before = [x.event for x in sc.events(RUN)]
    assert [e.turn for e in before if isinstance(e, ModelCalled)] == [1, 2]
    assert [e.turn for e in before if isinstance(e, ModelResponded)] == [1]

    second = sc.resume(RUN)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == {"city": "Paris", "celsius": 18.0}

    calls = sc.calls("model")
    assert [(c["turn"], c["pid"]) for c in calls] == [
        (1, first.pid),
        (2, first.pid),
        (2, second.pid),  # only the retry was asked again
    ]
    assert calls[1]["last"] == calls[2]["last"]  # the same error, told the same way
    assert "celsius: Field required" in calls[2]["last"]

    after = [x.event for x in sc.events(RUN)]
    called = [e for e in after if isinstance(e, ModelCalled)]
    assert [e.turn for e in called] == [1, 2, 2]
    assert called[1].request_hash == called[2].request_hash
    (settled,) = [e for e in after if isinstance(e, AgentCallSettled)]
    assert settled.outcome == "succeeded"
    check_integrity({RUN: sc.fold(RUN)})
