"""Child processes without the interpreter's start-up: a server that has imported a module
once forks a process per request, which runs that module as ``python -m MODULE ARGS`` would.

A fresh ``python -m tests.crash.runner`` spends a second or more of CPU importing ``little``
before it does anything; the crash tests start hundreds of them. Each child here is a real
process of its own (its own pid, environment, working directory and session; it can be
SIGKILLed and its exit status is the kernel's), forked from a server holding nothing but
imported modules: the third-party ones and ``little``, which takes no state when imported
(its producer name, crash hooks and wait hold are read at first use, and again in a forked
child: ``os.register_at_fork``). The child imports the services and the tests' modules
itself (they register workflows, read the environment), exactly as a fresh interpreter would.

The server is a child of the test process and dies with it (a parent-death signal); its
children die with the server. Linux only: elsewhere ``spawn`` starts a fresh interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import runpy
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, sig)


# ------------------------------------------------------------------------------------------
# The client side (the test process)


class ForkedChild:
    """The subset of ``subprocess.Popen`` the tests use, for a child the server forked."""

    def __init__(self, server: ForkServer, conn: socket.socket, pid: int, out: Path, err: Path):
        self._server, self._conn, self.pid = server, conn, pid
        self._out, self._err = out, err
        self.returncode: int | None = None

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                return None
            line = _read_line(self._conn)
            self._conn.close()
            # no line: the server died, and took its children with it
            self.returncode = int(json.loads(line)["returncode"]) if line else -signal.SIGKILL
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0.0)
        return code

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out = self._out.read_text(errors="replace")
        err = self._err.read_text(errors="replace")
        for p in (self._out, self._err):
            p.unlink(missing_ok=True)
        return out, err


class ForkServer:
    """A server that imported ``preload``; ``spawn`` runs ``python -m module *args``."""

    def __init__(self, preload: str, env: dict[str, str], cwd: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="little-fork-"))
        self.address = str(self.dir / "sock")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", self.address, preload, str(os.getpid())],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            # as a fresh interpreter's would be under a test: not a terminal
            stdout=subprocess.DEVNULL,
            stderr=(self.dir / "server.log").open("wb"),
            # the kernel's parent-death signal follows the thread that forks: only the main
            # thread lives as long as this process (the server also watches its parent)
            preexec_fn=_die_with_parent
            if threading.current_thread() is threading.main_thread()
            else None,
        )
        deadline = time.monotonic() + 120
        while not os.path.exists(self.address):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server for {preload} did not start")
            time.sleep(0.02)

    def spawn(
        self, module: str | None, args: list[str], env: dict[str, str], cwd: Path, code: str = ""
    ) -> ForkedChild:
        """``python -m module *args``, or ``python -c code *args`` when ``module`` is None."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.address)
        fd, out = tempfile.mkstemp(dir=self.dir, suffix=".out")
        os.close(fd)
        fd, err = tempfile.mkstemp(dir=self.dir, suffix=".err")
        os.close(fd)
        request = {"module": module, "code": code, "args": args, "env": env, "cwd": str(cwd)}
        request.update(out=out, err=err)
        body = json.dumps(request).encode()
        conn.sendall(struct.pack("!I", len(body)) + body)
        pid = int(json.loads(_read_line(conn))["pid"])
        return ForkedChild(self, conn, pid, Path(out), Path(err))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_servers: dict[tuple[str | None, ...], ForkServer] = {}
_lock = threading.Lock()


IMPORT_TIME_ENV = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONWARNINGS",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERMINAL_WIDTH",
    "COLUMNS",
    "LINES",
    "TERM",
    "COLORTERM",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "FORCE_COLOR",
    "NO_COLOR",
    "GITHUB_ACTIONS",
    "_TYPER_STANDARD_TRACEBACK",
    "_TYPER_FORCE_DISABLE_TERMINAL",
)
"""What the interpreter or a preloaded module reads when it starts or is imported: children
that differ in any of these fork from different servers."""


def server_for(preload: str, env: dict[str, str], cwd: Path) -> ForkServer | None:
    """The server of ``preload`` for a child with environment ``env``: one per preloaded module
    and per value of what is read at start-up (``IMPORT_TIME_ENV``, the server started with
    the child's values of those), started on first use, stopped at exit. None off Linux."""
    if sys.platform != "linux":
        return None
    startup = tuple(env.get(k) for k in IMPORT_TIME_ENV)
    key = (preload, *startup)
    with _lock:
        if key not in _servers:
            base = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
            for name, value in zip(IMPORT_TIME_ENV, startup, strict=True):
                base.pop(name, None)
                if value is not None:
                    base[name] = value
            _servers[key] = ForkServer(preload, base, cwd)
        return _servers[key]


@atexit.register
def _stop_all() -> None:
    for server in _servers.values():
        server.stop()
    _servers.clear()


# ------------------------------------------------------------------------------------------
# The server side (``python -m tests.forkserver ADDRESS PRELOAD PARENT_PID``)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m module *args`` and never return."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()  # the server's death ends its children
        for target, path in ((1, request["out"]), (2, request["err"])):
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(fd, target)
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        # exit handlers are the child's own, run at its end as an interpreter's are (the
        # OpenTelemetry SDK flushes its spans there); the server's are not inherited
        atexit._clear()
        try:
            if request["module"] is None:  # python -c CODE ARGS
                sys.argv = ["-c", *request["args"]]
                sys.path[0] = ""
                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(request["code"], "<string>", "exec"), main.__dict__)
            else:  # python -m MODULE ARGS
                sys.argv = [request["module"], *request["args"]]
                sys.path[0] = os.getcwd()
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


_OWN = ("little_services", "tests", "__main__")
_LIST_IMPORTS = (
    "import importlib, sys; importlib.import_module(sys.argv[1]); "
    f"print('\\n'.join(m for m in sys.modules if m.split('.')[0] not in {_OWN!r}))"
)


def _preload(module: str) -> None:
    """Import what importing ``module`` imports, but for the services' and the tests' modules:
    those keep state taken when imported (registered workflows, the environment), so every
    child imports them itself, as a fresh interpreter would."""
    names = subprocess.run(
        [sys.executable, "-c", _LIST_IMPORTS, module], capture_output=True, text=True, check=True
    ).stdout.split()
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if threading.active_count() != 1:  # a thread would not survive the fork
        raise SystemExit(f"importing {module}'s dependencies started a thread")


def _serve(address: str, preload: str, parent: int) -> None:
    _preload(preload)
    children: dict[int, socket.socket] = {}

    def end(signum: int, frame: object) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if os.getppid() != parent:  # no client left to remove the directory
            shutil.rmtree(os.path.dirname(address), ignore_errors=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, end)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    listener.listen(64)
    os.rename(address + ".tmp", address)  # the client waits for the name: bound and listening
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        if os.getppid() != parent:  # the test process is gone: so are we and our children
            end(signal.SIGTERM, None)
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(True)
                (size,) = struct.unpack("!I", _recv_exact(conn, 4))
                request = json.loads(_recv_exact(conn, size))
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    _child(request)
                children[pid] = conn
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            else:
                os.read(wake_r, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            waiting = children.pop(pid, None)
            if waiting is not None:
                with contextlib.suppress(OSError):
                    message = json.dumps({"returncode": _returncode(status)}).encode() + b"\n"
                    waiting.sendall(message)
                waiting.close()


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("the client went away")
        buf += chunk
    return bytes(buf)


def _read_line(conn: socket.socket) -> bytes:
    """One newline-ended message, read a byte at a time (nothing buffered past it); b"" at EOF."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            return b""
        buf += chunk
    return bytes(buf)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else os.getppid())
