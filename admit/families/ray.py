"""Ray (``ray.io/v1``): RayCluster, RayJob, RayService; one gang per RayCluster, also the ones KubeRay makes.

Sources: ray-project/kuberay ``ray-operator/apis/ray/v1/raycluster_types.go`` (``headGroupSpec``,
``workerGroupSpecs[].replicas / minReplicas / maxReplicas / numOfHosts / suspend``, ``enableInTreeAutoscaling``),
``rayjob_types.go`` (``rayClusterSpec``, ``clusterSelector``), ``rayservice_types.go`` (``rayClusterConfig``),
``controllers/ray/utils`` ``CalculateDesiredReplicas`` / ``GetWorkerGroupDesiredReplicas``, and
``controllers/ray/batchscheduler/scheduler-plugins/scheduler_plugins.go`` (KubeRay's own scheduler-plugins
integration, KubeRay >= 1.4: docs.ray.io "KubeRay integration with scheduler plugins").

- Pods: 1 head + Σ over worker groups of the desired replicas × ``numOfHosts`` (:func:`ray_pods`, as
  ``GetWorkerGroupDesiredReplicas``). ``auto`` minMember counts them all, or with the autoscaler on
  (``enableInTreeAutoscaling: true``) its floor, 1 + Σ ``minReplicas`` × numOfHosts: the autoscaler may shrink the
  cluster to it, and a larger gang would hold new pods back after a scale-down.
- Pod templates: ``headGroupSpec.template`` and each ``workerGroupSpecs[i].template`` (under :data:`CLUSTER_SPEC`).
- One gang per RayCluster. KubeRay makes a RayCluster for a RayJob or RayService (``constructRayClusterForRayJob``,
  ``constructRayClusterForRayService``): named ``<parent>-<5 random characters>`` since KubeRay v1.4.0,
  ``<parent>-raycluster-<5>`` up to v1.3.x (``utils.GenerateRayClusterName``), with the parent's labels,
  **annotations** and cluster spec, and a controller ownerReference to it. A RayService upgrade runs a second such
  cluster beside the serving one, a RayJob retry makes a new one; were they one gang, Coscheduling would count the
  serving cluster's pods toward the new one's quorum (``PreFilter`` counts every pod carrying the label) and let
  the new pods through one by one (ray-project/kuberay#4239, ray-project/kuberay#1476). So a RayCluster KubeRay made
  is a gang of its own (deliberately *not* a child of its parent, ``admit.gang.children``): its PodGroup is named
  after it (:func:`cluster_group_name`), whatever its parent's annotation or template label says, and owned by it.
  A RayJob or RayService gets no PodGroup and keeps its templates as written; its shape is still checked at its own
  admission, and a refusal of a cluster KubeRay made names the parent and its fields. A RayJob with
  ``clusterSelector`` and no ``rayClusterSpec`` runs on an existing cluster: nothing to gang.
- ``minResources``: the head first, then the worker groups in order, up to minMember pods, each as KubeRay builds
  it (:func:`kuberay_pod_spec`). Not counted: the history-server collector sidecar (feature gate
  ``RayClusterHistoryServer``, alpha, off by default in v1.7.0).
- **Later writes** (KubeRay v1.7.0 and the Ray autoscaler; docs/compatibility.md lists each with its test):

  - the autoscaler's JSON patch of ``rayclusters/<name>`` (its KubeRay node provider's ``_submit_raycluster_patch``)
    moves ``replicas`` and sets ``scaleStrategy.workersToDelete``, down to the floor (:func:`_autoscaler_floor`);
  - a RayService's incremental upgrade (feature gate ``RayServiceIncrementalUpgrade``, Beta, on in v1.7.0;
    ``upgradeStrategy.type: NewClusterWithIncrementalUpgrade``, which needs the autoscaler) creates the pending
    cluster with every worker ``replicas`` nil (``constructRayClusterForRayService``); the CRD defaults it to 0
    (``raycluster_types.go``: ``+kubebuilder:default:=0``) and KubeRay runs ``minReplicas``: the floor again;
  - a finished RayJob's ``DeleteWorkers`` deletion policy (feature gate ``RayJobDeletionPolicy``, Beta, on since
    v1.6.0; ``rayjob_controller.go`` ``suspendWorkerGroups``) suspends every worker group: the gang is what is left;
  - a running object annotated (:func:`running_ray`).
- KubeRay gangs a cluster itself when it carries the label ``ray.io/gang-scheduling-enabled`` (with the operator
  started with ``--batch-scheduler=scheduler-plugins``: PodGroup named after the RayCluster, minMember desired
  replicas + 1, one per RayCluster). A RayJob's or RayService's labels reach the RayCluster KubeRay makes. admit
  then defers (``shared.defer_to_operator``), on the parent and on its clusters.
- The batch scheduler is the operator's, not the cluster's: since KubeRay v1.3.0 it is the flag
  ``--batch-scheduler`` (``batchscheduler/schedulermanager.go`` ``getSchedulerFactory``: volcano, yunikorn;
  scheduler-plugins since v1.4.0, kai-scheduler since v1.5.0), and every plugin sets ``schedulerName`` on every
  head and worker pod in ``AddMetadataToChildResource`` (``batchscheduler/utils/utils.go``
  ``AddSchedulerNameToObject``). The per-cluster label ``ray.io/scheduler-name`` was read up to v1.2
  (``schedulermanager.go``: ``app.ObjectMeta.Labels[utils.RaySchedulerName]``) and is not any more: admit does not
  defer on it (that left the cluster with no gang at all) and says so. admit cannot read the operator's flag, so
  every Ray object it gangs gets one note saying what the flag does to the gang (:func:`batch_scheduler_note`);
  ``admit status`` names the flag when the pods of a RayCluster arrive with a batch scheduler's name
  (``backends.coscheduling.diagnose``).
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Any

from ..config import Config
from ..echo import clip
from ..gang.foreign import KUBERAY_BATCH_SCHEDULERS
from ..gang.plan import BelowMinMember, GangAnnotations, GangError, GangPlan, PodTarget, below_min_member, \
    check_group_name, choose_group_name, get_map, get_path, int_field, parse_gang_annotations
from .shared import (
    RunningUpdate,
    RunningVerdict,
    WorkloadKind,
    controller_owner,
    defer_to_operator,
    gang_min_member,
    min_resources_of,
    object_ref,
    template_target,
)

__all__ = ["RAYCLUSTER", "RAYJOB", "RAYSERVICE", "KINDS", "resolve_ray", "ray_pods", "kuberay_parent",
           "cluster_group_name", "GANG_LABEL", "SCHEDULER_LABEL", "KUBERAY_BATCH_SCHEDULERS", "batch_scheduler_note",
           "kuberay_pod_spec", "running_ray", "AUTOSCALER_RESOURCES", "WAIT_GCS_READY_RESOURCES"]

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


def kuberay_parent(obj: dict[str, Any]) -> tuple[str, str] | None:
    """``(kind, name)`` of the RayJob or RayService that made RayCluster ``obj`` (its controller ownerReference,
    ``ctrl.SetControllerReference`` in KubeRay), or ``None`` for a RayCluster a user wrote."""
    owner = controller_owner(obj)
    if owner is not None and owner[0] == GROUP and owner[1] in ("RayJob", "RayService"):
        return owner[1], owner[2]
    return None


def cluster_group_name(name: str) -> str:
    """The PodGroup name of a RayCluster KubeRay made: its own name, or where that is no valid label value (over 63
    characters) its first 57 characters and 5 hex digits of its SHA-256, so that two clusters never share one."""
    if check_group_name(name) is None:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:5]
    return f"{name[:57].rstrip('-.')}-{digest}"


def batch_scheduler_note(ref: str, config: Config) -> str:
    """The note every Ray object admit gangs gets: KubeRay's operator-wide ``--batch-scheduler`` decides whether
    admit's gang is used (module docstring)."""
    plugins = KUBERAY_BATCH_SCHEDULERS["scheduler-plugins"]
    tail = "" if config.scheduler_name == plugins else (
        f"; scheduler-plugins sends them to {plugins}, not admit's --scheduler-name {config.scheduler_name}, so "
        "leave it unset")
    return (f"{ref}: KubeRay's operator flag --batch-scheduler (since v1.3.0) sets the schedulerName of every head "
            "and worker pod: with volcano, yunikorn or kai-scheduler admit's PodGroup is never used. Run KubeRay with "
            f"--batch-scheduler unset or scheduler-plugins{tail}")


def ray_pods(cluster: dict[str, Any], prefix: tuple[str, ...], ref: str) -> tuple[list[dict[str, Any]], bool]:
    """``([{"where", "path", "pod_spec", "desired", "minimum", "suspended"}, ...], autoscaling)``: the head (always 1
    pod) then each worker group, with its desired pods (``replicas``, default ``minReplicas``, clamped to
    ``[minReplicas, maxReplicas]``) and its autoscaler minimum, both × numOfHosts, both 0 for a group KubeRay
    suspended.

    Raises:
        GangError (400): no ``headGroupSpec.template.spec``, a worker group without a template, a bad count, or
            ``minReplicas > maxReplicas``.
    """
    head = get_path(cluster, ("headGroupSpec", "template", "spec"))
    if not isinstance(head, dict):
        raise GangError(f"Add a head pod template at {'.'.join(prefix)}.headGroupSpec.template.spec: {ref} has none, "
                        "and a Ray cluster needs one", 400)
    out = [{"where": "head group", "path": prefix + ("headGroupSpec", "template"), "pod_spec": head, "desired": 1,
            "minimum": 1, "suspended": False}]
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise GangError(f"Make {'.'.join(prefix)}.workerGroupSpecs a list of worker groups: {ref} has "
                        f"{clip(groups)} there", 400)
    for i, g in enumerate(groups):
        where = f"{'.'.join(prefix)}.workerGroupSpecs[{i}]"
        if not isinstance(g, dict) or not isinstance(get_path(g, ("template", "spec")), dict):
            raise GangError(f"Add a pod template (template.spec) to {where}: {ref} has none there", 400)
        min_r = int_field(g, ("minReplicas",), 0, f"{ref}: {where}.minReplicas")
        max_r = int_field(g, ("maxReplicas",), INT32_MAX, f"{ref}: {where}.maxReplicas")
        replicas = int_field(g, ("replicas",), None, f"{ref}: {where}.replicas")
        hosts = int_field(g, ("numOfHosts",), 1, f"{ref}: {where}.numOfHosts")
        assert min_r is not None and max_r is not None and hosts is not None
        if min_r > max_r:
            raise GangError(f"Lower minReplicas of {where} to at most maxReplicas: {ref} has minReplicas={min_r} above "
                            f"maxReplicas={max_r}, and KubeRay refuses it", 400)
        desired = min(max(replicas if replicas is not None else min_r, min_r), max_r)
        suspended = g.get("suspend") is True
        if suspended:
            desired = min_r = 0
        out.append({"where": f"worker group {g.get('groupName') or i}", "path": prefix + ("workerGroupSpecs", str(i), "template"),
                    "pod_spec": g["template"]["spec"], "desired": desired * hosts, "minimum": min_r * hosts,
                    "suspended": suspended})
    return out, cluster.get("enableInTreeAutoscaling") is True


def _place_group(plan: GangPlan, obj: dict[str, Any], ann: GangAnnotations, config: Config, kind: str, ref: str,
                 targets: list[PodTarget], parent: tuple[str, str] | None) -> None:
    """Set ``plan``'s PodGroup name and pod templates (``targets``) by the one-gang-per-RayCluster rule (module
    docstring); ``parent``: the ``(kind, name)`` that made a RayCluster."""
    name = plan.name
    if kind != "RayCluster":
        plan.create_pod_group = False
        plan.group_name = name  # no PodGroup of this name is made: only messages read it
        plan.notes.append(
            f"{ref}: each RayCluster KubeRay makes for it ({name}-<5 characters>; KubeRay v1.3 and older: "
            f"{name}-raycluster-<5 characters>; a new one on every {'retry' if kind == 'RayJob' else 'upgrade'}) "
            "is a gang of its own: a PodGroup named after that RayCluster and owned by it, so an old cluster's pods "
            "never count toward a new one's quorum")
        if ann.pod_group is not None:
            plan.warnings.append(f"remove annotation {config.pod_group_key}: KubeRay copies it onto every RayCluster "
                                 "it makes, and each of them needs a PodGroup of its own")
    elif parent is not None and name:
        plan.targets = targets
        plan.group_name = cluster_group_name(name)
    else:
        plan.targets = targets
        plan.group_name = choose_group_name(obj, ann, plan.targets, config, kind, name)


#: The autoscaler sidecar's resources (``common/pod.go`` ``BuildAutoscalerContainer``, KubeRay v1.7.0), replaced
#: whole by ``autoscalerOptions.resources`` (``mergeAutoscalerOverrides``).
AUTOSCALER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
#: The ``wait-gcs-ready`` init container KubeRay adds to every worker pod (``DefaultWorkerPodTemplate``, v1.7.0).
WAIT_GCS_READY_RESOURCES = {"requests": {"cpu": "200m", "memory": "256Mi"},
                            "limits": {"cpu": "200m", "memory": "256Mi"}}


def kuberay_pod_spec(pod_spec: dict[str, Any], cluster: dict[str, Any], head: bool) -> dict[str, Any]:
    """The ``spec`` of a head (``head``) or worker pod as KubeRay v1.7.0 builds it from template spec ``pod_spec`` of
    RayClusterSpec ``cluster``, as far as its requests go (a new dict; ``pod_spec`` is not changed): the head gets
    the ``autoscaler`` container when ``enableInTreeAutoscaling`` is true (``DefaultHeadPodTemplate``), with
    :data:`AUTOSCALER_RESOURCES` or ``autoscalerOptions.resources``; a worker gets the ``wait-gcs-ready`` init
    container, appended after the template's own (``DefaultWorkerPodTemplate``, :data:`WAIT_GCS_READY_RESOURCES`;
    not with the operator's ``ENABLE_INIT_CONTAINER_INJECTION=false``, which admit cannot see).
    Only ``name`` and ``resources`` of the added containers are given: the pod's requests are all admit reads."""
    spec = dict(pod_spec)
    if head:
        if cluster.get("enableInTreeAutoscaling") is not True:
            return spec
        resources = get_path(cluster, ("autoscalerOptions", "resources"))
        containers = pod_spec.get("containers")
        spec["containers"] = [*(containers if isinstance(containers, list) else []),
                              {"name": "autoscaler",
                               "resources": resources if isinstance(resources, dict) else AUTOSCALER_RESOURCES}]
        return spec
    init = pod_spec.get("initContainers")
    spec["initContainers"] = [*(init if isinstance(init, list) else []),
                              {"name": "wait-gcs-ready", "resources": WAIT_GCS_READY_RESOURCES}]
    return spec


def _autoscaler_floor(asked: int, ann: GangAnnotations, config: Config, floor: int, ref: str, workers_field: str,
                      lower: str | None) -> None:
    """The autoscaler's rule, the same at every write of an autoscaling cluster: the minMember ``asked`` must not
    exceed ``floor`` (1 head + Σ minReplicas × numOfHosts), the fewest pods the Ray autoscaler scales it down to
    (ray-project/ray ``ray:python/ray/autoscaler/_private/kuberay/node_provider.py``
    ``_scale_request_to_patch_payload``: a group's ``replicas`` moves within ``[minReplicas, maxReplicas]``). Its
    PATCH never changes the floor, so it gets the answer the write before it got.

    Raises:
        BelowMinMember (403): minMember above the floor; the fix names ``minReplicas`` of ``workers_field`` and
            ``lower`` (the annotation to lower: the parent's for a cluster KubeRay made).
    """
    if asked <= floor:
        return
    workers = floor - 1
    raise BelowMinMember(
        ref, floor, f"1 head + {workers} worker{'s' if workers != 1 else ''} at minReplicas, the fewest the Ray "
        "autoscaler keeps", asked, f"{config.min_member_key}={asked}" if ann.min_member is not None else "minMember",
        f"Raise minReplicas of {workers_field} so that head and workers reach {asked} (the autoscaler keeps them; "
        "admit would otherwise refuse its scale-downs)", lower or config.min_member_key, None)


def _names(ref: str, kind: str, parent: tuple[str, str] | None, namespace: str,
           config: Config) -> tuple[str, str, str | None]:
    """``(ref, workers_field, lower)`` for messages about ``ref``: the object, its worker groups' field and the
    annotation to lower (``None``: its own). A cluster KubeRay made names the user's object and its fields (KubeRay
    copies its annotations)."""
    workers_field = ".".join((*CLUSTER_SPEC[kind], "workerGroupSpecs[*]"))
    if parent is None:
        return ref, workers_field, None
    made_for = object_ref(parent[0], namespace, parent[1])
    return (f"{ref} (made by KubeRay for {made_for})", f"{'.'.join((*CLUSTER_SPEC[parent[0]], 'workerGroupSpecs[*]'))} "
            f"of {made_for}", f"{config.min_member_key} on {made_for}")


def _floor_inputs(obj: dict[str, Any], config: Config) -> tuple[Any, ...]:
    """What a RayCluster's autoscaler floor and minMember are made of: ``enableInTreeAutoscaling``, each group's
    ``minReplicas``, ``numOfHosts`` and ``suspend`` (their CRD defaults when absent), the min-member annotation.
    The Ray autoscaler changes none of them (only ``replicas`` and ``scaleStrategy``)."""
    groups = get_path(obj, ("spec", "workerGroupSpecs"))
    annotations = get_path(obj, ("metadata", "annotations"))
    return (get_path(obj, ("spec", "enableInTreeAutoscaling")),
            [(g.get("minReplicas") or 0, g.get("numOfHosts") or 1, g.get("suspend") is True)
             if isinstance(g, dict) else g for g in (groups if isinstance(groups, list) else [])],
            annotations.get(config.min_member_key) if isinstance(annotations, dict) else None)


def _floor_on_update(obj: dict[str, Any], old: dict[str, Any], plan: GangPlan,
                     config: Config) -> RunningVerdict | None:
    """:func:`_autoscaler_floor` for an UPDATE, except that an UPDATE of a RayCluster that leaves its floor and
    min-member as they were (the autoscaler's PATCH, KubeRay's own update) is only warned, its gang sized to the
    floor (by :func:`resolve_ray`): refusing it would hold the scale-downs back. A RayJob's or RayService's UPDATE
    is judged whole: KubeRay makes its next cluster from it (``BelowMinMember`` above the floor)."""
    cluster = get_path(obj, CLUSTER_SPEC[plan.kind])
    if not plan.mutate or not isinstance(cluster, dict) or cluster.get("enableInTreeAutoscaling") is not True:
        return None
    ann = parse_gang_annotations(get_path(obj, ("metadata", "annotations")), config)
    parent = kuberay_parent(obj) if plan.kind == "RayCluster" else None
    ref, workers_field, lower = _names(plan.ref, plan.kind, parent, plan.namespace, config)
    floor = sum(p["minimum"] for p in ray_pods(cluster, CLUSTER_SPEC[plan.kind], ref)[0])
    if ann is None or ann.min_member is None or ann.min_member <= floor:
        return None
    if plan.kind == "RayCluster" and _floor_inputs(obj, config) == _floor_inputs(old, config):
        return RunningVerdict(
            f"{ref}: {config.min_member_key}={ann.min_member} is above the {floor} pods the Ray autoscaler scales it "
            f"down to (1 head + Σ minReplicas × numOfHosts), as before this update: admit sizes its gang to {floor}, "
            f"which can form after a scale-down. Raise minReplicas of {workers_field} or lower "
            f"{lower or config.min_member_key}", False)
    _autoscaler_floor(ann.min_member, ann, config, floor, ref, workers_field, lower)
    return None


def resolve_ray(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str,
                kind: str = "RayCluster") -> GangPlan:
    """Plan for a RayCluster, RayJob or RayService (``kind``; rules in the module docstring).

    Raises:
        GangError (400): a malformed cluster spec (see :func:`ray_pods`).
        BelowMinMember (403): a minMember above the pods, or at a CREATE above the autoscaler's floor
            (:func:`_autoscaler_floor`; an UPDATE's is judged by :func:`running_ray`).
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref(kind, namespace, name)
    plan = GangPlan(kind=kind, api_group=GROUP, name=name, namespace=namespace, group_name=name, min_member=1,
                    total_pods=None, total_field="", schedule_timeout_seconds=ann.schedule_timeout_seconds)
    labels = get_map(obj, ("metadata", "labels"))
    if GANG_LABEL in labels:
        return defer_to_operator(plan, f"it carries the label {GANG_LABEL}, so KubeRay's scheduler-plugins "
                                       "integration makes its PodGroup (operator --batch-scheduler=scheduler-plugins)",
                                 config)
    if labels.get(SCHEDULER_LABEL):
        plan.warnings.append(
            f"remove label {SCHEDULER_LABEL}={str(labels[SCHEDULER_LABEL])[:40]}: KubeRay ignores it since v1.3.0 (its "
            "--batch-scheduler flag decides); admit gangs this as any RayCluster")
    prefix = CLUSTER_SPEC[kind]
    cluster = get_path(obj, prefix)
    if not isinstance(cluster, dict):
        if kind == "RayJob" and get_path(obj, ("spec", "clusterSelector")):
            plan.mutate = False
            plan.create_pod_group = False
            plan.warnings.append(f"{ref} runs on an existing cluster (spec.clusterSelector): admit gangs no pods for "
                                 f"it; annotate that RayCluster instead")
            return plan
        raise GangError(f"Add a Ray cluster spec (headGroupSpec, workerGroupSpecs) at {'.'.join(prefix)}: {ref} has "
                        "none", 400)
    parent = kuberay_parent(obj) if kind == "RayCluster" else None
    ref, workers_field, lower = _names(ref, kind, parent, namespace, config)
    pods, autoscaling = ray_pods(cluster, prefix, ref)
    _place_group(plan, obj, ann, config, kind, ref, [template_target(p["path"], p["where"]) for p in pods],
                 parent)
    total = sum(p["desired"] for p in pods)
    plan.total_pods = total
    plan.total_field = "1 head + Σ workerGroupSpecs[*] desired replicas × numOfHosts"
    floor = sum(p["minimum"] for p in pods)  # the autoscaler's: 1 head + Σ minReplicas × numOfHosts
    plan.min_member = gang_min_member(ann, floor if autoscaling else total)
    if autoscaling and operation != "UPDATE":
        _autoscaler_floor(plan.min_member, ann, config, floor, ref, workers_field, lower)
    elif autoscaling and plan.min_member > floor:
        # an UPDATE, judged by _floor_on_update: sized to the floor, so that the autoscaler's PATCH passes check_plan
        plan.notes.append(f"{ref}: minMember {plan.min_member} is above the {floor} pods the Ray autoscaler keeps: "
                          f"its gang is sized to {floor}")
        plan.min_member = floor
    suspended = [p["where"] for p in pods if p.get("suspended")]
    if suspended and plan.min_member > total:
        # the gang is what is left: only KubeRay suspends a worker group (raycluster_types.go WorkerGroupSpec.Suspend:
        # "not a user-facing API and is only used by RayJob DeletionStrategy") and deletes those pods (reconcilePods),
        # and a refusal would only make KubeRay retry for ever
        plan.notes.append(
            f"{ref}: {', '.join(suspended)} {'is' if len(suspended) == 1 else 'are'} suspended (KubeRay's RayJob "
            f"deletion policy DeleteWorkers): their pods are deleted, so the gang is the {total} "
            f"pod{'s' if total != 1 else ''} left and its minMember {plan.min_member} becomes {total}")
        plan.min_member = total
    if parent is None:  # KubeRay's copy of the warning would reach KubeRay's client, not the user
        plan.notes.append(batch_scheduler_note(ref, config))
    plan.operator_notice = batch_scheduler_note(ref, config)  # the Event on the RayCluster (a PodGroup claim)
    workers = total - 1
    below_min_member(plan, ann, config, f"1 head + {workers} worker{'s' if workers != 1 else ''}",
                 f"Raise the replicas (and minReplicas) of {workers_field} so that head and workers "
                 f"reach {plan.min_member}", ref=ref, lower=lower)
    plan.min_resources = min_resources_of([(kuberay_pod_spec(p["pod_spec"], cluster, i == 0), p["desired"])
                                           for i, p in enumerate(pods)], plan.min_member, ann, f"{ref} pod template")
    return plan


def _was_gang(old: dict[str, Any], config: Config) -> bool:
    """The stored object already carried the gang annotation (its pods are in the gang, or will be)."""
    try:
        return parse_gang_annotations(get_path(old, ("metadata", "annotations")), config) is not None
    except GangError:
        return True  # a malformed value was refused at that write; this one is judged on its own


def running_ray(update: RunningUpdate, plan: GangPlan, config: Config) -> RunningVerdict | None:
    """``WorkloadKind.running_update`` of a RayCluster, RayJob or RayService: first the autoscaler's floor
    (:func:`_floor_on_update`); then, for an UPDATE that makes a running object a gang:

    - **RayCluster**: KubeRay changes none of its pods for a template change
      (``GenerateHashWithoutReplicasAndWorkersToDelete`` is compared only under ``upgradeStrategy.type: Recreate``,
      ``shouldRecreatePodsForUpgrade``), so the pods made later would wait beside running ones outside the gang:
      refused, with the fixes. Allowed
      when the stored cluster is suspended, when this UPDATE suspends it (KubeRay makes every pod again on resume),
      under ``Recreate`` (with a warning), and for a cluster KubeRay made (KubeRay's own ``modifyRayCluster``).
    - **RayJob / RayService**: KubeRay copies their annotations onto a RayCluster only when it makes one
      (``constructRayClusterForRayJob`` / ``constructRayClusterForRayService``) and compares only the cluster spec
      (``isClusterSpecHashEqual``), so the running cluster never sees the annotation: allowed with a warning saying
      when it takes effect (not while the stored object is suspended: its cluster is made on resume).

    Raises:
        BelowMinMember (403): an autoscaling cluster's minMember above its floor (``admit.webhook.rollout``
            renders it with the plan's scheduler).
    """
    obj, old = update.obj, update.old
    floor = _floor_on_update(obj, old, plan, config)
    if floor is not None:
        return floor
    if not plan.mutate or _was_gang(old, config) or get_path(old, ("spec", "suspend")) is True:
        return None  # KubeRay gangs it, or it runs on another cluster; already a gang; no pods yet
    if plan.kind != "RayCluster":
        when = ("when it retries (a new RayCluster per attempt) or is created again" if plan.kind == "RayJob" else
                "at its next upgrade (a change of spec.rayClusterConfig makes a new RayCluster: upgradeStrategy "
                "NewCluster or NewClusterWithIncrementalUpgrade) or when it is created again")
        return RunningVerdict(
            f"{plan.ref} is running: KubeRay copies its annotations onto a RayCluster only when it makes one and "
            f"compares only the cluster spec, so its current RayCluster is not ganged by this change. It takes "
            f"effect {when}", False)
    if kuberay_parent(obj) is not None or get_path(obj, ("spec", "suspend")) is True:
        return None
    if get_path(obj, ("spec", "upgradeStrategy", "type")) == "Recreate":
        return RunningVerdict(f"{plan.ref} has upgradeStrategy Recreate: KubeRay deletes all its running pods for "
                              "this change and makes them again, in the gang", False)
    return RunningVerdict(
        "Delete the RayCluster and create it again with the annotation; or suspend it in this same update "
        "(spec.suspend: true) and resume it after; or set spec.upgradeStrategy.type: Recreate in this same update "
        f"(KubeRay then makes every pod again, in the gang): {plan.ref} is running, and KubeRay leaves its running "
        "pods as they are when its templates change (upgradeStrategy is not Recreate), so they would stay outside "
        f"gang {plan.group_name}, and every pod KubeRay makes later (a scale-up, a replacement) would wait for "
        f"{plan.min_member} pods of the gang that never come", True)


KINDS = RAYCLUSTER, RAYJOB, RAYSERVICE = tuple(
    WorkloadKind(GROUP, kind, (("v1", kind.lower() + "s"),), partial(resolve_ray, kind=kind),
                 children=(("batch", "Job"),) if kind == "RayJob" else (), pod_joiner=None, pod_watch_selector=None,
                 rollout=None, gang_from_parent=None, handover=None, controller_gang=None, allowed_backends=None,
                 in_status=False, running_update=running_ray)
    for kind in CLUSTER_SPEC)
