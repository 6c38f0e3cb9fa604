"""Little's native harness over real clients, killed with a real SIGKILL (issue 28): between a
failed model attempt (a 429, recorded ``retryable``) and its retry, a resume makes exactly one
new attempt for the turn; after an MCP server's listing is recorded, a resume does not list
it again (and before, it does); killed mid-stream, a resume streams the turn again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from little.events import ModelCalled, ModelFailed, ModelResponded, ToolCallSucceeded
from tests.crash.harness_workflows import KILL_MID_STREAM, STREAMED
from tests.crash.support import Scenario

RUN = "run_harness_crash"


def model_events(scenario: Scenario, run_id: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for logged in scenario.events(run_id):
        e = logged.event
        if isinstance(e, ModelCalled):
            out.append(("called", e.turn))
        elif isinstance(e, ModelFailed):
            out.append(("failed", e.turn, e.error_type, e.retryable))
        elif isinstance(e, ModelResponded):
            out.append(("responded", e.turn))
    return out


def test_a_kill_between_a_failed_attempt_and_its_retry_resumes_with_one_new_attempt(
    tmp_path: Path,
) -> None:
    reference = Scenario(tmp_path / "reference")
    done = reference.start(RUN, "rate_limited", "Kafka")
    assert done.returncode == 0, done.describe()
    attempts = [
        ("called", 1),
        ("failed", 1, "RateLimitError", True),
        ("called", 1),
        ("responded", 1),
    ]
    assert model_events(reference, RUN) == attempts
    failed = next(x.event for x in reference.events(RUN) if isinstance(x.event, ModelFailed))

    scenario = Scenario(tmp_path / "crashed")
    # the claim is the process's event 0, the record at seq s its event s + 1: killed right
    # after the failed attempt is acked, in the wait before the retry
    assert scenario.start(
        RUN, "rate_limited", "Kafka", LITTLE_CRASH_AFTER_EVENT=failed.seq + 1
    ).killed
    assert model_events(scenario, RUN) == attempts[:2]
    assert [c["status"] for c in scenario.calls("http")] == [429]

    resumed = scenario.resume(RUN)
    assert resumed.returncode == 0, resumed.describe()
    assert (resumed.result["status"], resumed.result["output"]) == ("completed", "Kafka is a log.")
    # one new attempt: the turn's failure was recorded, so it is neither lost nor re-sent twice
    assert [c["status"] for c in scenario.calls("http")] == [429, 200]
    assert model_events(scenario, RUN) == attempts
    state = scenario.fold(RUN)
    assert state.interrupted_model_calls == 0
    assert state.usage.calls == 1


def mcp_requests(scenario: Scenario) -> list[str]:
    return [str(c["kind"]) for c in scenario.calls("mcp")]


def test_a_kill_after_the_mcp_listing_is_recorded_resumes_without_listing_again(
    tmp_path: Path,
) -> None:
    reference = Scenario(tmp_path / "reference")
    done = reference.start(RUN, "mcp_notes", "2 + 3?")
    assert done.returncode == 0, done.describe()
    assert done.result["output"] == 'told: "5"'
    assert mcp_requests(reference) == ["list", "call"]
    first_call = next(x.event for x in reference.events(RUN) if isinstance(x.event, ModelCalled))

    scenario = Scenario(tmp_path / "crashed")
    # the listing's result rides with the session's first model call: killed once it is acked
    # (the model's answer is not recorded yet)
    assert scenario.start(
        RUN, "mcp_notes", "2 + 3?", LITTLE_CRASH_AFTER_EVENT=first_call.seq + 1
    ).killed
    listed = [
        x.event
        for x in scenario.events(RUN)
        if isinstance(x.event, ToolCallSucceeded) and x.event.tool == "mcp:notes/tools/list"
    ]
    assert len(listed) == 1
    assert mcp_requests(scenario) == ["list"]

    resumed = scenario.resume(RUN)
    assert resumed.returncode == 0, resumed.describe()
    assert (resumed.result["status"], resumed.result["output"]) == ("completed", 'told: "5"')
    assert mcp_requests(scenario) == ["list", "call"]  # listed once, by the killed process


def test_a_kill_before_the_mcp_listing_is_recorded_lists_again_on_resume(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    # killed when the listing returned, before its result is recorded
    assert scenario.start(RUN, "mcp_notes", "2 + 3?", LITTLE_CRASH_AFTER_CALL=0).killed
    assert mcp_requests(scenario) == ["list"]
    resumed = scenario.resume(RUN)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["output"] == 'told: "5"'
    assert mcp_requests(scenario) == ["list", "list", "call"]
    state = scenario.fold(RUN)
    assert state.interrupted_tool_calls == 1  # the listing the kill cut off


def test_a_kill_mid_stream_resumes_by_streaming_the_turn_again(tmp_path: Path) -> None:
    """SIGKILLed while a model call streams (its consumer has the first delta; the call is
    written ahead, not answered): the resume asks the model again and streams the whole
    answer; the turn is answered once in the log."""
    scenario = Scenario(tmp_path)
    killed = scenario.start(RUN, "streamed", "What is Kafka?", **{KILL_MID_STREAM: "1"})
    assert killed.killed, killed.describe()
    assert [d["delta"] for d in scenario.calls("deltas")] == [STREAMED[0]]
    assert model_events(scenario, RUN) == [("called", 1)]  # in flight at the kill
    assert len(scenario.calls("http")) == 1

    resumed = scenario.resume(RUN)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["status"] == "completed"
    assert resumed.result["output"] == {"deltas": list(STREAMED), "answer": "".join(STREAMED)}
    assert len(scenario.calls("http")) == 2  # asked again by the resume
    assert [d["pid"] for d in scenario.calls("deltas")] == [killed.pid] + [resumed.pid] * 3
    assert model_events(scenario, RUN) == [("called", 1), ("called", 1), ("responded", 1)]
    state = scenario.fold(RUN)
    assert state.interrupted_model_calls == 1  # the call the kill cut off
    assert state.usage.calls == 1
