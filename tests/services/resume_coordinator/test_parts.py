"""The coordinator's small parts: the command ledger (what may be committed), the fair gate
(claims interleave with running work), workflow loading, settings, and retry-or-park."""

from __future__ import annotations

from pathlib import Path

import pytest

from little.errors import ConfigurationError
from little.runtime import load_workflows, registered
from little_services.resume_coordinator._scheduling import Ledger
from little_services.resume_coordinator._settings import CoordinatorSettings


def test_the_ledger_commits_only_below_the_first_unsettled_command() -> None:
    ledger = Ledger()
    ledger.open(3)
    assert ledger.point(3) is None  # nothing read: never commit (it would rewind the group)
    for offset in (10, 11, 12):
        ledger.received(3, offset)
    assert ledger.settle(3, 11) is None  # 10 is not yet durably started
    assert ledger.settle(3, 10) == 12
    assert ledger.settle(3, 12) == 13
    assert ledger.settle(3, 12) is None  # never moves backwards or twice
    ledger.received(3, 13)
    ledger.received(3, 14)
    assert ledger.settle(3, 14) is None
    assert ledger.close(3) is None  # 13 is unsettled: the next owner reads it (and 14) again
    assert ledger.settle(3, 13) is None  # the partition is gone


def test_the_ledger_ignores_partitions_it_does_not_own() -> None:
    ledger = Ledger()
    ledger.received(1, 5)
    assert ledger.settle(1, 5) is None
    assert ledger.close(1) is None


def test_workflows_load_from_the_environment_spec() -> None:
    names = load_workflows("little.examples.research")
    assert {"research", "summarise"} <= set(names)
    assert registered()["research"].name == "research"
    assert "research" in load_workflows("little.examples.research:research")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz", "cannot import no_such_module_xyz"),
        ("little.examples.research:nope", "has no attribute nope"),
        ("little.examples.research:CALLS_DIR", "neither a module nor a Workflow"),
    ],
)
def test_a_bad_workflow_spec_is_a_configuration_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_workflows(spec)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITTLE_COMMANDS_TOPIC", "c")
    monkeypatch.setenv("LITTLE_LEASE_SECONDS", "2.5")
    monkeypatch.setenv("LITTLE_SESSION_TIMEOUT_MS", "6000")
    settings = CoordinatorSettings()
    assert settings.commands_topic == "c"
    assert settings.lease_seconds == 2.5
    assert settings.heartbeat_ms() == 1000
    assert settings.coordinator_group == "little-resume-coordinator"
    with pytest.raises(ConfigurationError, match="LITTLE_KAFKA_BOOTSTRAP"):
        CoordinatorSettings(kafka_bootstrap=None).bootstrap()


def test_a_failed_execution_is_retried_if_its_error_is_retryable_else_parked() -> None:
    """The coordinator's one rule for an execution that ended on an error: a retryable one
    leaves the run to be resumed when its lease runs out; anything else parks it."""
    from little.errors import (
        AppendOutcomeUnknownError,
        BrokerUnavailableError,
        CapabilityDriftError,
        LogError,
    )
    from little.runtime import (
        ClaimRejectedError,
        StepFailedError,
        SubRunFailedError,
        UnknownWorkflowError,
        WorkflowVersionError,
    )
    from little_services.resume_coordinator._coordinator import Tracked, retry_or_park

    retried = {
        ClaimRejectedError("run r: claim at epoch 2 was rejected"): "claim_rejected",
        AppendOutcomeUnknownError("append of run r: unknown outcome"): "log_error",
        BrokerUnavailableError("no broker answered"): "log_error",
        LogError("append of run r: the log is closed"): "log_error",
    }
    for exc, outcome in retried.items():
        entry = Tracked("r", 0, 0.0)
        assert retry_or_park(entry, exc) == outcome, exc
        assert entry.parked is None, exc

    parked = {
        WorkflowVersionError("run r was started by workflow w v1, not w v2"): "integrity_error",
        CapabilityDriftError("run r: harness session s started with another manifest"): (
            "integrity_error"
        ),
        UnknownWorkflowError("w", ["x"], run_id="r"): "error",
        SubRunFailedError("r", "r~c", "w", "failed", "boom"): "error",
        StepFailedError("s", ValueError("bad")): "error",
        ConfigurationError("bad setting"): "error",
        RuntimeError("a bug"): "error",
    }
    for exc, outcome in parked.items():
        entry = Tracked("r", 0, 0.0)
        assert retry_or_park(entry, exc) == outcome, exc
        assert entry.parked is not None
        assert entry.parked.startswith(type(exc).__name__), entry.parked


def test_a_misrouted_run_event_on_the_tail_is_no_progress_of_its_run(tmp_path: Path) -> None:
    """An event of a run found in another partition than the run's (a producer with another
    partitioner) is not the run's stream: it neither makes this coordinator track the run
    (whose lease would then run out here, and the run be taken over from its owner) nor
    fences the run's execution, nor ends it."""
    from types import SimpleNamespace
    from typing import Any

    import little
    from little.log import partition_for
    from little_services.resume_coordinator._coordinator import Coordinator
    from little_services.resume_coordinator._metrics import Metrics

    partitions = 4
    snapshots: Any = SimpleNamespace(partitions=partitions)
    with little.local_world(tmp_path / "w", partitions=partitions) as world:
        coordinator = Coordinator(
            CoordinatorSettings(kafka_bootstrap=None), world, snapshots, Metrics()
        )
        coordinator.owned = set(range(partitions))
        run_id = "run-elsewhere"
        own = partition_for(run_id, partitions)
        other = (own + 1) % partitions
        coordinator.on_run_events([(other, run_id, "StepStarted", 1)])
        assert run_id not in coordinator.runs
        coordinator.on_run_events([(own, run_id, "StepStarted", 1)])
        tracked = coordinator.runs[run_id]
        assert (tracked.partition, tracked.epoch) == (own, 0)
        coordinator.on_run_events([(other, run_id, "RunClaimed", 7)])
        coordinator.on_run_events([(other, run_id, "RunCompleted", 7)])
        assert coordinator.runs[run_id].epoch == 0  # no claim seen, still tracked
        coordinator.on_run_events([(own, run_id, "RunClaimed", 2)])
        assert coordinator.runs[run_id].epoch == 2
