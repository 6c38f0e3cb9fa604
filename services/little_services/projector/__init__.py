"""The projector service (DESIGN §6): thin over ``little_services.projection``.

Settings from ``LITTLE_*``, JSON logs, the FastAPI app, Prometheus metrics, SIGTERM handling.
Entry point: ``little-projector``.
"""

from little_services.projector._api import create_app
from little_services.projector._metrics import ProjectorMetrics
from little_services.projector._service import serve
from little_services.projector._settings import ProjectorServiceSettings

__all__ = ["ProjectorMetrics", "ProjectorServiceSettings", "create_app", "serve"]
