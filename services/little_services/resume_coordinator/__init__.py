"""The resume coordinator: owns run partitions through its consumer group on the commands topic.

Partition p of ``little.commands.v1`` owns the runs of partition p of ``little.runs.v1``. The
owner executes StartRun, resumes every non-terminal run of its partitions on assignment and
every stalled one when its lease runs out, and cancels on CancelRun. It never decides anything
the log does not already say: claims with the next epoch fence whoever wrote before.
"""

from little_services.resume_coordinator._settings import CoordinatorSettings

__all__ = ["CoordinatorSettings"]
