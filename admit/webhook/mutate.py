"""The mutating decision (``/mutate``): pure, AdmissionRequest in, Decision out, no Kubernetes API call.

Behaviour: docs/behaviour.md, "On each request". What a pod carries to join its gang is the plan's backend's
(``GangBackend.join_ops``, ``leave_ops``, ``named_pod_ops``, found by ``plan.backend``): this module names no
backend's label or field. A second pass gives an empty patch (``reinvocationPolicy: IfNeeded``).

- Workload CREATE/UPDATE with ``gang.admit.dev/min-member``: every pod template gets the backend's marks, the
  workload the label ``gang.admit.dev/managed: "true"`` (the controller's label selector); an explicit non-default
  ``schedulerName`` is kept, with a warning.
- Pod CREATE: a pod that names its group with a backend's key gets what that backend still adds; a bare pod with
  the annotations gets its backend's marks; a pod a registered joiner claims (a Spark executor) joins its group.
  Pods are never touched on UPDATE (most pod fields are immutable).
- Workload UPDATE that removes the annotation: the backend takes its marks off (:func:`_ungang`). An UPDATE whose
  operator would refuse admit's write or act on it, or on the removal: ``rollout.running_problem``,
  ``rollout.removal_problem`` say what each phase does.
- A wrapper (``WorkloadKind.carry``: ScheduledSparkApplication, RayCronJob) gets its gang annotations written into
  its template, which its operator copies onto each run (``families.wrappers.carry_ops``; each run: :func:`_carried`).
- Unchanged: a child (a Deployment's ReplicaSet: its template is the parent's), subresources, DELETE, CONNECT,
  other kinds, malformed annotations (the validating webhook refuses them), an UPDATE of an object being deleted or
  of ``status`` / ``metadata.finalizers`` only (``gang.lifecycle``: removing a finalizer is never held up).
- A workload created with ``generateName`` has no name yet in this phase (kube-apiserver generates it after the
  mutating webhooks): its group is named here, once (:func:`_resolve`), written where the backend's pods carry it,
  and read back by the validating phase and the controller. ``gang.admit.dev/pod-group`` overrides it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..backends import BACKENDS, backend_of, handover_ops
from ..gang.children import is_child
from ..config import Config
from ..gang.foreign import other_generation_label, translate_group_labels
from ..families.kinds import KINDS, PARENTS, POD_JOINERS, RESOLVERS, annotations_path, carried_annotations, \
    gangs_on_its_own
from ..families.marks import drop_stale_marks
from ..families.wrappers import carry_ops
from ..gang.lifecycle import bookkeeping_only, going_away
from ..gang.ownerrefs import has_controller
from ..gang.patch import set_keys_ops
from ..gang.plan import (
    GangAnnotations, GangError, GangPlan, NoNameYet, Resolver, generated_group_name, get_path, parse_gang_annotations,
)
from .admissionreview import AdmissionRequest, Decision
from .rollout import removal_problem, running_problem
from ..families.apps import POD

__all__ = ["mutate", "plan_patch"]


def plan_patch(obj: dict[str, Any], plan: GangPlan, config: Config, label_workload: bool = True,
               old: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """JSONPatch operations and warnings that put ``plan`` into ``obj``.

    Returns ``(operations, warnings)``. ``obj`` is not modified. Targets marked immutable (Job templates on UPDATE)
    give a warning instead of operations, unless ``old`` (the stored object of an UPDATE) already carries admit's
    marks there (the backend's ``join_ops`` may put a GitOps re-apply's marks back). A plan its kind's own controller
    gangs (``plan.mutate`` off) gets ``backends.handover_ops`` instead, with the kind's record. The plan's
    ``extra_ops`` (a family's own writes on the workload: a TrainJob's runtime patch, an Argo step pod's member label)
    follow the backend's ops, whichever the backend.
    """
    if not plan.mutate:  # its own controller gangs it: at most hand it over, or take admit's earlier marks off
        ops, warnings = handover_ops(obj, plan, config, KINDS.get((plan.api_group, plan.kind)))
        return ops, plan.warnings + warnings
    ops, warnings = backend_of(plan.backend).join_ops(obj, plan, config, label_workload, old)
    return ops + plan.extra_ops, warnings


def _mutate_pod(req: AdmissionRequest, pod: dict[str, Any], config: Config, known_groups: Any) -> Decision:
    namespace = req.namespace or str(get_path(pod, ("metadata", "namespace")) or "")
    labels = get_path(pod, ("metadata", "labels"))
    other = other_generation_label(config)
    if other is None or not isinstance(labels, dict) or other not in labels:  # the hot path: one dict lookup
        return _mutate_pod_translated(req, pod, config, known_groups, namespace)
    meta = pod.get("metadata") or {}
    t_ops, t_warnings, pod = translate_group_labels(
        pod, [POD], config, f"Pod {namespace}/{meta.get('name') or meta.get('generateName') or ''}"
    )
    decision = _mutate_pod_translated(req, pod, config, known_groups, namespace)
    decision.patch[:0] = t_ops
    decision.warnings[:0] = t_warnings
    return decision


def _mutate_pod_translated(req: AdmissionRequest, pod: dict[str, Any], config: Config, known_groups: Any,
                           namespace: str) -> Decision:
    for backend in BACKENDS.values():  # a pod that names its group with a backend's key: that backend's answer
        named = backend.named_pod_ops(pod, POD, config)
        if named is not None:
            return Decision(patch=named[0], warnings=named[1])
    annotations = get_path(pod, ("metadata", "annotations"))
    if isinstance(annotations, dict) and config.min_member_key in annotations:
        if has_controller(pod) and not gangs_on_its_own(pod):  # an Argo step pod gangs as a bare pod
            return Decision(warnings=[f"annotate the controller (Deployment, Job, ...) instead of its pod template: "
                                      f"this pod carries {config.min_member_key} but belongs to a controller"])
        try:
            ann = parse_gang_annotations(annotations, config)
            if ann is None:  # the key is there with a null value: no gang
                return Decision()
            plan = _resolve(RESOLVERS[("", "Pod")], req, pod, ann, config, namespace)
        except GangError:
            return Decision()  # the validating webhook refuses it with the reason
        ops, warnings = plan_patch(pod, plan, config)
        return Decision(patch=ops, warnings=warnings, notes=plan.notes)
    for joiner in POD_JOINERS:
        plan = joiner(pod, config, namespace, known_groups)
        if plan is not None:
            if not isinstance(plan, GangPlan):  # the group is known only to the API: admission.py reads it
                return Decision(lookup=plan)
            ops, warnings = plan_patch(pod, plan, config, label_workload=False)
            return Decision(patch=ops, warnings=warnings)
    return Decision()


def mutate(req: AdmissionRequest, config: Config, known_groups: Any = None) -> Decision:
    """The ``/mutate`` answer for one request (see module docstring). Never raises for any object shape.

    ``known_groups`` is the PodGroup cache (``.get(namespace, name) -> dict | None``) or ``None``.
    """
    obj = req.object
    if obj is None or req.sub_resource or req.operation not in ("CREATE", "UPDATE"):
        return Decision()
    if req.operation == "UPDATE" and (going_away(obj) or bookkeeping_only(req.old_object, obj)):
        return Decision()
    if req.kind == "Pod" and req.group == "":
        return _mutate_pod(req, obj, config, known_groups) if req.operation == "CREATE" else Decision()
    resolver = RESOLVERS.get((req.group, req.kind))
    if resolver is None or req.group in config.ignored_api_groups or is_child(obj, req.group, req.kind, PARENTS):
        return Decision()
    namespace = req.namespace or str(get_path(obj, ("metadata", "namespace")) or "")
    obj, carried_ops = _carried(req, obj, config)
    try:
        ann = parse_gang_annotations(get_path(obj, annotations_path(req.group, req.kind)), config)
        if ann is None:
            if req.operation == "UPDATE" and req.old_object is not None:
                return _ungang(req, obj, req.old_object, config, namespace)
            return _translate_only(req, obj, config, namespace)
        plan = _resolve(resolver, req, obj, ann, config, namespace)
        t_ops: list[dict[str, Any]] = []
        t_warnings: list[str] = []
        if not has_controller(obj):  # never a child's template: see _translate_only
            t_ops, t_warnings, translated = translate_group_labels(obj, plan.targets, config, plan.ref)
            if t_ops:  # the templates carried the other generation's label: plan again on what they will carry
                obj = translated
                plan = _resolve(resolver, req, obj, ann, config, namespace)
    except GangError:
        return Decision(patch=carried_ops)  # the validating webhook refuses it with the reason
    carry = KINDS[(req.group, req.kind)].carry
    if carry is not None:  # a wrapper: its template carries the annotations to its runs, which are ganged
        return Decision(patch=carry_ops(obj, carry, plan, config), warnings=plan.warnings, notes=plan.notes)
    running = running_problem(obj, req.old_object, plan, config) if req.operation == "UPDATE" else None
    if running is not None and running.refuse:
        return Decision()  # the kind's operator would refuse or act on admit's write: the validating webhook refuses
    ops, warnings = plan_patch(obj, plan, config, old=req.old_object if req.operation == "UPDATE" else None)
    if running is not None:
        warnings.append(running.message)
    return Decision(patch=carried_ops + t_ops + ops, warnings=t_warnings + warnings, notes=plan.notes)


def _carried(req: AdmissionRequest, obj: dict[str, Any], config: Config) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(object, operations)``: at the CREATE of an object a wrapper's controller made from its template (a
    ScheduledSparkApplication's SparkApplication, a RayCronJob's RayJob; ``families.shared.Carry``) whose own
    metadata holds no ``<prefix>/min-member``, the gang annotations its template carried, put on its own
    ``metadata.annotations`` (so the controller, ``admit status`` and the operator, which copies a RayJob's
    annotations onto its RayCluster, see a gang workload); the object as it will be. Else ``(obj, [])``."""
    if req.operation != "CREATE":
        return obj, []
    own = get_path(obj, ("metadata", "annotations"))
    if isinstance(own, dict) and config.min_member_key in own:
        return obj, []
    carried = carried_annotations(obj, req.group, req.kind, config)
    if not carried:
        return obj, []
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(own if isinstance(own, dict) else {}), **carried}
    return {**obj, "metadata": meta}, set_keys_ops(obj, ("metadata", "annotations"), carried)


_TARGETS_ONLY = GangAnnotations(min_member=1, min_resources=False)


def _translate_only(req: AdmissionRequest, obj: dict[str, Any], config: Config, namespace: str) -> Decision:
    """A workload without admit's annotations: only the other API generation's group label is translated.

    Never in the template of an object that a controller made (a Deployment's ReplicaSet): the Deployment controller
    finds its ReplicaSet by comparing templates (``EqualIgnoreHash`` in ``pkg/controller/deployment/util``), so a
    label added to the child alone makes it create ReplicaSet after ReplicaSet. Its pods are translated instead.
    """
    if has_controller(obj):
        return Decision()
    try:
        plan = RESOLVERS[(req.group, req.kind)](obj, _TARGETS_ONLY, config, namespace, req.operation)
    except GangError:
        return Decision()
    ops, warnings, _ = translate_group_labels(obj, plan.targets, config, plan.ref)
    return Decision(patch=ops, warnings=warnings)


def _resolve(resolver: Resolver, req: AdmissionRequest, obj: dict[str, Any], ann: Any, config: Config,
             namespace: str) -> GangPlan:
    """``resolver(...)``; for an object that has only ``generateName`` (no name yet, no group label, no
    ``pod-group`` annotation), the plan with the group named by :func:`admit.gang.plan.generated_group_name`."""
    try:
        return resolver(obj, ann, config, namespace, req.operation)
    except NoNameYet as e:
        name = generated_group_name(e.generate_name, req.uid)
        plan = resolver(obj, dataclasses.replace(ann, pod_group=name), config, namespace, req.operation)
        plan.notes.append(  # a name chosen for the user, not a mistake: a note
            f"{plan.kind} created with generateName {e.generate_name!r}: its name is not known yet, so its PodGroup "
            f"is named {name!r} (its pods carry {backend_of(plan.backend).join_key(config)}={name}); set annotation "
            f"{config.pod_group_key} to choose the name"
        )
        return plan


def _ungang(req: AdmissionRequest, obj: dict[str, Any], old: dict[str, Any], config: Config, namespace: str) -> Decision:
    """Undo admit's marks when an UPDATE removes ``<prefix>/min-member``: the old plan's backend's ``leave_ops``
    (a pod that keeps naming a group admit no longer keeps would wait forever; the backends say why for theirs).
    A workload whose stored object had no annotation either loses the marks that outlived it
    (``families.marks.drop_stale_marks``)."""
    resolver = RESOLVERS[(req.group, req.kind)]
    carry = KINDS[(req.group, req.kind)].carry
    if carry is not None:  # a wrapper: its template stops carrying the annotations
        return Decision(patch=carry_ops(obj, carry, None, config))
    try:
        old_ann = parse_gang_annotations(get_path(old, annotations_path(req.group, req.kind)), config)
        if old_ann is None:  # the annotation went while admit did not see it: take off the marks that outlived it
            ops, warnings = drop_stale_marks(obj, req.group, req.kind, namespace,
                                             str(get_path(obj, ("metadata", "name")) or req.name), config)
            return Decision(patch=ops, warnings=warnings)
        old_plan = resolver(old, old_ann, config, namespace, "UPDATE")
    except GangError:
        return Decision()
    if not old_plan.mutate:  # an operator ganged it (Kubeflow, spark-operator batchScheduler): admit added nothing
        return Decision()
    removal = removal_problem(obj, old, old_plan, config)
    if removal is not None and removal.refuse:
        return Decision()  # the operator would re-run it or refuse: the validating webhook refuses with the fix
    ops, warnings = backend_of(old_plan.backend).leave_ops(obj, old_plan, config)
    return Decision(patch=ops, warnings=warnings + ([removal.message] if removal is not None else []))
