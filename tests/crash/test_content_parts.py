"""A crash with images in the conversation (issue 28 item 4): the prompt's photo and the page a
tool returned are in the artifact store, the log names them by sha256. The process is
SIGKILLed right after turn 2's model call returned (its request carried both images), before
its answer was recorded. The resume, in a new process, serves turn 1 and the tool call from
the log, rebuilds turn 2's request from the refs (the same request hash) and sends the real
``openai`` client the very same body: both images read back from the store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from little.events import ModelCalled, ModelResponded, ToolCallSucceeded
from tests.crash.agent_feature_workflows import PAGE, PHOTO
from tests.crash.support import Scenario, check_integrity

RUN = "run_content_parts"


def test_a_kill_after_a_turn_carrying_images_resumes_with_the_same_request(
    tmp_path: Path,
) -> None:
    sc = Scenario(tmp_path)
    # invocations: model turn 1 (0), the photograph tool (1), model turn 2 (2): killed after 2
    first = sc.start(RUN, "content_parts", None, LITTLE_CRASH_AFTER_CALL=2)
    assert first.killed, first.describe()
    before = [x.event for x in sc.events(RUN)]
    assert [e.turn for e in before if isinstance(e, ModelCalled)] == [1, 2]
    assert [e.turn for e in before if isinstance(e, ModelResponded)] == [1]
    (tool,) = [e for e in before if isinstance(e, ToolCallSucceeded)]
    page = hashlib.sha256(PAGE).hexdigest()
    assert json.loads(tool.result_json or "")["$parts"][1]["artifact"]["sha256"] == page

    second = sc.resume(RUN)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == "A receipt."
    photo = hashlib.sha256(PHOTO).hexdigest()
    http = sc.calls("http")
    assert [(h["turn"], h["pid"]) for h in http] == [
        (1, first.pid),
        (2, first.pid),
        (2, second.pid),  # only turn 2 asked again
    ]
    assert http[0]["images"] == [photo]
    assert http[1]["images"] == [photo, page]
    assert http[2]["body"] == http[1]["body"]  # the same bytes on the wire, from the store
    assert [t["pid"] for t in sc.calls("tools")] == [first.pid]  # the tool call was served

    after = [x.event for x in sc.events(RUN)]
    called = [e for e in after if isinstance(e, ModelCalled)]
    assert [e.turn for e in called] == [1, 2, 2]
    assert called[1].request_hash == called[2].request_hash
    check_integrity({RUN: sc.fold(RUN)})
