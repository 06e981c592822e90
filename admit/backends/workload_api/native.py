"""The Workload API's rules for the workloads whose native gang someone else makes. Pure.

Deferring (asked of this backend for every gang, whichever backend it uses: do not fight an operator that already
gangs its own jobs, docs/behaviour.md), the plan is validated only (``mutate`` and ``create_pod_group`` off, with a
note) by :func:`deferring_reason` for:

- a pod template whose ``spec.schedulingGroup`` names another group: the Job controller (``WorkloadWithJob``:
  "``spec.template.spec.schedulingGroup`` is set (bring-your-own PodGroup): the user manages the objects"), JobSet,
  LeaderWorkerSet, KubeRay or the user made it (KEP-5547, "Job Controller Changes");
- a Job with ``spec.scheduling`` (1.37, KEP-5547: the Job controller compiles it into a Workload and PodGroup, and
  refuses it beside a template ``schedulingGroup``) or the annotation ``scheduling.k8s.io/group-template-name`` (its
  PodGroup comes from a parent's Workload);
- a Deployment or StatefulSet with ``spec.scheduling`` (KEP-6276/KEP-6277, alpha targeted for 1.38; UNVERIFIED: not
  in the stored kubernetes sources yet): one PodGroup per ReplicaSet / StatefulSet;
- a JobSet or LeaderWorkerSet with ``spec.scheduling`` (JobSet ``keps/969-WAS-integration``, gate
  ``JobSetWorkloadAwareSchedulingAPI``, "when set (even to {}), the controller compiles a Workload"; LWS
  ``keps/666-gang-scheduling-in-lws``, gate ``WorkloadAwareScheduling``; the Go types are unconfirmed).

One gang mechanism per workload (:func:`native_handover`, through ``backends.handover_ops``): a workload deferred
because it became a native gang of its controller (``spec.scheduling``, perhaps set by a later mutating webhook such
as Kueue's, which makes kube-apiserver call admit's again, ``reinvocationPolicy: IfNeeded``) loses the marks admit put
on its mutable templates in an earlier pass (the Coscheduling pod-group label and ``schedulerName``, admit's own
``spec.schedulingGroup``, which the Job controller refuses beside ``spec.scheduling``, the ``<prefix>/managed``
label), with a warning. With ``--controller-gang Job`` admit hands a new workload-api Job gang to the Job controller:
it sets the ``spec.scheduling`` of the kind's ``WorkloadKind.handover`` (``families.apps.job_scheduling``) and makes
no ``schedulingGroup``, Workload or PodGroup of its own. The per-kind facts come with the kind's record
(:func:`deferring_reason`): this module names no kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import KUBE_DEFAULT_SCHEDULER, WORKLOAD_API, Config
from ...gang.patch import pointer
from ...gang.plan import GangPlan, PodTarget, get_path

if TYPE_CHECKING:  # the kind's record is the families' type; a backend only reads the facts passed to it
    from ...families.shared import WorkloadKind

__all__ = ["deferring_reason", "native_handover", "native_template", "written_group", "template_group"]


def deferring_reason(obj: dict[str, Any], plan: GangPlan, backend: str, config: Config,
                     kind: WorkloadKind | None = None) -> str | None:
    """``interface.BackendHooks.deferring_reason``: why the workload's own controller, not admit, owns its native gang
    objects (module docstring), or why admit hands a new ``backend`` gang over to it (``--controller-gang``), else
    ``None``. ``kind`` is the workload's record (``None``: a kind without one): its ``controller_gang`` (who makes its
    native gang from ``spec.scheduling``), ``gang_from_parent`` (the annotation that says a parent's Workload makes its
    PodGroup) and ``handover``. A pod template that already names a native gang (:func:`native_template`) also gets
    the plan a warning that says so."""
    managed = get_path(obj, ("metadata", "labels", config.managed_label)) == "true"
    reason = _native_reason(obj, plan, kind, backend, managed)
    native = native_template(obj, plan, backend, managed) if reason is not None else None
    if native is not None:
        plan.warnings.append(
            f"remove {config.min_member_key} or the pod template's {native[1]}: it names a native gang, so admit "
            "makes no gang of its own besides (no label, scheduler or PodGroup) and only checks the size")
    if reason is None and kind is not None and (handover := _handover(obj, plan, backend, config, kind)) is not None:
        reason = (f"{plan.ref} goes to the {kind.kind} controller's native gang: admit sets "
                  f"{_dotted(('spec', 'scheduling'), handover)} (--controller-gang {kind.kind}) and makes no Workload "
                  "or PodGroup of its own")
    return reason


def native_template(obj: dict[str, Any], plan: GangPlan, backend: str, managed: bool) -> tuple[str, str, Any] | None:
    """``(where, field, value)`` when a pod template of ``plan`` already names a native gang that admit did not write
    for ``backend``, else ``None``: ``spec.workloadRef`` (Kubernetes 1.35, KEP-4671: the pod names its Workload and
    pod group; admit never writes it), or ``spec.schedulingGroup`` (1.36+) naming another group than admit's, or
    under another backend than ``workload-api`` on a workload admit did not gang before (``managed``: its
    ``<prefix>/managed`` label; a managed workload moving back to ``coscheduling`` has admit's own
    ``schedulingGroup`` taken off). Two gang mechanisms for one set of pods would each wait for pods the other
    holds, so such a workload defers (:func:`deferring_reason`)."""
    for target in plan.targets:
        spec = get_path(obj, target.scheduler[:-1])
        if not isinstance(spec, dict):
            continue
        if spec.get("workloadRef") is not None:
            return target.where, "spec.workloadRef", spec["workloadRef"]
        named = template_group(obj, target)
        if spec.get("schedulingGroup") is not None and (named != plan.group_name or
                                                        (backend != WORKLOAD_API and not managed)):
            return target.where, "spec.schedulingGroup", spec["schedulingGroup"]
    return None


def _native_reason(obj: dict[str, Any], plan: GangPlan, kind: WorkloadKind | None, backend: str,
                   managed: bool) -> str | None:
    """Why the workload's own controller (or whoever named its group) makes its native gang, or ``None``."""
    controller = kind.controller_gang if kind is not None else None
    if controller is not None and get_path(obj, ("spec", "scheduling")) is not None:
        return f"{plan.ref} sets spec.scheduling: {controller}; admit only checks its size"
    parent = _parent_annotation(obj, kind)
    if parent is not None:
        return f"{plan.ref} carries {parent}: its PodGroup comes from a parent's Workload; admit only checks its size"
    native = native_template(obj, plan, backend, managed)
    if native is not None:
        where, field, value = native
        return (f"{plan.ref} {where} already sets {field}={str(value)[:200]}: whoever made that native gang (the Job "
                "controller, an operator, you) owns it; admit only checks its size")
    return None


def _parent_annotation(obj: dict[str, Any], kind: WorkloadKind | None) -> str | None:
    """The kind's ``gang_from_parent`` annotation when ``obj`` carries it, else ``None``."""
    key = kind.gang_from_parent if kind is not None else None
    return key if key is not None and get_path(obj, ("metadata", "annotations", key)) is not None else None


def _handover(obj: dict[str, Any], plan: GangPlan, backend: str, config: Config,
              kind: WorkloadKind | None) -> dict[str, Any] | None:
    """The ``spec.scheduling`` with which admit hands a new (mutable-template, not yet managed) workload-api gang to
    its kind's own controller (the record's ``handover``, for a kind ``--controller-gang`` names), else ``None``."""
    if (backend != WORKLOAD_API or kind is None or kind.handover is None or kind.kind not in config.controller_gangs
            or not plan.targets or any(t.immutable for t in plan.targets)
            or get_path(obj, ("metadata", "labels", config.managed_label)) == "true"):
        return None
    return kind.handover(plan.min_member)


def _dotted(path: tuple[str, ...], value: Any) -> str:
    """``spec.scheduling.schedulingPolicy.gang.minCount=3`` for ``value`` ``{"schedulingPolicy": {"gang": {"minCount":
    3}}}`` at ``path``: the field a one-key-per-level map sets, for messages."""
    while isinstance(value, dict) and len(value) == 1:
        (key, value), = value.items()
        path += (key,)
    return f"{'.'.join(path)}={value}"


def native_handover(obj: dict[str, Any], plan: GangPlan, config: Config,
                    kind: WorkloadKind | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """``(ops, warnings)`` for a workload whose gang its own controller makes (``plan.mutate`` off; module docstring,
    "One gang mechanism per workload"): ``spec.scheduling`` for a Job admit hands over, or the removal of admit's
    earlier marks from a workload that became a controller's native gang; ``([], [])`` when neither applies (the
    operator-made gangs of :func:`deferring_reason`). ``kind``: as :func:`deferring_reason`'s."""
    reason = _native_reason(obj, plan, kind, plan.backend,
                            get_path(obj, ("metadata", "labels", config.managed_label)) == "true")
    if reason is None:
        handover = _handover(obj, plan, plan.backend, config, kind)
        return ([{"op": "add", "path": "/spec/scheduling", "value": handover}] if handover is not None else []), []
    native = get_path(obj, ("spec", "scheduling")) is not None or _parent_annotation(obj, kind) is not None
    if not native or get_path(obj, ("metadata", "labels", config.managed_label)) != "true" or any(
            t.immutable for t in plan.targets):  # an immutable template keeps admit's marks: admit keeps its gang too
        return [], []
    ops: list[dict[str, Any]] = []
    removed: set[str] = set()
    for target in plan.targets:
        if get_path(obj, target.labels + (config.pod_group_label,)) == plan.group_name:
            ops.append({"op": "remove", "path": pointer(target.labels + (config.pod_group_label,))})
            removed.add(f"the {config.pod_group_label} label")
        if get_path(obj, target.scheduler) == config.scheduler_name != KUBE_DEFAULT_SCHEDULER:
            ops.append({"op": "replace", "path": pointer(target.scheduler), "value": KUBE_DEFAULT_SCHEDULER})
            removed.add(f"schedulerName {config.scheduler_name}")
        if template_group(obj, target) == plan.group_name:
            ops.append({"op": "remove", "path": pointer(target.scheduler[:-1] + ("schedulingGroup",))})
            removed.add("spec.schedulingGroup")
        if target.annotations is not None:  # admit's own template annotations (an LWS's group-spec)
            for key in sorted(plan.template_annotations):
                if get_path(obj, target.annotations + (key,)) is not None:
                    ops.append({"op": "remove", "path": pointer(target.annotations + (key,))})
                    removed.add(f"the {key} annotation")
    ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
    what = f" and took {', '.join(sorted(removed))} off its pod templates" if removed else ""
    return ops, [f"nothing to change: spec.scheduling (yours or another webhook's, such as Kueue's) makes this {plan.kind} "
                 f"its controller's native gang, so admit dropped its own gang{what}"]


def written_group(obj: dict[str, Any], plan: GangPlan, config: Config) -> str | None:
    """``interface.BackendHooks.written_group``: the group name admit wrote into ``spec.schedulingGroup`` of a
    workload it gangs (``<prefix>/managed``) when that differs from ``plan.group_name``, else ``None``."""
    if get_path(obj, ("metadata", "labels", config.managed_label)) != "true":
        return None
    named = next((g for t in plan.targets if (g := template_group(obj, t)) is not None), None)
    return named if isinstance(named, str) and named != plan.group_name else None


def template_group(obj: dict[str, Any], target: PodTarget) -> Any:
    """``spec.schedulingGroup.podGroupName`` of a target's pod spec, or ``None`` (on every admission: kept cheap)."""
    spec = get_path(obj, target.scheduler[:-1])
    group = spec.get("schedulingGroup") if isinstance(spec, dict) else None
    return group.get("podGroupName") if isinstance(group, dict) else None
