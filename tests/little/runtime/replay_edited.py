"""The replay tests' pipeline with its last stage edited, registered on import: a process
started with ``LITTLE_WORKFLOWS=tests.little.runtime.replay_edited`` (a resume coordinator) runs it."""

from __future__ import annotations

from tests.little.runtime.replay_workflows import version

EDITED = version("edited", write="Write a short post from: ")
