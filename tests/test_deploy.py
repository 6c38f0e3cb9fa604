"""The deploy assets agree with the code: compose, Dockerfiles, entry points, topics."""

from __future__ import annotations

import copy
import importlib.resources
import json
import re
import shutil
import subprocess
import tomllib
from typing import Any

import jsonschema
import yaml

from little.log import load_topic_specs
from tests.paths import REPO


def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def entry_points() -> set[str]:
    scripts: set[str] = set()
    for pyproject in (REPO / "libs/little/pyproject.toml", REPO / "services/pyproject.toml"):
        scripts |= set(tomllib.loads(pyproject.read_text())["project"]["scripts"])
    return scripts


def test_compose_services_build_from_dockerfiles_that_exist() -> None:
    services = compose()["services"]
    assert {"redpanda", "console", "topics", "projector", "resume-coordinator"} <= set(services)
    for name, service in services.items():
        if "build" in service:
            dockerfile = REPO / service["build"]["dockerfile"]
            assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"


def test_compose_commands_are_the_installed_entry_points() -> None:
    scripts = entry_points()
    for name, service in compose()["services"].items():
        if "build" in service:
            assert service["command"][0] in scripts, f"{name} runs {service['command'][0]}"


def test_dockerfiles_run_entry_points_and_the_supported_python() -> None:
    scripts = entry_points()
    requires = tomllib.loads((REPO / "libs/little/pyproject.toml").read_text())["project"][
        "requires-python"
    ]
    minimum = tuple(int(x) for x in requires.removeprefix(">=").split("."))
    for dockerfile in REPO.glob("services/*/Dockerfile"):
        text = dockerfile.read_text()
        cmd = re.findall(r'^CMD \["([^"]+)"', text, re.M)
        assert cmd, f"{dockerfile} has no CMD"
        assert cmd[-1] in scripts, f"{dockerfile}: CMD {cmd}"
        for version in re.findall(r"^FROM python:(\d+)\.(\d+)", text, re.M):
            assert tuple(map(int, version)) >= minimum, dockerfile
        assert "uv.lock" in text, f"{dockerfile} must install from the lock file"


def test_compose_uses_the_confluent_wire_format_and_one_node_topic_settings() -> None:
    env = compose()["x-little-env"]
    assert env["LITTLE_SCHEMA_REGISTRY_URL"].startswith("http://")
    assert env["LITTLE_TOPIC_REPLICATION_FACTOR"] == "1"
    assert all(key.startswith("LITTLE_") for key in env)


def test_runs_and_commands_topics_are_copartitioned() -> None:
    specs = load_topic_specs()
    assert specs["little.runs.v1"].partitions == specs["little.commands.v1"].partitions
    assert specs["little.snapshots.v1"].partitions == specs["little.runs.v1"].partitions


def compose_schema() -> Any:
    """The Compose Specification's JSON schema, as check-jsonschema ships it (its
    ``--builtin-schema vendor.compose-spec``, kept up to date by that project)."""
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath("compose-spec.json").read_text("utf-8"))


def compose_errors(document: object) -> list[str]:
    """What the Compose Specification's JSON schema finds wrong with ``document``."""
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)  # the draft it declares
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def test_docker_compose_config_where_the_client_exists() -> None:
    """The compose file is valid: against the Compose Specification's own JSON schema (as the
    check-jsonschema package ships it) everywhere, and by `docker compose config` (which needs
    no engine) where the compose client is installed."""
    assert compose_errors(compose()) == []
    docker = shutil.which("docker")
    has_compose = (
        bool(docker)
        and subprocess.run(
            [docker or "docker", "compose", "version"], capture_output=True
        ).returncode
        == 0
    )
    if has_compose:
        out = subprocess.run(
            [docker or "docker", "compose", "-f", str(REPO / "docker-compose.yml"), "config", "-q"],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr


def test_the_compose_schema_finds_what_compose_would_refuse() -> None:
    """The schema check can fail: a misspelt key, a misspelt service option and a port that is
    not a list are each found, naming where."""
    broken = copy.deepcopy(compose())
    broken["servces"] = {}
    service = broken["services"]["projector"]
    service["restart_policy"] = "always"  # a deploy option, not a service one
    service["ports"] = 8080  # a list of ports, not one
    errors = compose_errors(broken)
    assert any(e.startswith("(top): 'servces'") for e in errors), errors
    assert any(e.startswith("services/projector: ") and "'restart_policy'" in e for e in errors), (
        errors
    )
    assert any(e.startswith("services/projector/ports: 8080") for e in errors), errors


def test_both_services_see_one_artifact_store_and_no_shared_disk() -> None:
    """Reports and replay plans served by the projector read the artifacts the coordinator's
    runs wrote: one bucket on the compose file's MinIO, which the setup service creates, and
    no volume mounted in two services (on several hosts there is no shared disk)."""
    doc = compose()
    services = doc["services"]
    url = doc["x-little-env"]["LITTLE_ARTIFACTS_URL"]
    assert url.startswith("s3://")
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    assert f"little/{bucket}" in " ".join(services["buckets"]["command"])
    for name in ("projector", "resume-coordinator"):
        service = services[name]
        env = service["environment"]
        assert env["LITTLE_ARTIFACTS_URL"] == url, name
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000", name
        assert env["AWS_ACCESS_KEY_ID"] == services["minio"]["environment"]["MINIO_ROOT_USER"]
        assert "LITTLE_ARTIFACTS_DIR" not in env, name
        assert "buckets" in service["depends_on"], name
        dockerfile = (REPO / service["build"]["dockerfile"]).read_text()
        assert re.search(r"uv sync .*--extra s3", dockerfile), name
    mounted: dict[str, str] = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source not in mounted, f"{source} is mounted by {mounted.get(source)} and {name}"
            mounted[source] = name


def test_the_projector_writes_the_compose_database() -> None:
    services = compose()["services"]
    store = services["projector"]["environment"]["LITTLE_PROJECTION_STORE"]
    pg = services["postgres"]["environment"]
    assert store == (
        f"postgresql://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/"
        f"{pg['POSTGRES_DB']}"
    )
    assert services["projector"]["depends_on"]["postgres"]["condition"] == "service_healthy"
