"""The API half of the ``workload-api`` backend (``runtime.BackendAPI``), registered by its entry point in
pyproject.toml (group ``admit.gang_backend_apis``).
"""

from __future__ import annotations

from functools import partial

from ...observability import metrics
from ..interface import BackendAPI
from .diagnose import below_min_count
from .discovery import start
from ..gangobjects import decide_objects
from . import BACKEND
from .status import STATUS

__all__ = ["API"]

def _count(kind: str, operation: str) -> None:
    """``admit_native_gang_operations_total{kind, operation}``: a create is ``created``, the controller's too."""
    metrics.native_gang(kind, "created" if operation == "recreated" else operation)


API = BackendAPI(partial(decide_objects, BACKEND), below_min_count, STATUS, _count, start,
                 below_min_gauge=metrics.native_gangs_below_min_count)
