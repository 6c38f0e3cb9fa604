"""The deploy before the change: ``coordinator.versioned`` v1 only."""

from little.runtime import workflow
from tests.integration.versioned_flows import NAME, v1

workflow(NAME, version="1")(v1)
