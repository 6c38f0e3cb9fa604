"""A real PostgreSQL server for tests: ``initdb`` + ``postgres`` in a temporary directory, on a
free 127.0.0.1 port, never a mock and never a skip.

``LITTLE_TEST_POSTGRES_URL`` (a server you run: ``postgresql://user:pass@host:port/db`` of a
role that may create databases) is used as it is. Otherwise the server binaries are taken from
``PATH`` or Debian's ``/usr/lib/postgresql/<version>/bin`` (``make system-deps`` installs the
``postgresql`` package when they are missing). ``initdb`` refuses to run as root, so as root
the server runs as the unprivileged ``postgres`` user the package creates (``runuser``), else
as ``nobody``; its data directory is made theirs. Each test gets a database of its own. The
server is the caller's child process and never outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

HOW_TO_GET_POSTGRES = (
    "No PostgreSQL for the PostgreSQL tests. Either export LITTLE_TEST_POSTGRES_URL="
    "postgresql://user:pass@host:port/db of a server you run, or install the server binaries "
    "(`make system-deps`, which runs `apt-get install postgresql`) so initdb and postgres exist."
)
USER, PASSWORD = "little", "little-test"


class NoPostgresError(RuntimeError):
    pass


@dataclass(frozen=True)
class PostgresServer:
    url: str
    """A URL of the server's maintenance database (``postgres``), as a superuser."""

    def database_url(self, name: str) -> str:
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(path=f"/{name}"))

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"little_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in the newest /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")
    candidates.sort(key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user() -> str | None:
    """Who runs the server: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise NoPostgresError("running as root and no unprivileged user (postgres, nobody) exists")


def _as(user: str | None, argv: list[str]) -> list[str]:
    return argv if user is None else ["runuser", "-u", user, "--", *argv]


# Loaded here, in the parent: the child runs as another user, who may not read this Python.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the server's child process, before exec: the kernel sends it SIGINT (PostgreSQL's
    fast shutdown) when the process that started it dies, however it dies (SIGKILL, a
    timeout's ``os._exit``), so no test run leaves a server behind."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGINT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Fast shutdown (SIGINT: disconnect clients, checkpoint, exit); immediate, then SIGKILL,
    if it does not end in time."""
    for sig, grace in ((signal.SIGINT, 60.0), (signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise NoPostgresError(f"PostgreSQL exited ({proc.returncode}):\n{_tail(log)}")
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise NoPostgresError(f"not ready in {timeout:.0f}s:\n{_tail(log)}") from exc
            time.sleep(0.05)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


@contextmanager
def postgres_server(*, fsync: bool = False) -> Iterator[PostgresServer]:
    """A server for a test session (or a benchmark, with ``fsync=True``).

    The server is this process's child (``postgres`` itself, not ``pg_ctl``'s daemon): it is
    stopped when the block ends, on success, failure or KeyboardInterrupt, and by the kernel
    if this process dies without ending the block."""
    env_url = os.environ.get("LITTLE_TEST_POSTGRES_URL")
    if env_url:
        yield PostgresServer(env_url)
        return
    initdb = find_binary("initdb")
    # the server of initdb's own version, beside it (PATH may hold symlinks to one of several)
    beside = Path(initdb).resolve().parent / "postgres" if initdb else None
    postgres = str(beside) if beside and beside.exists() else find_binary("postgres")
    if not initdb or not postgres:
        raise NoPostgresError(HOW_TO_GET_POSTGRES)
    user = _server_user()
    # /tmp, not $TMPDIR, when another user runs the server: it must reach the directory
    root = Path(tempfile.mkdtemp(prefix="little-pg-", dir="/tmp" if user else None))
    data, sock, log = root / "data", root / "sock", root / "server.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        sock.mkdir()
        pwfile = root / "pw"
        pwfile.write_text(PASSWORD)
        if user is not None:
            entry = pwd.getpwnam(user)
            for p in (root, sock, pwfile):
                os.chown(p, entry.pw_uid, entry.pw_gid)
        try:
            subprocess.run(
                _as(
                    user,
                    [
                        initdb,
                        "-D",
                        str(data),
                        "-U",
                        USER,
                        f"--pwfile={pwfile}",
                        "--auth=scram-sha-256",
                        "--locale=C",
                        "--encoding=UTF8",
                    ],
                ),
                check=True,
                capture_output=True,
                text=True,
            )
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or exc.stdout or "").strip()
            raise NoPostgresError(
                f"could not start PostgreSQL ({' '.join(exc.cmd)}): {detail}"
            ) from exc
        port = _free_port()
        options = ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"]
        if not fsync:
            options += ["-c", "fsync=off", "-c", "full_page_writes=off"]
        url = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [postgres, "-D", str(data), "-p", str(port), "-k", str(sock), *options],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=user,
                group=pwd.getpwnam(user).pw_gid if user is not None else None,
                extra_groups=[] if user is not None else None,
                preexec_fn=_die_with_parent,
            )
        _wait_ready(proc, url, log, timeout=60)
        yield PostgresServer(url)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)
