from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from little.artifacts import ArtifactStore
from little.errors import ArtifactIntegrityError, ArtifactNotFoundError
from little.events import ArtifactRef

DATA = b'{"answer": 42}'


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def test_put_get_round_trip(store: ArtifactStore) -> None:
    ref = store.put("run-1", DATA, "application/json")
    digest = hashlib.sha256(DATA).hexdigest()
    assert ref == ArtifactRef(
        run_id="run-1", sha256=digest, size=len(DATA), media_type="application/json"
    )
    assert store.get(ref) == DATA
    assert store.exists(ref)
    store.verify(ref)
    assert store.path_for(digest) == store.root / "sha256" / digest[:2] / digest
    assert store.path_for(digest).read_bytes() == DATA


def test_root_is_created_on_demand(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()
    store.put("run-1", b"")
    assert (tmp_path / "a" / "b" / "sha256").is_dir()


def test_put_is_idempotent(store: ArtifactStore) -> None:
    first = store.put("run-1", DATA)
    mtime = store.path_for(first.sha256).stat().st_mtime_ns
    second = store.put("run-1", DATA)
    assert first == second
    assert store.path_for(first.sha256).stat().st_mtime_ns == mtime
    blobs = [p for p in store.root.rglob("*") if p.is_file()]
    assert blobs == [store.path_for(first.sha256)]  # no temp files left behind


def test_same_bytes_from_another_run_share_the_blob(store: ArtifactStore) -> None:
    a = store.put("run-1", DATA)
    b = store.put("run-2", DATA)
    assert a.sha256 == b.sha256
    assert store.get(b) == DATA


def test_corrupted_blob_raises_integrity_error_naming_the_artifact(store: ArtifactStore) -> None:
    ref = store.put("run-1", DATA)
    store.path_for(ref.sha256).write_bytes(b'{"answer": 43}')  # same size, other bytes
    with pytest.raises(ArtifactIntegrityError) as info:
        store.get(ref)
    message = str(info.value)
    assert ref.sha256 in message
    assert "run-1" in message
    assert str(store.path_for(ref.sha256)) in message
    with pytest.raises(ArtifactIntegrityError, match=ref.sha256):
        store.verify(ref)
    assert store.exists(ref)  # exists does not read the content


def test_missing_blob_raises_not_found(store: ArtifactStore) -> None:
    digest = hashlib.sha256(b"never stored").hexdigest()
    ref = ArtifactRef(run_id="run-1", sha256=digest, size=12, media_type="text/plain")
    assert not store.exists(ref)
    with pytest.raises(ArtifactNotFoundError, match=digest):
        store.get(ref)
    with pytest.raises(ArtifactNotFoundError):
        store.verify(ref)
    with pytest.raises(KeyError):  # ArtifactNotFoundError is a KeyError too
        store.get(ref)


def test_size_mismatch_raises_integrity_error(store: ArtifactStore) -> None:
    ref = store.put("run-1", DATA)
    wrong = ref.model_copy(update={"size": ref.size + 1})
    with pytest.raises(ArtifactIntegrityError, match=rf"{ref.sha256}.*{len(DATA)} bytes"):
        store.get(wrong)
    with pytest.raises(ArtifactIntegrityError):
        store.verify(wrong)


def test_truncated_blob_raises_integrity_error(store: ArtifactStore) -> None:
    ref = store.put("run-1", DATA)
    store.path_for(ref.sha256).write_bytes(DATA[:-1])
    with pytest.raises(ArtifactIntegrityError, match=ref.sha256):
        store.get(ref)
