"""The ``little`` command.

Packages add command groups through ``little.cli`` entry points (``little projections``
comes from little-services). They follow its conventions with ``console`` (stdout) and
the ``Bootstrap`` and ``DataDir`` options.
"""

import little.cli._waits  # noqa: F401 (importing it registers signal, approve, reject, worker)
from little.cli._app import Bootstrap, DataDir, app, console, main
from little.cli._commands import CommandSettings  # (importing it registers the commands)
from little.cli._plugins import add_plugins as _add_plugins

# Last: a plugin imports the names above from this module while it initialises.
_add_plugins(app)

__all__ = ["Bootstrap", "CommandSettings", "DataDir", "app", "console", "main"]
