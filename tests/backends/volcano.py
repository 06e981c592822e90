"""A third gang backend defined only here, through admit's backend interface alone: a minimal Volcano-like one.

It proves that "a new backend is one folder" holds: nothing under ``admit/`` knows its name. One gang becomes a
``scheduling.volcano.sh/v1beta1`` ``PodGroup`` with ``spec.minMember`` (volcano-sh/volcano
``vendor/volcano.sh/apis/pkg/apis/scheduling/v1beta1/types.go``, ``PodGroupSpec.MinMember``); a pod joins it by the
annotation ``scheduling.k8s.io/group-name`` (``KubeGroupNameAnnotationKey`` of ``.../v1beta1/labels.go``) and
``schedulerName: volcano``. Only what the interface asks for is written: no queue, no minResources. Its ``admit
status`` part (:data:`STATUS`: :func:`collect` lists the PodGroups, :func:`diagnose` gives one row per gang) uses
only what ``admit/backends/status.py`` and ``admit/backends/diagnose.py`` offer every backend.

Register both halves with :func:`install` (and :func:`uninstall` after), or as an installed package would, by entry
points (tests/backends/test_entry_points.py), then run admit with ``Config(gang_backend=volcano.NAME)``
(``"volcano-test"``).
"""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Any

from admit.backends import registry, runtime
from admit.backends.common import ObjectType, Ownership, owner_annotation
from admit.backends.diagnose import (GangStatus, is_live, is_scheduled, meta_of, one_line, owner_of, pending_verdict, to_int,
                                     waited_seconds)
from admit.backends.gangobjects import decide_objects
from admit.backends.status import BackendStatus, Listed, list_or_note
from admit.config import MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config
from admit.gang.ownerrefs import controller_identity
from admit.gang.patch import pointer, set_keys_ops, set_op
from admit.gang.plan import GangPlan, PodTarget, get_path
from admit.kube.client import KubeError, Resource

NAME = "volcano-test"
"""The backend's name: one admit will not ship, so that nothing here is taken for an in-tree Volcano backend."""
GROUP, VERSION, PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"
GROUP_PREFIX = f"podgroup.{GROUP}/"
"""What the GROUP column of ``admit status`` shows before a Volcano PodGroup's name (apart from the others')."""
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
SCHEDULER = "volcano"

JSON = dict[str, Any]


def _annotations_path(target: PodTarget) -> tuple[str, ...]:
    return target.annotations if target.annotations is not None else target.labels[:-1] + ("annotations",)


class Volcano:
    """``admit.backends.interface.GangBackend`` for a Volcano PodGroup."""

    name = NAME
    scheduler = "Volcano's gang plugin"
    size_name = "minMember"
    description = "Volcano PodGroup, pod annotation scheduling.k8s.io/group-name and schedulerName volcano"

    def served(self, config: Config) -> bool:
        return True

    def not_served_problem(self, config: Config) -> str | None:
        return f"the API server does not serve {GROUP}/{VERSION} {PLURAL}: install Volcano's CRDs"

    def join_field(self, config: Config) -> str:
        return f"{GROUP_NAME_ANNOTATION} annotation"

    def join_key(self, config: Config) -> str:
        return GROUP_NAME_ANNOTATION

    def object_types(self, config: Config) -> tuple[ObjectType, ...]:
        return (ObjectType(GROUP, VERSION, "PodGroup", PLURAL),)

    def prepare(self, plan: GangPlan, obj: JSON, config: Config, deferred: bool) -> None:
        return None

    def join_ops(self, obj: JSON, plan: GangPlan, config: Config, label_workload: bool,
                 old: JSON | None = None) -> tuple[list[JSON], list[str]]:
        ops: list[JSON] = []
        for target in plan.targets:
            if target.immutable:
                continue
            ops += set_keys_ops(obj, _annotations_path(target), {GROUP_NAME_ANNOTATION: plan.group_name})
            op = set_op(obj, target.scheduler, SCHEDULER)  # None: it already says volcano
            if op is not None:
                ops.append(op)
        if label_workload and (plan.kind != "Pod" or not plan.shared):
            ops += set_keys_ops(obj, ("metadata", "labels"), {config.managed_label: "true"})
        return ops, list(plan.warnings)

    def leave_ops(self, obj: JSON, old_plan: GangPlan, config: Config) -> tuple[list[JSON], list[str]]:
        ops = [{"op": "remove", "path": pointer(_annotations_path(t) + (GROUP_NAME_ANNOTATION,))}
               for t in old_plan.targets if not t.immutable and self.joined(obj, t, old_plan, config)]
        if get_path(obj, ("metadata", "labels", config.managed_label)) is not None:
            ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
        return ops, []

    def joined(self, obj: JSON, target: PodTarget, plan: GangPlan, config: Config) -> bool:
        return get_path(obj, _annotations_path(target) + (GROUP_NAME_ANNOTATION,)) == plan.group_name

    def pod_in_group(self, pod: JSON, name: str, config: Config) -> bool:
        return get_path(pod, ("metadata", "annotations", GROUP_NAME_ANNOTATION)) == name

    def named_pod_ops(self, pod: JSON, target: PodTarget, config: Config) -> tuple[list[JSON], list[str]] | None:
        """A pod annotated with its Volcano group gets ``schedulerName: volcano`` unless it names a scheduler."""
        annotations = get_path(pod, _annotations_path(target))
        if not isinstance(annotations, dict) or GROUP_NAME_ANNOTATION not in annotations:
            return None
        if get_path(pod, target.scheduler) not in (None, "", "default-scheduler"):
            return [], []
        return [op] if (op := set_op(pod, target.scheduler, SCHEDULER)) else [], []

    def unknown_group(self, pod: JSON, namespace: str, config: Config, cache: Any) -> str | None:
        """``interface.BackendHooks.unknown_group``: the group annotation's value when the admission cache holds no
        such PodGroup. Volcano keeps such a pod Pending until the PodGroup exists (volcano-sh/volcano
        v1.16.0-alpha.1, ed72c7c): its scheduler cache makes a job of the pod under that name (``getJobID``,
        ``pkg/scheduler/api/job_info.go``) and ``SchedulerCache.Snapshot`` (``pkg/scheduler/cache/cache.go``) skips
        every job whose PodGroup is nil ("The scheduling spec of Job ... is nil, ignore it"); its PodGroup
        controller makes a group only for a pod that names none (``pgcontroller.processNextReq``,
        ``pkg/controllers/podgroup/pg_controller.go``). (The chart's pod webhook ``matchConditions`` do not send a
        pod that carries only this annotation: docs/architecture.md, "Add a gang backend".)"""
        name = get_path(pod, ("metadata", "annotations", GROUP_NAME_ANNOTATION))
        lookup = getattr(cache, "gang_object", None)
        if not isinstance(name, str) or not name or lookup is None or lookup(GROUP, "PodGroup", namespace, name):
            return None
        return name

    def owned_fields(self, config: Config) -> tuple[tuple[tuple[str, ...], bool, str], ...]:
        """The group annotation and ``schedulerName`` :meth:`join_ops` writes on pod templates and pods."""
        return ((("metadata", "annotations", GROUP_NAME_ANNOTATION), False,
                 "the Volcano group annotation on pod templates and pods: Volcano's scheduler finds a pod's PodGroup "
                 "by it (getJobID, pkg/scheduler/api/job_info.go)"),
                (("spec", "schedulerName"), False, "a pod spec's schedulerName, set to volcano when unset"))

    def desired_objects(self, plan: GangPlan, config: Config) -> list[JSON]:
        return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
                 "metadata": {"name": plan.group_name, "namespace": plan.namespace,
                              "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
                              "annotations": {owner_annotation(config): plan.owner}},
                 "spec": {"minMember": plan.min_member}}]

    def size_of(self, obj: JSON) -> Any:
        return get_path(obj, ("spec", "minMember"))

    def update_ops(self, existing: JSON, desired: JSON, version: str) -> list[JSON] | None:
        want = desired["spec"]["minMember"]
        return [] if self.size_of(existing) == want else [{"op": "add", "path": "/spec/minMember", "value": want}]

    def ownership(self, existing: JSON, plan: GangPlan, config: Config, explicit_name: bool,
                  others: int | None = None) -> Ownership:
        meta = existing.get("metadata") or {}
        if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE:
            if (meta.get("annotations") or {}).get(owner_annotation(config)) == plan.owner:
                return Ownership("manage")
            return Ownership("conflict", f"PodGroup {plan.namespace}/{plan.group_name} belongs to another workload")
        if controller_identity(existing) == plan.owner:
            return Ownership("operator")
        return Ownership("use") if explicit_name else Ownership(
            "conflict", f"PodGroup {plan.namespace}/{plan.group_name} already exists and was not created by admit")

    def cannot_follow(self, kind: str, existing: JSON, desired: JSON, plan: GangPlan,
                      config: Config) -> tuple[str, str] | None:
        return None


BACKEND = Volcano()


def diagnose(*, pod_groups: list[JSON], pods: list[JSON], events: list[JSON] | None = None, config: Config = Config(),
             now: dt.datetime | None = None) -> list[GangStatus]:
    """``admit status``'s rows for Volcano gangs (pure), one per PodGroup or per value of the group-name annotation
    on live pods, sorted: ``PodGroupMissing`` (pods name a PodGroup that does not exist), ``NotEnoughPods`` (fewer
    pods than ``minMember``: Volcano's gang plugin keeps them Pending), the scheduler's last word on the pending pods
    (``classify_message``), ``Waiting``, ``Scheduled``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    pgs = {(meta_of(pg).get("namespace", ""), meta_of(pg).get("name", "")): pg for pg in pod_groups}
    members: dict[tuple[str, str], list[JSON]] = {}
    for pod in pods:
        group = (meta_of(pod).get("annotations") or {}).get(GROUP_NAME_ANNOTATION)
        if is_live(pod) and isinstance(group, str) and group:
            members.setdefault((meta_of(pod).get("namespace", ""), group), []).append(pod)
    return [_row(key, pgs.get(key), members.get(key, []), events or [], config, now)
            for key in sorted(set(pgs) | set(members))]


def _row(key: tuple[str, str], pg: JSON | None, pods: list[JSON], events: list[JSON], config: Config,
         now: dt.datetime) -> GangStatus:
    ns, name = key
    pending = [p for p in pods if not is_scheduled(p)]
    min_member = to_int(get_path(pg, ("spec", "minMember"))) if pg else None
    owner = (meta_of(pg).get("annotations") or {}).get(owner_annotation(config)) if pg else None
    shown = owner.split("/", 1)[1] if isinstance(owner, str) and "/" in owner else owner_of(pods[0]) if pods else "-"
    phase = str(get_path(pg, ("status", "phase")) or "-") if pg else "Missing"

    def status(reason: str, message: str) -> GangStatus:
        return GangStatus(ns, GROUP_PREFIX + name, shown, min_member, len(pods), len(pods) - len(pending),
                          len(pending), phase, waited_seconds(pending, now), reason, one_line(message))

    if pg is None:
        return status("PodGroupMissing", f"{len(pods)} pod(s) name PodGroup {ns}/{name} ({GROUP_NAME_ANNOTATION}), "
                                         "which does not exist")
    if min_member is not None and len(pods) < min_member:
        return status("NotEnoughPods", f"{len(pods)} pod(s) exist, minMember is {min_member}: Volcano's gang plugin "
                                       f"waits for {min_member - len(pods)} more")
    return status(*pending_verdict(pending, events, len(pods)))


async def collect(api: Any, config: Config, namespace: str | None, listed: Listed,
                  notes: list[str]) -> dict[str, Any] | None:
    """``admit.backends.status.Collect``: Volcano's PodGroups and the pods and events every backend reads; None
    (nothing of Volcano's to show) when they cannot be listed."""
    pod_groups = await list_or_note(api, Resource(GROUP, VERSION, PLURAL, "PodGroup"), namespace, notes)
    if pod_groups is None:
        return None
    return {"pod_groups": pod_groups, "pods": listed.pods, "events": listed.events, "config": config}


STATUS = BackendStatus(collect, diagnose)


async def missing_group(namespace: str, name: str, config: Config, cache: Any, store: Any) -> str | None:
    """``runtime.BackendAPI.missing_group``: the controller's warning when a stored workload claims the group (it is
    re-creating it); else, once the cache has listed and one GET agrees that the PodGroup does not exist, what to
    create. ``None`` when it exists, when nobody can tell, or when the GET fails."""
    warning = cache.missing(namespace, name, NAME)
    synced, pg = cache.pod_group(namespace, name, NAME)
    if warning or not synced or pg is not None:
        return warning or None
    try:
        if store is not None and await store.get_object(GROUP, VERSION, PLURAL, namespace, name,
                                                        config.api_timeout_seconds) is not None:
            return None
    except KubeError:
        return None
    return (f"create Volcano PodGroup {name[:63]} ({GROUP}/{VERSION}) or correct annotation {GROUP_NAME_ANNOTATION}: "
            "that PodGroup does not exist, so the pod waits")

API = runtime.BackendAPI(partial(decide_objects, BACKEND), status=STATUS, missing_group=missing_group)
"""The API half: the generic gang-object controller's decision, the ``admit status`` part and the warning for a pod
naming a PodGroup that does not exist (admission makes its PodGroup with the one engine every backend gets). An installed package would name it by an entry point of group
``admit.gang_backend_apis``, and :data:`BACKEND` by one of ``admit.gang_backends`` (tests/backends/test_entry_points.py
does so)."""


def install() -> None:
    """Register both halves (the pure one, and the API one with the generic gang-object controller's decision and
    the ``admit status`` part; admission makes its PodGroup with the one engine every backend gets)."""
    registry.register(BACKEND)
    runtime.register(NAME, API)


def uninstall() -> None:
    registry.unregister(NAME)
    runtime.unregister(NAME)
