"""The ``coscheduling`` backend's ``admit status`` part: list the scheduler-plugins PodGroups, and say when their
CRD is not installed (the API half; the diagnosis is ``admit/backends/coscheduling/diagnose.py``, pure).

Registered as ``runtime.APIS["coscheduling"].status`` (:data:`STATUS`); ``admit/cli/status.py`` runs it.
"""

from __future__ import annotations

from typing import Any

from ...config import COSCHEDULING, Config
from ...kube.client import KubeError
from ...kube.watchcache import KubeRaw, Resource
from ..status import BackendStatus, Listed, list_or_note
from . import crd_missing_message, other_pod_group_group
from .diagnose import diagnose

__all__ = ["collect", "STATUS"]


async def collect(api: KubeRaw, config: Config, namespace: str | None, listed: Listed,
                  notes: list[str]) -> dict[str, Any]:
    """``status.Collect``: the keyword arguments of ``diagnose.diagnose`` for ``namespace`` (``None``: all): the
    PodGroups of ``config``'s API group and version (none, with a note, when they cannot be listed; when this backend
    is enabled and the API server does not serve them, a second note names the CRD and the fix) and ``listed``.
    Raises ``kube.KubeError`` when the API cannot be reached."""
    resource = Resource(config.pod_group_group, config.pod_group_version, config.pod_group_plural, "PodGroup")
    pod_groups = await list_or_note(api, resource, namespace, notes)
    if pod_groups is None and COSCHEDULING in config.allowed_backends:
        problem = await _pod_group_crd_problem(api, config, resource)
        if problem:
            notes.append(problem)
    return {"pod_groups": pod_groups or [], "pods": listed.pods, "events": listed.events, "nodes": listed.nodes,
            "workloads": listed.workloads, "config": config, "sizes": listed.sizes}


async def _pod_group_crd_problem(api: KubeRaw, config: Config, resource: Resource) -> str | None:
    """When the PodGroup list was refused: ``coscheduling.crd_missing_message`` if the API server does not serve the
    resource (404 on discovery of its group/version, or no ``podgroups`` there; both API groups asked), else None."""

    async def serves(group: str) -> bool | None:
        try:
            doc = await api.request("GET", f"/apis/{group}/{config.pod_group_version}")
        except KubeError as e:
            return False if e.status == 404 else None
        return any(isinstance(r, dict) and r.get("name") == resource.plural for r in doc.get("resources") or [])

    if await serves(config.pod_group_group) is not False:
        return None
    return "PodGroup CRD: " + crd_missing_message(config, bool(await serves(other_pod_group_group(config))))


STATUS = BackendStatus(collect, diagnose)
"""The ``admit status`` part of the ``coscheduling`` backend."""
