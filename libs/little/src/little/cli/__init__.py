"""The ``little`` command.

Packages add command groups through ``little.cli`` entry points (``little projections``
comes from little-services). They follow its conventions with ``console`` (stdout) and
the ``Bootstrap`` and ``DataDir`` options.
"""

# Importing a command module registers its commands on ``app``, in this order (``--help``'s):
import little.cli._app  # events, report, explain, export, replay, demo, topics
import little.cli._waits  # noqa: F401 (run, runs, the commands, signal, approve, reject, worker)
from little.cli._commands import CommandSettings
from little.cli._plugins import add_plugins as _add_plugins
from little.cli._shell import Bootstrap, DataDir, app, console, main

# Last: a plugin imports the names above from this module while it initialises.
_add_plugins(app)

__all__ = ["Bootstrap", "CommandSettings", "DataDir", "app", "console", "main"]
