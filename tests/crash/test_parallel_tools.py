"""A crash between concurrent tool calls (issue 28 item 2): the model asks for three tool calls
in one turn; they run at once; the process is SIGKILLed once the first to finish is recorded,
the other two in flight (started, no result). The resume, in a new process, runs again only
those two; the one recorded is served from the log, and the model is given the three answers in
the order it asked."""

from __future__ import annotations

import json
from pathlib import Path

from little.events import ToolCallFailed, ToolCallStarted, ToolCallSucceeded
from tests.crash.agent_feature_workflows import KILL_WHEN_DURABLE
from tests.crash.support import Scenario, check_integrity

RUN = "run_parallel_tools"


def test_a_kill_after_the_first_of_three_concurrent_calls_finished_runs_only_the_others_again(
    tmp_path: Path,
) -> None:
    sc = Scenario(tmp_path)
    first = sc.start(RUN, "parallel_tools", None, **{KILL_WHEN_DURABLE: str(sc.data_dir)})
    assert first.killed, first.describe()

    before = [x.event for x in sc.events(RUN)]
    assert [e.call_id for e in before if isinstance(e, ToolCallStarted)] == [
        "1:c1",
        "1:c2",
        "1:c3",
    ]
    assert [e.call_id for e in before if isinstance(e, ToolCallSucceeded)] == ["1:c2"]
    assert not [e for e in before if isinstance(e, ToolCallFailed)]

    second = sc.resume(RUN)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == "slow 1 (attempt 2); fast 2 (attempt 1); slow 3 (attempt 2)"

    tools = sc.calls("tools")
    by_call = {c: [t["pid"] for t in tools if t["call_id"] == c] for c in ("1:c1", "1:c2", "1:c3")}
    assert by_call["1:c2"] == [first.pid]  # recorded before the kill: never run again
    assert by_call["1:c1"] == [first.pid, second.pid]
    assert by_call["1:c3"] == [first.pid, second.pid]
    # the model's second turn got the answers in the order it asked
    (turn2,) = [m for m in sc.calls("model") if m["turn"] == 2]
    assert [c for c, _ in turn2["answers"]] == ["c1", "c2", "c3"]
    assert json.loads(turn2["answers"][1][1]) == "fast 2 (attempt 1)"

    after = [x.event for x in sc.events(RUN)]
    started = [e.call_id for e in after if isinstance(e, ToolCallStarted)]
    assert started.count("1:c2") == 1
    assert started.count("1:c1") == started.count("1:c3") == 2
    check_integrity({RUN: sc.fold(RUN)})
