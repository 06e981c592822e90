"""The half of each gang backend that talks to the API server, and the registry ``name -> BackendAPI``.

:class:`BackendAPI` is what the controller runs for the backend's gangs (``decide``: ``None`` when another loop
keeps them, as the PodGroup controller of ``admit/controller/podgroups.py`` keeps Coscheduling's), what ``admit
status`` runs to explain them (``status``, ``admit/backends/status.py``) and the metric its writes count in
(``count``). Admission makes every backend's objects with one engine, ``admit/backends/ensure.py``. The pure half is
``interface.GangBackend``; both are found by the plan's ``backend`` name. Not pure: the status parts import the API
client (``kube.client``), so the pure decisions never import this module (pyproject.toml contracts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..config import COSCHEDULING, WORKLOAD_API
from ..observability import metrics
from .action import Action
from .coscheduling.discovery import start as coscheduling_start
from .coscheduling.status import STATUS as COSCHEDULING_STATUS
from .status import BackendStatus
from .workload_api.diagnose import below_min_count
from .workload_api.discovery import start as workload_api_start
from .workload_api.reconcile import decide_native
from .workload_api.status import STATUS as WORKLOAD_API_STATUS

__all__ = ["GangDecide", "BackendAPI", "APIS", "api_of", "register", "unregister"]


GangDecide = Callable[..., list[Action]]
"""``decide(key, objects, claims, config, *, now, unclaimed_since, grace) -> [action.Action]``: the pure controller
decision for one gang key over the backend's objects (``backends.gangobjects.decide_objects`` for any backend)."""


@dataclass(frozen=True, slots=True)
class BackendAPI:
    """The API half of one backend.

    Attributes:
        decide: the controller's decision for the generic gang-object loop (``controller/workload_api.py``), or
            ``None`` when another controller keeps this backend's objects.
        below_min_count: ``(PodGroup, its pods) -> (scheduled, pending, minCount) | None`` for a gang that broke
            after it was scheduled (``workload_api.diagnose.below_min_count``; the loop counts them every resync
            period), or ``None``. The loop groups pods by ``spec.schedulingGroup.podGroupName`` for it.
        status: its ``admit status`` part (``status.BackendStatus``: list its objects, diagnose its gangs), or
            ``None`` when ``admit status`` does not show its gangs.
        start: ``async (api_client, config) -> (config, problem, rediscovery)``, run once at ``admit serve`` start
            for an enabled backend (``cli.serve.start_backends``): its discovery (the settings it found, such as the
            Workload API version; why it cannot create its objects on this cluster, or ``None``; an object whose
            ``async again(config) -> config`` finds the served version again after a 404 and whose ``listeners`` it
            awaits on a switch, or ``None``); raises ``common.BackendUnavailable`` when it is the default backend and
            cannot run. ``None``: nothing to discover.
        count: ``(kind, operation)`` for each write admission makes (``"created"``, ``"patched"``) and each
            admission refused because of a stored object (``"refused"``): the backend's metric, or ``None``.
    """

    decide: GangDecide | None = None
    below_min_count: Callable[[Any, list[Any]], Any] | None = None
    status: BackendStatus | None = None
    count: Callable[[str, str], None] | None = None
    start: Callable[[Any, Any], Awaitable[tuple[Any, str | None, Any]]] | None = None


def _count_pod_group(kind: str, operation: str) -> None:
    metrics.pod_group(operation)


APIS: dict[str, BackendAPI] = {
    COSCHEDULING: BackendAPI(status=COSCHEDULING_STATUS, count=_count_pod_group, start=coscheduling_start),
    WORKLOAD_API: BackendAPI(decide_native, below_min_count, WORKLOAD_API_STATUS, metrics.native_gang,
                             workload_api_start),
}
"""``name -> BackendAPI``: the built-ins and any :func:`register` added (keys are ``interface.BACKENDS``')."""


def api_of(name: str) -> BackendAPI:
    """The API half of backend ``name`` (KeyError when none is registered)."""
    return APIS[name]


def register(name: str, api: BackendAPI) -> None:
    """Add (or replace) the API half of backend ``name``."""
    APIS[name] = api


def unregister(name: str) -> None:
    """Remove an API half :func:`register` added (tests)."""
    APIS.pop(name, None)
