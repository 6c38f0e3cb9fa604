"""The Kafka path over SASL/SCRAM-SHA-512 on TLS, for real: the module's own broker is started
by ``deploy/local-kafka/kafka.sh`` with ``LITTLE_KAFKA_SECURITY=sasl_ssl`` (a CA and a broker
certificate made by keytool at start, the SCRAM user written at format time).

A workflow, the projector and the resume coordinator run through it with their settings from
``LITTLE_KAFKA_*``; wrong credentials fail at once naming authentication (the wait is bounded
by the client's connect timeout, and the error comes from the broker's refusal, not from that
bound); no secret value (SASL password, API token) is in any log or error text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import little
from little.commands import CommandPublisher, StartRun
from little.errors import KafkaAuthenticationError
from little.log import COMMANDS_TOPIC, load_topic_specs
from little.log.kafka import apply_topics
from little.replay import fold_run
from tests.faults.support import (
    OwnBroker,
    check_stream,
    child_env,
    result_of,
    spawn_runner,
    wait_until,
    world_of,
)
from tests.faults.workflows import CALLS_DIR
from tests.integration.coordinator_support import (
    COORDINATOR_WORKFLOWS,
    dockerfile_command,
    free_port,
)
from tests.projection_runs import fresh_topics

pytestmark = pytest.mark.kafka

USER = "little-app"
PASSWORD = "scram-PW-7f3a91c2e5"
"""The SASL password: a known value, looked for in every log and error text."""
API_TOKEN = "api-TOKEN-5b8e02d4aa"
WRONG_TOKEN = "wrong-TOKEN-9c1d77e0bf"
SECRETS = (PASSWORD, API_TOKEN, WRONG_TOKEN)


class Secured:
    def __init__(self, broker: OwnBroker, client: dict[str, str]) -> None:
        self.broker = broker
        self.client = client
        self.bootstrap = broker.bootstrap


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    broker = OwnBroker(
        tmp_path_factory.mktemp("sasl") / "kafka",
        LITTLE_KAFKA_SECURITY="sasl_ssl",
        LITTLE_KAFKA_SCRAM_USER=USER,
        LITTLE_KAFKA_SCRAM_PASSWORD=PASSWORD,
    )
    broker.start()
    try:
        listed = broker.tool("client-env")
        assert listed.returncode == 0, listed.stderr
        client = dict(line.split("=", 1) for line in listed.stdout.split())
        assert client["LITTLE_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        saved = {k: os.environ.get(k) for k in client}
        os.environ.update(client)  # this module's own clients (topics, checks) connect too
        try:
            yield Secured(broker, client)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        broker.stop()


def topics_for(secured: Secured, tag: str) -> dict[str, str]:
    settings = fresh_topics(secured.bootstrap, tag, partitions=3)
    commands = f"t.{tag}.commands"
    spec = load_topic_specs()[COMMANDS_TOPIC]
    apply_topics(secured.bootstrap, [replace(spec, name=commands, partitions=3)])
    return {**settings, "LITTLE_COMMANDS_TOPIC": commands}


def test_plaintext_clients_are_not_served_by_the_sasl_ssl_listener(secured: Secured) -> None:
    with pytest.raises(little.BrokerUnavailableError):
        little.kafka_world(secured.bootstrap, security_protocol="PLAINTEXT")


def test_a_workflow_the_projector_and_the_coordinator_run_over_sasl_ssl(
    secured: Secured, unique: str, tmp_path: Path
) -> None:
    settings = {
        **topics_for(secured, unique),
        **secured.client,
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
        "LITTLE_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "LITTLE_LOG_LEVEL": "debug",
        "LITTLE_API_TOKEN": API_TOKEN,
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    calls = tmp_path / "calls"

    # 1. a workflow process writes a run
    direct = f"direct-{unique}"
    writer = spawn_runner(
        ["run", direct, "faults.chatter", json.dumps({"turns": 3, "latency": 0})],
        child_env(settings, **{CALLS_DIR: str(calls)}),
        logs / "writer.log",
    )
    out, _ = writer.communicate(timeout=120)
    assert writer.returncode == 0, (logs / "writer.log").read_text()[-3000:]
    assert result_of(out)["status"] == "completed"

    # 2. the coordinator executes a StartRun
    coordinator_port = free_port()
    command = dockerfile_command()
    coordinator_env = child_env(
        settings,
        LITTLE_COORDINATOR_GROUP=f"coord-{unique}",
        LITTLE_COORDINATOR_ID=f"coord-{unique}",
        LITTLE_WORKFLOWS=f"{COORDINATOR_WORKFLOWS},tests.faults.workflows",
        LITTLE_HTTP_HOST="127.0.0.1",
        LITTLE_HTTP_PORT=str(coordinator_port),
        LITTLE_LEASE_SECONDS="5",
        LITTLE_SESSION_TIMEOUT_MS="6000",
        **{CALLS_DIR: str(calls)},
    )
    projector_port = free_port()
    projector_env = child_env(
        settings, LITTLE_HTTP_HOST="127.0.0.1", LITTLE_HTTP_PORT=str(projector_port)
    )
    with (logs / "coordinator.log").open("ab") as clog, (logs / "projector.log").open("ab") as plog:
        coordinator = subprocess.Popen(
            [str(Path(sys.executable).parent / command[0]), *command[1:]],
            env=coordinator_env,
            stdout=clog,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        projector = subprocess.Popen(
            [sys.executable, "-m", "little_services.projector"],
            env=projector_env,
            stdout=subprocess.DEVNULL,
            stderr=plog,
        )
    via_coordinator = f"coord-{unique}"
    try:
        wait_until(
            lambda: _ready(coordinator_port) or coordinator.poll() is not None,
            90,
            "the coordinator to own its partitions",
        )
        assert coordinator.poll() is None, (logs / "coordinator.log").read_text()[-3000:]
        with CommandPublisher(secured.bootstrap, topic=settings["LITTLE_COMMANDS_TOPIC"]) as pub:
            pub.send([StartRun.of(via_coordinator, "faults.chatter", {"turns": 3, "latency": 0})])
        with world_of(settings) as world:

            def completed(run_id: str) -> bool:
                state, _, _ = fold_run(world, run_id, use_snapshot=False)
                return state.status == "completed"

            wait_until(lambda: completed(via_coordinator), 90, "the coordinator's run")
            for run_id in (direct, via_coordinator):
                check_stream(list(world.read_run(run_id)))

        # 3. the projector folds both, and serves them behind its bearer token
        def projected() -> bool:
            try:
                return all(
                    _get(projector_port, f"/runs/{r}", API_TOKEN)["status"] == "completed"
                    for r in (direct, via_coordinator)
                )
            except (OSError, KeyError):
                return False

        wait_until(projected, 90, "the projector to serve both runs")
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(projector_port, f"/runs/{direct}", WRONG_TOKEN)
        assert refused.value.code == 401
        with pytest.raises(urllib.error.HTTPError) as missing:
            _get(projector_port, f"/runs/{direct}", None)
        assert missing.value.code == 401
    finally:
        for proc in (coordinator, projector):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    texts = {p.name: p.read_text(errors="replace") for p in logs.iterdir()}
    texts["broker.log"] = (secured.broker.data_dir / "broker.log").read_text(errors="replace")
    assert "http_unauthorized" in texts["projector.log"]
    for name, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{name} holds a secret"


def test_wrong_credentials_fail_at_once_naming_authentication(
    secured: Secured, unique: str, tmp_path: Path
) -> None:
    wrong = "wrong-PW-0e4c6b1a93"
    settings = {
        **topics_for(secured, unique),
        **secured.client,
        "LITTLE_KAFKA_SASL_PASSWORD": wrong,
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
    }
    # in-process: the typed error, raised on the broker's refusal (the bound is the client's
    # connect timeout of 10 s: a BrokerUnavailableError would say it ran out)
    saved = os.environ["LITTLE_KAFKA_SASL_PASSWORD"]
    os.environ["LITTLE_KAFKA_SASL_PASSWORD"] = wrong
    try:
        with pytest.raises(KafkaAuthenticationError) as caught:
            little.kafka_world(secured.bootstrap)
    finally:
        os.environ["LITTLE_KAFKA_SASL_PASSWORD"] = saved
    message = str(caught.value)
    assert "authentication failed" in message
    assert repr(USER) in message
    assert wrong not in message
    assert PASSWORD not in message

    # a workflow process and the coordinator: non-zero exit, authentication named
    log = tmp_path / "writer.log"
    writer = spawn_runner(["run", f"r-{unique}", "faults.chatter", "{}"], child_env(settings), log)
    writer.communicate(timeout=60)
    assert writer.returncode != 0
    text = log.read_text()
    assert "KafkaAuthenticationError" in text
    assert "authentication failed" in text
    command = dockerfile_command()
    done = subprocess.run(
        [str(Path(sys.executable).parent / command[0]), *command[1:]],
        env=child_env(
            settings,
            LITTLE_COORDINATOR_GROUP=f"coord-{unique}",
            LITTLE_WORKFLOWS="tests.faults.workflows",
            LITTLE_HTTP_PORT=str(free_port()),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "authentication failed" in done.stdout + done.stderr
    for secret in (wrong, PASSWORD):
        assert secret not in text
        assert secret not in done.stdout + done.stderr


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _get(port: int, path: str, token: str | None) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=5) as r:
        body: dict[str, object] = json.loads(r.read())
        return body
