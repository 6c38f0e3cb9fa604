"""Conformance suites for little's storage ports, as test classes a backend subclasses; and
``assert_replays``, a golden run (a golden file, or a run of a world) as a regression test of a
workflow.

Every backend of the ``EventLog`` port (with the ``CursorStore`` of its topic), of the
``SnapshotStore`` port and of the artifact store (``ArtifactBackend``) must behave alike; these suites say how, and little's own backends
(embedded sqlite and Kafka, in little's ``tests/conformance``) run them unchanged. A suite never
asks which backend it runs on: a subclass supplies hooks and the inherited tests do the rest.

The hooks: a ``backend_spec`` pytest fixture returning fresh, empty storage for one test as a
JSON object (a path, topic names), and an opener (``open_log`` and ``open_cursors``, or
``open_store``) that opens the backend on a spec. The suites open it several times per test, and
in child processes that exit without closing it (what was acknowledged must be durable): a
child imports the subclass by its ``module:qualname`` with this process's ``sys.path``, so the
test module must be importable by its module name (pytest's default import mode). ::

    import pytest
    from little.testing import BackendSpec, SnapshotStoreConformance

    from mybackend import RedisSnapshotStore


    class TestRedisSnapshotStore(SnapshotStoreConformance):
        @pytest.fixture
        def backend_spec(self, redis_url: str, unique: str) -> BackendSpec:
            return {"url": redis_url, "namespace": f"t{unique}"}  # nothing stored there yet

        def open_store(self, spec: BackendSpec) -> RedisSnapshotStore:
            return RedisSnapshotStore(spec["url"], namespace=spec["namespace"])

An ``EventLogConformance`` subclass does the same with ``open_log`` and ``open_cursors``, and
its spec's log has ``partitions`` (class attribute, 3) partitions. Class attributes tune a
suite to what a backend documents (``large_payload_bytes``); an
``ArtifactStoreConformance`` subclass supplies ``open_store`` and ``tamper`` (overwrite a blob
behind the store's back); a snapshot store with a size limit subclasses
``LimitedSnapshotStoreConformance`` and names a size over it (``refused_payload_bytes``).

This package imports pytest, a test-time dependency only: little-workflow does not depend on
it, and ``import little`` never imports ``little.testing``. For pytest's assertion messages,
call ``pytest.register_assert_rewrite("little.testing")`` in a ``conftest.py`` before anything
imports it.
"""

from little.testing._artifact_store import ArtifactStoreConformance
from little.testing._child import BackendSpec
from little.testing._event_log import EventLogConformance
from little.testing._replays import assert_replays
from little.testing._snapshot_store import (
    LimitedSnapshotStoreConformance,
    SnapshotStoreConformance,
)

__all__ = [
    "ArtifactStoreConformance",
    "BackendSpec",
    "EventLogConformance",
    "LimitedSnapshotStoreConformance",
    "SnapshotStoreConformance",
    "assert_replays",
]
