"""docs/settings.md is generated from the settings classes and names every LITTLE_* variable
the library and the services read; the services answer --help with their settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from little.settings import LittleSettings, describe_settings
from little_services.projector import ProjectorServiceSettings
from little_services.resume_coordinator import CoordinatorSettings
from little_services.settings_reference import render

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "settings.md"


def test_the_reference_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/settings.md is out of date: run python -m little_services.settings_reference"
    )


def _variables_in(paths: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        found.update(re.findall(r"LITTLE_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text()))
    return found


def test_every_variable_the_code_reads_is_in_the_reference() -> None:
    sources = [
        *(REPO / "libs" / "little" / "src").rglob("*.py"),
        *(REPO / "services").rglob("*.py"),
        *(REPO / "services").rglob("Dockerfile"),
        REPO / "docker-compose.yml",
        REPO / "deploy" / "topics.yaml",
    ]
    documented = set(re.findall(r"`(LITTLE_[A-Z0-9_]+)`", DOC.read_text()))
    # prefixes in prose ("LITTLE_TOPIC_* overrides") are not variables
    named = _variables_in(sources) - {"LITTLE_TOPIC", "LITTLE_KAFKA"}
    assert {"LITTLE_WORKFLOWS", "LITTLE_KAFKA_BOOTSTRAP", "LITTLE_CRASH_AFTER_CALL"} <= named
    assert sorted(named - documented) == []


def test_every_setting_has_a_meaning() -> None:
    for cls in (LittleSettings, ProjectorServiceSettings, CoordinatorSettings):
        assert [d.env for d in describe_settings(cls) if not d.meaning] == [], cls.__name__


def test_a_per_service_port_wins_over_the_shared_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITTLE_HTTP_PORT", "9001")
    assert ProjectorServiceSettings().http_port == 9001
    assert CoordinatorSettings().http_port == 9001
    monkeypatch.setenv("LITTLE_COORDINATOR_HTTP_PORT", "9002")
    monkeypatch.setenv("LITTLE_PROJECTOR_HTTP_PORT", "9003")
    assert CoordinatorSettings().http_port == 9002
    assert ProjectorServiceSettings().http_port == 9003


def test_both_services_listen_on_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LITTLE_HTTP_HOST", "LITTLE_PROJECTOR_HTTP_HOST", "LITTLE_COORDINATOR_HTTP_HOST"):
        monkeypatch.delenv(name, raising=False)
    assert ProjectorServiceSettings().http_host == "127.0.0.1"
    assert CoordinatorSettings().http_host == "127.0.0.1"


SERVICES = {
    "little-projector": "little_services.projector",
    "little-resume-coordinator": "little_services.resume_coordinator",
}


@pytest.mark.parametrize("prog", sorted(SERVICES))
def test_a_service_answers_help_with_its_settings_and_does_not_start(prog: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", SERVICES[prog], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "LITTLE_KAFKA_BOOTSTRAP": "127.0.0.1:1",
            # the code under test (the one these tests import), not whatever is installed
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {prog}\n")
    cls = ProjectorServiceSettings if prog == "little-projector" else CoordinatorSettings
    for doc in describe_settings(cls):
        assert " | ".join(doc.env) in out.stdout
    assert out.stderr == ""


@pytest.mark.parametrize("prog", sorted(SERVICES))
def test_a_service_refuses_arguments_in_one_line(prog: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", SERVICES[prog], "--port", "80"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == (
        f"{prog}: unexpected argument '--port': it is configured by LITTLE_* environment "
        f"variables (see {prog} --help)\n"
    )
