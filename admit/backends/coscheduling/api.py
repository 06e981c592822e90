"""The API half of the ``coscheduling`` backend (``runtime.BackendAPI``), registered by its entry point in
pyproject.toml (group ``admit.gang_backend_apis``) as any installed backend registers its own.

Admission makes its PodGroup with the one engine (``admit/backends/ensure.py``); its gang controller
(``admit/controller/gangs.py``) keeps them with the one decision (``decide`` left out: ``gangobjects.decide_objects``).
A Pod CREATE labelled for a PodGroup that does not exist gets its warning from ``missing.py``.
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
