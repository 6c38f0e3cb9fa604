"""The artifact store conformance suite (``little.testing.ArtifactStoreConformance``) on both
backends: the directory store, and S3 on a real S3-compatible server (moto standalone on
127.0.0.1). Then what is the S3 backend's own: its key layout, one PUT per blob, the settings
that choose it, a missing bucket; and a run whose output is past the inline limit on each.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import little
from little.artifacts import ArtifactBackend, ArtifactStore, S3ArtifactStore, open_artifact_store
from little.errors import ConfigurationError
from little.events import ArtifactRef, RunCompleted
from little.runtime import WorkflowContext, run, workflow
from little.settings import LittleSettings
from little.testing import ArtifactStoreConformance, BackendSpec
from tests.s3_server import S3Server

DATA = b'{"answer": 42}'


@workflow("test.artifacts_big_output", version="1")
async def big_output(ctx: WorkflowContext, n: int) -> str:
    from little.runtime._execution import LARGE_PAYLOAD

    return "y" * LARGE_PAYLOAD + str(n)


class RunOutputs:
    """Beside the suite: a run on a world with this store keeps a large output in it."""

    def test_a_run_whose_output_is_past_the_inline_limit_keeps_it_in_the_store(
        self, store: ArtifactBackend, tmp_path: Path
    ) -> None:
        with little.local_world(tmp_path / "w") as base:
            world = replace(base, artifacts=store)
            result = asyncio.run(run(world, big_output, 7, run_id="big-1"))
            done = [e.event for e in world.read_run("big-1") if isinstance(e.event, RunCompleted)]
        assert result.status == "completed"
        (end,) = done
        assert end.output_json is None
        assert end.output_ref is not None
        assert json.loads(store.get(end.output_ref)).endswith("7")


class TestDirectoryArtifactStore(ArtifactStoreConformance, RunOutputs):
    @pytest.fixture
    def backend_spec(self, tmp_path: Path) -> BackendSpec:
        return {"root": str(tmp_path / "artifacts")}

    def open_store(self, spec: BackendSpec) -> ArtifactStore:
        return ArtifactStore(spec["root"])

    def tamper(self, spec: BackendSpec, sha256: str, data: bytes) -> None:
        ArtifactStore(spec["root"]).path_for(sha256).write_bytes(data)


def _client(spec: BackendSpec) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=spec["endpoint"],
        aws_access_key_id=spec["key"],
        aws_secret_access_key=spec["secret"],
        region_name=spec["region"],
    )


class TestS3ArtifactStore(ArtifactStoreConformance, RunOutputs):
    @pytest.fixture
    def backend_spec(self, s3: S3Server) -> BackendSpec:
        env = s3.env()
        return {
            "url": f"s3://{s3.new_bucket()}/worlds/a",
            "endpoint": s3.endpoint,
            "key": env["AWS_ACCESS_KEY_ID"],
            "secret": env["AWS_SECRET_ACCESS_KEY"],
            "region": env["AWS_REGION"],
        }

    def open_store(self, spec: BackendSpec) -> S3ArtifactStore:
        return S3ArtifactStore.from_url(spec["url"], client=_client(spec))

    def tamper(self, spec: BackendSpec, sha256: str, data: bytes) -> None:
        store = self.open_store(spec)
        store.client.put_object(Bucket=store.bucket, Key=store.key_for(sha256), Body=data)


# -- the S3 backend's own: its layout, its settings, its errors ------------------------------


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server, named to boto3 by the standard ``AWS_*`` variables only."""
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3


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
