"""Gang plans for the built-in workload kinds: Deployment, ReplicaSet, StatefulSet (apps/v1), Job (batch/v1), Pod.

Each resolver is pure: ``resolver(obj, annotations, config, namespace, operation) -> GangPlan`` and raises
:class:`admit.plan.GangError` for a workload that must be refused.

Rules and their sources:

- ``auto`` minMember: Deployment/ReplicaSet/StatefulSet ``spec.replicas`` (API default 1); Job ``spec.parallelism``
  (API default 1), capped by ``spec.completions`` (the Job controller never runs more pods than remaining
  completions: Kubernetes docs "Jobs", parallel execution).
- StatefulSet ``podManagementPolicy`` defaults to ``OrderedReady`` and is immutable (Kubernetes docs
  "StatefulSets", pod management policies): OrderedReady creates pod N+1 only after pod N is Ready, so a gang of
  more than one pod deadlocks; admit refuses it and says to recreate with ``Parallel``.
- Job ``spec.template`` is immutable after creation (Kubernetes API validation, ``ValidateJobUpdate``): on UPDATE
  admit cannot label it, so it warns instead of patching.
- ``replicas: 0`` is a paused workload, not a broken gang: it is allowed (no pods wait), with a warning.
"""

from __future__ import annotations

from typing import Any

from .config import Config
from .plan import GangAnnotations, GangError, GangPlan, PodTarget, choose_group_name, get_path, int_field
from .resources import ResourceError, gang_min_resources

__all__ = ["resolve_replicated", "resolve_statefulset", "resolve_job", "resolve_pod", "template_min_resources"]

TEMPLATE = PodTarget(("spec", "template", "metadata", "labels"), ("spec", "template", "spec", "schedulerName"))
TEMPLATE_IMMUTABLE = PodTarget(
    ("spec", "template", "metadata", "labels"), ("spec", "template", "spec", "schedulerName"), immutable=True
)
POD = PodTarget(("metadata", "labels"), ("spec", "schedulerName"), where="pod")


def template_min_resources(pod_spec: Any, count: int, ann: GangAnnotations, where: str) -> dict[str, str] | None:
    """``minResources`` for ``count`` identical pods of ``pod_spec``, or ``None`` when the annotation says ``none``.

    Raises:
        GangError (code 400): a resource quantity in the template does not parse (message names ``where``).
    """
    if not ann.min_resources or not isinstance(pod_spec, dict):
        return None
    try:
        return gang_min_resources([(pod_spec, count)]) or None
    except ResourceError as e:
        raise GangError(f"{where}: {e}", 400) from None


def _name(obj: dict[str, Any]) -> str:
    return str(get_path(obj, ("metadata", "name")) or "")


def _replicated_plan(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, kind: str, api_group: str,
    total: int, total_field: str, target: PodTarget,
) -> GangPlan:
    name = _name(obj)
    group_name = choose_group_name(obj, ann, [target], config, kind, name)
    min_member = ann.min_member if ann.min_member is not None else max(total, 1)
    plan = GangPlan(
        kind=kind,
        api_group=api_group,
        name=name,
        namespace=namespace,
        group_name=group_name,
        min_member=min_member,
        total_pods=total,
        total_field=total_field,
        min_resources=template_min_resources(
            get_path(obj, ("spec", "template", "spec")), min_member, ann, f"{kind} {namespace}/{name} pod template"
        ),
        schedule_timeout_seconds=ann.schedule_timeout_seconds,
        targets=[target],
    )
    if total == 0:
        plan.warnings.append(
            f"{plan.ref} has {total_field}=0: no pods run; its PodGroup keeps minMember {min_member}"
        )
    return plan


def resolve_replicated(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str,
    kind: str = "Deployment",
) -> GangPlan:
    """Plan for a Deployment or ReplicaSet (apps/v1): pods = ``spec.replicas`` (default 1)."""
    replicas = int_field(obj, ("spec", "replicas"), 1, "spec.replicas")
    assert replicas is not None
    return _replicated_plan(obj, ann, config, namespace, kind, "apps", replicas, "spec.replicas", TEMPLATE)


def resolve_statefulset(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
) -> GangPlan:
    """Plan for a StatefulSet; refuses ``podManagementPolicy: OrderedReady`` (the default) with minMember > 1."""
    replicas = int_field(obj, ("spec", "replicas"), 1, "spec.replicas")
    assert replicas is not None
    plan = _replicated_plan(obj, ann, config, namespace, "StatefulSet", "apps", replicas, "spec.replicas", TEMPLATE)
    policy = get_path(obj, ("spec", "podManagementPolicy")) or "OrderedReady"
    if plan.min_member > 1 and policy != "Parallel":
        # kube-apiserver defaults the field before admission, so an unset policy arrives as "OrderedReady": say that
        # it is the default either way (seen on a real control plane; an offline review sees the field unset).
        if policy == "OrderedReady":
            policy = "OrderedReady (the default when spec.podManagementPolicy is not set)"
        fix = (
            "podManagementPolicy is immutable: delete the StatefulSet (kubectl delete --cascade=orphan keeps the pods)"
            " and create it again with podManagementPolicy: Parallel"
            if operation == "UPDATE"
            else "set spec.podManagementPolicy: Parallel"
        )
        raise GangError(
            f"{plan.ref} uses podManagementPolicy {policy} with gang minMember {plan.min_member}: OrderedReady starts "
            f"one pod only after the previous one is Ready, so the gang never reaches {plan.min_member} pods and "
            f"deadlocks; {fix}"
        )
    return plan


def resolve_job(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a batch/v1 Job: pods at once = min(``spec.parallelism`` (default 1), ``spec.completions``)."""
    parallelism = int_field(obj, ("spec", "parallelism"), 1, "spec.parallelism")
    completions = int_field(obj, ("spec", "completions"), None, "spec.completions")
    assert parallelism is not None
    total = parallelism if completions is None else min(parallelism, completions)
    field = "spec.parallelism" if completions is None or parallelism <= completions else "spec.completions"
    target = TEMPLATE_IMMUTABLE if operation == "UPDATE" else TEMPLATE
    return _replicated_plan(obj, ann, config, namespace, "Job", "batch", total, field, target)


def resolve_pod(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a bare Pod carrying the gang annotations.

    Several bare pods may share one group (``gang.admit.dev/pod-group`` on each, ``min-member`` = their number), so
    the PodGroup's owner is "any Pod" rather than one pod. ``auto`` minMember is 1. The default group name is the
    pod's name; a pod created with only ``generateName`` must name its group by annotation.
    """
    name = _name(obj)
    group_name = choose_group_name(obj, ann, [POD], config, "Pod", name)
    min_member = ann.min_member if ann.min_member is not None else 1
    return GangPlan(
        kind="Pod",
        api_group="",
        name=name,
        namespace=namespace,
        group_name=group_name,
        min_member=min_member,
        total_pods=None,
        total_field="",
        min_resources=template_min_resources(obj.get("spec"), min_member, ann, f"Pod {namespace}/{name}"),
        schedule_timeout_seconds=ann.schedule_timeout_seconds,
        targets=[POD],
        shared=True,
    )
