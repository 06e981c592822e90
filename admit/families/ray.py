"""Ray (``ray.io/v1``): RayCluster, RayJob, RayService; a RayJob's or RayService's RayCluster is a child.

Sources: ray-project/kuberay ``ray-operator/apis/ray/v1/raycluster_types.go`` (``headGroupSpec``,
``workerGroupSpecs[].replicas / minReplicas / maxReplicas / numOfHosts / suspend``, ``enableInTreeAutoscaling``),
``rayjob_types.go`` (``rayClusterSpec``, ``clusterSelector``), ``rayservice_types.go`` (``rayClusterConfig``),
``controllers/ray/utils`` ``CalculateDesiredReplicas`` / ``GetWorkerGroupDesiredReplicas``, and
``controllers/ray/batchscheduler/scheduler-plugins/scheduler_plugins.go`` (KubeRay's own scheduler-plugins
integration, KubeRay >= 1.4: docs.ray.io "KubeRay integration with scheduler plugins").

- Pods: 1 head + Σ over worker groups of the desired replicas × ``numOfHosts`` (default 1): replicas (default: the
  group's ``minReplicas``, default 0) clamped to ``[minReplicas, maxReplicas]``, 0 for a suspended group, as
  ``GetWorkerGroupDesiredReplicas``. ``auto`` minMember = 1 + Σ desired × numOfHosts, or with the autoscaler on
  (``enableInTreeAutoscaling: true``) 1 + Σ ``minReplicas`` × numOfHosts: the autoscaler may shrink the cluster to
  its minimum, and a gang larger than that would hold new pods back after a scale-down.
- Pod templates: ``headGroupSpec.template`` and each ``workerGroupSpecs[i].template`` (under ``spec`` of a
  RayCluster, ``spec.rayClusterSpec`` of a RayJob, ``spec.rayClusterConfig`` of a RayService). KubeRay copies them
  into the RayCluster it creates for a RayJob or RayService (controller ownerReference to it), so that cluster's
  pods join the PodGroup named after the RayJob/RayService; the RayCluster itself is a child (``admit.children``).
  A RayJob with ``clusterSelector`` and no ``rayClusterSpec`` runs on an existing cluster: nothing to gang.
- ``minResources``: the head first, then the worker groups in order, up to minMember pods.
- KubeRay gangs a cluster itself when it carries the label ``ray.io/gang-scheduling-enabled`` (with the operator
  started with ``--batch-scheduler=scheduler-plugins``: PodGroup named after the RayCluster, minMember desired
  replicas + 1) or names another batch scheduler with ``ray.io/scheduler-name`` (Volcano, YuniKorn). A RayJob's or
  RayService's labels reach the RayCluster KubeRay makes. admit then defers (``shared.defer_to_operator``).
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..plan import GangAnnotations, GangError, GangPlan, choose_group_name, get_path, int_field
from .shared import (
    WorkloadKind,
    defer_to_operator,
    gang_min_member,
    min_resources_of,
    object_ref,
    refuse_below,
    template_target,
)

__all__ = ["RAYCLUSTER", "RAYJOB", "RAYSERVICE", "KINDS", "resolve_ray", "ray_pods", "GANG_LABEL", "SCHEDULER_LABEL"]

GROUP = "ray.io"
GANG_LABEL = "ray.io/gang-scheduling-enabled"
SCHEDULER_LABEL = "ray.io/scheduler-name"
INT32_MAX = 2**31 - 1

#: Kind -> key path of its RayClusterSpec.
CLUSTER_SPEC: dict[str, tuple[str, ...]] = {
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
    "RayService": ("spec", "rayClusterConfig"),
}


def ray_pods(cluster: dict[str, Any], prefix: tuple[str, ...], ref: str) -> tuple[list[dict[str, Any]], bool]:
    """``([{"where", "path", "pod_spec", "desired", "minimum"}, ...], autoscaling)``: the head (always 1 pod) then
    each worker group, with its desired pods and its autoscaler minimum (both × numOfHosts).

    Raises:
        GangError (400): no ``headGroupSpec.template.spec``, a worker group without a template, a bad count, or
            ``minReplicas > maxReplicas``.
    """
    head = get_path(cluster, ("headGroupSpec", "template", "spec"))
    if not isinstance(head, dict):
        raise GangError(f"{ref} has no {'.'.join(prefix)}.headGroupSpec.template.spec: a Ray cluster needs a head pod "
                        "template", 400)
    out = [{"where": "head group", "path": prefix + ("headGroupSpec", "template"), "pod_spec": head, "desired": 1,
            "minimum": 1}]
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise GangError(f"{ref}: {'.'.join(prefix)}.workerGroupSpecs must be a list of worker groups", 400)
    for i, g in enumerate(groups):
        where = f"{'.'.join(prefix)}.workerGroupSpecs[{i}]"
        if not isinstance(g, dict) or not isinstance(get_path(g, ("template", "spec")), dict):
            raise GangError(f"{ref}: {where} needs a pod template (template.spec)", 400)
        min_r = int_field(g, ("minReplicas",), 0, f"{ref}: {where}.minReplicas")
        max_r = int_field(g, ("maxReplicas",), INT32_MAX, f"{ref}: {where}.maxReplicas")
        replicas = int_field(g, ("replicas",), None, f"{ref}: {where}.replicas")
        hosts = int_field(g, ("numOfHosts",), 1, f"{ref}: {where}.numOfHosts")
        assert min_r is not None and max_r is not None and hosts is not None
        if min_r > max_r:
            raise GangError(f"{ref}: {where} has minReplicas={min_r} above maxReplicas={max_r}; KubeRay refuses it", 400)
        desired = min(max(replicas if replicas is not None else min_r, min_r), max_r)
        if g.get("suspend") is True:
            desired = min_r = 0
        out.append({"where": f"worker group {g.get('groupName') or i}", "path": prefix + ("workerGroupSpecs", str(i), "template"),
                    "pod_spec": g["template"]["spec"], "desired": desired * hosts, "minimum": min_r * hosts})
    return out, cluster.get("enableInTreeAutoscaling") is True


def resolve_ray(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str,
                kind: str = "RayCluster") -> GangPlan:
    """Plan for a RayCluster, RayJob or RayService (``kind``; rules in the module docstring).

    Raises:
        GangError (400): a malformed cluster spec (see :func:`ray_pods`); minMember above the pods is refused later
            by ``validate.check_plan`` (403).
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref(kind, namespace, name)
    plan = GangPlan(kind=kind, api_group=GROUP, name=name, namespace=namespace, group_name=name, min_member=1,
                    total_pods=None, total_field="", schedule_timeout_seconds=ann.schedule_timeout_seconds)
    labels = get_path(obj, ("metadata", "labels"))
    labels = labels if isinstance(labels, dict) else {}
    if GANG_LABEL in labels:
        return defer_to_operator(plan, f"it carries the label {GANG_LABEL}, so KubeRay's scheduler-plugins "
                                       "integration makes its PodGroup (operator --batch-scheduler=scheduler-plugins)",
                                 config)
    if labels.get(SCHEDULER_LABEL):
        return defer_to_operator(plan, f"it names the batch scheduler {labels[SCHEDULER_LABEL]!r} with the label "
                                       f"{SCHEDULER_LABEL}, which gangs it through KubeRay", config)
    prefix = CLUSTER_SPEC[kind]
    cluster = get_path(obj, prefix)
    if not isinstance(cluster, dict):
        if kind == "RayJob" and get_path(obj, ("spec", "clusterSelector")):
            plan.mutate = False
            plan.create_pod_group = False
            plan.warnings.append(f"{ref} runs on an existing cluster (spec.clusterSelector): admit gangs no pods for "
                                 f"it; annotate that RayCluster instead")
            return plan
        raise GangError(f"{ref} has no {'.'.join(prefix)}: it needs a Ray cluster spec (headGroupSpec, workerGroupSpecs)",
                        400)
    pods, autoscaling = ray_pods(cluster, prefix, ref)
    plan.targets = [template_target(p["path"], p["where"]) for p in pods]
    plan.group_name = choose_group_name(obj, ann, plan.targets, config, kind, name)
    total = sum(p["desired"] for p in pods)
    plan.total_pods = total
    plan.total_field = "1 head + Σ workerGroupSpecs[*] desired replicas × numOfHosts"
    if autoscaling:
        floor = sum(p["minimum"] for p in pods)
        plan.min_member = gang_min_member(ann, floor)
        if ann.min_member is not None and ann.min_member > floor:
            plan.warnings.append(
                f"{ref}: minMember {ann.min_member} is above the autoscaler's minimum of {floor} pods (1 head + "
                "Σ minReplicas × numOfHosts): after a scale-down new pods wait until the cluster has that many again")
    else:
        plan.min_member = gang_min_member(ann, total)
    workers = total - 1
    refuse_below(plan, ann, config, f"1 head + {workers} worker{'s' if workers != 1 else ''}",
                 f"Raise {'.'.join(prefix)}.workerGroupSpecs[*].replicas (and minReplicas) so that head and workers "
                 f"reach {plan.min_member}")
    plan.min_resources = min_resources_of([(p["pod_spec"], p["desired"]) for p in pods], plan.min_member, ann, ref)
    return plan


def _resolver(kind: str):  # noqa: ANN202 - a Resolver
    def resolve(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
        return resolve_ray(obj, ann, config, namespace, operation, kind=kind)

    resolve.__doc__ = f"Plan for a {kind} (``admit.families.ray.resolve_ray``)."
    return resolve


RAYCLUSTER = WorkloadKind(GROUP, "RayCluster", (("v1", "rayclusters"),), _resolver("RayCluster"))
RAYJOB = WorkloadKind(GROUP, "RayJob", (("v1", "rayjobs"),), _resolver("RayJob"),
                      children=((GROUP, "RayCluster"), ("batch", "Job")))
RAYSERVICE = WorkloadKind(GROUP, "RayService", (("v1", "rayservices"),), _resolver("RayService"),
                          children=((GROUP, "RayCluster"),))

KINDS = (RAYCLUSTER, RAYJOB, RAYSERVICE)
