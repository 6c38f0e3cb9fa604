"""The directory store's own layout; the contract both backends keep is in
tests/conformance/test_artifact_store.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from little.artifacts import ArtifactStore

DATA = b'{"answer": 42}'


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def test_blobs_live_under_their_hash(store: ArtifactStore) -> None:
    ref = store.put("run-1", DATA, "application/json")
    digest = ref.sha256
    assert store.path_for(digest) == store.root / "sha256" / digest[:2] / digest
    assert store.path_for(digest).read_bytes() == DATA
    assert store.where(digest) == str(store.path_for(digest))


def test_root_is_created_on_demand(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()
    store.put("run-1", b"")
    assert (tmp_path / "a" / "b" / "sha256").is_dir()


def test_a_second_put_leaves_the_blob_and_no_temp_file(store: ArtifactStore) -> None:
    first = store.put("run-1", DATA)
    mtime = store.path_for(first.sha256).stat().st_mtime_ns
    store.put("run-1", DATA)
    assert store.path_for(first.sha256).stat().st_mtime_ns == mtime
    blobs = [p for p in store.root.rglob("*") if p.is_file()]
    assert blobs == [store.path_for(first.sha256)]
