"""The ``workload-api`` gang backend: Kubernetes' native gang scheduling (scheduling.k8s.io). Pure.

One gang becomes a ``Workload`` with one pod group template (named ``gang``) whose ``schedulingPolicy.gang.minCount``
is minMember, and the runtime ``PodGroup`` made from it, both named after the gang (``plan.group_name``); the pod
templates get ``spec.schedulingGroup.podGroupName`` and keep the default scheduler (the ``GangScheduling`` plugin
runs inside kube-scheduler). Shapes, from kubernetes/kubernetes ``staging/src/k8s.io/api/scheduling``:

- ``v1alpha2/types.go`` (1.36, gates ``GenericWorkload`` + ``GangScheduling``, runtime-config
  ``scheduling.k8s.io/v1alpha2=true``): ``Workload.spec.controllerRef{apiGroup, kind, name}`` (optional, immutable),
  ``Workload.spec.podGroupTemplates[]{name, schedulingPolicy{gang{minCount}}}`` (at most 8, immutable; ``name`` a
  DNS label); ``PodGroup.spec.podGroupTemplateRef.workload{workloadName, podGroupTemplateName}`` (DNS labels,
  immutable) and ``PodGroup.spec.schedulingPolicy`` (immutable). Measured on a 1.36.2 kube-apiserver: a patch of
  ``minCount`` is refused on both objects (422 "field is immutable"), the server adds ``spec.disruptionMode: Pod``
  and the finalizer ``scheduling.k8s.io/podgroup-protection`` (a PodGroup deleted while pods name it stays until
  they are gone, so it cannot be re-created with another ``minCount`` under a live gang). admit keeps the stored
  objects, warns, and refuses a pod count below the stored ``minCount`` (``immutable_message``).
- the later versions (``v1alpha3``, ``v1beta1``: 1.37; ``v1``): how they differ is :data:`SHAPES`, one row per
  served version with its source; discovery (``discovery.py``) picks the first row the API server serves.
- ``core/v1`` ``PodSpec.schedulingGroup.podGroupName`` (gate ``GenericWorkload``): immutable on a Pod; the PodGroup
  "may not exist at the time the Pod is created". kube-scheduler's PreEnqueue keeps a gang's pods out of the queue
  until ``minCount`` of them exist ("waiting for minCount pods from a gang to appear in scheduling queue").

Priority (1.37+): the pods' ``priorityClassName`` and explicit ``preemptionPolicy`` go into the template and the
PodGroup (:func:`gang_priority`, :func:`priority_mismatch`); the API server drops ``preemptionPolicy`` with its
``PodGroupPreemptionPolicy`` gate off (``dropDisabledPreemptionPolicyField`` of
``pkg/registry/scheduling/compositepodgroup/strategy.go``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from ...config import (KUBE_DEFAULT_SCHEDULER, WORKLOAD_API, WORKLOAD_API_GROUP, WORKLOAD_API_FIRST_ALPHA,
                      WORKLOAD_API_VERSIONS, Config)
from ...gang.ownerrefs import controller_identity
from ...gang.patch import pointer, set_keys_ops
from ...gang.plan import MEMBER, GangError, GangPlan, PodTarget, get_path
from ..common import (ObjectType, Ownership, gang_metadata, managed_ownership, members_left, record_succeeded,
                      succeeded_ops, succeeded_record)
from .native import deferring_reason, native_handover, template_group, written_group

__all__ = [
    "not_served_message", "not_served_refusal", "first_alpha_message",
    "WorkloadAPI",
    "BACKEND",
    "Shape",
    "SHAPES",
    "shape",
    "gang_priority",
    "priority_mismatch",
    "TEMPLATE_NAME",
    "api_version",
    "name_problem",
    "desired_workload",
    "desired_pod_group",
    "desired_objects",
    "min_count_of",
    "with_min_count",
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
SCHEDULED = "PodGroupScheduled"  # v1alpha2 (1.36)
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"  # v1alpha3, v1beta1 (1.37), renamed in kubernetes PR#139743
MAX_GROUP_PRIORITY = 1_000_000_000  # HighestUserDefinablePriority: "+k8s:maximum" of PodGroup ``priority``
_PRIORITY_KEYS = ("priorityClassName", "preemptionPolicy")


def not_served_message(config: Config) -> str:
    """One line saying what the cluster lacks for the ``workload-api`` backend: :func:`first_alpha_message` on a
    cluster that serves only ``scheduling.k8s.io/v1alpha1`` (``config.workload_api_served``; Kubernetes 1.35), else
    the feature gates and runtime-config."""
    if config.workload_api_served and set(config.workload_api_served) <= {WORKLOAD_API_FIRST_ALPHA}:
        return first_alpha_message()
    return (
        "the API server does not serve Kubernetes' native gang scheduling (scheduling.k8s.io Workload and PodGroup): "
        "on Kubernetes 1.36 start kube-apiserver, kube-controller-manager and kube-scheduler with "
        "--feature-gates=GenericWorkload=true,GangScheduling=true and kube-apiserver with "
        "--runtime-config=scheduling.k8s.io/v1alpha2=true; on 1.37 with --feature-gates=GenericWorkload=true and "
        "--runtime-config=scheduling.k8s.io/v1beta1=true"
    )


def not_served_refusal(ref: str, config: Config) -> str:
    """The refusal of workload ``ref`` (``"Job ml/train"``) that asks for the ``workload-api`` backend on an API
    server that does not serve it: the fix of :func:`not_served_message` first, then why."""
    if config.workload_api_served and set(config.workload_api_served) <= {WORKLOAD_API_FIRST_ALPHA}:
        fix, _, why = first_alpha_message().partition(": ")
        return f'{fix[0].upper()}{fix[1:]}: {ref} asks for gang backend "workload-api", and {why}'
    return (f"Enable Kubernetes' native gang scheduling, or use the coscheduling backend: {ref} asks for gang backend "
            f'"workload-api", but {not_served_message(config)}')


def first_alpha_message() -> str:
    """The fix when the API server serves only ``scheduling.k8s.io/v1alpha1`` (Kubernetes 1.35, KEP-4671's first
    alpha: a ``Workload`` whose ``spec.podGroups`` embed the gangs, pods naming it in ``spec.workloadRef``, no
    ``PodGroup`` object). 1.36 replaced that API (``v1alpha2``: ``PodGroup`` objects, pod ``spec.schedulingGroup``)
    and admit writes only the later shapes: no admit release helps, the cluster's version or the backend does."""
    return ("run Kubernetes 1.36 or later, or use the coscheduling backend (--gang-backend coscheduling, chart "
            "config.gangBackend): this API server serves only scheduling.k8s.io/v1alpha1 (Kubernetes 1.35), whose "
            "Workload with embedded pod groups admit does not write")


@dataclass(frozen=True, slots=True)
class Shape:
    """How one served version of ``scheduling.k8s.io`` spells what admit writes and reads.

    Attributes:
        kubernetes: the release that serves it (``"1.37"``).
        reference: the PodGroup's link to its Workload template: ``"podGroupTemplateRef"``
            (``{workload: {workloadName, podGroupTemplateName}}``) or ``"workloadRef"`` (``{workloadName,
            templateName}``).
        workload_name_label: the referenced ``workloadName`` must be a DNS label (``k8s-short-name``), not a DNS
            subdomain (``k8s-long-name``).
        min_count_mutable: ``gang.minCount`` may change on both objects ("to support workload scaling").
        priority: ``priorityClassName`` on the template and the PodGroup without an alpha gate (admit writes it).
        preemption_policy: ``preemptionPolicy`` exists on both (gate ``PodGroupPreemptionPolicy``).
        scheduled_condition: the PodGroup condition kube-scheduler sets when the gang was scheduled.
        source: where this row comes from (``types.go`` of that version), or why it is unverified.
    """

    kubernetes: str
    reference: str
    workload_name_label: bool
    min_count_mutable: bool
    priority: bool
    preemption_policy: bool
    scheduled_condition: str
    source: str


_TYPES = "kubernetes/kubernetes staging/src/k8s.io/api/scheduling/{}/types.go"
#: The versions admit speaks, preferred first (``config.WORKLOAD_API_VERSIONS`` lists the same keys).
SHAPES: dict[str, Shape] = {
    "v1": Shape("1.38", "workloadRef", False, True, True, True, INITIALLY_SCHEDULED,
                "UNVERIFIED: not in the stored kubernetes sources yet; 1.38 plans the v1beta1 building blocks as GA "
                "(KEP-4671), so this row repeats v1beta1"),
    "v1beta1": Shape("1.37", "workloadRef", False, True, True, True, INITIALLY_SCHEDULED,
                     _TYPES.format("v1beta1") + " (beta, off by default: gate GenericWorkload + runtime-config)"),
    "v1alpha3": Shape("1.37", "workloadRef", False, True, True, True, INITIALLY_SCHEDULED,
                      _TYPES.format("v1alpha3") + " (replaces v1alpha2; adds CompositePodGroup)"),
    "v1alpha2": Shape("1.36", "podGroupTemplateRef", True, False, False, False, SCHEDULED,
                      _TYPES.format("v1alpha2") + " (its priorityClassName needs the alpha gate "
                      "WorkloadAwarePreemption, off by default: not written; the priority check of validatePodGroup "
                      "is described from 1.37 on, not verified against 1.36's scheduler)"),
}
if tuple(SHAPES) != WORKLOAD_API_VERSIONS:
    raise RuntimeError("config.WORKLOAD_API_VERSIONS must list the SHAPES rows in order")


def shape(version: str) -> Shape:
    """The :data:`SHAPES` row of ``version`` (``v1alpha2`` for ``""``: offline without discovery).

    Raises:
        KeyError: a version admit does not know (discovery never picks one)."""
    return SHAPES[version or "v1alpha2"]


def api_version(config: Config) -> str:
    """``"scheduling.k8s.io/<version>"`` for the served version (``v1alpha2`` when none was discovered: offline)."""
    return f"{WORKLOAD_API_GROUP}/{config.workload_api_version or 'v1alpha2'}"


def name_problem(name: str, version: str) -> str | None:
    """Why ``name`` cannot name a Workload that a PodGroup references, or ``None``.

    v1alpha2 ``WorkloadPodGroupTemplateReference.workloadName`` is ``k8s-short-name`` (a DNS label: no dots, at most
    63 characters); the ``workloadRef.workloadName`` of the later versions is ``k8s-long-name`` (a DNS subdomain,
    which admit's group names always are). Row ``workload_name_label`` of :data:`SHAPES`.
    """
    if not shape(version).workload_name_label:
        return None
    if len(name) > 63 or not _DNS_LABEL.match(name):
        return (f'"{name}" cannot name a scheduling.k8s.io/v1alpha2 Workload that its PodGroup references: it must be '
                "a DNS label (lowercase letters, digits and '-', at most 63 characters, no '.')")
    return None


def _gang(plan: GangPlan) -> dict[str, Any]:
    return {"gang": {"minCount": plan.min_member}}


def _priority_fields(plan: GangPlan, config: Config) -> dict[str, str]:
    row = shape(config.workload_api_version)
    if not row.priority:
        return {}
    return {k: v for k, v in plan.native_priority.items() if k != "preemptionPolicy" or row.preemption_policy}


def desired_workload(plan: GangPlan, config: Config) -> dict[str, Any]:
    """The ``Workload`` admit creates for ``plan``: ``{"apiVersion", "kind": "Workload", "metadata": {name,
    namespace, labels, annotations}, "spec": {"controllerRef"?: {apiGroup?, kind, name}, "podGroupTemplates":
    [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": int}}, "priorityClassName"?: str,
    "preemptionPolicy"?: str}]}}`` (the priority keys where :data:`SHAPES` has them and the pods set them; metadata:
    ``common.gang_metadata``). ``controllerRef`` names the workload unless the group is shared by bare Pods."""
    spec: dict[str, Any] = {}
    if not plan.shared and plan.name:
        ref = {"kind": plan.kind, "name": plan.name}
        if plan.api_group:
            ref = {"apiGroup": plan.api_group, **ref}
        spec["controllerRef"] = ref
    spec["podGroupTemplates"] = [{"name": TEMPLATE_NAME, "schedulingPolicy": _gang(plan),
                                  **_priority_fields(plan, config)}]
    return {"apiVersion": api_version(config), "kind": "Workload", "metadata": gang_metadata(plan, config),
            "spec": spec}


def desired_pod_group(plan: GangPlan, config: Config) -> dict[str, Any]:
    """The runtime ``PodGroup`` (scheduling.k8s.io) made from the Workload's template: ``spec`` is
    ``{"podGroupTemplateRef": {"workload": {"workloadName", "podGroupTemplateName"}}, "schedulingPolicy": ...}`` in
    v1alpha2 and ``{"workloadRef": {"workloadName", "templateName"}, "schedulingPolicy": ..., "priorityClassName"?,
    "preemptionPolicy"?}`` in the later versions (row ``reference`` of :data:`SHAPES`): "Controllers are expected
    to fill this field by copying it from a PodGroupTemplate" (``PodGroupSpec.priorityClassName``). Its metadata is
    the Workload's."""
    if shape(config.workload_api_version).reference == "workloadRef":
        ref: dict[str, Any] = {"workloadRef": {"workloadName": plan.group_name, "templateName": TEMPLATE_NAME}}
    else:
        ref = {"podGroupTemplateRef": {"workload": {"workloadName": plan.group_name,
                                                    "podGroupTemplateName": TEMPLATE_NAME}}}
    spec = {**ref, "schedulingPolicy": _gang(plan), **_priority_fields(plan, config)}
    return {"apiVersion": api_version(config), "kind": "PodGroup", "metadata": gang_metadata(plan, config),
            "spec": spec}


def _effective_scheduler(spec: dict[str, Any], config: Config, managed: bool) -> str:
    """The ``schedulerName`` a target's pods will have after :func:`plan_patch` (which puts admit's own Coscheduling
    name back to the default on a workload it manages) and kube-apiserver's defaulting (empty: default)."""
    name = spec.get("schedulerName") or KUBE_DEFAULT_SCHEDULER
    return KUBE_DEFAULT_SCHEDULER if managed and name == config.scheduler_name else name


def gang_priority(obj: dict[str, Any], plan: GangPlan, config: Config) -> dict[str, str]:
    """What the gang's Workload template and PodGroup must copy from its pods so kube-scheduler schedules them:
    ``{"priorityClassName": str, "preemptionPolicy": str}``, each key only where the pod templates set it.

    Source: kube-scheduler ``validatePodGroup`` (1.37, ``pkg/scheduler/schedule_one_podgroup.go``): every pod of a
    PodGroup must have the same ``schedulerName``, the same priority as the PodGroup (resolved from its
    ``priorityClassName``) and the same ``preemptionPolicy``; the PodGroup ``priority`` is at most 1000000000.

    Raises:
        GangError (403): the templates name different priority classes, preemption policies or schedulers (the
            message names both values, where, and the fix), or a ``system-*`` class.
    """
    managed = _managed(obj, config)
    seen: dict[str, dict[str, str]] = {"priorityClassName": {}, "preemptionPolicy": {}, "schedulerName": {}}
    for target in plan.targets:
        spec = get_path(obj, pod_spec_path(target))
        if not isinstance(spec, dict):
            continue
        values = {"priorityClassName": spec.get("priorityClassName") or "",
                  "preemptionPolicy": spec.get("preemptionPolicy") or "",
                  "schedulerName": _effective_scheduler(spec, config, managed)}
        for key, value in values.items():
            seen[key].setdefault(str(value), target.where)
    why = {"priorityClassName": "priority as the pod group's priority",
           "preemptionPolicy": "preemption policy", "schedulerName": ".spec.schedulerName"}
    for key, values in seen.items():
        if len(values) > 1:
            (a, where_a), (b, where_b) = list(values.items())[:2]
            raise GangError(
                f"Give every pod template the same {key}, or gang them apart (annotation {config.pod_group_key} on "
                f"separate workloads): {plan.ref} mixes two {key} values in one native gang: the {where_a} has "
                f"{a or '(none)'!r} and the {where_b} has {b or '(none)'!r}. kube-scheduler schedules a PodGroup only "
                f"when all its pods have the same {why[key]} (\"all pods in a single pod group should have the same "
                "...\"), so this gang would stay Pending")
    cls = next(iter(seen["priorityClassName"]), "")
    if cls.startswith("system-"):  # a PodGroup's priority is capped at HighestUserDefinablePriority
        raise GangError(
            f"Use a PriorityClass of your own, or the coscheduling backend ({config.backend_key}: coscheduling): "
            f"{plan.ref}: pods with priorityClassName {cls!r} cannot form a native gang: a PodGroup's priority is at "
            f"most {MAX_GROUP_PRIORITY} (HighestUserDefinablePriority, scheduling.k8s.io PodGroup types.go) and the "
            "system-* classes are above it (system-cluster-critical 2000000000, system-node-critical 2000001000), so "
            "the PodGroup could never carry its pods' priority")
    return {k: v for k in _PRIORITY_KEYS if (v := next(iter(seen[k]), ""))}


def _priority_of(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("kind") == "Workload":
        templates = get_path(obj, ("spec", "podGroupTemplates"))
        chosen = next((t for t in templates if isinstance(t, dict) and t.get("name") == TEMPLATE_NAME), None) \
            if isinstance(templates, list) else None
        source = chosen or {}
    else:
        source = spec_v if isinstance(spec_v := obj.get("spec"), dict) else {}
    return {k: source.get(k) for k in _PRIORITY_KEYS}


def priority_mismatch(existing: dict[str, Any], desired: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (stored, wanted)}`` for the priority fields ``desired`` sets that ``existing`` holds otherwise.

    A field ``desired`` leaves out is not compared: priority admission fills the stored object from the global
    default class (``priorityClassName``) and from the class (``preemptionPolicy``, "defaults to
    PreemptLowerPriority"), exactly as it fills the pods. Both fields are immutable (``+k8s:immutable``)."""
    have, want = _priority_of(existing), _priority_of(desired)
    return {k: (have[k], want[k]) for k in _PRIORITY_KEYS if want[k] and have[k] != want[k]}


def priority_message(kind: str, plan: GangPlan, mismatch: dict[str, tuple[Any, Any]], pod_group_key: str) -> str:
    """The refusal for a managed object whose immutable priority fields differ from the pods' (its pods would never
    be scheduled: :func:`priority_mismatch`), with the fix, which names ``pod_group_key`` (``Config.pod_group_key``)."""
    what = ", ".join(f"{k} {have or '(none)'!r} (the pods now name {want!r})" for k, (have, want) in
                     mismatch.items())
    return (f"Delete the {plan.kind} and create it again (admit then makes both objects anew), or name a new group "
            f"with annotation {pod_group_key}: {kind} {plan.namespace}/{plan.group_name} keeps {what}; the "
            "field is immutable on the Workload's template and the PodGroup, and kube-scheduler schedules a PodGroup "
            f"only with its pods' priority, so {plan.ref}'s new pods would stay Pending")


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


def with_min_count(obj: dict[str, Any], count: int) -> dict[str, Any]:
    """A copy of a desired Workload (its one template) or PodGroup whose gang ``minCount`` is ``count``."""
    out = copy.deepcopy(obj)
    spec = out["spec"]["podGroupTemplates"][0] if out.get("kind") == "Workload" else out["spec"]
    spec["schedulingPolicy"]["gang"]["minCount"] = count
    return out


def _template_ref(obj: dict[str, Any]) -> tuple[Any, Any]:
    spec = spec_v if isinstance(spec_v := obj.get("spec"), dict) else {}
    if "workloadRef" in spec:
        return get_path(spec, ("workloadRef", "workloadName")), get_path(spec, ("workloadRef", "templateName"))
    ref = get_path(spec, ("podGroupTemplateRef", "workload"))
    return get_path(ref, ("workloadName",)), get_path(ref, ("podGroupTemplateName",))


def spec_differs(existing: dict[str, Any], desired: dict[str, Any]) -> bool:
    """True when ``existing`` differs from ``desired`` (same kind) in what admit manages: the gang ``minCount`` and,
    for a PodGroup, the Workload template it references. Fields the server defaults (``disruptionMode``) or that
    admit does not set are ignored."""
    if min_count_of(existing) != min_count_of(desired) or priority_mismatch(existing, desired):
        return True
    if desired.get("kind") == "Workload":
        names = [t.get("name") for t in get_path(existing, ("spec", "podGroupTemplates")) or [] if isinstance(t, dict)]
        return names != [TEMPLATE_NAME]
    return _template_ref(existing) != _template_ref(desired)


def update_ops(existing: dict[str, Any], desired: dict[str, Any], version: str) -> list[dict[str, Any]] | None:
    """JSON patch that brings ``existing`` to ``desired`` (``[]``: already in step), or ``None`` when the API does
    not allow it: always in v1alpha2 (templates and policy are immutable), and in the later versions when more than
    ``minCount`` differs (the template list, the template reference and the priority fields are immutable there
    too; :func:`priority_mismatch` says which). The record of the members that succeeded (``common.succeeded_ops``)
    is an annotation, mutable in every version: even a v1alpha2 object whose spec is in step takes it."""
    record = succeeded_ops(existing, desired)
    if not spec_differs(existing, desired):
        return record
    if not shape(version).min_count_mutable or priority_mismatch(existing, desired):
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
    return [{"op": "test", "path": path, "value": min_count_of(existing)},
            {"op": "replace", "path": path, "value": want}, *record]


def immutable_message(kind: str, plan: GangPlan, have: Any, version: str, pod_group_key: str) -> tuple[str, bool]:
    """``(message, refuse)`` for a managed object whose ``minCount`` cannot follow ``plan``: refuse when the workload
    would run fewer pods than the stored ``minCount`` (kube-scheduler would keep its new pods Pending), else warn. The
    fix names ``pod_group_key`` (``Config.pod_group_key``)."""
    what = f"{kind} {plan.namespace}/{plan.group_name}"
    why = (f"minCount is immutable in scheduling.k8s.io/{version}" + (" (Kubernetes 1.36; mutable in v1beta1, 1.37)"
                                                                        if version == "v1alpha2" else ""))
    fix = f"delete the {plan.kind} and create it again (or name a new group with annotation {pod_group_key})"
    total = plan.total_pods
    if isinstance(have, int) and total is not None and 0 < total < have:
        return (f"Keep {plan.total_field} at least {have}, or {fix} to change the gang size: {plan.ref} runs {total} "
                f"pod{'s' if total != 1 else ''} ({plan.total_field}={total}) but {what} keeps minCount {have}; "
                f"{why}, so kube-scheduler's GangScheduling plugin would keep new pods Pending"), True
    return (f"to change the gang size, {fix}: {what} keeps minCount {have}, not {plan.min_member} ({why})"), False


def ownership(existing: dict[str, Any], plan: GangPlan, config: Config, explicit_name: bool) -> Ownership:
    """How admit may treat an existing Workload or PodGroup (scheduling.k8s.io) for ``plan``: the rules of
    ``podgroup.ownership`` (manage ours, leave an operator's, use one named explicitly, refuse the rest), so both
    backends behave the same. A Workload whose ``spec.controllerRef`` or controller ownerReference names the
    workload itself was made by its own controller (the Job controller's ``WorkloadWithJob``, an operator)."""
    what = f"{existing.get('kind', 'Workload')} {plan.namespace}/{plan.group_name}"
    managed = managed_ownership(existing, plan, config, what)
    if managed is not None:
        return managed
    ref_owner = controller_identity(existing)
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
        f"Set annotation {config.pod_group_key} to another name, or to {plan.group_name!r} to join it as it is: "
        f"{what} already exists and was not created by admit",
    )


def pod_spec_path(target: PodTarget) -> tuple[str, ...]:
    """Key path of the pod spec a target's ``schedulerName`` lives in (``("spec", "template", "spec")``)."""
    return target.scheduler[:-1]


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
            warnings.append(f"remove schedulerName {str(scheduler)[:63]!r} from the {plan.kind} {target.where}, unless "
                            "that scheduler profile runs the GangScheduling plugin: the native gang happens only there")
        if t_ops and target.immutable:
            warnings.append(
                f"delete and recreate the {plan.kind} to gang-schedule it: its {target.where} is immutable, so admit "
                "cannot set spec.schedulingGroup")
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
            warnings.append(f"recreate the {old_plan.kind}: its {target.where} is immutable and keeps "
                            "spec.schedulingGroup, so new pods wait for a PodGroup admit no longer keeps")
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
    if str(annotations.get(config.min_resources_key, "")).strip().lower() == "auto":
        out.append(f"remove {config.min_resources_key}: the workload-api backend's PodGroups have no minResources "
                   "(kube-scheduler checks that every pod of the gang fits)")
    if config.timeout_key in annotations:
        out.append(f"remove {config.timeout_key}: the workload-api backend's PodGroups have no "
                   "scheduleTimeoutSeconds (kube-scheduler's GangScheduling plugin applies its own wait)")
    return out


class WorkloadAPI:
    """The ``workload-api`` backend as ``interface.GangBackend``: a Workload and its PodGroup (scheduling.k8s.io),
    pods join by ``spec.schedulingGroup.podGroupName`` and keep the default scheduler."""

    name = WORKLOAD_API
    scheduler = "kube-scheduler's GangScheduling plugin"  # its PreEnqueue waits for minCount pods
    size_name = "minCount"
    description = "Kubernetes' native Workload and PodGroup, scheduling.k8s.io, pod spec.schedulingGroup"

    def join_field(self, config: Config) -> str:
        return "spec.schedulingGroup"

    def join_key(self, config: Config) -> str:
        return "spec.schedulingGroup.podGroupName"

    def served(self, config: Config) -> bool:
        return bool(config.workload_api_version)  # found at start by admit/backends/workload_api/discovery.py

    def not_served_problem(self, config: Config) -> str | None:
        return None  # an upgrade may have moved the served version: admission runs discovery again

    def object_types(self, config: Config) -> tuple[ObjectType, ...]:
        version = config.workload_api_version or "v1alpha2"
        return tuple(ObjectType(WORKLOAD_API_GROUP, version, kind, plural) for kind, plural in KIND_PLURALS.items())

    def prepare(self, plan: GangPlan, obj: dict[str, Any], config: Config, deferred: bool) -> None:
        """Refuse a gang the served API cannot hold (not served; a group name that cannot name a Workload); warn
        about annotations without a native field; read the pods' priority into the plan (1.37+)."""
        if not config.workload_api_version:
            raise GangError(not_served_refusal(plan.ref, config), 400)
        if deferred:
            return
        problem = name_problem(plan.group_name, config.workload_api_version)
        if problem:
            raise GangError(f"Set annotation {config.pod_group_key} to a DNS label: {problem}", 400)
        plan.warnings.extend(unsupported_warnings(get_path(obj, ("metadata", "annotations")), plan, config))
        if shape(config.workload_api_version).priority:
            plan.native_priority = gang_priority(obj, plan, config)

    def join_ops(self, obj: dict[str, Any], plan: GangPlan, config: Config, label_workload: bool,
                 old: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
        return plan_patch(obj, plan, config, label_workload)

    leave_ops = staticmethod(ungang_ops)

    def joined(self, obj: dict[str, Any], target: PodTarget, plan: GangPlan, config: Config) -> bool:
        return template_group(obj, target) == plan.group_name

    def pod_in_group(self, pod: dict[str, Any], name: str, config: Config) -> bool:
        return get_path(pod, ("spec", "schedulingGroup", "podGroupName")) == name

    def named_pod_ops(self, pod: dict[str, Any], target: PodTarget,
                      config: Config) -> tuple[list[dict[str, Any]], list[str]] | None:
        """``None``: a pod's ``spec.schedulingGroup`` needs nothing more (the default scheduler runs the native gang);
        a bare pod that also carries the gang annotations is planned from them (``deferring_reason`` defers to a
        group someone else named)."""
        return None

    desired_objects = staticmethod(desired_objects)
    size_of = staticmethod(min_count_of)
    update_ops = staticmethod(update_ops)

    def ownership(self, existing: dict[str, Any], plan: GangPlan, config: Config, explicit_name: bool,
                  others: int | None = None) -> Ownership:
        return ownership(existing, plan, config, explicit_name)

    def merge_shared(self, existing: dict[str, Any], desired: dict[str, Any], plan: GangPlan,
                     members: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], list[str]]:
        """``interface.BackendHooks.merge_shared``: a group whose size follows its members (``plan.follows_members``)
        gets ``minCount`` :func:`common.members_left` on both objects, where the served version lets it change
        (:data:`SHAPES` ``min_count_mutable``, v1beta1 on; in v1alpha2 ``backends.apply_backend`` refuses such a
        group at its first member), and records the members that succeeded (``common.record_succeeded``); any other
        shared group takes what this member asks, as without the hook."""
        if not plan.follows_members or members is None:
            return desired, []
        left = members_left(plan.min_member, members, succeeded_record(existing)[1])
        return record_succeeded(existing, desired if left is None else with_min_count(desired, left), members), []

    def members_selector(self, plan: GangPlan, config: Config) -> str:
        """``interface.BackendHooks.members_selector``: the pods labelled members (``<prefix>/managed: member``); a
        pod names its group in ``spec.schedulingGroup``, which no selector reads, so the engine keeps those of this
        group (``pod_in_group``)."""
        return f"{config.managed_label}={MEMBER}"

    def owned_fields(self, config: Config) -> tuple[tuple[tuple[str, ...], bool, str], ...]:
        """``interface.BackendHooks.owned_fields``: what :func:`plan_patch` writes."""
        return (
            (("spec", "schedulingGroup"), False,
             "a pod spec's schedulingGroup (KEP-4671/5547): admit sets podGroupName to its group, and removes the "
             "field it set when the gang annotation goes"),
            (("spec", "schedulerName"), False,
             "a pod spec's schedulerName, set back to default-scheduler (which runs the GangScheduling plugin) when "
             "a gang admit managed moves here from the Coscheduling profile (--scheduler-name)"),
            (("metadata", "labels", config.pod_group_label), False,
             "the pod-group label admit wrote on pod templates, removed when a gang moves here"),
        )

    deferring_reason = staticmethod(deferring_reason)
    native_handover = staticmethod(native_handover)
    written_group = staticmethod(written_group)

    def cannot_admit(self, kind: str, existing: dict[str, Any], desired: dict[str, Any],
                     ops: list[dict[str, Any]] | None, plan: GangPlan, config: Config) -> tuple[int | None, str] | None:
        """``interface.BackendHooks.cannot_admit``: refuse stored priority fields other than the pods'
        (:func:`priority_message`); keep a ``minCount`` that cannot follow (v1alpha2) with a warning, or refuse a
        workload that would run fewer pods than it (:func:`immutable_message`)."""
        mismatch = priority_mismatch(existing, desired)
        if mismatch:
            return 403, priority_message(kind, plan, mismatch, config.pod_group_key)
        if ops is not None:
            return None
        version = config.workload_api_version or "v1alpha2"
        message, refuse = immutable_message(kind, plan, min_count_of(existing), version, config.pod_group_key)
        return (403 if refuse else None), message

    def cannot_follow(self, kind: str, existing: dict[str, Any], desired: dict[str, Any], plan: GangPlan,
                      config: Config) -> tuple[str, str] | None:
        """A priority field the pods changed (immutable on both objects), or a PodGroup ``minCount`` that cannot
        follow (v1alpha2)."""
        mismatch = priority_mismatch(existing, desired)
        if mismatch:
            return "priority", priority_message(kind, plan, mismatch, config.pod_group_key)
        if kind == "PodGroup":
            version = config.workload_api_version or "v1alpha2"
            have = min_count_of(existing)
            return "immutable", immutable_message(kind, plan, have, version, config.pod_group_key)[0]
        return None


BACKEND = WorkloadAPI()
