"""The admission path's read-only view of the controller's watch caches (``admission.GroupCache``): every method is a
dict lookup, never an API call, and changes nothing. An answer says whether its cache has listed (``synced``): an
object absent from a synced cache does not exist (up to the watch's delay); absent from an unsynced one, it is
unknown.
"""

from __future__ import annotations

from typing import Any

from .claims import resolvable_object
from ..config import POD_GROUP_BACKEND
from ..kube.watchcache import Resource

__all__ = ["ControllerView"]


class ControllerView:
    """Read-only view of a ``manager.Manager``'s caches: the methods of ``admission.GroupCache``.

    The objects pods name with the label ``Config.pod_group_label`` are the group kind (the last of
    ``GangBackend.object_types``) of the label's backend, ``config.POD_GROUP_BACKEND``: ``get``, ``pod_group`` and
    ``missing`` answer for them from that backend's gang controller (``None`` / unknown when it is not enabled), or
    for another backend's group kind when given its name. ``gang_object`` is keyed by API group and kind, so two
    backends whose objects share a kind never hide each other. ``workload`` gives a scalable kind's reduced copy
    (``claims.resolvable_copy``), another kind's small record without a spec (``claims.workload_record``), and
    ``(False, None)`` for a resource the controller does not watch.
    """

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self._workloads: dict[Resource, Any] = manager.workloads
        self.group_pods = manager.group_pods

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        gang = self._manager.gangs.get(POD_GROUP_BACKEND)
        return gang.managed[gang.kinds[-1]].get(namespace, name) if gang is not None else None

    def gang_object(self, group: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        gang = self._manager.by_type.get((group, kind))
        return gang.get(kind, namespace, name) if gang is not None else None

    def missing(self, namespace: str, name: str, backend: str = POD_GROUP_BACKEND) -> str | None:
        gang = self._manager.gangs.get(backend)
        return gang.missing(namespace, name) if gang is not None else None

    def extended_resources(self) -> dict[str, str]:
        return self._manager.dra_extended_resources

    def runtime_overheads(self) -> dict[str, dict[str, str]]:
        return self._manager.runtime_overheads

    def pod_group(self, namespace: str, name: str, backend: str = POD_GROUP_BACKEND) -> tuple[
        bool, dict[str, Any] | None
    ]:
        gang = self._manager.gangs.get(backend)
        if gang is None:
            return False, None
        managed, other = gang.managed[gang.kinds[-1]], gang.others[gang.kinds[-1]]
        return managed.synced and other.synced, managed.get(namespace, name) or other.get(namespace, name)

    def workload(self, group: str, version: str, plural: str, kind: str, namespace: str, name: str) -> tuple[
        bool, dict[str, Any] | None
    ]:
        cache = self._workloads.get(Resource(group, version, plural, kind))
        if cache is None:
            return False, None
        record = cache.get(namespace, name)
        return cache.synced, resolvable_object(record) if record is not None else None
