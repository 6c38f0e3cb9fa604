"""Finding a real Kafka broker for the tests. Never a mock, never a skip.

Order: ``LITTLE_TEST_KAFKA_BOOTSTRAP``; a testcontainers Redpanda if a Docker engine answers;
the local JVM broker (``deploy/local-kafka/kafka.sh``) if java and mvn exist. With none of
these the Kafka tests fail with a message that says how to get a broker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "deploy" / "local-kafka" / "kafka.sh"

HOW_TO_GET_A_BROKER = (
    "No Kafka broker for the Kafka tests. Get one by any of: "
    "(1) export LITTLE_TEST_KAFKA_BOOTSTRAP=host:port of a broker you run; "
    "(2) run a Docker engine (testcontainers starts Redpanda); "
    "(3) install a JDK 17+ and Maven (`apt-get install openjdk-17-jdk-headless maven`) so "
    "deploy/local-kafka/kafka.sh can start Apache Kafka from Maven Central jars."
)


class NoBrokerError(RuntimeError):
    pass


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@contextmanager
def kafka_bootstrap() -> Iterator[str]:
    """Yield a bootstrap address of a real broker for the test session."""
    env = os.environ.get("LITTLE_TEST_KAFKA_BOOTSTRAP")
    if env:
        yield env
        return
    if _docker_answers():
        from testcontainers.kafka import RedpandaContainer

        with RedpandaContainer() as container:
            yield container.get_bootstrap_server()
        return
    if shutil.which("java") and shutil.which("mvn"):
        started = subprocess.run(
            [str(KAFKA_SH), "start"], capture_output=True, text=True, timeout=600
        )
        if started.returncode != 0:
            raise NoBrokerError(
                f"deploy/local-kafka/kafka.sh start failed:\n{started.stdout}\n{started.stderr}"
            )
        bootstrap = subprocess.run(
            [str(KAFKA_SH), "bootstrap"], capture_output=True, text=True, check=True
        ).stdout.strip()
        try:
            yield bootstrap
        finally:
            if os.environ.get("LITTLE_TEST_KEEP_BROKER") != "1":
                subprocess.run([str(KAFKA_SH), "stop"], capture_output=True, timeout=120)
        return
    raise NoBrokerError(HOW_TO_GET_A_BROKER)
