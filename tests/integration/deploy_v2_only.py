"""A deploy of the change that dropped v1 while runs of it were in flight."""

from little.runtime import workflow
from tests.integration.versioned_flows import NAME, v2

workflow(NAME, version="2")(v2)
