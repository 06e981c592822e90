"""A third gang backend defined only here, through admit's backend interface alone: a minimal Volcano-like one.

It proves that "a new backend is one folder" holds: nothing under ``admit/`` knows its name. One gang becomes a
``scheduling.volcano.sh/v1beta1`` ``PodGroup`` with ``spec.minMember`` (volcano-sh/volcano
``vendor/volcano.sh/apis/pkg/apis/scheduling/v1beta1/types.go``, ``PodGroupSpec.MinMember``); a pod joins it by the
annotation ``scheduling.k8s.io/group-name`` (``KubeGroupNameAnnotationKey`` of ``.../v1beta1/labels.go``) and
``schedulerName: volcano``. Only what the interface asks for is written: no queue, no minResources.

Register both halves with :func:`install` (and :func:`uninstall` after), then run admit with
``Config(gang_backend="volcano")``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from admit.backends import registry, runtime
from admit.backends.common import ObjectType, Ownership, owner_annotation
from admit.backends.gangobjects import decide_objects
from admit.config import MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config
from admit.gang.ownerrefs import controller_identity
from admit.gang.patch import pointer, set_keys_ops, set_op
from admit.gang.plan import GangPlan, PodTarget, get_path
from admit.kube.client import AlreadyExists, Budget

NAME = "volcano"
GROUP, VERSION, PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"
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
            if get_path(obj, target.scheduler) != SCHEDULER:
                ops.append(set_op(obj, target.scheduler, SCHEDULER))
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

    def ownership(self, existing: JSON, plan: GangPlan, config: Config, explicit_name: bool) -> Ownership:
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


async def ensure(store: Any, plan: GangPlan, config: Config, decision: Any, explicit_name: bool, dry_run: bool,
                 cache: Any = None, generation: int | None = None) -> None:
    """``runtime.Ensure``: create the PodGroup at admission (409: read it, refuse another's, bring ours in step)."""
    (desired,) = BACKEND.desired_objects(plan, config)
    decision.pod_groups.append(desired)
    if store is None:
        return
    left = Budget(config.api_timeout_seconds).left
    try:
        decision.pod_groups[-1] = await store.create_object(GROUP, VERSION, PLURAL, desired, dry_run, left())
        return
    except AlreadyExists:
        pass
    existing = await store.get_object(GROUP, VERSION, PLURAL, plan.namespace, plan.group_name, left())
    own = BACKEND.ownership(existing, plan, config, explicit_name)
    if own.action == "conflict":
        decision.allowed, decision.code, decision.message = False, 409, own.message
    elif own.action == "manage" and (ops := BACKEND.update_ops(existing, desired, VERSION)):
        decision.pod_groups[-1] = await store.patch_object(GROUP, VERSION, PLURAL, plan.namespace, plan.group_name,
                                                           ops, dry_run, left())


def install() -> None:
    """Register both halves (the pure one, and the API one with the generic gang-object controller's decision)."""
    registry.register(BACKEND)
    runtime.register(NAME, runtime.BackendAPI(ensure, partial(decide_objects, BACKEND)))


def uninstall() -> None:
    registry.unregister(NAME)
    runtime.unregister(NAME)
