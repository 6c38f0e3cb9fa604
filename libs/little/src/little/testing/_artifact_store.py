"""The artifact store conformance suite (``ArtifactBackend``)."""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import ClassVar

import pytest

from little.artifacts import ArtifactBackend
from little.errors import ArtifactIntegrityError, ArtifactNotFoundError, ConfigurationError
from little.events import ArtifactRef
from little.testing._child import BackendSpec, missing_hook, run_child, suite_name

DATA = b'{"answer": 42}'


class ArtifactStoreConformance:
    """What every artifact store does: bytes kept under their sha256, returned only after
    their hash and size are checked against the ref, put idempotently.

    A subclass supplies the ``backend_spec`` fixture (fresh, empty storage for one test, as
    JSON), ``open_store`` (an ``ArtifactBackend`` on that storage: called several times per
    test, in this process and in a child process, which must all see one store) and ``tamper``
    (overwrite a stored blob with other bytes behind the store's back, as a failing disk or a
    careless operator could). Child processes import the subclass by ``module:qualname``.
    """

    large_payload_bytes: ClassVar[int] = 10 << 20
    """A size the backend keeps (past any single-read buffer)."""

    @pytest.fixture
    def backend_spec(self) -> BackendSpec:
        """Fresh, empty storage for one test (override: a fixture, it may use others)."""
        raise missing_hook(self, "the backend_spec fixture")

    def open_store(self, spec: BackendSpec) -> ArtifactBackend:
        """An artifact store on the storage ``spec`` names."""
        raise missing_hook(self, "open_store")

    def tamper(self, spec: BackendSpec, sha256: str, data: bytes) -> None:
        """Replace the stored blob of ``sha256`` with ``data``, not through the store."""
        raise missing_hook(self, "tamper")

    @pytest.fixture
    def store(self, backend_spec: BackendSpec) -> ArtifactBackend:
        return self.open_store(backend_spec)

    def test_put_then_get_round_trips(self, store: ArtifactBackend) -> None:
        ref = store.put("run-1", DATA, "application/json")
        assert ref == ArtifactRef(
            run_id="run-1",
            sha256=hashlib.sha256(DATA).hexdigest(),
            size=len(DATA),
            media_type="application/json",
        )
        assert store.get(ref) == DATA
        assert store.exists(ref)
        store.verify(ref)

    def test_empty_and_large_blobs_round_trip(self, store: ArtifactBackend) -> None:
        big = random.Random(1).randbytes(self.large_payload_bytes)
        for data in (b"", big):
            assert store.get(store.put("run-1", data)) == data

    def test_put_is_idempotent(self, store: ArtifactBackend) -> None:
        first = store.put("run-1", DATA)
        assert store.put("run-1", DATA) == first
        assert store.get(first) == DATA

    def test_the_same_bytes_from_another_run_share_the_blob(self, store: ArtifactBackend) -> None:
        a = store.put("run-1", DATA)
        b = store.put("run-2", DATA)
        assert a.sha256 == b.sha256
        assert store.get(b) == DATA

    def test_a_corrupted_blob_raises_an_integrity_error_naming_it(
        self, store: ArtifactBackend, backend_spec: BackendSpec
    ) -> None:
        ref = store.put("run-1", DATA)
        self.tamper(backend_spec, ref.sha256, b'{"answer": 43}')  # same size, other bytes
        with pytest.raises(ArtifactIntegrityError) as info:
            store.get(ref)
        message = str(info.value)
        assert ref.sha256 in message
        assert "run-1" in message
        assert store.where(ref.sha256) in message
        with pytest.raises(ArtifactIntegrityError, match=ref.sha256):
            store.verify(ref)
        assert store.exists(ref)  # exists does not read the content

    def test_a_truncated_blob_raises_an_integrity_error(
        self, store: ArtifactBackend, backend_spec: BackendSpec
    ) -> None:
        ref = store.put("run-1", DATA)
        self.tamper(backend_spec, ref.sha256, DATA[:-1])
        with pytest.raises(ArtifactIntegrityError, match=ref.sha256):
            store.get(ref)

    def test_a_missing_blob_raises_not_found(self, store: ArtifactBackend) -> None:
        digest = hashlib.sha256(b"never stored").hexdigest()
        ref = ArtifactRef(run_id="run-1", sha256=digest, size=12, media_type="text/plain")
        assert not store.exists(ref)
        with pytest.raises(ArtifactNotFoundError, match=digest):
            store.get(ref)
        with pytest.raises(ArtifactNotFoundError):
            store.verify(ref)
        with pytest.raises(KeyError):  # ArtifactNotFoundError is a KeyError too
            store.get(ref)

    def test_a_size_other_than_the_refs_raises_an_integrity_error(
        self, store: ArtifactBackend
    ) -> None:
        ref = store.put("run-1", DATA)
        wrong = ref.model_copy(update={"size": ref.size + 1})
        with pytest.raises(ArtifactIntegrityError, match=rf"{ref.sha256}.*{len(DATA)} bytes"):
            store.get(wrong)

    def test_a_ref_that_is_not_a_sha256_is_refused(self, store: ArtifactBackend) -> None:
        # the model refuses such a hash; a ref built without validation still cannot escape
        bad = ArtifactRef.model_construct(
            run_id="r", sha256="../../etc/passwd", size=1, media_type="text/plain"
        )
        with pytest.raises(ConfigurationError, match="sha256"):
            store.get(bad)

    def test_puts_from_many_threads_at_once_agree(self, store: ArtifactBackend) -> None:
        async def many() -> list[ArtifactRef]:
            blobs = [f"blob {i % 5}".encode() for i in range(40)]
            return await asyncio.gather(
                *(asyncio.to_thread(store.put, f"run-{i}", b) for i, b in enumerate(blobs))
            )

        refs = asyncio.run(many())
        assert len({r.sha256 for r in refs}) == 5
        for r in refs:
            assert store.get(r).startswith(b"blob ")

    def test_another_store_on_the_same_storage_reads_the_blobs(
        self, store: ArtifactBackend, backend_spec: BackendSpec
    ) -> None:
        ref = store.put("run-1", DATA)
        assert self.open_store(backend_spec).get(ref) == DATA

    def test_a_blob_put_by_a_process_that_died_is_kept(self, backend_spec: BackendSpec) -> None:
        text = "written, then died"
        assert run_child(suite_name(self), "put", backend_spec, "run-d", text) == "put"
        data = text.encode()
        ref = ArtifactRef(
            run_id="run-d",
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            media_type="application/octet-stream",
        )
        assert self.open_store(backend_spec).get(ref) == data
