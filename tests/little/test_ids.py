"""Random ids from the pool (``little._ids``): what ``uuid.uuid4()`` gives, without a system
call per id, never one twice, and never the parent's in a forked child."""

from __future__ import annotations

import os
import threading
import uuid

from little._ids import new_uuid, new_uuid_hex


def test_an_id_is_a_version_4_uuid_in_its_text_form() -> None:
    for _ in range(600):  # more than two refills
        text = new_uuid()
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    hexed = new_uuid_hex()
    assert uuid.UUID(hex=hexed).hex == hexed
    assert uuid.UUID(hex=hexed).version == 4


def test_threads_drawing_at_once_never_get_one_id_twice() -> None:
    drawn: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(drawn))

    def draw(into: list[str]) -> None:
        start.wait()
        for _ in range(3000):
            into.append(new_uuid())

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for into in drawn for i in into]
    assert len(every) == 8 * 3000
    assert len(set(every)) == len(every)


def test_a_forked_child_never_draws_the_ids_its_parent_holds() -> None:
    new_uuid()
    if not new_uuid._ids:  # the last of a batch: draw into the next one
        new_uuid()
    assert new_uuid._ids  # the pool holds ids now: the child gets a copy of it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first ids, to the parent
        try:
            os.write(write, ",".join(new_uuid() for _ in range(10)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs = set(pipe.read().split(","))
    os.waitpid(pid, 0)
    parents = {new_uuid() for _ in range(300)}  # the rest of the pool, and then some
    assert len(childs) == 10
    assert not childs & parents
