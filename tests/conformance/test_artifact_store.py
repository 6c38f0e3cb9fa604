"""The artifact store contract on every backend: the directory store and S3 (a real
S3-compatible server, moto standalone on 127.0.0.1, reached through the ``AWS_*`` variables).

Each backend supplies how to open a store and how to change a stored blob behind its back
(``tamper``); the tests are written once.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import little
from little.artifacts import ArtifactBackend, ArtifactStore, S3ArtifactStore, open_artifact_store
from little.errors import ArtifactIntegrityError, ArtifactNotFoundError, ConfigurationError
from little.events import ArtifactRef, RunCompleted
from little.runtime import WorkflowContext, run, workflow
from little.settings import LittleSettings
from tests.s3_server import S3Server

DATA = b'{"answer": 42}'


@dataclass
class Backend:
    store: ArtifactBackend
    tamper: Callable[[str, bytes], None]
    """Overwrite the blob of a hash with other bytes, as a disk or a bucket could."""


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3


@pytest.fixture(params=["directory", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "directory":
        d = ArtifactStore(tmp_path / "artifacts")
        yield Backend(d, lambda sha, data: d.path_for(sha).write_bytes(data))
        return
    s3: S3Server = request.getfixturevalue("s3_env")
    bucket = s3.new_bucket()
    store = open_artifact_store(f"s3://{bucket}/worlds/a")
    assert isinstance(store, S3ArtifactStore)
    raw = s3.client()
    yield Backend(
        store, lambda sha, data: raw.put_object(Bucket=bucket, Key=store.key_for(sha), Body=data)
    )


def test_put_get_round_trip(backend: Backend) -> None:
    store = backend.store
    ref = store.put("run-1", DATA, "application/json")
    digest = hashlib.sha256(DATA).hexdigest()
    assert ref == ArtifactRef(
        run_id="run-1", sha256=digest, size=len(DATA), media_type="application/json"
    )
    assert store.get(ref) == DATA
    assert store.exists(ref)
    store.verify(ref)


def test_empty_and_large_blobs_round_trip(backend: Backend) -> None:
    big = bytes(range(256)) * 40_000  # 10 MB: past any single-read buffer
    for data in (b"", big):
        ref = backend.store.put("run-1", data)
        assert backend.store.get(ref) == data


def test_put_is_idempotent(backend: Backend) -> None:
    first = backend.store.put("run-1", DATA)
    second = backend.store.put("run-1", DATA)
    assert first == second
    assert backend.store.get(second) == DATA


def test_same_bytes_from_another_run_share_the_blob(backend: Backend) -> None:
    a = backend.store.put("run-1", DATA)
    b = backend.store.put("run-2", DATA)
    assert a.sha256 == b.sha256
    assert backend.store.get(b) == DATA


def test_a_corrupted_blob_raises_integrity_error_naming_the_artifact(backend: Backend) -> None:
    store = backend.store
    ref = store.put("run-1", DATA)
    backend.tamper(ref.sha256, b'{"answer": 43}')  # same size, other bytes
    with pytest.raises(ArtifactIntegrityError) as info:
        store.get(ref)
    message = str(info.value)
    assert ref.sha256 in message
    assert "run-1" in message
    assert store.where(ref.sha256) in message
    with pytest.raises(ArtifactIntegrityError, match=ref.sha256):
        store.verify(ref)
    assert store.exists(ref)  # exists does not read the content


def test_a_truncated_blob_raises_integrity_error(backend: Backend) -> None:
    ref = backend.store.put("run-1", DATA)
    backend.tamper(ref.sha256, DATA[:-1])
    with pytest.raises(ArtifactIntegrityError, match=ref.sha256):
        backend.store.get(ref)


def test_a_missing_blob_raises_not_found(backend: Backend) -> None:
    digest = hashlib.sha256(b"never stored").hexdigest()
    ref = ArtifactRef(run_id="run-1", sha256=digest, size=12, media_type="text/plain")
    assert not backend.store.exists(ref)
    with pytest.raises(ArtifactNotFoundError, match=digest):
        backend.store.get(ref)
    with pytest.raises(ArtifactNotFoundError):
        backend.store.verify(ref)
    with pytest.raises(KeyError):  # ArtifactNotFoundError is a KeyError too
        backend.store.get(ref)


def test_a_size_mismatch_raises_integrity_error(backend: Backend) -> None:
    ref = backend.store.put("run-1", DATA)
    wrong = ref.model_copy(update={"size": ref.size + 1})
    with pytest.raises(ArtifactIntegrityError, match=rf"{ref.sha256}.*{len(DATA)} bytes"):
        backend.store.get(wrong)


def test_a_ref_that_is_not_a_sha256_is_refused(backend: Backend) -> None:
    # the model refuses such a hash; a ref built without validation still cannot escape
    bad = ArtifactRef.model_construct(
        run_id="r", sha256="../../etc/passwd", size=1, media_type="text/plain"
    )
    with pytest.raises(ConfigurationError, match="sha256"):
        backend.store.get(bad)


def test_puts_from_many_threads_at_once_agree(backend: Backend) -> None:
    async def many() -> list[ArtifactRef]:
        blobs = [f"blob {i % 5}".encode() for i in range(40)]
        return await asyncio.gather(
            *(asyncio.to_thread(backend.store.put, f"run-{i}", b) for i, b in enumerate(blobs))
        )

    refs = asyncio.run(many())
    assert len({r.sha256 for r in refs}) == 5
    for r in refs:
        assert backend.store.get(r).startswith(b"blob ")


@workflow("test.s3_big_output", version="1")
async def big_output(ctx: WorkflowContext, n: int) -> str:
    from little.runtime._context import LARGE_PAYLOAD

    return "y" * LARGE_PAYLOAD + str(n)


def test_a_run_whose_output_is_past_the_inline_limit_keeps_it_in_the_store(
    backend: Backend, tmp_path: Path
) -> None:
    with little.local_world(tmp_path / "w") as base:
        from dataclasses import replace

        world = replace(base, artifacts=backend.store)
        result = asyncio.run(run(world, big_output, 7, run_id="big-1"))
        done = [e.event for e in world.read_run("big-1") if isinstance(e.event, RunCompleted)]
    assert result.status == "completed"
    (end,) = done
    assert end.output_json is None
    assert end.output_ref is not None
    assert backend.store.get(end.output_ref).decode().endswith('7"')


# -- the S3 backend's own: its layout, its settings, its errors ------------------------------


def test_s3_keys_are_content_addressed_under_the_prefix(s3_env: S3Server) -> None:
    bucket = s3_env.new_bucket()
    store = S3ArtifactStore.from_url(f"s3://{bucket}/team/world/")
    ref = store.put("run-1", DATA)
    keys = [o["Key"] for o in s3_env.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == [f"team/world/sha256/{ref.sha256[:2]}/{ref.sha256}"]
    assert store.where(ref.sha256) == f"s3://{bucket}/{keys[0]}"


def test_an_s3_put_of_a_stored_blob_writes_nothing(s3_env: S3Server) -> None:
    bucket = s3_env.new_bucket()
    store = S3ArtifactStore.from_url(f"s3://{bucket}")
    puts: list[Any] = []
    store.client.meta.events.register("before-call.s3.PutObject", lambda **kw: puts.append(kw))
    store.put("run-1", DATA)
    store.put("run-2", DATA)
    assert len(puts) == 1


def test_the_world_settings_put_artifacts_in_s3(
    s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_env.new_bucket()
    monkeypatch.setenv("LITTLE_ARTIFACTS_URL", f"s3://{bucket}/p")
    monkeypatch.setenv("LITTLE_ARTIFACTS_DIR", str(tmp_path / "unused"))
    with LittleSettings(data_dir=tmp_path / "data").world() as world:
        assert isinstance(world.artifacts, S3ArtifactStore)
        ref = world.artifacts.put("run-1", b"payload")
    assert S3ArtifactStore.from_url(f"s3://{bucket}/p").get(ref) == b"payload"
    assert not (tmp_path / "unused").exists()
    assert not (tmp_path / "data" / "artifacts").exists()


def test_a_missing_bucket_is_a_configuration_error_naming_it(s3_env: S3Server) -> None:
    store = S3ArtifactStore.from_url("s3://no-such-bucket-here/p")
    with pytest.raises(ConfigurationError, match="no-such-bucket-here"):
        store.put("run-1", DATA)
    ref = ArtifactRef(
        run_id="r", sha256=hashlib.sha256(DATA).hexdigest(), size=len(DATA), media_type="x"
    )
    with pytest.raises(ConfigurationError, match="no-such-bucket-here"):
        store.get(ref)


def test_artifact_locations_are_parsed_or_refused(tmp_path: Path) -> None:
    assert isinstance(open_artifact_store(tmp_path / "d"), ArtifactStore)
    file_store = open_artifact_store(f"file://{tmp_path}/e")
    assert isinstance(file_store, ArtifactStore)
    assert file_store.root == tmp_path / "e"
    s3_store = open_artifact_store("s3://b/x/y")
    assert isinstance(s3_store, S3ArtifactStore)
    assert (s3_store.bucket, s3_store.prefix) == ("b", "x/y")
    with pytest.raises(ConfigurationError, match="gs"):
        open_artifact_store("gs://bucket/p")
    with pytest.raises(ConfigurationError, match="bucket"):
        open_artifact_store("s3:///p")
