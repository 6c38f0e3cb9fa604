"""A real PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary directory, on a
free 127.0.0.1 port, never a mock and never a skip.

``LITTLE_TEST_POSTGRES_URL`` (a server you run: ``postgresql://user:pass@host:port/db`` of a
role that may create databases) is used as it is. Otherwise the server binaries are taken from
``PATH`` or Debian's ``/usr/lib/postgresql/<version>/bin`` (``make system-deps`` installs the
``postgresql`` package when they are missing). ``initdb`` refuses to run as root, so as root
the server runs as the unprivileged ``postgres`` user the package creates (``runuser``), else
as ``nobody``; its data directory is made theirs. Each test gets a database of its own.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

HOW_TO_GET_POSTGRES = (
    "No PostgreSQL for the PostgreSQL tests. Either export LITTLE_TEST_POSTGRES_URL="
    "postgresql://user:pass@host:port/db of a server you run, or install the server binaries "
    "(`make system-deps`, which runs `apt-get install postgresql`) so initdb and pg_ctl exist."
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


@contextmanager
def postgres_server(*, fsync: bool = False) -> Iterator[PostgresServer]:
    """A server for a test session (or a benchmark, with ``fsync=True``)."""
    env_url = os.environ.get("LITTLE_TEST_POSTGRES_URL")
    if env_url:
        yield PostgresServer(env_url)
        return
    initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
    if not initdb or not pg_ctl:
        raise NoPostgresError(HOW_TO_GET_POSTGRES)
    user = _server_user()
    # /tmp, not $TMPDIR, when another user runs the server: it must reach the directory
    root = Path(tempfile.mkdtemp(prefix="little-pg-", dir="/tmp" if user else None))
    data, sock, log = root / "data", root / "sock", root / "server.log"
    sock.mkdir()
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD)
    if user is not None:
        entry = pwd.getpwnam(user)
        for p in (root, sock, pwfile):
            os.chown(p, entry.pw_uid, entry.pw_gid)
    port = _free_port()
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
        options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections=200" + (
            "" if fsync else " -c fsync=off -c full_page_writes=off"
        )
        subprocess.run(
            _as(
                user,
                [pg_ctl, "start", "-w", "-t", "60", "-D", str(data), "-l", str(log), "-o", options],
            ),
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or "").strip()
        if log.exists():
            detail += "\n" + log.read_text()[-2000:]
        shutil.rmtree(root, ignore_errors=True)
        raise NoPostgresError(
            f"could not start PostgreSQL ({' '.join(exc.cmd)}): {detail}"
        ) from exc
    try:
        yield PostgresServer(f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres")
    finally:
        subprocess.run(
            _as(user, [pg_ctl, "stop", "-m", "fast", "-w", "-D", str(data)]),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
