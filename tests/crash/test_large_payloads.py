"""Size limits on a real broker (issue 13): a 5 MB tool result and a 5 MB model response are
never attempted as records (the broker's ``message.max.bytes`` is about 1 MB): they go to the
artifact store and their events carry the refs. Both round-trip through a real crash (the
process SIGKILLs itself right after the event naming the payload is acked) and a resume in a
new process, which serves them from the log instead of calling the tool or the model again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from little.events import ModelResponded, ToolCallSucceeded
from little.replay import replay_run
from tests.crash.runner import open_world
from tests.crash.support import Scenario, counts
from tests.crash.workflows import BULK_BYTES

pytestmark = pytest.mark.kafka

# librdkafka's default message.max.bytes; the broker's default is 1,048,588.
MAX_RECORD = 1_000_000


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _check_log(sc: Scenario, run_id: str) -> dict[str, Any]:
    """Every record of the run is far under the limit; the payloads are refs that hash-check;
    ``replay_run`` hydrates them. Returns the run's output and where its events sit."""
    with open_world(str(sc.data_dir), sc.kafka) as world:
        records = list(world.log.read_run(run_id))
        assert max(len(r.payload) for r in records) < MAX_RECORD // 10
        events = [world.decode(r).event for r in records]
        results = [e for e in events if isinstance(e, ToolCallSucceeded)]
        responses = [e for e in events if isinstance(e, ModelResponded)]
        assert [r.result_json for r in results] == [None]
        assert results[0].result_ref is not None
        assert results[0].result_ref.size > BULK_BYTES
        assert responses[-1].response_ref is not None
        assert responses[-1].response_ref.size > BULK_BYTES
        for ref in (results[0].result_ref, responses[-1].response_ref):
            world.artifacts.verify(ref)
        state = replay_run(world, run_id).state
        assert state.status == "completed"
        output = state.output_json if state.output_ref is None else None
        assert output is None  # the 5 MB answer is a ref too
        assert state.output_ref is not None
        answer = json.loads(world.artifacts.get(state.output_ref))
        kinds = [e.event_type for e in events]
        return {
            "answer_sha": _sha(answer),
            "answer_size": len(answer),
            "answer_start": answer[:6],
            "tool_result_at": kinds.index("harness.tool_call.succeeded"),
            "response_at": len(kinds) - 1 - kinds[::-1].index("harness.model.responded"),
        }


def test_5_mb_tool_results_and_model_responses_survive_a_crash_and_a_resume_on_kafka(
    kafka_bootstrap_servers: str, tmp_path: Path, unique: str
) -> None:
    base = Scenario(tmp_path / "base", kafka=f"{kafka_bootstrap_servers}|t{unique}b.")
    done = base.start("bulky-base", "bulky", None)
    assert done.returncode == 0, done.describe()
    baseline = _check_log(base, "bulky-base")
    assert baseline["answer_size"] >= BULK_BYTES
    assert baseline["answer_start"] == "model-"  # the model's 5 MB content is the answer

    # The process appends the claim first (seq -1), so event k is the k-th record after it.
    for name, at in (("tool", baseline["tool_result_at"]), ("model", baseline["response_at"])):
        sc = Scenario(tmp_path / name, kafka=f"{kafka_bootstrap_servers}|t{unique}{name}.")
        run_id = f"bulky-{name}"
        first = sc.start(run_id, "bulky", None, LITTLE_CRASH_AFTER_EVENT=at)
        assert first.killed, first.describe()
        again = sc.resume(run_id)
        assert again.returncode == 0, again.describe()
        found = _check_log(sc, run_id)
        assert found["answer_sha"] == baseline["answer_sha"], name
        # Served from the log after the crash, not paid for again: the tool ran once, and
        # the model answered each turn once.
        assert counts(sc.calls("tools"), "tool") == {"bulk": 1}, name
        assert counts(sc.calls("model"), "turn") == {1: 1, 2: 1}, name
        assert sc.fold(run_id).accepted_claims == 2
