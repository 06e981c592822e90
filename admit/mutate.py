"""The mutating decision (``/mutate``): pure, AdmissionRequest in, Decision out, no Kubernetes API call.

Behaviour (DESIGN.md, "What it does on each request"):

- Workload CREATE/UPDATE with ``gang.admit.dev/min-member``: every pod template gets the label
  ``scheduling.x-k8s.io/pod-group: <group>`` and ``spec.schedulerName: <scheduler>``; the workload itself gets the
  label ``gang.admit.dev/managed: "true"`` (the PodGroup controller's label selector). An explicit non-default
  schedulerName is kept, with a warning. A second pass gives an empty patch (``reinvocationPolicy: IfNeeded``).
- Pod CREATE: a pod that carries the group label gets the schedulerName; a bare pod with the annotations gets label
  and schedulerName; a pod a registered joiner claims (Spark executor) joins its group. Pods are never touched on
  UPDATE (most pod fields are immutable; kube-apiserver would refuse the patch).
- Workload UPDATE that removes the annotation: the group label admit put on the templates and the managed label are
  removed (a labelled pod whose PodGroup is gone would wait forever).
- A child (a ReplicaSet its Deployment made: ``children.py``) passes unchanged: its template is the parent's, which
  admit already patched.
- Subresources, DELETE, CONNECT, other kinds, and workloads whose annotations are malformed (the validating webhook
  refuses those, with the reason) pass unchanged.
"""

from __future__ import annotations

from typing import Any

from .backends import coscheduling, workload_api
from .children import is_child
from .config import KUBE_DEFAULT_SCHEDULER, WORKLOAD_API, Config
from .kinds import POD_JOINERS, RESOLVERS
from .patch import pointer, set_keys_ops, set_op
from .plan import GangError, GangPlan, get_path, parse_gang_annotations
from .review import AdmissionRequest, Decision
from .workloads import POD

__all__ = ["mutate", "plan_patch", "has_controller"]

_UNSET_SCHEDULERS = (None, "", KUBE_DEFAULT_SCHEDULER)


def has_controller(obj: dict[str, Any]) -> bool:
    """True when ``metadata.ownerReferences`` has an entry with ``controller: true`` (the pod is not bare)."""
    refs = get_path(obj, ("metadata", "ownerReferences"))
    return isinstance(refs, list) and any(isinstance(r, dict) and r.get("controller") for r in refs)


def _scheduler_ops(obj: dict[str, Any], path: tuple[str, ...], where: str, config: Config) -> tuple[
    dict[str, Any] | None, str | None
]:
    current = get_path(obj, path)
    if current == config.scheduler_name:
        return None, None
    if current in _UNSET_SCHEDULERS:
        return set_op(obj, path, config.scheduler_name), None
    return None, (
        f"{where} keeps schedulerName {current!r}: gang scheduling only happens if that scheduler runs the "
        f"Coscheduling plugin (admit's scheduler is {config.scheduler_name!r})"
    )


def plan_patch(obj: dict[str, Any], plan: GangPlan, config: Config, label_workload: bool = True) -> tuple[
    list[dict[str, Any]], list[str]
]:
    """JSONPatch operations and warnings that put ``plan`` into ``obj``.

    Returns ``(operations, warnings)``. ``obj`` is not modified. Targets marked immutable (Job templates on UPDATE)
    give a warning instead of operations.
    """
    if plan.backend == WORKLOAD_API:  # spec.schedulingGroup instead of label and schedulerName
        return workload_api.plan_patch(obj, plan, config, label_workload)
    ops: list[dict[str, Any]] = []
    warnings = list(plan.warnings)
    if not plan.mutate:
        return ops, warnings
    ops.extend(coscheduling.switch_back_ops(obj, plan, config))
    for target in plan.targets:
        t_ops = set_keys_ops(obj, target.labels, {config.pod_group_label: plan.group_name})
        s_op, warning = _scheduler_ops(obj, target.scheduler, f"{plan.kind} {target.where}", config)
        if s_op is not None:
            t_ops.append(s_op)
        if warning:
            warnings.append(warning)
        if t_ops and target.immutable:
            warnings.append(
                f"{plan.ref}: the {target.where} is immutable, so admit cannot add the {config.pod_group_label} label "
                f"and schedulerName; its pods will not be gang-scheduled. Delete and recreate the {plan.kind} with the "
                "annotation to gang-schedule it"
            )
            continue
        ops.extend(t_ops)
    if label_workload and (plan.kind != "Pod" or not plan.shared):  # a Pod that owns its group: spark-submit driver
        ops.extend(set_keys_ops(obj, ("metadata", "labels"), {config.managed_label: "true"}))
    return ops, warnings


def _mutate_pod(req: AdmissionRequest, pod: dict[str, Any], config: Config, known_groups: Any) -> Decision:
    labels = get_path(pod, ("metadata", "labels"))
    if isinstance(labels, dict) and config.pod_group_label in labels:
        op, warning = _scheduler_ops(pod, POD.scheduler, "pod", config)
        return Decision(patch=[op] if op else [], warnings=[warning] if warning else [])
    namespace = req.namespace or str(get_path(pod, ("metadata", "namespace")) or "")
    annotations = get_path(pod, ("metadata", "annotations"))
    if isinstance(annotations, dict) and config.min_member_key in annotations:
        if has_controller(pod):
            return Decision(
                warnings=[
                    f"pod carries {config.min_member_key} but belongs to a controller: annotate the controller "
                    "(Deployment, Job, ...) instead of its pod template"
                ]
            )
        try:
            ann = parse_gang_annotations(annotations, config)
            assert ann is not None
            plan = RESOLVERS[("", "Pod")](pod, ann, config, namespace, req.operation)
        except GangError:
            return Decision()  # the validating webhook refuses it with the reason
        ops, warnings = plan_patch(pod, plan, config)
        return Decision(patch=ops, warnings=warnings)
    for joiner in POD_JOINERS:
        plan = joiner(pod, config, namespace, known_groups)
        if plan is not None:
            ops, warnings = plan_patch(pod, plan, config)
            return Decision(patch=ops, warnings=warnings)
    return Decision()


def mutate(req: AdmissionRequest, config: Config, known_groups: Any = None) -> Decision:
    """The ``/mutate`` answer for one request (see module docstring). Never raises for any object shape.

    ``known_groups`` is the PodGroup cache (``.get(namespace, name) -> dict | None``) or ``None``.
    """
    obj = req.object
    if obj is None or req.sub_resource or req.operation not in ("CREATE", "UPDATE"):
        return Decision()
    if req.kind == "Pod" and req.group == "":
        if req.operation != "CREATE":
            return Decision()
        return _mutate_pod(req, obj, config, known_groups)
    resolver = RESOLVERS.get((req.group, req.kind))
    if resolver is None or req.group in config.ignored_api_groups or is_child(obj, req.group, req.kind):
        return Decision()
    namespace = req.namespace or str(get_path(obj, ("metadata", "namespace")) or "")
    try:
        ann = parse_gang_annotations(get_path(obj, ("metadata", "annotations")), config)
        if ann is None:
            if req.operation == "UPDATE" and req.old_object is not None:
                return _ungang(req, obj, req.old_object, config, namespace)
            return Decision()
        plan = resolver(obj, ann, config, namespace, req.operation)
    except GangError:
        return Decision()  # the validating webhook refuses it with the reason
    ops, warnings = plan_patch(obj, plan, config)
    return Decision(patch=ops, warnings=warnings)


def _ungang(req: AdmissionRequest, obj: dict[str, Any], old: dict[str, Any], config: Config, namespace: str) -> Decision:
    """Undo admit's labels when an UPDATE removes ``<prefix>/min-member``.

    A pod that keeps the pod-group label after its PodGroup is gone never runs: Coscheduling's Permit denies a pod
    whose labelled PodGroup is not found (scheduler-plugins ``pkg/coscheduling/core/core.go``, ``Permit`` returns
    ``PodGroupNotFound``). So the label is
    removed from the templates where it still names the group admit gave them, and the managed label from the
    workload; a label the user set to another value is left alone, as is ``schedulerName`` (the Coscheduling
    profile schedules pods without a group like any other).
    """
    resolver = RESOLVERS[(req.group, req.kind)]
    try:
        old_ann = parse_gang_annotations(get_path(old, ("metadata", "annotations")), config)
        if old_ann is None:
            return Decision()
        old_plan = resolver(old, old_ann, config, namespace, "UPDATE")
    except GangError:
        return Decision()
    if not old_plan.mutate:  # an operator ganged it (Kubeflow, spark-operator batchScheduler): admit added nothing
        return Decision()
    if old_plan.backend == WORKLOAD_API:
        ops, warnings = workload_api.ungang_ops(obj, old_plan, config)
        return Decision(patch=ops, warnings=warnings)
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for target in old_plan.targets:
        key = target.labels + (config.pod_group_label,)
        if get_path(obj, key) != old_plan.group_name:
            continue
        if target.immutable:
            warnings.append(
                f"{old_plan.ref}: the {target.where} is immutable and keeps the {config.pod_group_label} label; new "
                "pods will wait for a PodGroup that admit no longer keeps. Recreate the "
                f"{old_plan.kind} without the label"
            )
            continue
        ops.append({"op": "remove", "path": pointer(key)})
    if get_path(obj, ("metadata", "labels", config.managed_label)) is not None:
        ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
    return Decision(patch=ops, warnings=warnings)
