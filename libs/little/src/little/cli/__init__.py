"""The ``little`` command.

Packages add command groups through ``little.cli`` entry points (``little projections``
comes from little-services). They follow its conventions with ``console`` (stdout) and
the ``Bootstrap`` and ``DataDir`` options.
"""

from little.cli import _commands  # noqa: F401  (it registers its commands)
from little.cli._app import Bootstrap, DataDir, app, console, main
from little.cli._plugins import add_plugins as _add_plugins

# Last: a plugin imports the names above from this module while it initialises.
_add_plugins(app)

__all__ = ["Bootstrap", "DataDir", "app", "console", "main"]
