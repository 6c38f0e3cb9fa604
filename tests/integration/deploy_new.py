"""The deploy of the change: v2 for new runs, v1 kept (resume_only) for the runs it started."""

from little.runtime import workflow
from tests.integration.versioned_flows import NAME, v1, v2

workflow(NAME, version="1", resume_only=True)(v1)
workflow(NAME, version="2")(v2)
