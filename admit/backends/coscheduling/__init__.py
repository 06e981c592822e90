"""The ``coscheduling`` gang backend: scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1). Pure.

The objects, spec comparison and ownership rules are in ``podgroup.py``; here, the pod template patch (label
``scheduling.x-k8s.io/pod-group`` + ``schedulerName``: :func:`plan_patch`), its undoing (:func:`ungang_ops`) and the
``Coscheduling`` class with its hooks (the shared bare-pod merge, the descriptions of the controller's writes).
Source of the shapes: kubernetes-sigs/scheduler-plugins ``apis/scheduling/v1alpha1/types.go``.
"""

from __future__ import annotations

from typing import Any

from ...config import COSCHEDULING, LEGACY_POD_GROUP_API_GROUP, POD_GROUP_API_GROUP, Config
from ...config import KUBE_DEFAULT_SCHEDULER
from ...gang.patch import pointer, set_keys_ops, set_op
from ...gang.plan import GangPlan, PodTarget, get_path
from ..common import ObjectType, record_succeeded, succeeded_ops
from .podgroup import (
    describe_spec, desired_pod_group, merge_shared_spec, ownership, spec_changes, spec_differs, spec_json_patch,
)

__all__ = ["switch_back_ops", "scheduler_ops", "plan_patch", "ungang_ops", "crd_missing_message",
           "other_pod_group_group", "Coscheduling", "BACKEND"]


def switch_back_ops(obj: dict[str, Any], plan: GangPlan, config: Config) -> list[dict[str, Any]]:
    """On a workload admit ganged before (its ``<prefix>/managed`` label) that moves back from the ``workload-api``
    backend: remove the ``spec.schedulingGroup`` admit put on its mutable pod templates (it names this group).
    Empty for every object that never used the other backend."""
    if get_path(obj, ("metadata", "labels", config.managed_label)) != "true":
        return []
    ops = []
    for target in plan.targets:
        spec = target.scheduler[:-1]
        if not target.immutable and get_path(obj, spec + ("schedulingGroup", "podGroupName")) == plan.group_name:
            ops.append({"op": "remove", "path": pointer(spec + ("schedulingGroup",))})
    return ops


def scheduler_ops(obj: dict[str, Any], path: tuple[str, ...], where: str, config: Config) -> tuple[
    dict[str, Any] | None, str | None
]:
    """``(op, warning)`` giving ``obj`` admit's ``schedulerName`` at ``path``: an op when it is unset or the default
    scheduler, a warning (and no op) when it names another scheduler, neither when it is admit's already."""
    current = get_path(obj, path)
    if current == config.scheduler_name:
        return None, None
    if current in (None, "", KUBE_DEFAULT_SCHEDULER):
        return set_op(obj, path, config.scheduler_name), None
    return None, (
        f"remove schedulerName {str(current)[:63]!r} from the {where}, unless that scheduler runs the Coscheduling "
        f"plugin: admit keeps it, so its pods gang only there (admit's scheduler is {config.scheduler_name!r})"
    )


def _restores(old: dict[str, Any] | None, target: PodTarget, plan: GangPlan, config: Config) -> bool:
    """True when the stored object ``old`` already carries admit's marks on ``target`` (the plan's group label, and
    admit's ``schedulerName``), so restoring them on an immutable template is no change (:func:`plan_patch`)."""
    if old is None:
        return False
    if target.group_label and get_path(old, target.labels + (config.pod_group_label,)) != plan.group_name:
        return False
    return get_path(old, target.scheduler) == config.scheduler_name


def plan_patch(obj: dict[str, Any], plan: GangPlan, config: Config, label_workload: bool = True,
               old: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """JSONPatch operations and warnings that join ``plan``'s pods to its PodGroup: on every pod template the label
    ``scheduling.x-k8s.io/pod-group: <group>`` and ``spec.schedulerName`` of the Coscheduling profile, the plan's
    template annotations, and (``label_workload``) the ``<prefix>/managed`` label on the workload.

    Returns ``(operations, warnings)``; ``obj`` is not modified. Targets marked immutable (Job templates on UPDATE)
    give a warning instead of operations, unless ``old`` (the stored object of an UPDATE) carries admit's marks
    there already: then the operations restore them (a GitOps re-apply of a manifest naming ``schedulerName:
    default-scheduler``, Argo CD or Flux with server-side apply, ``kubectl apply``), so the template equals the stored
    one and kube-apiserver does not refuse the update as immutable (``ValidateJobSpecUpdate``).
    """
    ops: list[dict[str, Any]] = []
    warnings = list(plan.warnings)
    if not plan.mutate:
        return ops, warnings
    ops.extend(switch_back_ops(obj, plan, config))
    for target in plan.targets:
        t_ops = set_keys_ops(obj, target.labels, {config.pod_group_label: plan.group_name}) if target.group_label else []
        if target.annotations is not None and plan.template_annotations:
            t_ops.extend(set_keys_ops(obj, target.annotations, plan.template_annotations))
        s_op, warning = scheduler_ops(obj, target.scheduler, f"{plan.kind} {target.where}", config)
        if s_op is not None:
            t_ops.append(s_op)
        if warning:
            warnings.append(warning)
        if t_ops and target.immutable and not _restores(old, target, plan, config):
            warnings.append(
                f"delete and recreate the {plan.kind} to gang-schedule it: its {target.where} is immutable, so admit "
                f"cannot add the {config.pod_group_label} label and schedulerName")
            continue
        ops.extend(t_ops)
    if label_workload and (plan.kind != "Pod" or not plan.shared):  # a Pod that owns its group: spark-submit driver
        ops.extend(set_keys_ops(obj, ("metadata", "labels"), {config.managed_label: "true"}))
    return ops, warnings


def ungang_ops(obj: dict[str, Any], old_plan: GangPlan, config: Config) -> tuple[list[dict[str, Any]], list[str]]:
    """JSONPatch operations and warnings that undo admit's marks when an UPDATE removes ``<prefix>/min-member``.

    A pod that keeps the pod-group label after its PodGroup is gone never runs: Coscheduling's Permit denies a pod
    whose labelled PodGroup is not found (scheduler-plugins ``pkg/coscheduling/core/core.go``, ``Permit`` returns
    ``PodGroupNotFound``). So the label is removed from the templates where it still names the group admit gave
    them, and the managed label from the workload; a label the user set to another value is left alone, as is
    ``schedulerName`` (the Coscheduling profile schedules pods without a group like any other).
    """
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for target in old_plan.targets:
        if target.annotations is not None:
            for name, value in old_plan.template_annotations.items():
                key = target.annotations + (name,)
                if get_path(obj, key) == value and not target.immutable:
                    ops.append({"op": "remove", "path": pointer(key)})
        key = target.labels + (config.pod_group_label,)
        if not target.group_label or get_path(obj, key) != old_plan.group_name:
            continue
        if target.immutable:
            warnings.append(
                f"recreate the {old_plan.kind} without the {config.pod_group_label} label: its {target.where} is "
                "immutable and keeps it, so new pods wait for a PodGroup admit no longer keeps")
            continue
        ops.append({"op": "remove", "path": pointer(key)})
    if get_path(obj, ("metadata", "labels", config.managed_label)) is not None:
        ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
    return ops, warnings


def other_pod_group_group(config: Config) -> str:
    """The PodGroup API group admit is not configured for: ``scheduling.sigs.k8s.io`` (scheduler-plugins before
    v0.25.7) when it speaks ``scheduling.x-k8s.io``, and the other way round (``--pod-group-api``)."""
    return LEGACY_POD_GROUP_API_GROUP if config.pod_group_group == POD_GROUP_API_GROUP else POD_GROUP_API_GROUP


def crd_missing_message(config: Config, other_served: bool = False) -> str:
    """One line for a cluster whose API server does not serve admit's PodGroup resource (``<group>/<version>
    podgroups`` answers 404 "the server could not find the requested resource": the CRD is not installed), with
    the fixes. No "retry": the answer stays the same until someone installs the CRD or changes the setting.

    ``other_served``: the API server serves PodGroups in the other group (:func:`other_pod_group_group`): an older or
    newer scheduler-plugins than ``--pod-group-api`` says; the message then leads with that setting.
    """
    crd = f"{config.pod_group_plural}.{config.pod_group_group}"
    other = other_pod_group_group(config)
    setting = (f"--pod-group-api {other} (chart: config.podGroupAPI={other}; its pods then carry label "
               f"{'pod-group.scheduling.sigs.k8s.io' if other == LEGACY_POD_GROUP_API_GROUP else 'scheduling.x-k8s.io/pod-group'})")
    head = (f"the PodGroup CRD {crd} ({config.pod_group_api_version}) is not installed: the API server does not serve "
            f"{config.pod_group_group}/{config.pod_group_version} {config.pod_group_plural}")
    if other_served:
        return (f"{head}, but it serves PodGroups in {other}, the API group of your scheduler-plugins: start admit "
                f"with {setting}")
    return (f"{head}. Install it: scheduler-plugins' chart installs it, or admit's chart with "
            f"podGroupCRD.install=true (a single-scheduler install), or kubectl apply -f the CRD of your "
            f"scheduler-plugins release (manifests/crds/scheduling.x-k8s.io_podgroups.yaml); or, if your "
            f"scheduler-plugins serves {other}, start admit with {setting}")


class Coscheduling:
    """The ``coscheduling`` backend as ``interface.GangBackend``: one PodGroup per gang, pods join by label and the
    Coscheduling profile's ``schedulerName``."""

    name = COSCHEDULING
    scheduler = "the Coscheduling plugin"  # its PreFilter rejects a pod until minMember pods of its PodGroup exist
    size_name = "minMember"
    description = "scheduler-plugins PodGroup, pod label and schedulerName"

    def join_field(self, config: Config) -> str:
        return f"{config.pod_group_label} label"

    def join_key(self, config: Config) -> str:
        return config.pod_group_label

    def served(self, config: Config) -> bool:
        return True  # not checked at start: a missing CRD shows as the API's 404 at the first create

    def not_served_problem(self, config: Config) -> str | None:
        return crd_missing_message(config)

    def object_types(self, config: Config) -> tuple[ObjectType, ...]:
        group, _, version = config.pod_group_api_version.rpartition("/")
        return (ObjectType(group, version, "PodGroup", "podgroups"),)

    def prepare(self, plan: GangPlan, obj: dict[str, Any], config: Config, deferred: bool) -> None:
        return None

    join_ops = staticmethod(plan_patch)
    leave_ops = staticmethod(ungang_ops)

    def joined(self, obj: dict[str, Any], target: PodTarget, plan: GangPlan, config: Config) -> bool:
        return get_path(obj, target.labels + (config.pod_group_label,)) == plan.group_name

    def pod_in_group(self, pod: dict[str, Any], name: str, config: Config) -> bool:
        return get_path(pod, ("metadata", "labels", config.pod_group_label)) == name

    def pod_selector(self, name: str, config: Config) -> str:
        return f"{config.pod_group_label}={name}"

    def named_pod_ops(self, pod: dict[str, Any], target: PodTarget,
                      config: Config) -> tuple[list[dict[str, Any]], list[str]] | None:
        """A pod carrying the pod-group label (any value: the PodGroup is the user's) gets the Coscheduling
        profile's ``schedulerName`` (:func:`scheduler_ops`: a pod naming another scheduler keeps it, warned)."""
        labels = get_path(pod, target.labels)
        if not isinstance(labels, dict) or config.pod_group_label not in labels:
            return None
        op, warning = scheduler_ops(pod, target.scheduler, target.where, config)
        return [op] if op else [], [warning] if warning else []

    def unknown_group(self, pod: dict[str, Any], namespace: str, config: Config, cache: Any) -> str | None:
        """``interface.BackendHooks.unknown_group``: the pod-group label's value when the managed PodGroup cache
        (``cache.get``) lacks that PodGroup (why it matters, and what the answer says: ``missing.py``)."""
        labels = get_path(pod, ("metadata", "labels"))
        name = labels.get(config.pod_group_label) if isinstance(labels, dict) else None
        if not isinstance(name, str) or not name or cache is None or cache.get(namespace, name) is not None:
            return None
        return name

    def owned_fields(self, config: Config) -> tuple[tuple[tuple[str, ...], bool, str], ...]:
        """``interface.BackendHooks.owned_fields``: what :func:`plan_patch` and :func:`switch_back_ops` write."""
        label = config.pod_group_label
        return (
            (("metadata", "labels", label), False,
             "the pod-group label on pod templates and pods: scheduler-plugins' Coscheduling finds a pod's PodGroup "
             "by this label (PodGroupLabel, apis/scheduling/v1alpha1/types.go); admit writes the name of the group it "
             "manages, and copies the other scheduler-plugins generation's label to it (admit.foreign)"),
            (("spec", "*", "labels", label), True,
             "the same label on a SparkApplication's spec.driver / spec.executor (the spark-operator copies these "
             "labels onto the pods it creates)"),
            (("spec", "schedulerName"), False,
             "a pod spec's schedulerName, set to the scheduler profile that runs Coscheduling (--scheduler-name) "
             "only when it is unset or default-scheduler; an explicit other scheduler is kept with a warning"),
            (("spec", "*", "schedulerName"), True, "the same for a SparkApplication's spec.driver / spec.executor"),
            (("spec", "schedulingGroup"), False,
             "a pod spec's schedulingGroup naming the group, which admit removes from a gang its managed label says "
             "it moved here from the other built-in backend (switch_back_ops)"),
        )

    def desired_objects(self, plan: GangPlan, config: Config) -> list[dict[str, Any]]:
        return [desired_pod_group(plan, config)]

    def size_of(self, obj: dict[str, Any]) -> Any:
        return get_path(obj, ("spec", "minMember"))

    def update_ops(self, existing: dict[str, Any], desired: dict[str, Any],
                   version: str = "") -> list[dict[str, Any]] | None:
        """JSON patch making the PodGroup's managed spec fields equal ``desired``'s (never ``None``: every field of a
        scheduler-plugins PodGroup spec may change), and its record of the members that succeeded when ``desired``
        records more of them (``common.succeeded_ops``)."""
        ops = spec_json_patch(existing, desired["spec"]) if spec_differs(existing, desired["spec"]) else []
        return ops + succeeded_ops(existing, desired)

    ownership = staticmethod(ownership)

    def describe(self, desired: dict[str, Any]) -> list[str]:
        return describe_spec(desired.get("spec") or {})

    def describe_changes(self, existing: dict[str, Any], desired: dict[str, Any]) -> list[str]:
        return spec_changes(existing, desired.get("spec") or {})

    def merge_shared(self, existing: dict[str, Any], desired: dict[str, Any], plan: GangPlan,
                     members: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], list[str]]:
        """``interface.BackendHooks.merge_shared``: ``podgroup.merge_shared_spec``, and the record of the members that
        succeeded (``common.record_succeeded``)."""
        spec, warnings = merge_shared_spec(existing, plan, members)
        return record_succeeded(existing, {**desired, "spec": spec}, members), warnings

    def members_selector(self, plan: GangPlan, config: Config) -> str:
        """``interface.BackendHooks.members_selector``: the pods carrying the group's label."""
        return f"{config.pod_group_label}={plan.group_name}"

    def cannot_follow(self, kind: str, existing: dict[str, Any], desired: dict[str, Any], plan: GangPlan,
                      config: Config) -> tuple[str, str] | None:
        return None  # every field of a scheduler-plugins PodGroup spec may change


BACKEND = Coscheduling()
