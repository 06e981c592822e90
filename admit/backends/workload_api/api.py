"""The API half of the ``workload-api`` backend (``runtime.BackendAPI``), registered by its entry point in
pyproject.toml (group ``admit.gang_backend_apis``); ``decide`` left out: ``gangobjects.decide_objects``.
"""

from __future__ import annotations

from ...observability import metrics
from ..interface import BackendAPI
from .diagnose import below_min_count
from .discovery import start
from .status import STATUS

__all__ = ["API"]


def _count(kind: str, operation: str) -> None:
    """``admit_native_gang_operations_total{kind, operation}``: a create is ``created``, the controller's too."""
    metrics.native_gang(kind, "created" if operation == "recreated" else operation)


API = BackendAPI(below_min_count=below_min_count, status=STATUS, count=_count, start=start,
                 below_min_gauge=metrics.native_gangs_below_min_count)
