"""Finding a real Kafka broker for the tests. Never a mock, never a skip.

Order: ``LITTLE_TEST_KAFKA_BOOTSTRAP``; a testcontainers Redpanda if a Docker engine answers;
the local JVM broker (``deploy/local-kafka/kafka.sh``) if java and mvn exist. With none of
these the Kafka tests fail with a message that says how to get a broker.

A run spread over pytest-xdist workers (``make test``: ``-n 2``) shares one broker: the
controlling process starts it in the background (``BrokerForWorkers``) while the workers
collect and run the tests that need none, and writes its address, or why there is none, to a
file the workers name in ``LITTLE_TEST_KAFKA_BOOTSTRAP_FILE``; a worker's first Kafka test
waits for that file. The controller stops the broker when the run ends.

The local JVM broker of a test session is not the developer's (``make kafka-start``): it has a
data dir of its own, deleted before each start, and free ports. A session's topics are not
wanted by the next one, and a broker that starts on the logs of every earlier run (SIGKILLed at
the end of one) spends minutes recovering their segments before it answers. The dir is the
first of ``LITTLE_TEST_KAFKA_DATA`` (default ``~/.cache/little/kafka-test``), ``...-1``,
``...-2``, ... whose lock file no live session holds (``flock``, released when the process ends
however it ends): two test sessions on one machine never stop each other's broker, and the next
session to take a dir stops a broker its dead owner left running.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "deploy" / "local-kafka" / "kafka.sh"

HOW_TO_GET_A_BROKER = (
    "No Kafka broker for the Kafka tests. Get one by any of: "
    "(1) export LITTLE_TEST_KAFKA_BOOTSTRAP=host:port of a broker you run; "
    "(2) run a Docker engine (testcontainers starts Redpanda); "
    "(3) install a JDK 17+ and Maven (`apt-get install openjdk-17-jdk-headless maven`) so "
    "deploy/local-kafka/kafka.sh can start Apache Kafka from Maven Central jars."
)


TEST_KAFKA_DATA = Path(
    os.environ.get("LITTLE_TEST_KAFKA_DATA", Path.home() / ".cache" / "little" / "kafka-test")
)
"""The first data dir a test session's own local broker may take (see the module's doc)."""
TEST_KAFKA_DIRS = 16


def _claim_data_dir() -> tuple[Path, IO[str]]:
    """The first test broker data dir no live session holds, and its held lock file."""
    TEST_KAFKA_DATA.parent.mkdir(parents=True, exist_ok=True)
    for n in range(TEST_KAFKA_DIRS):
        data = TEST_KAFKA_DATA.with_name(TEST_KAFKA_DATA.name + (f"-{n}" if n else ""))
        lock = open(data.with_name(data.name + ".lock"), "w")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return data, lock
    raise NoBrokerError(
        f"{TEST_KAFKA_DIRS} test sessions on this machine hold a test broker data dir "
        f"({TEST_KAFKA_DATA}, -1, ...); let one end"
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


BOOTSTRAP_FILE = "LITTLE_TEST_KAFKA_BOOTSTRAP_FILE"
"""Where a worker of a distributed run finds the broker its controller started."""
BROKER_START_TIMEOUT = 900.0
"""How long a worker waits for the controller's broker (a first start downloads the jars)."""


@contextmanager
def kafka_bootstrap() -> Iterator[str]:
    """Yield a bootstrap address of a real broker for the test session."""
    env = os.environ.get("LITTLE_TEST_KAFKA_BOOTSTRAP")
    if env:
        yield env
        return
    shared = os.environ.get(BOOTSTRAP_FILE)
    if shared:
        yield _wait_for_controller(Path(shared))
        return
    with _own_broker() as bootstrap:
        yield bootstrap


@contextmanager
def _own_broker() -> Iterator[str]:
    if _docker_answers():
        from testcontainers.kafka import RedpandaContainer

        with RedpandaContainer() as container:
            yield container.get_bootstrap_server()
        return
    if shutil.which("java") and shutil.which("mvn"):
        data, lock = _claim_data_dir()
        env = {
            **os.environ,
            "LITTLE_KAFKA_DATA": str(data),
            "LITTLE_KAFKA_PORT": str(_free_port()),
            "LITTLE_KAFKA_CONTROLLER_PORT": str(_free_port()),
        }

        def kafka_sh(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(KAFKA_SH), command], capture_output=True, text=True, timeout=timeout, env=env
            )

        try:
            reset = kafka_sh("reset", 180)  # stops a broker an interrupted session left running
            if reset.returncode != 0:
                raise NoBrokerError(
                    f"deploy/local-kafka/kafka.sh reset of {data} failed:\n"
                    f"{reset.stdout}\n{reset.stderr}"
                )
            started = kafka_sh("start", 600)
            if started.returncode != 0:
                raise NoBrokerError(
                    f"deploy/local-kafka/kafka.sh start failed:\n{started.stdout}\n{started.stderr}"
                )
            bootstrap = f"127.0.0.1:{env['LITTLE_KAFKA_PORT']}"
        except BaseException:  # a start cut short may have left the JVM up
            kafka_sh("stop", 120)
            lock.close()
            raise
        try:
            yield bootstrap
        finally:
            if os.environ.get("LITTLE_TEST_KEEP_BROKER") != "1":
                kafka_sh("stop", 120)
            lock.close()
        return
    raise NoBrokerError(HOW_TO_GET_A_BROKER)


def _wait_for_controller(path: Path) -> str:
    deadline = time.monotonic() + BROKER_START_TIMEOUT
    while not path.exists():  # written whole by a rename: present means complete
        if time.monotonic() > deadline:
            raise NoBrokerError(
                f"the broker the test run's controller was starting did not come up within "
                f"{BROKER_START_TIMEOUT:.0f} s (waited for {path})"
            )
        time.sleep(0.2)
    found = json.loads(path.read_text())
    if "error" in found:
        raise NoBrokerError(str(found["error"]))
    return str(found["bootstrap"])


class BrokerForWorkers:
    """The broker of a distributed run, started by its controlling process in a thread (so
    the workers start meanwhile), its address written to ``path`` for them; ``stop`` ends it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-for-workers", daemon=True)
        self._thread.start()

    def _publish(self, found: dict[str, str]) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(found))
        partial.rename(self.path)

    def _run(self) -> None:
        try:
            with _own_broker() as bootstrap:
                self._publish({"bootstrap": bootstrap})
                self._stop.wait()
        except BaseException as exc:  # the workers' Kafka tests fail with why
            if not self.path.exists():
                self._publish({"error": str(exc) or type(exc).__name__})
        finally:
            self._stopped.set()

    def stop(self) -> None:
        """End the broker (waiting for a start still under way: it is bounded by kafka.sh's
        own timeouts) and remove the address file's directory."""
        self._stop.set()
        self._stopped.wait(timeout=BROKER_START_TIMEOUT)
        shutil.rmtree(self.path.parent, ignore_errors=True)


class PrivateBroker:
    """A broker of one test's own: the local JVM broker on free ports with its own data dir,
    for faults that would disturb the shared broker (SIGSTOP, SIGKILL)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.env = {
            **os.environ,
            "LITTLE_KAFKA_DATA": str(data_dir),
            "LITTLE_KAFKA_PORT": str(self.port),
            "LITTLE_KAFKA_CONTROLLER_PORT": str(_free_port()),
            "LITTLE_KAFKA_CDS": "0",
        }
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if not (shutil.which("java") and shutil.which("mvn")):
            raise NoBrokerError(
                "this test needs a broker of its own from deploy/local-kafka/kafka.sh: "
                + HOW_TO_GET_A_BROKER.split("(3) ", 1)[1]
            )
        try:
            done = subprocess.run(
                [str(KAFKA_SH), "start"], capture_output=True, text=True, timeout=600, env=self.env
            )
            if done.returncode != 0:
                raise NoBrokerError(f"private broker did not start:\n{done.stdout}\n{done.stderr}")
        except BaseException:  # a start cut short may have left the JVM up
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return int((self.data_dir / "broker.pid").read_text().strip())

    def stop(self) -> None:
        subprocess.run([str(KAFKA_SH), "stop"], capture_output=True, timeout=120, env=self.env)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
