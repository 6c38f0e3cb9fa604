"""A process forked after ``import little`` (a fork server, ``multiprocessing``'s fork start
method) is a writer of its own: it names itself with its own pid on the events it writes and
reads its own crash hooks from its environment, whatever its parent read or counted."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator

import pytest

from little.runtime import _faults, _writer


@pytest.fixture(autouse=True)
def _faults_forgotten() -> Iterator[None]:
    yield
    _faults.FAULTS.reset()  # this process's hooks are read again by whatever runs next


def _in_a_child(body: str) -> str:
    """Fork, run ``body`` (Python, with ``_writer``, ``_faults`` and ``os`` in scope) in the
    child and return what it wrote to ``out``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            with os.fdopen(write, "w") as out:
                try:
                    exec(body, {"_writer": _writer, "_faults": _faults, "os": os, "out": out})
                    code = 0
                except BaseException:
                    out.write(traceback.format_exc())  # the parent's assertion shows it
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, text
    return text


def test_a_forked_child_writes_under_its_own_pid() -> None:
    parent = _writer.producer()
    assert parent.endswith(f"/{os.getpid()}")
    child = _in_a_child("out.write(_writer.producer() + ' ' + str(os.getpid()))")
    name, pid = child.split()
    assert name.endswith(f"/{pid}")
    assert name != parent


def test_a_forked_child_reads_its_own_crash_hooks_and_counts_from_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LITTLE_CRASH_AFTER_CALL", raising=False)
    _faults.FAULTS.call_returned()  # the parent read the hooks (none) and counted a call
    child = _in_a_child(
        "os.environ['LITTLE_CRASH_AFTER_CALL'] = '5'\n"
        "_faults.FAULTS.call_returned()\n"
        "out.write(f'{_faults.FAULTS.after_call} {_faults.FAULTS.calls}')"
    )
    assert child == "5 1"
