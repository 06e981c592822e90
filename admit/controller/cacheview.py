"""The admission path's read-only view of the controller's watch caches (``admission.GroupCache``).

The controller (``podgroups.py``) keeps list+watch caches of the PodGroups (those admit manages, and the others) and
of the gang workloads (objects admit labelled ``gang.admit.dev/managed: "true"``, Spark driver pods among them).
Admission reads them through this view and nothing else: every method is a dict lookup, never an API call, and
none changes the controller. Each answer says whether the cache behind it has listed (``synced``): an object absent
from a synced cache does not exist (up to the watch's delay, milliseconds); absent from an unsynced one, it is
unknown.
"""

from __future__ import annotations

from typing import Any

from .claims import resolvable_object
from ..kube.watchcache import Resource

__all__ = ["ControllerView"]


class ControllerView:
    """Read-only view of a ``controller.Controller``'s caches.

    Methods (``admission.GroupCache``):
        get(namespace, name): a PodGroup admit manages, or ``None``.
        gang_object(group, kind, namespace, name): the same for the PodGroup's API group and kind, else ``None``.
        missing(namespace, name): the controller's warning for a pod whose claimed group is being re-created.
        extended_resources(): ``{extended resource name: DeviceClass name}`` served through DRA.
        pod_group(namespace, name): ``(synced, PodGroup | None)`` over managed and other PodGroups.
        group_pods(namespace, name, exclude): pods of the other stored gang workloads that name that PodGroup.
        workload(group, version, plural, kind, namespace, name): ``(synced, object | None)``: a stored gang workload
            of that resource as the cache keeps it: for a scalable kind the reduced copy its resolver reads
            (``claims.resolvable_copy``), else its small record without a spec (``claims.workload_record``);
            ``(False, None)`` for a resource the controller does not watch.
    """

    def __init__(self, controller: Any) -> None:
        self._controller = controller
        self._managed = controller.pod_groups
        self._other = controller.other_pod_groups
        self._workloads: dict[Resource, Any] = controller.workloads
        self.get = controller.pod_groups.get
        self._group = controller.config.pod_group_group
        self.missing = controller.cache.missing
        self.extended_resources = controller.cache.extended_resources
        self.runtime_overheads = controller.cache.runtime_overheads

    def gang_object(self, group: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(namespace, name) if kind == "PodGroup" and group == self._group else None

    def group_pods(self, namespace: str, name: str, exclude: str) -> int | None:
        """The pods (``plan.total_pods``) of the stored gang workloads whose plan names PodGroup ``namespace/name``,
        other than the workload ``exclude`` (its owner identity, ``"apps/Deployment/web"``), or ``None`` when no other
        workload names it: what else fills a hand-written PodGroup several workloads join. Dict lookups over the
        controller's claim index."""
        total: int | None = None
        for wkey in self._controller._by_group.get((namespace, name)):  # noqa: SLF001 - the view reads its index
            claim = self._controller._claims.get(wkey)  # noqa: SLF001
            if claim is None or claim.plan is None or claim.identity == exclude:
                continue
            total = (total or 0) + (claim.plan.total_pods or 0)
        return total

    def pod_group(self, namespace: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        synced = self._managed.synced and self._other.synced
        return synced, self._managed.get(namespace, name) or self._other.get(namespace, name)

    def workload(self, group: str, version: str, plural: str, kind: str, namespace: str, name: str) -> tuple[
        bool, dict[str, Any] | None
    ]:
        cache = self._workloads.get(Resource(group, version, plural, kind))
        if cache is None:
            return False, None
        record = cache.get(namespace, name)
        if record is None:
            return cache.synced, None
        return cache.synced, resolvable_object(record)
