"""The ``workload-api`` backend's ``admit status`` part: find the scheduling.k8s.io version the API server serves
and list its PodGroups (the API half; the diagnosis is ``admit/backends/workload_api/diagnose.py``, pure).

Registered as ``runtime.APIS["workload-api"].status`` (:data:`STATUS`); ``admit/cli/status.py`` runs it
(``wanted_backends``).
"""

from __future__ import annotations

from typing import Any

from ...config import WORKLOAD_API_GROUP, Config
from ...kube.client import KubeError
from ...kube.watchcache import KubeRaw, Resource
from ..status import BackendStatus, Listed, list_or_note
from .diagnose import diagnose_native
from .discovery import choose_version

__all__ = ["served_version", "collect", "STATUS"]


async def served_version(api: KubeRaw, notes: list[str]) -> str | None:
    """The scheduling.k8s.io version admit would speak (``discovery.choose_version`` over API discovery), ``""``
    when none is served, ``None`` (with a note) when discovery itself is forbidden. Raises ``kube.KubeError`` for
    any other failure of the group's discovery."""
    try:
        group = await api.request("GET", f"/apis/{WORKLOAD_API_GROUP}")
    except KubeError as e:
        if e.status == 404:
            return ""
        if e.status == 403:
            notes.append(f"discovery of {WORKLOAD_API_GROUP} forbidden ({e.reason}); native gangs left out")
            return None
        raise
    served: dict[str, set[str]] = {}
    for v in group.get("versions") or []:
        version = v.get("version") if isinstance(v, dict) else None
        if version:
            try:
                doc = await api.request("GET", f"/apis/{WORKLOAD_API_GROUP}/{version}")
            except KubeError:
                continue
            served[version] = {r["name"] for r in doc.get("resources") or []
                               if isinstance(r, dict) and isinstance(r.get("name"), str)}
    return choose_version(served)


async def collect(api: KubeRaw, config: Config, namespace: str | None, listed: Listed,
                  notes: list[str]) -> dict[str, Any] | None:
    """``status.Collect``: the keyword arguments of ``diagnose.diagnose_native`` (``listed``'s pods, events and
    workloads, plus the served version's scheduling.k8s.io PodGroups; none where the API server serves no Workload
    API, so that the diagnosis reports the workloads asking for it), or None when discovery is forbidden. Raises
    ``kube.KubeError`` when the API cannot be reached."""
    served = await served_version(api, notes)
    if served is None:
        return None
    pod_groups = await list_or_note(api, Resource(WORKLOAD_API_GROUP, served, "podgroups", "PodGroup"), namespace,
                                    notes) if served else []
    return {"pod_groups": pod_groups or [], "pods": listed.pods, "events": listed.events,
            "workloads": listed.workloads, "served": served, "config": config, "notes": notes,
            "sizes": listed.sizes}


STATUS = BackendStatus(collect, diagnose_native)
"""The ``admit status`` part of the ``workload-api`` backend."""
