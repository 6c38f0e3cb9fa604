"""What the services' commands do with their arguments: ``--help`` prints the settings they
read and exits 0; anything else is one line and exit 2 (they are configured by ``LITTLE_*``
variables, not flags)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pydantic_settings import BaseSettings

from little_services.settings_reference import settings_help


def handle_arguments(
    prog: str, summary: str, settings: type[BaseSettings], argv: Sequence[str]
) -> None:
    if not argv:
        return
    if list(argv) in (["--help"], ["-h"]):
        sys.stdout.write(settings_help(prog, summary, settings))
        sys.exit(0)
    sys.stderr.write(
        f"{prog}: unexpected argument {argv[0]!r}: it is configured by LITTLE_* environment "
        f"variables (see {prog} --help)\n"
    )
    sys.exit(2)
