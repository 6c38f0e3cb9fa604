"""``little-projector``: fold little.runs.v1 into run states and serve them over HTTP."""

from __future__ import annotations

import sys

from little.logs import configure
from little_services.projector._service import serve
from little_services.projector._settings import ProjectorServiceSettings


def main() -> None:
    configure(json=True)
    sys.exit(serve(ProjectorServiceSettings()))


if __name__ == "__main__":
    main()
