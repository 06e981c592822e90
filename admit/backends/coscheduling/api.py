"""The API half of the ``coscheduling`` backend (``runtime.BackendAPI``), registered by its entry point in
pyproject.toml (group ``admit.gang_backend_apis``); ``decide`` left out: ``gangobjects.decide_objects``.
"""

from __future__ import annotations

from ...observability import metrics
from ..interface import BackendAPI
from .discovery import start
from .missing import missing_group
from .status import STATUS

__all__ = ["API"]


def _count(kind: str, operation: str) -> None:
    """``admit_podgroup_operations_total{operation}`` (``recreated``: the controller created it again)."""
    metrics.pod_group(operation)


API = BackendAPI(status=STATUS, count=_count, start=start, missing_group=missing_group)
