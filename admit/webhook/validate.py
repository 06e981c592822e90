"""The validating decision (``/validate``): pure, AdmissionRequest in, Verdict out.

What needs the Kubernetes API is returned as work for ``admission.py`` (:class:`Verdict`; a ``*/scale`` UPDATE's or
an HPA's parent must be read: a Scale object carries no annotations).

Refused, with a message naming the object, the numbers and the fix (docs/behaviour.md, "On each request"):

- malformed ``gang.admit.dev/*`` values (400);
- a gang workload running fewer pods than minMember, also through ``*/scale`` or an HPA (1 to minMember - 1, down
  or up from zero): the backend's scheduler keeps every pod Pending (Coscheduling's PreFilter, "cannot find enough
  sibling pods", scheduler-plugins ``pkg/coscheduling/core/core.go``) (403); zero replicas is allowed;
- the shapes a kind's resolver refuses (OrderedReady StatefulSets with minMember > 1, ...);
- an UPDATE whose rolling update would never form the gang (``rollout.rollout_problem``), or whose admit write, or
  the removal of admit's marks, the kind's operator would refuse or re-run the workload for
  (``rollout.running_problem``, ``rollout.removal_problem``); a rule that only warns adds a warning;
- a CREATE with ``generateName`` whose pod templates the mutating phase did not mark (its pods would never point at
  the group): set ``gang.admit.dev/pod-group``.

Allowed with a warning: admit keys without ``gang.admit.dev/min-member`` (a misspelt key, gang settings alone, the
annotation on a pod template). Allowed untouched: an UPDATE of an object being deleted or of ``status`` /
``metadata.finalizers`` only (``gang.lifecycle``), and a child (a Deployment's ReplicaSet, ``gang.children``), also
on its ``*/scale``: its parent's gang was checked on the parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..backends import backend_of, check_plan, scheduler_of
from ..gang.children import is_child
from ..config import Config
from ..families.kinds import PARENTS, POD_JOINERS, READS, RESOLVERS, SCALABLE, annotations_path, carried_annotations, \
    carried_path, gangs_on_its_own
from ..families.shared import Read, RunningVerdict
from ..families.marks import stale_marks, stale_message
from ..gang.lifecycle import bookkeeping_only, going_away
from ..gang.ownerrefs import has_controller
from ..gang.plan import (
    GangAnnotations,
    GangError,
    GangPlan,
    get_path,
    ignored_without_min_member,
    misplaced_annotation_warnings,
    label_key_warnings,
    parse_gang_annotations,
    template_annotation_warnings,
    unknown_annotation_warnings,
)
from ..gang.resources import (
    ResourceError, countable_min_resources, left_out_warning, resource_claims_warning, with_runtime_overhead,
)
from .admissionreview import AdmissionRequest, Decision
from .rollout import removal_problem, rollout_problem, running_problem


__all__ = ["Verdict", "ScaleCheck", "validate", "check_plan", "scale_verdict", "add_overhead", "autoscaler_refusal"]


@dataclass(slots=True)
class ScaleCheck:
    """A ``*/scale`` UPDATE that lowers replicas: read the parent to learn its minMember.

    Attributes:
        group / version / kind / plural: the parent workload's API coordinates (``apps``, ``v1``, ``Deployment``,
            ``deployments``).
        namespace / name: the parent.
        replicas: the requested ``spec.replicas`` (a HorizontalPodAutoscaler's ``spec.minReplicas``; the workload's
            own fixed minMember for ``Verdict.autoscaled``).
        hpa: ``"HorizontalPodAutoscaler ns/name"`` when the check is of an HPA that targets the parent, else ``""``.
        max_replicas: that HPA's ``spec.maxReplicas``.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespace: str
    name: str
    replicas: int
    hpa: str = ""
    max_replicas: int | None = None


@dataclass(slots=True)
class Verdict:
    """Result of :func:`validate`: a decision, plus the API work it depends on.

    Attributes:
        decision: the answer if no work is needed (or if the work succeeds).
        ensure: the gang objects of this plan must exist with its spec before its first pod, unless ``None``.
        scale: the parent of a scale request must be read and checked, unless ``None``.
        read: an object the kind's admission reads and judges first (``WorkloadKind.admission_read``: a TrainJob's
            runtime, whose JobSet Trainer builds), unless ``None``.
        autoscaled: a gang workload with a fixed minMember, created or given a new one: its namespace's
            HorizontalPodAutoscalers must be listed and judged (:func:`autoscaler_refusal`) first, unless ``None``.
        explicit_name: the group was named by annotation (``GangBackend.ownership``'s ``explicit``).
        dry_run: the request is a dry run: compute everything, write nothing.
    """

    decision: Decision
    ensure: GangPlan | None = None
    scale: ScaleCheck | None = None
    read: Read | None = None
    autoscaled: ScaleCheck | None = None
    explicit_name: bool = False
    dry_run: bool = False


def drop_uncountable(plan: GangPlan, served: Any) -> list[str]:
    """Leave out of ``plan.min_resources`` what the scheduler cannot count (``resources.countable_min_resources``:
    the implicit ``deviceclass.resource.kubernetes.io/*`` names, and ``served``, ``{extended resource name:
    DeviceClass}`` from the controller's DeviceClass cache). Returns the warnings (empty: nothing left out); changes
    ``plan`` in place."""
    kept, left_out = countable_min_resources(plan.min_resources, served)
    if not left_out:
        return []
    plan.min_resources = kept
    return [left_out_warning(left_out)]


def add_overhead(plan: GangPlan, overheads: dict[str, dict[str, str]]) -> list[str]:
    """Add to ``plan.min_resources`` the ``overhead.podFixed`` of its pods' RuntimeClass (``plan.runtime_class``,
    ``resources.with_runtime_overhead``; ``overheads`` from the controller's RuntimeClass cache, no API call), once
    per counted pod. Returns warnings (a quantity of the RuntimeClass that does not parse); changes ``plan``."""
    if not plan.runtime_class or not overheads:
        return []
    try:
        plan.min_resources, _ = with_runtime_overhead(plan.min_resources, plan.runtime_class, plan.min_member,
                                                      overheads)
    except ResourceError as e:
        return [f"{plan.ref}: minResources leaves out the pod overhead of RuntimeClass {plan.runtime_class}: {e}"]
    return []


def countable_warnings(plan: GangPlan, obj: Any) -> list[str]:
    """At admission, without any cache: :func:`drop_uncountable` for the implicit DRA names, and one warning when a
    pod template of the gang requests devices through ``spec.resourceClaims`` (pure)."""
    warnings = drop_uncountable(plan, {})
    specs = (get_path(obj, t.labels[:-2] + ("spec",)) for t in plan.targets if t.labels[-2:] == ("metadata", "labels"))
    claims = resource_claims_warning(specs)
    if claims:
        warnings.append(claims)
    return warnings


def scale_verdict(parent: dict[str, Any], check: ScaleCheck, config: Config, dry_run: bool = False) -> Verdict:
    """Judge a scale request once the parent workload is known (pure).

    One rule for the scale path and the workload path (:func:`check_plan`): the parent is resolved with
    ``spec.replicas`` set to the requested value, and any target from 1 to minMember - 1 is refused, whether the
    scale goes down, or up from zero. With ``auto`` minMember the verdict asks for the PodGroup to be brought to the
    new size in this admission (``ensure``), before the new pods exist; a fixed minMember does not depend on the
    replica count, so its PodGroup needs nothing.
    """
    resolver = RESOLVERS.get((check.group, check.kind))
    if is_child(parent, check.group, check.kind, PARENTS):
        return Verdict(Decision())  # its parent's gang was checked on the parent; its controller sets its replicas
    try:
        ann = parse_gang_annotations(get_path(parent, ("metadata", "annotations")), config)
        if ann is None or resolver is None:
            marks = stale_marks(parent, check.group, check.kind, config)  # admit's marks outlived the annotation
            return Verdict(Decision(warnings=[stale_message(check.kind, check.namespace, check.name, marks, config)]
                                    if marks else []))
        scaled = dict(parent)
        scaled["spec"] = dict(parent.get("spec") or {}, replicas=check.replicas)
        plan = resolver(scaled, ann, config, check.namespace, "UPDATE")
    except GangError as e:
        return Verdict(Decision.deny(e.message, e.code))
    if check.hpa:
        return Verdict(_hpa_decision(check, plan, ann, config))
    if 0 < check.replicas < plan.min_member:
        return Verdict(Decision.deny(
            f"Scale to at least {plan.min_member} (or to 0 to pause it), or lower {config.min_member_key} first: "
            f"scaling {plan.ref} to {check.replicas} replica{'s' if check.replicas != 1 else ''} goes below its gang "
            f"minMember {plan.min_member} ({config.min_member_key}), so {scheduler_of(plan.backend)} would keep every "
            "pod Pending forever"
        ))
    decision = Decision(warnings=plan.warnings, notes=plan.notes)
    if ann.min_member is not None or check.replicas == 0 or not plan.create_pod_group:
        return Verdict(decision)
    return Verdict(decision, ensure=plan, explicit_name=ann.pod_group is not None, dry_run=dry_run)


def _hpa_decision(check: ScaleCheck, plan: GangPlan, ann: GangAnnotations, config: Config) -> Decision:
    """A HorizontalPodAutoscaler of a gang workload: refused when its ``minReplicas`` (above 0) or ``maxReplicas``
    is below the gang's fixed minMember (why: :func:`autoscaler_refusal`; the HPA's scale fails as
    ``FailedRescale``). An ``auto`` gang follows its replicas (the scale resizes the PodGroup), so any HPA fits it."""
    if ann.min_member is None or not plan.create_pod_group:
        return Decision()
    target = f"{check.kind} {check.namespace}/{check.name}"
    why = (f"the gang minMember {plan.min_member} of {target} ({config.min_member_key}={plan.min_member}): "
           f"{scheduler_of(plan.backend)} would keep the pods of a smaller {check.kind} Pending forever, so admit "
           f"refuses every scale below {plan.min_member}, on every HPA cycle, with the error only in this HPA's status")
    for field, value in (("minReplicas", check.replicas), ("maxReplicas", check.max_replicas)):
        if value is not None and 0 < value < plan.min_member:
            return Decision.deny(f"Set spec.{field} to at least {plan.min_member}, or lower {config.min_member_key} on "
                                 f"{target}: {check.hpa} has spec.{field}={value}, below {why}")
    return Decision()


#: ``(API group, kind)`` -> ``(version, plural)`` of the kinds whose ``*/scale`` admit checks (an HPA's
#: ``scaleTargetRef`` names the kind).
_SCALABLE_BY_KIND = {(group, kind): (version, plural) for (_, plural), (group, version, kind) in SCALABLE.items()}


def _validate_hpa(req: AdmissionRequest, config: Config) -> Verdict:
    """A HorizontalPodAutoscaler CREATE/UPDATE (autoscaling/v2): check its ``minReplicas`` and ``maxReplicas``
    against its target's gang (:func:`_hpa_decision`); the target is looked up like a ``*/scale``'s parent (the
    controller's cache of gang workloads: no API call for a target that is no gang)."""
    scales = _hpa_scales(req.object)
    if scales is None:
        return Verdict(Decision())
    group, kind, name, low, high = scales
    coords = _SCALABLE_BY_KIND.get((group, kind))
    if coords is None or not name or low is None:
        return Verdict(Decision())  # kube-apiserver validates the HPA itself
    namespace = req.namespace or str(get_path(req.object, ("metadata", "namespace")) or "")
    hpa = f"HorizontalPodAutoscaler {namespace}/{get_path(req.object, ('metadata', 'name')) or req.name}"
    return Verdict(Decision(), scale=ScaleCheck(group, coords[0], kind, coords[1], namespace, name, low, hpa=hpa,
                                                max_replicas=high), dry_run=req.dry_run)


def _hpa_scales(hpa: Any) -> tuple[str, str, str, int | None, int | None] | None:
    """What an autoscaling/v2 HorizontalPodAutoscaler scales: its ``scaleTargetRef``'s API group, kind and name
    (``""`` when not a string), and its ``spec.minReplicas`` (1 when left out, as kube-apiserver defaults it) and
    ``spec.maxReplicas``, each ``None`` when not an integer; ``None`` when it has no ``scaleTargetRef``."""
    spec = get_path(hpa, ("spec",))
    ref = spec.get("scaleTargetRef") if isinstance(spec, dict) else None
    if not isinstance(ref, dict):
        return None
    name = ref.get("name")
    low, high = (v if isinstance(v, int) and not isinstance(v, bool) else None
                 for v in (spec.get("minReplicas", 1), spec.get("maxReplicas")))
    return (str(ref.get("apiVersion") or "").rpartition("/")[0], str(ref.get("kind") or ""),
            name if isinstance(name, str) else "", low, high)


def autoscaler_refusal(hpas: list[dict[str, Any]], target: ScaleCheck, config: Config) -> str | None:
    """The refusal of a gang workload ``target`` (its fixed minMember in ``target.replicas``) that one of ``hpas``
    (autoscaling/v2 HorizontalPodAutoscalers of its namespace, as listed) scales (``scaleTargetRef``: its API group,
    kind and name) with ``spec.minReplicas`` (1 when left out) or ``spec.maxReplicas`` below that minMember, else
    None. The HPA keeps its target within those bounds (kubernetes ``pkg/controller/podautoscaler/horizontal.go``
    ``reconcileAutoscaler``: below minReplicas up to it, above maxReplicas down to it, else the metrics' count
    clamped by ``convertDesiredReplicasWithRules``; each a ``Scales(ns).Update``), and admit refuses each such scale
    below minMember, on every HPA cycle, with the error only in the HPA's status. :func:`_hpa_decision` judges the
    HPA's own write; this judges the workload's (an HPA applied first, as Helm and Argo CD order a StatefulSet after
    its HPA, or a min-member raised later)."""
    for hpa in hpas:
        scales, name = _hpa_scales(hpa), get_path(hpa, ("metadata", "name"))
        if scales is None or scales[:3] != (target.group, target.kind, target.name):
            continue
        for field, value, moves in (("minReplicas", scales[3], "down to"),
                                    ("maxReplicas", scales[4], "to no more than")):
            if value is not None and 0 < value < target.replicas:
                return (f"Set spec.{field} of HorizontalPodAutoscaler {target.namespace}/{name} to at least "
                        f"{target.replicas}, or {config.min_member_key} to at most {value} (or auto): that HPA "
                        f"scales this {target.kind} {moves} {value} replica{'s' * (value != 1)}, below its gang "
                        f"minMember {target.replicas}, and admit would refuse each such scale, on every HPA cycle, "
                        "with the error only in the HPA's status")
    return None


def _autoscaled(req: AdmissionRequest, ann: GangAnnotations, plan: GangPlan, namespace: str,
                config: Config) -> ScaleCheck | None:
    """The HPA check (``Verdict.autoscaled``) of a scalable gang workload with a fixed minMember above 1, on its
    CREATE or on an UPDATE that changes its min-member annotation; else None."""
    coords = _SCALABLE_BY_KIND.get((req.group, req.kind))
    if coords is None or ann.min_member is None or plan.min_member < 2 or not isinstance(req.object, dict):
        return None
    key = ("metadata", "annotations", config.min_member_key)
    if req.operation == "UPDATE" and get_path(req.old_object, key) == get_path(req.object, key):
        return None
    return ScaleCheck(req.group, coords[0], req.kind, coords[1], namespace, str(req.name or get_path(
        req.object, ("metadata", "name"))), plan.min_member)


def _validate_scale(req: AdmissionRequest, config: Config) -> Verdict:
    parent = SCALABLE.get((req.resource_group, req.resource))
    if parent is None or req.operation != "UPDATE":
        return Verdict(Decision())
    new = get_path(req.object, ("spec", "replicas"))
    if not isinstance(new, int) or isinstance(new, bool) or new == 0:
        return Verdict(Decision())  # kube-apiserver validates the Scale object itself; pausing never breaks a gang
    group, version, kind = parent
    return Verdict(Decision(), scale=ScaleCheck(group, version, kind, req.resource, req.namespace, req.name, new),
                   dry_run=req.dry_run)


def _unlabelled_generated(req: AdmissionRequest, plan: GangPlan, ann: GangAnnotations, config: Config) -> str | None:
    """The refusal for a CREATE with ``generateName`` whose templates the mutating phase did not label, else None.

    kube-apiserver fills in the name between the two phases, so a group named here after that name is one no pod
    would point at (the mutating phase never saw the name)."""
    obj = req.object
    gen = get_path(obj, ("metadata", "generateName"))
    if obj is None or req.operation != "CREATE" or not gen or ann.pod_group is not None or not plan.mutate:
        return None
    missing = [t.where for t in plan.targets if not backend_of(plan.backend).joined(obj, t, plan, config)]
    if not missing:
        return None
    field = backend_of(plan.backend).join_field(config)
    return (
        f"Set annotation {config.pod_group_key} to a name for its group, or make sure admit's mutating webhook sees "
        f"this object: {plan.ref} was created with generateName {gen!r} and its {', '.join(sorted(set(missing)))} "
        f"carries no {field} (admit's mutating webhook did not set it), so its pods would never join a PodGroup named "
        "after the generated name"
    )


def _pod_made_group(req: AdmissionRequest, pod: dict[str, Any], config: Config) -> Verdict:
    """A controller-made Pod CREATE: a registered pod joiner (``kinds.POD_JOINERS``, called without a cache) may
    say that this pod's group is made when its pod is created (a LeaderWorkerSet leader, ``admit.families.lws``);
    its PodGroup is then ensured like a workload's. Any other such pod is allowed untouched. Never denies for the
    pod's shape: the joiner's warnings were given by ``/mutate`` already. Only pods with an annotation under admit's
    prefix are asked about, so other controller pods cost one pass over their annotation keys."""
    annotations = get_path(pod, ("metadata", "annotations"))
    prefix = config.key_prefix
    if not isinstance(annotations, dict) or not any(isinstance(k, str) and k.startswith(prefix) for k in annotations):
        return Verdict(Decision())  # such a pod carries its family's annotation (e.g. an LWS group spec): cheap exit
    namespace = req.namespace or str(get_path(pod, ("metadata", "namespace")) or "")
    plan = next((p for joiner in POD_JOINERS if (p := joiner(pod, config, namespace, None)) is not None), None)
    if isinstance(plan, GangPlan) and plan.mutate and plan.create_pod_group:
        return Verdict(Decision(), ensure=plan, dry_run=req.dry_run)
    return Verdict(Decision())


def _removal(req: AdmissionRequest, obj: dict[str, Any], config: Config) -> RunningVerdict | None:
    """``rollout.removal_problem`` of an UPDATE whose object has no gang annotations while the stored one had
    (None otherwise, or when the stored ones do not resolve)."""
    old = req.old_object
    resolver = RESOLVERS.get((req.group, req.kind))
    if not isinstance(old, dict) or resolver is None:
        return None
    try:
        old_ann = parse_gang_annotations(get_path(old, annotations_path(req.group, req.kind)), config)
        if old_ann is None:
            return None
        namespace = req.namespace or str(get_path(old, ("metadata", "namespace")) or "")
        return removal_problem(obj, old, resolver(old, old_ann, config, namespace, "UPDATE"), config)
    except GangError:
        return None


def validate(req: AdmissionRequest, config: Config) -> Verdict:
    """The ``/validate`` verdict for one request (see module docstring). Never raises for any object shape."""
    if req.operation not in ("CREATE", "UPDATE") or req.object is None:
        return Verdict(Decision())
    if req.sub_resource:
        return _validate_scale(req, config) if req.sub_resource == "scale" else Verdict(Decision())
    obj = req.object
    if req.operation == "UPDATE" and (going_away(obj) or bookkeeping_only(req.old_object, obj)):
        return Verdict(Decision())
    if req.group == "autoscaling" and req.kind == "HorizontalPodAutoscaler":
        return _validate_hpa(req, config)
    is_pod = req.kind == "Pod" and req.group == ""
    if is_pod and req.operation == "CREATE" and has_controller(obj) and not gangs_on_its_own(obj):
        return _pod_made_group(req, obj, config)
    if is_pod and req.operation != "CREATE":
        return Verdict(Decision())
    resolver = RESOLVERS.get((req.group, req.kind))
    if resolver is None or req.group in config.ignored_api_groups or is_child(obj, req.group, req.kind, PARENTS):
        return Verdict(Decision())
    where = annotations_path(req.group, req.kind)
    annotations = get_path(obj, where)  # a CronJob's are its jobTemplate's (WorkloadKind.annotations)
    if req.operation == "CREATE" and not (isinstance(annotations, dict) and config.min_member_key in annotations):
        annotations = carried_annotations(obj, req.group, req.kind, config) or annotations  # mutate.py put them on
    typos = unknown_annotation_warnings(annotations, config) + label_key_warnings(obj, config)
    try:
        ann = parse_gang_annotations(annotations, config)
        if ann is None and req.operation == "UPDATE":
            removal = _removal(req, obj, config)
            if removal is not None and removal.refuse:
                return Verdict(Decision.deny(removal.message, 403, typos))
            typos += [removal.message] if removal is not None else []
        if ann is None:
            return Verdict(Decision(warnings=typos + ignored_without_min_member(annotations, config)
                                    + template_annotation_warnings(obj, config, carried_path(req.group, req.kind))
                                    + misplaced_annotation_warnings(obj, where, config)))
        namespace = req.namespace or str(get_path(obj, ("metadata", "namespace")) or "")
        plan = resolver(obj, ann, config, namespace, req.operation)
        check_plan(plan, config, ann)
    except GangError as e:
        return Verdict(Decision.deny(e.message, e.code, typos))
    if req.operation == "UPDATE":
        running = running_problem(obj, req.old_object, plan, config)
        if running is not None and running.refuse:
            return Verdict(Decision.deny(running.message, 403, typos + plan.warnings))
        if running is not None:
            plan.warnings.append(running.message)
        problem = rollout_problem(obj, req.old_object, plan, config)
        if problem:
            return Verdict(Decision.deny(problem, 403, typos + plan.warnings))
    decision = Decision(warnings=typos + plan.warnings, message="; ".join(plan.notes), notes=plan.notes)
    read_of = READS.get((req.group, req.kind)) if req.operation == "CREATE" else None
    read = read_of(obj, namespace) if read_of is not None else None
    if read is not None:
        return Verdict(decision, read=read, dry_run=req.dry_run)
    if not plan.create_pod_group:
        return Verdict(decision)
    decision.warnings.extend(countable_warnings(plan, obj))
    if any(t.immutable and not backend_of(plan.backend).joined(obj, t, plan, config) for t in plan.targets):
        return Verdict(decision)  # its pods cannot be labelled (the mutating webhook warned): no PodGroup to wait on
    unlabelled = _unlabelled_generated(req, plan, ann, config)
    if unlabelled:
        return Verdict(Decision.deny(unlabelled, 400, decision.warnings))
    return Verdict(decision, ensure=plan, explicit_name=ann.pod_group is not None, dry_run=req.dry_run,
                   autoscaled=_autoscaled(req, ann, plan, namespace, config))
