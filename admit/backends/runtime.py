"""The half of each gang backend that talks to the API server, and the registry ``name -> BackendAPI``.

:class:`BackendAPI` is what admission calls for a plan whose objects must exist when it is admitted (``ensure``),
what the controller runs for the backend's gangs (``decide``: ``None`` when another loop keeps them, as the
PodGroup controller of ``admit/controller/podgroups.py`` keeps Coscheduling's), and what ``admit status`` runs to
explain them (``status``, ``admit/backends/status.py``). The pure half is
``interface.GangBackend``; both are found by the plan's ``backend`` name. Not pure: the ensure modules import the
API client (``kube.client``), so the pure decisions never import this module (pyproject.toml contracts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from ..config import COSCHEDULING, WORKLOAD_API, Config
from ..gang.plan import GangPlan
from .action import Action
from .coscheduling.ensure import ensure_coscheduling
from .coscheduling.status import STATUS as COSCHEDULING_STATUS
from .status import BackendStatus
from .workload_api.diagnose import below_min_count
from .workload_api.ensure import ensure_workload_api
from .workload_api.reconcile import decide_native
from .workload_api.status import STATUS as WORKLOAD_API_STATUS

__all__ = ["Ensure", "GangDecide", "BackendAPI", "APIS", "api_of", "register", "unregister"]


class Ensure(Protocol):
    """``await ensure(store, plan, config, decision, explicit_name, dry_run, cache, generation)``: make the plan's
    objects exist with the right spec at admission, recording them in ``decision.pod_groups`` (a conflict turns
    ``decision`` into a 409 denial). Raises ``kube.KubeError``; ``Admission.validate`` applies the failure mode."""

    def __call__(self, store: Any, plan: GangPlan, config: Config, decision: Any, explicit_name: bool,
                 dry_run: bool, cache: Any = None, generation: int | None = None) -> Awaitable[None]: ...


GangDecide = Callable[..., list[Action]]
"""``decide(key, objects, claims, config, *, now, unclaimed_since, grace) -> [action.Action]``: the pure controller
decision for one gang key over the backend's objects (``backends.gangobjects.decide_objects`` for any backend)."""


@dataclass(frozen=True, slots=True)
class BackendAPI:
    """The API half of one backend.

    Attributes:
        ensure: :class:`Ensure`.
        decide: the controller's decision for the generic gang-object loop (``controller/workload_api.py``), or
            ``None`` when another controller keeps this backend's objects.
        below_min_count: ``(PodGroup, its pods) -> (scheduled, pending, minCount) | None`` for a gang that broke
            after it was scheduled (``workload_api.diagnose.below_min_count``; the loop counts them every resync
            period), or ``None``. The loop groups pods by ``spec.schedulingGroup.podGroupName`` for it.
        status: its ``admit status`` part (``status.BackendStatus``: list its objects, diagnose its gangs), or
            ``None`` when ``admit status`` does not show its gangs.
    """

    ensure: Ensure
    decide: GangDecide | None = None
    below_min_count: Callable[[Any, list[Any]], Any] | None = None
    status: BackendStatus | None = None


async def _ensure_workload_api(store: Any, plan: GangPlan, config: Config, decision: Any, explicit_name: bool,
                               dry_run: bool, cache: Any = None, generation: int | None = None) -> None:
    await ensure_workload_api(store, plan, config, decision, explicit_name, dry_run, cache)


APIS: dict[str, BackendAPI] = {
    COSCHEDULING: BackendAPI(ensure_coscheduling, status=COSCHEDULING_STATUS),
    WORKLOAD_API: BackendAPI(_ensure_workload_api, decide_native, below_min_count, WORKLOAD_API_STATUS),
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
