"""OpenTelemetry traces of a crashed and resumed run, exported over OTLP/HTTP to a real
receiver on 127.0.0.1, from real processes (the first one SIGKILLed in a model call)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import little
from little.replay import fold_run
from tests.little.tracing.flows import SECRET
from tests.little.tracing.receiver import ReceivedSpan, Receiver
from tests.paths import REPO

TIMEOUT = 120.0


def _env(receiver: Receiver, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="20",  # ms: the crashed process's finished spans go out early
        OTEL_SERVICE_NAME="traced-test",
    )
    env.update(extra)
    return env


def _child(data_dir: Path, run_id: str, mode: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.little.tracing.child", str(data_dir), run_id, mode],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _turn_in_flight(data_dir: Path, run_id: str, turn: int) -> bool:
    with little.local_world(data_dir) as world:
        state, _, _ = fold_run(world, run_id)
    session = state.session("ask#agent")
    recorded = None if session is None else session.turn(turn)
    return recorded is not None and recorded.status == "called"


def _one(spans: list[ReceivedSpan], name: str, **attributes: object) -> ReceivedSpan:
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, f"{len(found)} spans {name} {attributes}: {[s.name for s in spans]}"
    return found[0]


def test_a_crashed_and_resumed_run_is_one_trace_whose_resume_serves_the_logged_calls(
    tmp_path: Path,
) -> None:
    data_dir, run_id, gate = tmp_path / "world", "run-traced-1", tmp_path / "gate"
    with Receiver() as receiver:
        first = _child(data_dir, run_id, "run", _env(receiver, TRACING_TEST_GATE=str(gate)))
        try:
            # turn 1 and its tool call ended (exported); turn 2 is in flight at the gate
            receiver.wait_for(lambda s: s.name == "execute_tool lookup")
            deadline = time.monotonic() + TIMEOUT
            while not _turn_in_flight(data_dir, run_id, 2):
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline, "turn 2 never went in flight"
                time.sleep(0.02)
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=TIMEOUT)
        assert first.returncode == -signal.SIGKILL
        crashed = receiver.received()

        second = _child(data_dir, run_id, "resume", _env(receiver))
        out, err = second.communicate(timeout=TIMEOUT)
        assert second.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1].removeprefix("RESULT "))
        assert result == {"status": "completed", "configured": True}
        spans = receiver.received()
    resumed = [s for s in spans if s not in crashed]

    # the crashed process: its first step and first model/tool calls, never the run's span
    # (SIGKILL ended it unfinished); the trace it started is in RunStarted's record header
    step1 = _one(crashed, "little.step prepare")
    trace_id, first_run_span = step1.trace_id, step1.parent_span_id
    assert {s.trace_id for s in crashed} == {trace_id}
    assert not [s for s in crashed if s.name == "little.run traced"]
    with little.local_world(data_dir) as world:
        started = next(
            r for r in world.log.read_run(run_id) if r.header("little.type") == b"RunStarted"
        )
    traceparent = (started.header("traceparent") or b"").decode()
    assert traceparent.split("-")[1:3] == [trace_id, first_run_span]

    # the resume continues that trace: its execution is a child of the first execution
    run_span = _one(resumed, "little.run traced")
    assert run_span.trace_id == trace_id
    assert run_span.parent_span_id == first_run_span
    assert run_span["little.run_id"] == run_id
    assert run_span["little.resumed"] is True
    assert run_span["little.epoch"] == 2
    assert run_span["little.status"] == "completed"
    assert run_span["little.served_calls"] == 1
    assert run_span["little.reinvoked_calls"] == 1
    assert run_span.resource["service.name"] == "traced-test"
    assert {s.trace_id for s in resumed} == {trace_id}

    # the committed step is served from the log; the step in progress runs on
    assert _one(resumed, "little.step prepare")["little.served_from_log"] is True
    ask = _one(resumed, "little.step ask")
    assert ask["little.served_from_log"] is False
    assert ask.parent_span_id == run_span.span_id
    session = _one(resumed, "invoke_agent agent")
    assert session.parent_span_id == ask.span_id
    assert session["gen_ai.agent.id"] == "ask#agent"

    # turn 1 and its tool call: served from the log; turn 2, in flight at the kill: invoked again
    turn1 = _one(resumed, "chat gpt-4o-mini", **{"little.turn": 1})
    tool = _one(resumed, "execute_tool lookup")
    turn2 = _one(resumed, "chat gpt-4o-mini", **{"little.turn": 2})
    for span in (turn1, tool, turn2):
        assert span.parent_span_id == session.span_id
        assert span["little.run_id"] == run_id
        assert span["little.epoch"] == 2
        assert span["little.replayed"] is False
    assert turn1["little.served_from_log"] is True
    assert tool["little.served_from_log"] is True
    assert turn2["little.served_from_log"] is False
    assert turn2["little.reinvoked"] is True
    assert "little.seq" not in turn1.attributes  # served: no new record
    assert isinstance(turn2["little.seq"], int)
    for span in (turn1, turn2):
        assert span["gen_ai.operation.name"] == "chat"
        assert span["gen_ai.system"] == span["gen_ai.provider.name"] == "openai"
        assert span["gen_ai.request.model"] == "gpt-4o-mini"
    # turn 2 was paid now; turn 1 was paid by the crashed process (its span says so) and
    # served now: it reports what it saved, never usage, so a cost dashboard counts it once
    assert turn2["gen_ai.usage.input_tokens"] == 2000
    assert turn2["gen_ai.usage.output_tokens"] == 100
    assert turn2["little.cost_usd"] > 0  # gpt-4o-mini is priced
    assert not [k for k in turn1.attributes if k.startswith("gen_ai.usage.")]
    assert "little.cost_usd" not in turn1.attributes
    assert turn1["little.avoided_input_tokens"] == 1000
    assert turn1["little.avoided_output_tokens"] == 100
    assert turn1["little.avoided_cost_usd"] > 0
    assert turn2["gen_ai.response.finish_reasons"] == ("stop",)
    assert tool["gen_ai.tool.name"] == "lookup"

    # the crashed process's turn 1 was fresh; its turn 2 never ended, so never exported
    crashed_turn1 = _one(crashed, "chat gpt-4o-mini", **{"little.turn": 1})
    assert crashed_turn1["little.served_from_log"] is False
    assert crashed_turn1["gen_ai.usage.input_tokens"] == 1000
    # over both executions the trace's chat usage is what was billed: each turn once
    chats = [s for s in crashed + resumed if s.name == "chat gpt-4o-mini"]
    assert sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in chats) == 3000
    assert not [s for s in crashed if s.attributes.get("little.turn") == 2]

    # the sub-run is a child of the step that started it, in the same trace
    start_step = _one(resumed, "little.step start_workflow/traced_child.1")
    sub = _one(resumed, "little.run traced_child")
    assert sub.parent_span_id == start_step.span_id
    assert sub.trace_id == trace_id
    assert sub["little.parent_run_id"] == run_id
    assert _one(resumed, "little.step double").parent_span_id == sub.span_id


def test_a_replay_marks_the_calls_it_serves_from_the_recorded_run(tmp_path: Path) -> None:
    with Receiver() as receiver:
        child = _child(tmp_path / "world", "run-source", "replay", _env(receiver))
        _, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 0, err
        spans = receiver.received()
    runs = {s["little.run_id"]: s for s in spans if s.name == "little.run traced"}
    source, replay = runs["run-source"], runs["run-source-replay"]
    assert source["little.replayed"] is False
    assert replay["little.replayed"] is True
    assert replay["little.replay_source_run_id"] == "run-source"
    assert replay["little.served_calls"] == 0  # not from its own log: from the recorded run

    def chats(run: ReceivedSpan) -> list[ReceivedSpan]:
        return [s for s in spans if s.name == "chat gpt-4o-mini" and s.trace_id == run.trace_id]

    # the source run made two fresh model calls; the replay answered the agent call from the
    # record as a whole (no turn invoked), what it cost counted at the recorded usage
    assert [s["little.turn"] for s in chats(source)] == [1, 2]
    (served,) = chats(replay)
    assert served["little.replayed"] is True
    assert served["little.served_from_log"] is False
    assert served["little.replay_source_run_id"] == "run-source"
    assert served["little.model_calls"] == 2
    assert served["gen_ai.request.model"] == "gpt-4o-mini"
    # nothing was paid: no usage (a GenAI cost dashboard would count the source's twice), what
    # the record saved in attributes of little's own
    assert not [k for k in served.attributes if k.startswith("gen_ai.usage.")]
    assert "little.cost_usd" not in served.attributes
    assert served["little.avoided_input_tokens"] == 3000
    assert served["little.avoided_output_tokens"] == 200
    assert served["little.avoided_cost_usd"] > 0
    assert sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in chats(replay)) == 0
    assert sum(s["gen_ai.usage.input_tokens"] for s in chats(source)) == 3000
    assert not [
        s for s in spans if s.trace_id == replay.trace_id and s.name.startswith("execute_tool")
    ]


def test_a_failed_span_carries_the_error_type_never_its_message(tmp_path: Path) -> None:
    with Receiver() as receiver:
        child = _child(tmp_path / "world", "run-failing", "failing", _env(receiver))
        out, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 0, err
        spans = receiver.received()
    assert json.loads(out.strip().splitlines()[-1].removeprefix("RESULT "))["status"] == "failed"
    error = 2  # STATUS_CODE_ERROR
    tool = _one(spans, "execute_tool leaky")
    assert (tool.status_code, tool.status_message, tool["error.type"]) == (
        error,
        "ToolError",
        "ToolError",
    )
    step = _one(spans, "little.step fail")
    assert (step.status_code, step["error.type"]) == (error, "RuntimeError")
    run_span = _one(spans, "little.run traced_failing")
    assert (run_span.status_code, run_span["error.type"]) == (error, "RuntimeError")
    assert _one(spans, "little.step ask").status_code != error  # the model got the error
    assert SECRET not in repr(spans)


_BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def test_without_the_otel_packages_runs_work_and_nothing_is_imported(tmp_path: Path) -> None:
    script = _BLOCKER + textwrap.dedent(
        f"""
        import asyncio, json
        import little, little.tracing
        import tests.little.tracing.flows
        from little.runtime import lookup, run
        configured = little.tracing.configure_from_env("x")
        with little.local_world({str(tmp_path)!r}) as world:
            result = asyncio.run(run(world, lookup("traced"), None))
            headers = [dict(r.headers) for r in world.log.read_run(result.run_id)]
        print(json.dumps({{
            "status": result.status,
            "configured": configured,
            "available": little.tracing.available(),
            "traceparents": sum("traceparent" in h for h in headers),
            "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
        }}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"  # asked for, but not installed
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "status": "completed",
        "configured": False,
        "available": False,
        "traceparents": 0,
        "imported": [],
    }


@pytest.mark.parametrize("variable", ["", "OTEL_SDK_DISABLED"])
def test_the_sdk_is_set_up_only_when_an_exporter_is_asked_for(variable: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if variable:
        env.update(OTEL_TRACES_EXPORTER="console", OTEL_SDK_DISABLED="true")
    script = "import little.tracing as t; print(t.configure_from_env('x'), t.enabled())"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"]
    env.pop("OTEL_SDK_DISABLED", None)
    env["OTEL_TRACES_EXPORTER"] = "console"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["True", "True"]


@pytest.mark.parametrize(
    "entry",
    [
        "from little.cli import main; main()",
        "from little_services.projector.__main__ import main; main()",
        "from little_services.resume_coordinator.__main__ import main; main()",
    ],
)
def test_an_unknown_exporter_is_one_readable_line_and_exit_1(entry: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LITTLE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(OTEL_TRACES_EXPORTER="zipkin", LITTLE_WORKFLOWS="tests.little.tracing.flows")
    args = ["events", "some-run", "--data-dir", str(tmp_path)] if "little.cli" in entry else []
    done = subprocess.run(
        [sys.executable, "-c", entry, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 1, output
    assert "Traceback" not in output
    (line,) = [x for x in output.splitlines() if "OTEL_TRACES_EXPORTER" in x]
    assert "'zipkin'" in line
    assert "otlp" in line
