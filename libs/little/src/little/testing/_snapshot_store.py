"""The SnapshotStore conformance suite."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from little.errors import LogError
from little.snapshots import SnapshotStore
from little.testing._child import BackendSpec, missing_hook, run_child, suite_name
from little.testing._event_log import _same_partition_runs


def _noise(size: int, seed: int) -> bytes:
    """``size`` bytes that no store could keep by accident (every byte value, no pattern)."""
    return random.Random(seed).randbytes(size)


class SnapshotStoreConformance:
    """What every ``SnapshotStore`` backend does: the newest bytes per run, kept exactly.

    A subclass supplies the ``backend_spec`` fixture (fresh storage for one test, as JSON) and
    ``open_store`` (a ``SnapshotStore`` on that storage: called several times per test, in this
    process and in a child process, which must all see one store). Child processes import the
    subclass by ``module:qualname``.

    ``large_payload_bytes`` is a size the backend keeps. A backend with a size limit worth
    trying subclasses ``LimitedSnapshotStoreConformance`` instead.
    """

    partitions: ClassVar[int] = 3
    """How many partitions the storage of ``backend_spec`` has, for a backend that partitions
    snapshots (the suite then puts several runs of one partition)."""

    large_payload_bytes: ClassVar[int] = 4 << 20

    @pytest.fixture
    def backend_spec(self) -> BackendSpec:
        """Fresh, empty storage for one test (override: a fixture, it may use others)."""
        raise missing_hook(self, "the backend_spec fixture")

    def open_store(self, spec: BackendSpec) -> SnapshotStore:
        """A ``SnapshotStore`` on the storage ``spec`` names (the caller closes it)."""
        raise missing_hook(self, "open_store")

    @pytest.fixture
    def store(self, backend_spec: BackendSpec) -> Iterator[SnapshotStore]:
        opened = self.open_store(backend_spec)
        yield opened
        opened.close()

    def same_partition_runs(self, n: int) -> list[str]:
        """``n`` run ids in partition 0, for a backend that partitions snapshots."""
        return _same_partition_runs(n, self.partitions)

    # -- one store ---------------------------------------------------------------------------

    def test_a_run_never_put_has_no_snapshot(self, store: SnapshotStore) -> None:
        assert store.get("never-put") is None
        store.put("run-1", b"one")
        assert store.get("never-put") is None
        assert store.get("run-") is None  # a prefix of a stored run is another run
        assert store.get("run-10") is None

    def test_put_then_get_returns_the_bytes_exactly(self, store: SnapshotStore) -> None:
        payload = bytes(range(256)) * 3 + b"\x00\x00" + _noise(1000, seed=1) + b"\x00"
        store.put("run-x", payload)
        got = store.get("run-x")
        assert isinstance(got, bytes)
        assert got == payload

    def test_a_later_put_replaces_the_snapshot(self, store: SnapshotStore) -> None:
        store.put("run-r", _noise(5000, seed=2))
        store.put("run-r", b"shorter")  # nothing of the longer one is left behind
        assert store.get("run-r") == b"shorter"
        for i in range(10):
            store.put("run-r", f"v{i}".encode())
        assert store.get("run-r") == b"v9"

    def test_an_empty_payload_is_a_snapshot_not_a_deletion(self, store: SnapshotStore) -> None:
        store.put("run-e", b"before")
        store.put("run-e", b"")
        assert store.get("run-e") == b""
        store.put("run-e", b"after")
        assert store.get("run-e") == b"after"

    def test_many_runs_are_kept_apart(self, store: SnapshotStore) -> None:
        runs = [
            *self.same_partition_runs(8),
            *(f"run-{i}" for i in range(1, 11)),  # run-1 and run-10: one a prefix of the other
            "run-é/ü ✓",
            "RUN-1",
        ]
        runs = list(dict.fromkeys(runs))
        for round_ in range(3):  # interleaved: every run is replaced twice
            for run in runs:
                store.put(run, f"{run}@{round_}".encode())
        for run in runs:
            assert store.get(run) == f"{run}@2".encode()

    def test_a_large_payload_round_trips(self, store: SnapshotStore) -> None:
        large = _noise(self.large_payload_bytes, seed=3)
        store.put("run-l", large)
        assert store.get("run-l") == large
        store.put("run-l", b"small again")
        assert store.get("run-l") == b"small again"

    def test_puts_from_several_threads_of_one_store(self, store: SnapshotStore) -> None:
        """Writers share a store across threads (the coordinator puts from a pool)."""
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                for i in range(5):
                    for r in range(4):
                        store.put(f"run-t{t}-{r}", f"{t}-{r}-{i}".encode())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for t in range(4):
            for r in range(4):
                assert store.get(f"run-t{t}-{r}") == f"{t}-{r}-4".encode()

    def test_close_is_idempotent(self, backend_spec: BackendSpec) -> None:
        unused = self.open_store(backend_spec)
        unused.close()
        unused.close()
        used = self.open_store(backend_spec)
        used.put("run-c", b"c")
        assert used.get("run-c") == b"c"
        used.close()
        used.close()

    # -- several stores on one storage -------------------------------------------------------

    def test_a_snapshot_survives_close_and_reopen(self, backend_spec: BackendSpec) -> None:
        first = self.open_store(backend_spec)
        first.put("run-s", b"first")
        first.put("run-s", b"newest")
        first.put("run-t", b"other")
        first.close()
        reopened = self.open_store(backend_spec)
        try:
            assert reopened.get("run-s") == b"newest"
            assert reopened.get("run-t") == b"other"
            assert reopened.get("run-u") is None
        finally:
            reopened.close()

    def test_stores_open_at_once_see_each_others_puts(self, backend_spec: BackendSpec) -> None:
        a, b = self.open_store(backend_spec), self.open_store(backend_spec)
        try:
            a.put("run-ab", b"from a")
            assert b.get("run-ab") == b"from a"
            b.put("run-ab", b"from b")
            assert a.get("run-ab") == b"from b"
            assert b.get("run-ab") == b"from b"
        finally:
            a.close()
            b.close()

    def test_an_acknowledged_put_survives_the_writing_process_dying(
        self, backend_spec: BackendSpec
    ) -> None:
        before = self.open_store(backend_spec)
        try:
            before.put("run-d", b"older")
        finally:
            before.close()
        assert run_child(suite_name(self), "put", backend_spec, "run-d", "written, then died") == (
            "put"
        )
        reopened = self.open_store(backend_spec)
        try:
            assert reopened.get("run-d") == b"written, then died"
        finally:
            reopened.close()


class LimitedSnapshotStoreConformance(SnapshotStoreConformance):
    """``SnapshotStoreConformance`` for a backend with a documented size limit:
    ``refused_payload_bytes`` is a size over it, which the store refuses, naming the run,
    keeping the snapshot it had."""

    refused_payload_bytes: ClassVar[int]

    def test_a_payload_over_the_limit_is_refused_naming_the_run(self, store: SnapshotStore) -> None:
        store.put("run-big", b"kept")
        with pytest.raises(LogError, match="run-big"):
            store.put("run-big", _noise(self.refused_payload_bytes, seed=4))
        assert store.get("run-big") == b"kept"
        store.put("run-big", b"next")  # the store still works
        assert store.get("run-big") == b"next"
