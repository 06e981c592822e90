"""The ``workload-api`` gang backend: Kubernetes' native gang scheduling (scheduling.k8s.io). Pure.

One gang becomes a ``Workload`` with one pod group template whose ``schedulingPolicy.gang.minCount`` is minMember,
and the runtime ``PodGroup`` made from that template; the pod templates get ``spec.schedulingGroup.podGroupName``
and keep the default scheduler (the ``GangScheduling`` plugin runs inside kube-scheduler). Shapes, from
kubernetes/kubernetes ``staging/src/k8s.io/api/scheduling``:

- ``v1alpha2/types.go`` (Kubernetes 1.36, gates ``GenericWorkload`` + ``GangScheduling``, runtime-config
  ``scheduling.k8s.io/v1alpha2=true``): ``Workload.spec.controllerRef{apiGroup, kind, name}`` (optional,
  immutable, "a link back to the original workload definition"), ``Workload.spec.podGroupTemplates[]{name,
  schedulingPolicy{gang{minCount}}}`` (at most 8, immutable; ``name`` a DNS label); ``PodGroup.spec
  .podGroupTemplateRef.workload{workloadName, podGroupTemplateName}`` (both DNS labels, immutable) and
  ``PodGroup.spec.schedulingPolicy`` (immutable). Measured on the 1.36.2 kube-apiserver of ``../shared/k8s``: a JSON
  patch of ``minCount`` is refused on both objects (422 "field is immutable"), the server adds
  ``spec.disruptionMode: Pod`` to a PodGroup, and gives it the finalizer ``scheduling.k8s.io/podgroup-protection``:
  a PodGroup deleted while pods name it stays "being deleted" until they are gone, so it cannot be re-created with
  another ``minCount`` under a live gang. admit keeps the stored objects, warns, and refuses a pod count below the
  stored ``minCount`` (``immutable_message``).
- ``v1beta1/types.go`` (1.37, beta, off by default; gate ``GenericWorkload``): the same Workload, but
  ``PodGroup.spec.workloadRef{workloadName (DNS subdomain), templateName}``, and ``gang.minCount`` is mutable on
  both objects ("to support workload scaling"; templates cannot be added or removed).
- ``core/v1`` ``PodSpec.schedulingGroup.podGroupName`` (gate ``GenericWorkload``): immutable on a Pod; the PodGroup
  "may not exist at the time the Pod is created" (the pod waits). kube-scheduler's PreEnqueue keeps every pod of a
  gang out of the queue until ``minCount`` of them exist ("waiting for minCount pods from a gang to appear in
  scheduling queue", seen with ``../shared/k8s/manifests/example-native-gang-v1alpha2.yaml``).

No equivalent: PodGroup ``minResources`` and ``scheduleTimeoutSeconds`` of scheduler-plugins; admit says so in a
warning when the user asked for them explicitly.

Names: the Workload and the PodGroup are both named after the gang (``plan.group_name``: the workload's name, or
``gang.admit.dev/pod-group``), so ``kubectl get workloads,podgroups.scheduling.k8s.io <name>`` finds them; the one
template is called ``gang``.
"""

from __future__ import annotations

import re
from typing import Any

from ..config import KUBE_DEFAULT_SCHEDULER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, WORKLOAD_API_GROUP, Config
from ..patch import pointer, set_keys_ops
from ..plan import GangPlan, PodTarget, get_path
from ..podgroup import Ownership, owner_annotation

__all__ = [
    "TEMPLATE_NAME",
    "api_version",
    "name_problem",
    "desired_workload",
    "desired_pod_group",
    "desired_objects",
    "min_count_of",
    "spec_differs",
    "update_ops",
    "ownership",
    "pod_spec_path",
    "template_group",
    "plan_patch",
    "ungang_ops",
    "unsupported_warnings",
    "KIND_PLURALS",
]

TEMPLATE_NAME = "gang"
KIND_PLURALS = {"Workload": "workloads", "PodGroup": "podgroups"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def api_version(config: Config) -> str:
    """``"scheduling.k8s.io/<version>"`` for the served version (``v1alpha2`` when none was discovered: offline)."""
    return f"{WORKLOAD_API_GROUP}/{config.workload_api_version or 'v1alpha2'}"


def name_problem(name: str, version: str) -> str | None:
    """Why ``name`` cannot name a Workload that a PodGroup references, or ``None``.

    v1alpha2 ``WorkloadPodGroupTemplateReference.workloadName`` is ``k8s-short-name`` (a DNS label: no dots, at most
    63 characters); v1beta1 ``WorkloadReference.workloadName`` is ``k8s-long-name`` (a DNS subdomain, which admit's
    group names always are).
    """
    if version == "v1beta1":
        return None
    if len(name) > 63 or not _DNS_LABEL.match(name):
        return (f'"{name}" cannot name a scheduling.k8s.io/v1alpha2 Workload that its PodGroup references: it must be '
                "a DNS label (lowercase letters, digits and '-', at most 63 characters, no '.')")
    return None


def _meta(plan: GangPlan, config: Config) -> dict[str, Any]:
    return {
        "name": plan.group_name,
        "namespace": plan.namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        "annotations": {owner_annotation(config): plan.owner},
    }


def _gang(plan: GangPlan) -> dict[str, Any]:
    return {"gang": {"minCount": plan.min_member}}


def desired_workload(plan: GangPlan, config: Config) -> dict[str, Any]:
    """The ``Workload`` admit creates for ``plan``: ``{"apiVersion", "kind": "Workload", "metadata": {name,
    namespace, labels, annotations}, "spec": {"controllerRef"?: {apiGroup?, kind, name}, "podGroupTemplates":
    [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": int}}}]}}``; no ownerReferences (DESIGN.md,
    "Garbage-collector race"). ``controllerRef`` names the workload unless the group is shared by bare Pods."""
    spec: dict[str, Any] = {}
    if not plan.shared and plan.name:
        ref = {"kind": plan.kind, "name": plan.name}
        if plan.api_group:
            ref = {"apiGroup": plan.api_group, **ref}
        spec["controllerRef"] = ref
    spec["podGroupTemplates"] = [{"name": TEMPLATE_NAME, "schedulingPolicy": _gang(plan)}]
    return {"apiVersion": api_version(config), "kind": "Workload", "metadata": _meta(plan, config), "spec": spec}


def desired_pod_group(plan: GangPlan, config: Config) -> dict[str, Any]:
    """The runtime ``PodGroup`` (scheduling.k8s.io) made from the Workload's template: ``spec`` is
    ``{"podGroupTemplateRef": {"workload": {"workloadName", "podGroupTemplateName"}}, "schedulingPolicy": ...}`` in
    v1alpha2 and ``{"workloadRef": {"workloadName", "templateName"}, "schedulingPolicy": ...}`` in v1beta1."""
    if config.workload_api_version == "v1beta1":
        ref: dict[str, Any] = {"workloadRef": {"workloadName": plan.group_name, "templateName": TEMPLATE_NAME}}
    else:
        ref = {"podGroupTemplateRef": {"workload": {"workloadName": plan.group_name,
                                                    "podGroupTemplateName": TEMPLATE_NAME}}}
    spec = {**ref, "schedulingPolicy": _gang(plan)}
    return {"apiVersion": api_version(config), "kind": "PodGroup", "metadata": _meta(plan, config), "spec": spec}


def desired_objects(plan: GangPlan, config: Config) -> list[dict[str, Any]]:
    """``[Workload, PodGroup]``, in the order they must be created (the PodGroup references the Workload; KEP-5547,
    "Object Creation Order")."""
    return [desired_workload(plan, config), desired_pod_group(plan, config)]


def min_count_of(obj: dict[str, Any]) -> Any:
    """``gang.minCount`` of a Workload's template ``gang`` (else its first template) or of a PodGroup; ``None``
    when absent."""
    if obj.get("kind") == "Workload":
        templates = get_path(obj, ("spec", "podGroupTemplates"))
        if not isinstance(templates, list) or not templates:
            return None
        chosen = next((t for t in templates if isinstance(t, dict) and t.get("name") == TEMPLATE_NAME), templates[0])
        return get_path(chosen, ("schedulingPolicy", "gang", "minCount"))
    return get_path(obj, ("spec", "schedulingPolicy", "gang", "minCount"))


def _template_ref(obj: dict[str, Any]) -> tuple[Any, Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if "workloadRef" in spec:
        return get_path(spec, ("workloadRef", "workloadName")), get_path(spec, ("workloadRef", "templateName"))
    ref = get_path(spec, ("podGroupTemplateRef", "workload"))
    return get_path(ref, ("workloadName",)), get_path(ref, ("podGroupTemplateName",))


def spec_differs(existing: dict[str, Any], desired: dict[str, Any]) -> bool:
    """True when ``existing`` differs from ``desired`` (same kind) in what admit manages: the gang ``minCount`` and,
    for a PodGroup, the Workload template it references. Fields the server defaults (``disruptionMode``) or that
    admit does not set are ignored."""
    if min_count_of(existing) != min_count_of(desired):
        return True
    if desired.get("kind") == "Workload":
        names = [t.get("name") for t in get_path(existing, ("spec", "podGroupTemplates")) or [] if isinstance(t, dict)]
        return names != [TEMPLATE_NAME]
    return _template_ref(existing) != _template_ref(desired)


def update_ops(existing: dict[str, Any], desired: dict[str, Any], version: str) -> list[dict[str, Any]] | None:
    """JSON patch that brings ``existing`` to ``desired`` (``[]``: already in step), or ``None`` when the API does
    not allow it: always in v1alpha2 (templates and policy are immutable), and in v1beta1 when more than ``minCount``
    differs (the template list and the template reference are immutable there too)."""
    if not spec_differs(existing, desired):
        return []
    if version != "v1beta1":
        return None
    want = min_count_of(desired)
    if desired.get("kind") == "Workload":
        templates = get_path(existing, ("spec", "podGroupTemplates")) or []
        names = [t.get("name") for t in templates if isinstance(t, dict)]
        if names != [TEMPLATE_NAME] or get_path(templates[0], ("schedulingPolicy", "gang")) is None:
            return None
        path = "/spec/podGroupTemplates/0/schedulingPolicy/gang/minCount"
    else:
        if _template_ref(existing) != _template_ref(desired) or get_path(existing, ("spec", "schedulingPolicy",
                                                                                     "gang")) is None:
            return None
        path = "/spec/schedulingPolicy/gang/minCount"
    return [{"op": "test", "path": path, "value": min_count_of(existing)}, {"op": "replace", "path": path,
                                                                             "value": want}]


def immutable_message(kind: str, plan: GangPlan, have: Any, version: str) -> tuple[str, bool]:
    """``(message, refuse)`` for a managed object whose ``minCount`` cannot follow ``plan``: refuse when the workload
    would run fewer pods than the stored ``minCount`` (kube-scheduler would keep its new pods Pending), else warn."""
    what = f"{kind} {plan.namespace}/{plan.group_name}"
    why = (f"minCount is immutable in scheduling.k8s.io/{version}" + (" (Kubernetes 1.36; mutable in v1beta1, 1.37)"
                                                                        if version == "v1alpha2" else ""))
    fix = f"delete the {plan.kind} and create it again (or name a new group with annotation gang.admit.dev/pod-group)"
    total = plan.total_pods
    if isinstance(have, int) and total is not None and 0 < total < have:
        return (f"{plan.ref} runs {total} pod{'s' if total != 1 else ''} ({plan.total_field}={total}) but {what} keeps "
                f"minCount {have}: {why}, so kube-scheduler's GangScheduling plugin would keep new pods Pending. Keep "
                f"{plan.total_field} at least {have}, or {fix} to change the gang size"), True
    return (f"{what} keeps minCount {have}, not {plan.min_member}: {why}; to change the gang size, {fix}"), False


def _controller_owner(obj: dict[str, Any]) -> str | None:
    for ref in get_path(obj, ("metadata", "ownerReferences")) or []:
        if isinstance(ref, dict) and ref.get("controller"):
            api = str(ref.get("apiVersion", ""))
            group = api.rpartition("/")[0] if "/" in api else ""
            return f"{group}/{ref.get('kind')}/{ref.get('name')}"
    return None


def ownership(existing: dict[str, Any], plan: GangPlan, config: Config, explicit_name: bool) -> Ownership:
    """How admit may treat an existing Workload or PodGroup (scheduling.k8s.io) for ``plan``: the rules of
    ``podgroup.ownership`` (manage ours, leave an operator's, use one named explicitly, refuse the rest), so both
    backends behave the same. A Workload whose ``spec.controllerRef`` or controller ownerReference names the
    workload itself was made by its own controller (the Job controller's ``WorkloadWithJob``, an operator)."""
    meta = existing.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    what = f"{existing.get('kind', 'Workload')} {plan.namespace}/{plan.group_name}"
    ref_owner = _controller_owner(existing)
    if labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE:
        owner = annotations.get(owner_annotation(config))
        if owner == plan.owner and (ref_owner is None or ref_owner == plan.owner or plan.shared):
            return Ownership("manage")
        return Ownership(
            "conflict",
            f"{what} already belongs to {(ref_owner or owner or 'another object').replace('//', '/')}, not to "
            f"{plan.ref}; set annotation {config.pod_group_key} to another name",
        )
    cref = get_path(existing, ("spec", "controllerRef"))
    cref_owner = (f"{cref.get('apiGroup', '')}/{cref.get('kind')}/{cref.get('name')}"
                  if isinstance(cref, dict) else None)
    if plan.owner in (ref_owner, cref_owner):
        return Ownership("operator",
                         warnings=[f"{what} is managed by the {plan.kind}'s own controller; admit leaves it unchanged"])
    if explicit_name:
        have = min_count_of(existing)
        warnings = [] if have == plan.min_member else [
            f"{what} was not created by admit and is used as it is: its gang minCount is {have}, not "
            f"{plan.min_member}"]
        return Ownership("use", warnings=warnings)
    return Ownership(
        "conflict",
        f"{what} already exists and was not created by admit; set annotation {config.pod_group_key} to another name, "
        f"or to {plan.group_name!r} to join it as it is",
    )


def pod_spec_path(target: PodTarget) -> tuple[str, ...]:
    """Key path of the pod spec a target's ``schedulerName`` lives in (``("spec", "template", "spec")``)."""
    return target.scheduler[:-1]


def template_group(obj: dict[str, Any], target: PodTarget) -> Any:
    """``spec.schedulingGroup.podGroupName`` of a target's pod spec, or ``None`` (on every admission: kept cheap)."""
    spec = get_path(obj, target.scheduler[:-1])
    group = spec.get("schedulingGroup") if isinstance(spec, dict) else None
    return group.get("podGroupName") if isinstance(group, dict) else None


def _managed(obj: dict[str, Any], config: Config) -> bool:
    return get_path(obj, ("metadata", "labels", config.managed_label)) == "true"


def plan_patch(obj: dict[str, Any], plan: GangPlan, config: Config, label_workload: bool = True) -> tuple[
    list[dict[str, Any]], list[str]
]:
    """JSONPatch operations and warnings that put ``plan`` into ``obj`` for the native gang.

    Each pod spec gets ``schedulingGroup: {podGroupName: <group>}``. ``schedulerName`` stays as it is (the default
    scheduler runs the native gang); on a workload admit ganged before (its ``<prefix>/managed`` label) that moves
    from the ``coscheduling`` backend, admit's own pod-group label is removed and admit's Coscheduling scheduler name
    goes back to ``default-scheduler``. An explicit other scheduler is kept with a warning. Targets marked immutable
    (a Job's template on UPDATE; a Pod is never patched on UPDATE) get a warning instead: ``schedulingGroup`` cannot
    change on a stored Pod.
    """
    ops: list[dict[str, Any]] = []
    warnings = list(plan.warnings)
    if not plan.mutate:
        return ops, warnings
    managed = _managed(obj, config)
    for target in plan.targets:
        spec = pod_spec_path(target)
        t_ops: list[dict[str, Any]] = []
        if template_group(obj, target) != plan.group_name:
            # only podGroupName: any other field of an existing schedulingGroup stays (admit.patch)
            t_ops.extend(set_keys_ops(obj, spec + ("schedulingGroup",), {"podGroupName": plan.group_name}))
        if managed and get_path(obj, target.labels + (config.pod_group_label,)) == plan.group_name:
            t_ops.append({"op": "remove", "path": pointer(target.labels + (config.pod_group_label,))})
        scheduler = get_path(obj, target.scheduler)
        if managed and scheduler == config.scheduler_name and scheduler != KUBE_DEFAULT_SCHEDULER:
            t_ops.append({"op": "replace", "path": pointer(target.scheduler), "value": KUBE_DEFAULT_SCHEDULER})
        elif scheduler not in (None, "", KUBE_DEFAULT_SCHEDULER):
            warnings.append(f"{plan.kind} {target.where} keeps schedulerName {scheduler!r}: the native gang only "
                            "happens if that scheduler profile runs the GangScheduling plugin")
        if t_ops and target.immutable:
            warnings.append(
                f"{plan.ref}: the {target.where} is immutable, so admit cannot set spec.schedulingGroup; its pods will "
                f"not be gang-scheduled. Delete and recreate the {plan.kind} with the annotation to gang-schedule it"
            )
            continue
        ops.extend(t_ops)
    if label_workload and (plan.kind != "Pod" or not plan.shared):
        ops.extend(set_keys_ops(obj, ("metadata", "labels"), {config.managed_label: "true"}))
    return ops, warnings


def ungang_ops(obj: dict[str, Any], old_plan: GangPlan, config: Config) -> tuple[list[dict[str, Any]], list[str]]:
    """When an UPDATE removes ``<prefix>/min-member``: remove the ``schedulingGroup`` admit put on each mutable pod
    template (where it still names the group; a pod naming a PodGroup that is gone waits forever) and the managed
    label. Immutable templates get a warning."""
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for target in old_plan.targets:
        if template_group(obj, target) != old_plan.group_name:
            continue
        if target.immutable:
            warnings.append(f"{old_plan.ref}: the {target.where} is immutable and keeps spec.schedulingGroup; new pods "
                            f"will wait for a PodGroup that admit no longer keeps. Recreate the {old_plan.kind}")
            continue
        ops.append({"op": "remove", "path": pointer(pod_spec_path(target) + ("schedulingGroup",))})
    if get_path(obj, ("metadata", "labels", config.managed_label)) is not None:
        ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
    return ops, warnings


def unsupported_warnings(annotations: Any, plan: GangPlan, config: Config) -> list[str]:
    """Warnings for the annotations the native gang has no field for (asked explicitly; the default
    ``min-resources: auto`` is silent): ``min-resources`` (scheduler-plugins ``minResources``) and
    ``schedule-timeout-seconds`` (``scheduleTimeoutSeconds``)."""
    if not isinstance(annotations, dict):
        return []
    out = []
    where = f"{plan.ref} uses the workload-api backend"
    if str(annotations.get(config.min_resources_key, "")).strip().lower() == "auto":
        out.append(f"{where}: scheduling.k8s.io PodGroups have no minResources, so "
                   f"{config.min_resources_key}=auto is ignored (kube-scheduler checks that every pod of the gang "
                   "fits)")
    if config.timeout_key in annotations:
        out.append(f"{where}: scheduling.k8s.io PodGroups have no scheduleTimeoutSeconds, so {config.timeout_key} is "
                   "ignored (kube-scheduler's GangScheduling plugin applies its own wait)")
    return out
