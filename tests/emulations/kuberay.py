"""KubeRay's operator (ray-project/kuberay ``ray-operator``, v1.3 to v1.7) as the fake API runs it: the RayClusters
it makes for RayJobs and RayServices, and the head and worker Pods it makes for every RayCluster, each created
through the fake's admission chain as the ``kuberay-operator`` ServiceAccount.

Read at ray-project/kuberay ``feeaf72`` (2026-08-19, after v1.7.0), with the tags named below for what changed:

- **RayJob -> RayCluster** (``controllers/ray/rayjob_controller.go`` ``constructRayClusterForRayJob``): name
  ``utils.GenerateRayClusterName(<rayjob>)``; labels = the RayJob's labels plus ``ray.io/originated-from-cr-name``,
  ``ray.io/originated-from-crd: RayJob`` and ``ray.io/job-submission-mode``; annotations = the RayJob's (all of
  them, admit's included); ``spec`` = a deep copy of ``spec.rayClusterSpec``; a controller ownerReference to the
  RayJob (``ctrl.SetControllerReference``). A RayJob with ``clusterSelector`` and no ``rayClusterSpec`` gets none.
  The submitter Job is made only once the head is ready, which never happens in the fake (no kubelet): not made.
- **RayService -> RayCluster** (``rayservice_controller.go`` ``constructRayClusterForRayService``): the same name
  rule; labels + ``ray.io/originated-from-crd: RayService``; annotations = the RayService's plus
  ``ray.io/num-worker-groups`` and ``ray.io/kuberay-version``.
- **Cluster names** (``utils/util.go`` ``GenerateRayClusterName``): ``<parent>-<5 random characters>`` since v1.4.0;
  ``<parent>-raycluster-<5>`` up to v1.3.x (``RayClusterSuffix``). :class:`KubeRay` ``version`` picks one.
- **RayCluster -> Pods** (``raycluster_controller.go`` ``reconcilePods``, ``buildHeadPod``, ``buildWorkerPod``,
  ``createHeadPod``, ``createWorkerPod``; ``common/pod.go`` ``DefaultHeadPodTemplate``, ``DefaultWorkerPodTemplate``,
  ``labelPod``): nothing while ``spec.suspend``; the batch scheduler's ``DoBatchSchedulingOnSubmission`` first; then
  the head Pod, then in the same pass the worker Pods of each group (desired = ``GetWorkerGroupDesiredReplicas`` x
  ``numOfHosts``: replicas clamped to [minReplicas, maxReplicas], 0 for a suspended group). Each Pod is the group's
  template with ``generateName`` ``<cluster>-head-`` / ``<cluster>-<group>-worker-`` (``utils.PodName``: the prefix
  cut to 50 characters), labels = the template's (and the group's ``labels``) with ``ray.io/is-ray-node``,
  ``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group`` (``headgroup`` for the head), ``ray.io/identifier``,
  ``app.kubernetes.io/name: kuberay``, ``app.kubernetes.io/created-by: kuberay-operator`` (``labelPod``: the user
  cannot override the type, group and cluster keys), the template's annotations plus ``ray.io/ft-enabled`` on the
  head (``configureGCSFaultTolerance``), the template's spec, and a controller ownerReference to the RayCluster.
  Containers' env, ports and commands (``BuildPod``) are not emulated: admit reads none of them.
- **The operator-wide batch scheduler** (``--batch-scheduler``, read by ``batchscheduler/schedulermanager.go``
  ``getSchedulerFactory``; since v1.3.0 the per-cluster label ``ray.io/scheduler-name`` is not read: v1.2's
  ``schedulermanager.go`` still read ``app.ObjectMeta.Labels[utils.RaySchedulerName]``). ``AddMetadataToChildResource``
  runs on every head and worker Pod before its create:

  ==================== ======== =====================================================================================
  ``--batch-scheduler``  since    what it does (file, function)
  ==================== ======== =====================================================================================
  ``volcano``          v1.3.0   schedulerName ``volcano``; annotations ``scheduling.k8s.io/group-name:
                                ray-<RayJob or RayCluster>-pg`` and ``volcano.sh/task-spec: <group>``; labels
                                ``volcano.sh/queue-name`` and ``ray.io/priority-class-name`` copied from the cluster
                                (``volcano/volcano_scheduler.go``); a Volcano PodGroup for every RayCluster, one per
                                RayJob for RayJob-made ones (``handleRayCluster``, ``handleRayJob``,
                                ``getAppPodGroupName``; made here only when the fake serves
                                ``scheduling.volcano.sh/v1beta1``)
  ``yunikorn``         v1.3.0   schedulerName ``yunikorn``; labels ``applicationId`` / ``queue`` from the cluster's
                                ``yunikorn.apache.org/app-id`` / ``queue`` (``yunikorn/yunikorn_scheduler.go``)
  ``scheduler-plugins`` v1.4.0  schedulerName ``scheduler-plugins-scheduler``; with the cluster label
                                ``ray.io/gang-scheduling-enabled`` (present, any value) the Pod label
                                ``scheduling.x-k8s.io/pod-group: <cluster>`` and a PodGroup ``<cluster>``, minMember
                                desired workers + 1, ownerReference (not controller) to the RayCluster
                                (``scheduler-plugins/scheduler_plugins.go`` ``createPodGroup``,
                                ``AddMetadataToChildResource``)
  ``kai-scheduler``    v1.5.0   schedulerName ``kai-scheduler``; label ``kai.scheduler/queue`` from the cluster
                                (``kai-scheduler/kai_scheduler.go``)
  ==================== ======== =====================================================================================

  Every plugin sets ``spec.schedulerName`` of every Pod (``batchscheduler/utils/utils.go``
  ``AddSchedulerNameToObject``), whatever the template or admit wrote.

Installed with :func:`install`. A refused create is a Warning Event on the RayCluster (``FailedToCreateHeadPod``,
``FailedToCreateWorkerPod``) or on the RayJob/RayService (``FailedToCreateRayCluster``), as KubeRay's recorder, and an
entry of :attr:`KubeRay.errors`.

**Later writes** (v1.7.0, each through the admission chain; :data:`LATER_WRITES` registers them for the invariant of
tests/operators/test_later_writes.py, tests/emulations/later.py):

- ``reconcilePods`` beyond the first pass: a suspended cluster's and a suspended group's pods deleted, a group's
  ``scaleStrategy.workersToDelete`` deleted, surplus pods deleted at random only without the autoscaler, missing
  pods made again (a pod lost with its node, :meth:`KubeRay.lose_node`; the controller watches the pods it owns),
  and every pod deleted and made again when ``upgradeStrategy.type: Recreate`` and the spec's hash changed
  (``shouldRecreatePodsForUpgrade``; the head carries ``ray.io/upgrade-strategy-recreate-hash``, ``createHeadPod``).
  KubeRay's pods carry what it adds: the head's ``autoscaler`` sidecar (``BuildAutoscalerContainer``) and each
  worker's ``wait-gcs-ready`` init container (``DefaultWorkerPodTemplate``).
- RayService (``reconcileRayCluster``, ``shouldPrepareNewCluster``, ``isZeroDowntimeUpgradeEnabled``): the first
  cluster is made and at once recorded as active (the fake has no ready head); a change of
  ``spec.rayClusterConfig`` (its hash, ``rayClusterSpecForHashing``) makes a pending cluster unless
  ``upgradeStrategy.type: None``, with every worker ``replicas`` nil under ``NewClusterWithIncrementalUpgrade``
  (gate ``RayServiceIncrementalUpgrade``); :meth:`KubeRay.promote` makes it active and deletes the old one.
- RayJob (:meth:`KubeRay.finish`): once the job ends, the deletion policy (gate ``RayJobDeletionPolicy``):
  ``DeleteWorkers`` (an UPDATE with ``suspend: true`` on every worker group, ``suspendWorkerGroups``),
  ``DeleteCluster``, ``DeleteSelf``; ``shutdownAfterJobFinishes`` without a strategy deletes the cluster.
- The Ray autoscaler (:class:`RayAutoscaler`, ray-project/ray ``KubeRayNodeProvider``): JSON patches of
  ``rayclusters/<name>`` as the head's ServiceAccount, ``replicas`` within the group's bounds and
  ``workersToDelete``, then the list cleared (``safe_to_scale``).

Not emulated: Services, Ingresses and the submitter Job (made once the head is ready, which never happens in the
fake), the serve applications and the traffic shift of an incremental upgrade (Gateway, HTTPRoute,
``target_capacity``), a RayService's in-place update of its active cluster when worker groups are only appended or
the KubeRay version changes (``modifyRayCluster``), RayJob retries (``backoffLimit``: a new cluster per attempt;
:meth:`KubeRay.new_pending_cluster` makes one when a test asks), multi-host replica indexes
(``RayMultiHostIndexing``), ``--enable-batch-scheduler`` (the pre-1.3 spelling of ``volcano``), the Workload API
scheduler (feature gate ``KubernetesWAS``, alpha in v1.7.0).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any

from admit.testing.fake_kube import ApiError
from admit.testing.fake_kube.objects import apply_patch

from .kit import OperatorEmulation, Sync, controller_ref, random_suffix, service_account
from .later import Emulated, LaterWrite

if TYPE_CHECKING:
    from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI, ResourceType

__all__ = ["KubeRay", "RayAutoscaler", "install", "BATCH_SCHEDULERS", "cluster_name", "cluster_for_parent", "ray_pod",
           "desired_workers", "SCHEDULER_NAMES", "replicas_patch", "workers_to_delete_patch", "LATER", "LATER_WRITES"]

JSON = dict[str, Any]
API = "ray.io/v1"
GANG_LABEL = "ray.io/gang-scheduling-enabled"
KUBERAY_VERSION = "v1.7.0"
#: ``utils.HashWithoutReplicasAndWorkersToDeleteKey``: a RayService's cluster's spec hash (``constant.go``).
HASH_KEY = "ray.io/hash-without-replicas-and-workers-to-delete"
#: ``utils.UpgradeStrategyRecreateHashKey``: the cluster spec hash on the head pod (``createHeadPod``).
RECREATE_HASH_KEY = "ray.io/upgrade-strategy-recreate-hash"
#: ``features.go`` ``defaultFeatureGates`` of v1.7.0, those the emulation reads.
FEATURE_GATES: dict[str, bool] = {"RayJobDeletionPolicy": True, "RayServiceIncrementalUpgrade": True,
                                  "RayClusterStatusConditions": True, "RayMultiHostIndexing": True}

#: ``--batch-scheduler`` value -> the first KubeRay release that accepts it (``getSchedulerFactory``).
BATCH_SCHEDULERS: dict[str, tuple[int, int]] = {"volcano": (1, 3), "yunikorn": (1, 3), "scheduler-plugins": (1, 4),
                                                 "kai-scheduler": (1, 5)}
#: ``--batch-scheduler`` value -> the ``schedulerName`` its plugin puts on every Pod (``Name()`` of each plugin).
SCHEDULER_NAMES: dict[str, str] = {"volcano": "volcano", "yunikorn": "yunikorn",
                                   "scheduler-plugins": "scheduler-plugins-scheduler", "kai-scheduler": "kai-scheduler"}


def cluster_name(parent: str, version: tuple[int, int] = (1, 7)) -> str:
    """``utils.GenerateRayClusterName``: ``<parent>-<5>`` since v1.4.0, ``<parent>-raycluster-<5>`` before."""
    return f"{parent}-{random_suffix()}" if version >= (1, 4) else f"{parent}-raycluster-{random_suffix()}"


def cluster_for_parent(parent: JSON, name: str, gates: dict[str, bool] | None = None) -> JSON | None:
    """The RayCluster KubeRay makes for RayJob or RayService ``parent`` (stored, with uid), or None for a RayJob
    without ``spec.rayClusterSpec`` (``constructRayClusterForRayJob`` / ``constructRayClusterForRayService``). A
    RayService's pending cluster of an incremental upgrade (an active cluster in its status and
    :func:`incremental_upgrade`) has every worker group's ``replicas`` left out (nil), as
    ``constructRayClusterForRayService`` writes it; the CRD defaults it to 0 before admission."""
    kind, meta, spec = parent["kind"], parent["metadata"], parent.get("spec") or {}
    cluster_spec = spec.get("rayClusterSpec") if kind == "RayJob" else spec.get("rayClusterConfig")
    if not isinstance(cluster_spec, dict):
        return None
    labels = {**(meta.get("labels") or {}), "ray.io/originated-from-cr-name": meta["name"],
              "ray.io/originated-from-crd": kind}
    annotations = dict(meta.get("annotations") or {})
    if kind == "RayJob":
        labels["ray.io/job-submission-mode"] = spec.get("submissionMode") or "K8sJobMode"
    else:
        annotations[HASH_KEY] = cluster_hash(cluster_spec, service=True)
        annotations["ray.io/num-worker-groups"] = str(len(cluster_spec.get("workerGroupSpecs") or []))
        annotations["ray.io/kuberay-version"] = KUBERAY_VERSION
    made = copy.deepcopy(cluster_spec)
    if kind == "RayJob" and spec.get("submissionMode") == "SidecarMode":
        annotations["ray.io/disable-provisioned-head-restart"] = "true"
    if kind == "RayService" and incremental_upgrade(parent, gates) and \
            ((parent.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName"):
        for group in made.get("workerGroupSpecs") or []:
            group.pop("replicas", None)  # "start the pending cluster without a replicas value"
    return {"apiVersion": API, "kind": "RayCluster",
            "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": labels,
                         "annotations": annotations, "ownerReferences": [controller_ref(parent)]},
            "spec": made}


def incremental_upgrade(service: JSON, gates: dict[str, bool] | None = None) -> bool:
    """``utils.IsIncrementalUpgradeEnabled``: the gate ``RayServiceIncrementalUpgrade`` on and
    ``spec.upgradeStrategy.type: NewClusterWithIncrementalUpgrade``."""
    return (gates or FEATURE_GATES).get("RayServiceIncrementalUpgrade", False) and \
        ((service.get("spec") or {}).get("upgradeStrategy") or {}).get("type") == "NewClusterWithIncrementalUpgrade"


def desired_workers(group: JSON) -> int:
    """``GetWorkerGroupDesiredReplicas`` x ``numOfHosts`` of one ``workerGroupSpecs`` item."""
    if group.get("suspend") is True:
        return 0
    low, high = group.get("minReplicas") or 0, group.get("maxReplicas", 2**31 - 1)
    replicas = group.get("replicas")
    want = low if replicas is None or replicas < low else min(replicas, high)
    return want * (group.get("numOfHosts") or 1)


def _pod_name(prefix: str, node_type: str) -> str:
    """``utils.PodName(prefix, type, isGenerateName=true)``: the prefix cut to 50 characters, lower-cased."""
    return f"{prefix[:50]}-{node_type}-".lower()


def ray_pod(cluster: JSON, group: JSON | None, batch_scheduler: str | None) -> JSON:
    """The head (``group`` None) or a worker Pod of ``group`` as KubeRay creates it for stored ``cluster``, after
    the batch scheduler's ``AddMetadataToChildResource`` (module docstring)."""
    meta = cluster["metadata"]
    spec = cluster.get("spec") or {}
    head = group is None
    source = spec.get("headGroupSpec") if head else group
    template = copy.deepcopy((source or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    group_name = "headgroup" if head else str(group.get("groupName", ""))  # type: ignore[union-attr]
    node_type = "head" if head else "worker"
    labels = {**(tmeta.get("labels") or {}), **((source or {}).get("labels") or {})}
    labels.update({"ray.io/is-ray-node": "yes", "ray.io/identifier": f"{meta['name']}-{node_type}",
                   "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"})
    labels.update({"ray.io/cluster": meta["name"], "ray.io/node-type": node_type, "ray.io/group": group_name})
    annotations = dict(tmeta.get("annotations") or {})
    pod_spec = template.get("spec") or {}
    if head:
        annotations["ray.io/ft-enabled"] = "false"
        annotations[RECREATE_HASH_KEY] = cluster_hash(spec)  # createHeadPod
        annotations["ray.io/kuberay-version"] = KUBERAY_VERSION
        if spec.get("enableInTreeAutoscaling") is True:
            pod_spec["containers"] = [*(pod_spec.get("containers") or []), autoscaler_container(spec, pod_spec)]
    else:
        pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []), wait_gcs_ready_container(pod_spec)]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": _pod_name(meta["name"] if head else f"{meta['name']}-{group_name}",
                                                  node_type),
                        "namespace": meta.get("namespace"), "labels": labels, "annotations": annotations,
                        "ownerReferences": [controller_ref(cluster)]},
           "spec": pod_spec}
    _add_metadata(cluster, pod, group_name, batch_scheduler)
    return pod


def autoscaler_container(spec: JSON, head_spec: JSON) -> JSON:
    """``common/pod.go`` ``BuildAutoscalerContainer`` + ``mergeAutoscalerOverrides`` (v1.7.0): the ``autoscaler``
    sidecar of the head, the Ray container's image, requests and limits 500m CPU / 512Mi unless
    ``autoscalerOptions.resources`` replaces them (its env, command and probes are not emulated)."""
    options = spec.get("autoscalerOptions") or {}
    image = ((head_spec.get("containers") or [{}])[0]).get("image")
    return {"name": "autoscaler", "image": options.get("image") or image,
            "imagePullPolicy": options.get("imagePullPolicy") or "IfNotPresent",
            "resources": copy.deepcopy(options.get("resources") or {
                "limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}})}


def wait_gcs_ready_container(worker_spec: JSON) -> JSON:
    """``DefaultWorkerPodTemplate`` (v1.7.0): the ``wait-gcs-ready`` init container appended to every worker pod
    while the operator's ``ENABLE_INIT_CONTAINER_INJECTION`` is not ``false`` (the default), with the Ray
    container's image and fixed requests and limits 200m CPU / 256Mi."""
    ray = (worker_spec.get("containers") or [{}])[0]
    return {"name": "wait-gcs-ready", "image": ray.get("image"),
            "resources": {"limits": {"cpu": "200m", "memory": "256Mi"},
                          "requests": {"cpu": "200m", "memory": "256Mi"}}}


def cluster_hash(spec: JSON, *, service: bool = False) -> str:
    """``utils.GenerateHashWithoutReplicasAndWorkersToDelete`` (v1.7.0) of a RayClusterSpec: its JSON hash with
    every group's ``replicas``, ``minReplicas``, ``maxReplicas``, ``scaleStrategy.workersToDelete``, every
    template's ``tolerations`` and ``schedulingGates``, and ``upgradeStrategy`` left out; with ``service``, also
    ``suspend`` (``rayservice_controller.go`` ``rayClusterSpecForHashing``). Another hash function than KubeRay's
    (sha1 of sorted JSON, not ``GenerateJsonHash``): only equality matters."""
    muted = copy.deepcopy(spec)
    muted.pop("upgradeStrategy", None)
    if service:
        muted.pop("suspend", None)
    templates = [(muted.get("headGroupSpec") or {}).get("template")]
    for group in muted.get("workerGroupSpecs") or []:
        for key in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(key, None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
        if group.get("scaleStrategy") == {}:
            group.pop("scaleStrategy")
        templates.append(group.get("template"))
    for template in templates:
        for key in ("tolerations", "schedulingGates"):
            ((template or {}).get("spec") or {}).pop(key, None)
    return hashlib.sha1(json.dumps(muted, sort_keys=True).encode()).hexdigest()


def _add_metadata(cluster: JSON, pod: JSON, group_name: str, batch_scheduler: str | None) -> None:
    """``AddMetadataToChildResource`` of the ``--batch-scheduler`` plugin (module docstring table)."""
    if batch_scheduler is None:
        return
    cluster_labels = cluster["metadata"].get("labels") or {}
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]

    def copy_label(src: str, dst: str | None = None) -> None:
        if cluster_labels.get(src):
            labels[dst or src] = cluster_labels[src]

    if batch_scheduler == "volcano":
        copy_label("volcano.sh/queue-name")
        copy_label("ray.io/priority-class-name")
        annotations["scheduling.k8s.io/group-name"] = volcano_pod_group_name(cluster)
        annotations["volcano.sh/task-spec"] = group_name
    elif batch_scheduler == "yunikorn":
        copy_label("yunikorn.apache.org/app-id", "applicationId")
        copy_label("yunikorn.apache.org/queue", "queue")
    elif batch_scheduler == "kai-scheduler":
        copy_label("kai.scheduler/queue")
    elif batch_scheduler == "scheduler-plugins" and GANG_LABEL in cluster_labels:
        labels["scheduling.x-k8s.io/pod-group"] = cluster["metadata"]["name"]
    pod["spec"]["schedulerName"] = SCHEDULER_NAMES[batch_scheduler]


#: ``selectMostImpactfulRule``: the policy run when several rules are due.
POLICY_IMPACT = {"DeleteSelf": 4, "DeleteCluster": 3, "DeleteWorkers": 2, "DeleteNone": 1}


def deletion_policy(job: JSON, job_status: str, gates: dict[str, bool] | None = None) -> str:
    """The deletion policy KubeRay runs once RayJob ``job`` ends with ``job_status`` and every TTL has passed:
    with the gate ``RayJobDeletionPolicy`` and ``spec.deletionStrategy``, the most impactful rule whose
    ``condition.jobStatus`` matches (``handleDeletionRules``, ``isDeletionRuleMatched``, ``selectMostImpactfulRule``)
    or the legacy ``onSuccess`` / ``onFailure`` policy (``handleLegacyDeletionPolicy``); else ``DeleteCluster`` when
    ``shutdownAfterJobFinishes`` (``handleShutdownAfterJobFinishes``); else ``DeleteNone``."""
    spec = job.get("spec") or {}
    strategy = spec.get("deletionStrategy")
    if (gates or FEATURE_GATES).get("RayJobDeletionPolicy") and isinstance(strategy, dict):
        rules = [r.get("policy", "DeleteNone") for r in strategy.get("deletionRules") or []
                 if (r.get("condition") or {}).get("jobStatus") == job_status]
        if rules:
            return max(rules, key=lambda p: POLICY_IMPACT.get(p, 0))
        legacy = strategy.get("onSuccess" if job_status == "SUCCEEDED" else "onFailure")
        if isinstance(legacy, dict) and legacy.get("policy"):
            return str(legacy["policy"])
        return "DeleteNone"
    return "DeleteCluster" if spec.get("shutdownAfterJobFinishes") else "DeleteNone"


def volcano_pod_group_name(obj: JSON) -> str:
    """``getAppPodGroupName``: ``ray-<RayJob>-pg`` for a RayJob's cluster, else ``ray-<name>-pg``."""
    labels = obj["metadata"].get("labels") or {}
    name = obj["metadata"]["name"]
    if labels.get("ray.io/originated-from-crd") == "RayJob" and labels.get("ray.io/originated-from-cr-name"):
        name = labels["ray.io/originated-from-cr-name"]
    return f"ray-{name}-pg"


class KubeRay(OperatorEmulation):
    """The emulated KubeRay operator of one :class:`FakeKubeAPI` (module docstring).

    Args:
        api: the fake.
        batch_scheduler: the operator's ``--batch-scheduler`` (None: unset, KubeRay's default; else a key of
            :data:`BATCH_SCHEDULERS`).
        version: the KubeRay release ``(major, minor)`` emulated: cluster names, and which batch schedulers exist.
        feature_gates: changes to :data:`FEATURE_GATES` (the operator's ``--feature-gates``).

    Raises:
        ValueError: a batch scheduler that release does not know (KubeRay exits: "the scheduler is not supported").
    """

    component = "kuberay-operator"

    def __init__(self, api: "FakeKubeAPI", *, batch_scheduler: str | None = None,
                 version: tuple[int, int] = (1, 7), feature_gates: dict[str, bool] | None = None) -> None:
        super().__init__(api, service_account("ray-system", "kuberay-operator"))
        if batch_scheduler is not None and BATCH_SCHEDULERS.get(batch_scheduler, (99, 0)) > version:
            raise ValueError(f"the scheduler is not supported, name={batch_scheduler}")
        self.batch_scheduler = batch_scheduler
        self.version = version
        self.gates = {**FEATURE_GATES, **(feature_gates or {})}
        #: Refused writes of the clusters' Ray autoscalers (:class:`RayAutoscaler`), as :attr:`errors`.
        self.autoscaler_errors: list[tuple[str, str, str]] = []
        self.watch(API, "rayclusters", self._sync_cluster)
        self.watch(API, "rayjobs", self._sync_parent("rayjobs"))
        self.watch(API, "rayservices", self._sync_service)
        self._clusters = self._loops[self.api.resource_type(API, "rayclusters").key]

    def observe(self, rt: "ResourceType", ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """Also a Pod's write or deletion: reconcile the RayCluster that controls it (``SetupWithManager``:
        ``Owns(&corev1.Pod{})``), so a lost pod is made again."""
        super().observe(rt, ns, name, obj, old)
        pod = obj if obj is not None else old
        if rt.group == "" and rt.plural == "pods" and pod is not None:
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "RayCluster":
                    self._clusters.changed(ns, ref["name"])

    def clusters_of(self, parent: JSON) -> list[JSON]:
        """The RayClusters controlled by stored ``parent``."""
        return self.owned(API, "rayclusters", parent["metadata"].get("namespace") or "", parent["metadata"]["uid"])

    def _sync_parent(self, plural: str) -> Sync:
        async def sync(ns: str, name: str) -> None:
            parent = self.live(API, plural, ns, name)
            if parent is None or self.clusters_of(parent) or (parent.get("status") or {}).get("jobStatus"):
                return
            if (parent.get("spec") or {}).get("suspend") is True:
                return  # a suspended RayJob gets its cluster when resumed
            await self.new_pending_cluster(parent)
        return sync

    async def new_pending_cluster(self, parent: JSON) -> JSON | None:
        """Make one more RayCluster for ``parent`` (a RayService upgrade's pending cluster, a RayJob retry's new
        cluster): a fresh ``GenerateRayClusterName``, the parent's metadata copied again."""
        body = cluster_for_parent(parent, cluster_name(parent["metadata"]["name"], self.version), self.gates)
        if body is None:
            return None
        if self.batch_scheduler == "volcano" and parent["kind"] == "RayJob":
            self._volcano_pod_group(parent, body)
        return await self.create(parent, API, "rayclusters", body, "FailedToCreateRayCluster")

    # ------------------------------------------------------------------------------------------- writes as KubeRay

    async def update(self, owner: JSON, api_version: str, plural: str, new: JSON, reason: str, *,
                     user: JSON | None = None) -> JSON | None:
        """Update ``new`` (the whole object, as a controller-runtime ``r.Update``) through admission as this
        operator (or ``user``); a refusal is recorded in :attr:`errors` and as a Warning Event ``reason`` on
        ``owner``, and returns None."""
        rt = self.api.resource_type(api_version, plural)
        meta = new["metadata"]
        try:
            return await self.api.admitted_update(rt, meta.get("namespace"), meta["name"], new, False,
                                                  user=user or self.user)
        except ApiError as e:
            self._refused(owner, reason, f"{reason}: {plural} {meta.get('namespace')}/{meta['name']}: {e.message}")
            return None

    async def patch(self, owner: JSON, api_version: str, plural: str, name: str, payload: list[JSON], reason: str,
                    *, user: JSON) -> JSON | None:
        """A JSON patch (``application/json-patch+json``) of ``plural``/``name`` in ``owner``'s namespace through
        admission as ``user``, as kube-apiserver applies one (``fake_kube.objects.apply_patch``); a refusal as in
        :meth:`update`."""
        rt = self.api.resource_type(api_version, plural)
        ns = owner["metadata"].get("namespace")
        try:
            existing = self.api.get(api_version, plural, ns, name)
            if existing is None:
                raise ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found')
            new = apply_patch(rt, existing, "application/json-patch+json", payload)
            return await self.api.admitted_update(rt, ns, name, new, False, user=user)
        except ApiError as e:
            self._refused(owner, reason, f"{reason}: {plural} {ns}/{name}: {e.message}")
            return None

    def _refused(self, owner: JSON, reason: str, message: str) -> None:
        self.errors.append((owner["metadata"].get("namespace") or "", owner["metadata"]["name"], message))
        self.event(owner, "Warning", reason, message)

    def _delete_pods(self, pods: list[JSON]) -> None:
        """``r.Delete`` of each pod (``deleteAllPods``, ``deletePods``): kube-apiserver admits a DELETE through no
        webhook of admit's (its rules are CREATE and UPDATE)."""
        for pod in pods:
            self.api.delete_object("v1", "pods", pod["metadata"].get("namespace"), pod["metadata"]["name"])

    # ------------------------------------------------------------------------------------------- RayCluster

    async def _sync_cluster(self, ns: str, name: str) -> None:
        """``raycluster_controller.go`` ``reconcilePods`` (v1.7.0): suspend deletes every pod; a spec change under
        ``upgradeStrategy.type: Recreate`` deletes every pod (``shouldRecreatePodsForUpgrade``); else the head,
        then each worker group: a suspended group's pods deleted, ``scaleStrategy.workersToDelete`` deleted, the
        missing pods made, and surplus pods deleted at random only without the autoscaler."""
        cluster = self.live(API, "rayclusters", ns, name)
        if cluster is None:
            return
        spec = cluster.get("spec") or {}
        pods = self.owned("v1", "pods", ns, cluster["metadata"]["uid"])
        heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if spec.get("suspend") is True or self._recreate_for_upgrade(spec, heads):
            self._delete_pods(pods)  # the pods' deletions bring this sync back, which then makes them again
            return
        self._submission(cluster)
        if not heads and await self.create(cluster, "v1", "pods", ray_pod(cluster, None, self.batch_scheduler),
                                           "FailedToCreateHeadPod") is None:
            return
        autoscaling = spec.get("enableInTreeAutoscaling") is True
        for group in spec.get("workerGroupSpecs") or []:
            mine = [p for p in pods if p["metadata"]["labels"].get("ray.io/group") == str(group.get("groupName", ""))
                    and p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
            if group.get("suspend") is True:
                self._delete_pods(mine)
                continue
            doomed = set((group.get("scaleStrategy") or {}).get("workersToDelete") or [])
            self._delete_pods([p for p in mine if p["metadata"]["name"] in doomed])
            running = [p for p in mine if p["metadata"]["name"] not in doomed]
            diff = desired_workers(group) - len(running)
            for _ in range(diff):
                if await self.create(cluster, "v1", "pods", ray_pod(cluster, group, self.batch_scheduler),
                                     "FailedToCreateWorkerPod") is None:
                    return
            if diff < 0 and not autoscaling:  # "randomly deleting Pods" (ENABLE_RANDOM_POD_DELETE aside)
                self._delete_pods(running[:-diff])

    @staticmethod
    def _recreate_for_upgrade(spec: JSON, heads: list[JSON]) -> bool:
        """``shouldRecreatePodsForUpgrade``: ``upgradeStrategy.type: Recreate`` and the head pod's
        ``ray.io/upgrade-strategy-recreate-hash`` differs from the spec's hash now."""
        if (spec.get("upgradeStrategy") or {}).get("type") != "Recreate" or not heads:
            return False
        actual = (heads[0]["metadata"].get("annotations") or {}).get(RECREATE_HASH_KEY)
        return bool(actual) and actual != cluster_hash(spec)

    async def lose_node(self, pod: JSON) -> None:
        """The node of ``pod`` is lost: the pod garbage collector deletes its pods (kubernetes
        ``pkg/controller/podgc/gc_controller.go`` ``gcOrphaned``), and KubeRay makes a new one through admission
        (``reconcilePods``: a worker group below its desired pods, or no head; a RayJob's cluster in
        ``SidecarMode`` with ``ray.io/disable-provisioned-head-restart`` keeps no head once provisioned, which the
        fake never is)."""
        self._delete_pods([pod])
        await self.idle()

    # ------------------------------------------------------------------------------------------- RayService

    async def _sync_service(self, ns: str, name: str) -> None:
        """``rayservice_controller.go`` ``reconcileRayCluster`` / ``shouldPrepareNewCluster`` (v1.7.0): a new
        RayService gets its first cluster (promoted at once here: the fake has no ready head); a change of
        ``spec.rayClusterConfig`` (its hash, :func:`cluster_hash`) gets a pending cluster when a zero-downtime
        upgrade is on (``isZeroDowntimeUpgradeEnabled``: ``upgradeStrategy.type`` unset, ``NewCluster`` or
        ``NewClusterWithIncrementalUpgrade``), which :meth:`promote` makes active."""
        service = self.live(API, "rayservices", ns, name)
        if service is None:
            return
        status = service.get("status") or {}
        clusters = {c["metadata"]["name"]: c for c in self.clusters_of(service)}
        active = clusters.get((status.get("activeServiceStatus") or {}).get("rayClusterName", ""))
        pending = clusters.get((status.get("pendingServiceStatus") or {}).get("rayClusterName", ""))
        if active is None and pending is None:
            made = await self.new_pending_cluster(service)
            if made is not None:
                self._service_status(service, made["metadata"]["name"], "")
            return
        goal = (service.get("spec") or {}).get("rayClusterConfig") or {}
        if pending is not None or active is None or \
                (active["metadata"].get("annotations") or {}).get(HASH_KEY) == cluster_hash(goal, service=True):
            return
        kind = ((service.get("spec") or {}).get("upgradeStrategy") or {}).get("type")
        if kind not in (None, "NewCluster", "NewClusterWithIncrementalUpgrade"):
            return  # None: "No new cluster will be created while the strategy is set to None"
        made = await self.new_pending_cluster(service)
        if made is not None:
            self._service_status(service, active["metadata"]["name"], made["metadata"]["name"])

    def _service_status(self, service: JSON, active: str, pending: str) -> None:
        """The RayService's ``status`` (its ``/status`` subresource: no admission)."""
        stored = copy.deepcopy(service)
        stored["status"] = {**(service.get("status") or {}), "activeServiceStatus": {"rayClusterName": active},
                            "pendingServiceStatus": {"rayClusterName": pending}}
        self.api.put(stored)

    async def promote(self, service: JSON) -> None:
        """The pending cluster is ready and serves (``reconcilePromotionAndServingStatus``): it becomes the active
        one, and the old active cluster is deleted (``cleanUpRayClusterInstance``, after
        ``rayClusterDeletionDelaySeconds``, default 60 s: at once here)."""
        stored = self.live(API, "rayservices", service["metadata"].get("namespace") or "", service["metadata"]["name"])
        status = (stored or {}).get("status") or {}
        pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
        if stored is None or not pending:
            return
        old = (status.get("activeServiceStatus") or {}).get("rayClusterName")
        self._service_status(stored, pending, "")
        if old:
            self.api.delete_object(API, "rayclusters", stored["metadata"].get("namespace"), old)
        await self.idle()

    # ------------------------------------------------------------------------------------------- RayJob

    async def finish(self, job: JSON, job_status: str = "SUCCEEDED") -> str:
        """The Ray job of RayJob ``job`` ends with ``job_status``; KubeRay then runs its deletion policy, as if
        every TTL has passed (``handleDeletionRules`` / ``handleLegacyDeletionPolicy``,
        ``executeDeletionPolicy``; feature gate ``RayJobDeletionPolicy``, Beta, on since v1.6.0; without a
        ``deletionStrategy``, ``shutdownAfterJobFinishes`` deletes the cluster): ``DeleteWorkers`` updates the
        cluster with ``suspend: true`` on every worker group (``suspendWorkerGroups``), ``DeleteCluster`` deletes
        it (``deleteClusterResources``), ``DeleteSelf`` deletes the RayJob. Returns the policy run."""
        ns = job["metadata"].get("namespace") or ""
        stored = self.live(API, "rayjobs", ns, job["metadata"]["name"])
        if stored is None:
            return "DeleteNone"
        clusters = self.clusters_of(stored)
        stored["status"] = {**(stored.get("status") or {}), "jobStatus": job_status, "jobDeploymentStatus":
                            "Complete", "rayClusterName": clusters[-1]["metadata"]["name"] if clusters else ""}
        self.api.put(stored)
        policy = deletion_policy(stored, job_status, self.gates)
        if policy == "DeleteWorkers" and clusters:
            cluster = copy.deepcopy(clusters[-1])
            for group in (cluster.get("spec") or {}).get("workerGroupSpecs") or []:
                group["suspend"] = True
            await self.update(stored, API, "rayclusters", cluster, "FailedToUpdateRayCluster")
        elif policy == "DeleteCluster" and clusters:
            self.api.delete_object(API, "rayclusters", ns, clusters[-1]["metadata"]["name"])
        elif policy == "DeleteSelf":
            self.api.delete_object(API, "rayjobs", ns, stored["metadata"]["name"])
        await self.idle()
        return policy

    def _submission(self, cluster: JSON) -> None:
        """``DoBatchSchedulingOnSubmission`` of the plugin: the gang objects KubeRay itself writes."""
        meta = cluster["metadata"]
        if self.batch_scheduler == "scheduler-plugins" and GANG_LABEL in (meta.get("labels") or {}):
            if self.api.get("scheduling.x-k8s.io/v1alpha1", "podgroups", meta.get("namespace"), meta["name"]) is None:
                workers = sum(desired_workers(g) for g in (cluster.get("spec") or {}).get("workerGroupSpecs") or [])
                self.api.put({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                              "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                                           "ownerReferences": [{"apiVersion": API, "kind": "RayCluster",
                                                                "name": meta["name"], "uid": meta["uid"]}]},
                              "spec": {"minMember": workers + 1}})
        elif self.batch_scheduler == "volcano" and (meta.get("labels") or {}).get(
                "ray.io/originated-from-crd") != "RayJob":
            self._volcano_pod_group(cluster, cluster)

    def _volcano_pod_group(self, owner: JSON, named: JSON) -> None:
        try:
            self.api.resource_type("scheduling.volcano.sh/v1beta1", "podgroups")
        except KeyError:
            return
        name = volcano_pod_group_name(named)
        ns = owner["metadata"].get("namespace")
        if self.api.get("scheduling.volcano.sh/v1beta1", "podgroups", ns, name) is None:
            self.api.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                          "metadata": {"name": name, "namespace": ns,
                                       "ownerReferences": [controller_ref(owner)] if owner["metadata"].get("uid")
                                       else []},
                          "spec": {"minMember": 1}})


def replicas_patch(index: int, target: int) -> JSON:
    """ray-project/ray ``ray:python/ray/autoscaler/_private/kuberay/node_provider.py`` ``worker_replica_patch``: the
    JSON patch operation that sets worker group ``index``'s ``replicas``."""
    return {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/replicas", "value": target}


def workers_to_delete_patch(index: int, workers: list[str]) -> JSON:
    """``worker_delete_patch`` (the same file): the operation that sets worker group ``index``'s
    ``scaleStrategy`` to ``{"workersToDelete": workers}`` (the whole ``scaleStrategy``, present or not)."""
    return {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/scaleStrategy",
            "value": {"workersToDelete": workers}}


class RayAutoscaler:
    """The Ray autoscaler of one RayCluster (ray-project/ray ``python/ray/autoscaler/_private/kuberay/
    node_provider.py`` ``KubeRayNodeProvider``, Ray 2.x), which KubeRay runs as the head pod's ``autoscaler``
    sidecar when ``enableInTreeAutoscaling`` is true. Its writes go through the fake's admission chain as the head
    pod's ServiceAccount (KubeRay ``utils.GetHeadGroupServiceAccountName``: the head template's
    ``serviceAccountName``, else one named after the cluster, ``reconcileAutoscalerServiceAccount``); a refused one
    is an entry of :attr:`errors` (the autoscaler logs it and tries again at its next update).

    Args:
        kuberay: the emulated operator (its API, and the pods it made).
        namespace / cluster: the RayCluster.
    """

    def __init__(self, kuberay: KubeRay, namespace: str, cluster: str) -> None:
        self.kuberay = kuberay
        self.namespace = namespace
        self.cluster = cluster
        stored = kuberay.api.get(API, "rayclusters", namespace, cluster) or {}
        head = (((stored.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
        self.user = service_account(namespace, head.get("serviceAccountName") or cluster)
        self.errors = kuberay.autoscaler_errors

    def _stored(self) -> JSON:
        cluster = self.kuberay.api.get(API, "rayclusters", self.namespace, self.cluster)
        if cluster is None:
            raise LookupError(f"RayCluster {self.namespace}/{self.cluster} is gone")
        return cluster

    def _workers(self, group: str) -> list[JSON]:
        """``get_node_data``: the cluster's non-terminating pods of ``group`` (label ``ray.io/group``)."""
        return [p for p in self.kuberay.api.objects("pods", self.namespace, "v1")
                if p["metadata"]["labels"].get("ray.io/cluster") == self.cluster
                and p["metadata"]["labels"].get("ray.io/group") == group
                and p["metadata"]["labels"].get("ray.io/node-type") == "worker"
                and not p["metadata"].get("deletionTimestamp")]

    async def _submit(self, cluster: JSON, payload: list[JSON]) -> bool:
        """``_submit_raycluster_patch``: a JSON patch of ``rayclusters/<name>``."""
        errors = len(self.kuberay.errors)
        done = await self.kuberay.patch(cluster, API, "rayclusters", self.cluster, payload,
                                        "RayAutoscalerPatchRefused", user=self.user)
        self.errors.extend(self.kuberay.errors[errors:])
        del self.kuberay.errors[errors:]
        await self.kuberay.idle()
        return done is not None

    async def scale(self, group: str, target: int) -> bool:
        """One autoscaler update that wants ``target`` workers of ``group``
        (``_scale_request_to_patch_payload``): the target within the group's bounds (the autoscaler's node type
        ``min_workers`` / ``max_workers`` are ``minReplicas`` / ``maxReplicas``,
        ``kuberay/autoscaling_config.py``; the patch caps at ``maxReplicas`` again); ``replicas`` replaced when it
        differs (``_worker_group_replicas``: absent counts as 1), and on a scale-down the idle workers it stops named
        in ``scaleStrategy.workersToDelete`` (the newest here). Returns whether the patch went through."""
        cluster = self._stored()
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        index = [g.get("groupName") for g in groups].index(group)
        spec = groups[index]
        target = max(spec.get("minReplicas") or 0, min(target, spec.get("maxReplicas", 2**31 - 1)))
        workers = self._workers(group)
        payload = []
        if target != spec.get("replicas", 1):
            payload.append(replicas_patch(index, target))
        hosts = spec.get("numOfHosts") or 1
        surplus = len(workers) - target * hosts
        if surplus > 0:
            doomed = [p["metadata"]["name"] for p in workers[-surplus:]]
            payload.append(workers_to_delete_patch(index, doomed))
        return await self._submit(cluster, payload) if payload else True

    async def clean_up(self) -> bool:
        """``safe_to_scale``: once KubeRay deleted every worker in a ``workersToDelete``, patch each such list to
        empty; False while one of them still runs."""
        cluster = self._stored()
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        payload = []
        for index, spec in enumerate(groups):
            doomed = (spec.get("scaleStrategy") or {}).get("workersToDelete") or []
            live = {p["metadata"]["name"] for p in self._workers(str(spec.get("groupName", "")))}
            if live & set(doomed):
                return False
            if doomed:
                payload.append(workers_to_delete_patch(index, []))
        return await self._submit(cluster, payload) if payload else True


def install(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None, *, batch_scheduler: str | None = None,
            version: tuple[int, int] = (1, 7), feature_gates: dict[str, bool] | None = None) -> KubeRay:
    """Run KubeRay on ``api`` (options as :class:`KubeRay`). KubeRay registers no webhook that touches what admit
    writes (its optional RayCluster validating webhook, ``utils/validation.go`` ``ValidateRayClusterMetadata`` /
    ``ValidateRayClusterSpec``, checks names, containers, replica bounds and GCS options, not template labels,
    annotations or ``schedulerName``), so ``chain`` is not used."""
    return api.add_controller(KubeRay(api, batch_scheduler=batch_scheduler, version=version,
                                      feature_gates=feature_gates))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): what KubeRay and the Ray autoscaler send after a Ray object's CREATE
# ----------------------------------------------------------------------------------------------------------------------

CLUSTER_SPEC_FIELD = {"RayCluster": None, "RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}


def cluster_spec_of(obj: JSON) -> JSON:
    """The RayClusterSpec a user's RayCluster, RayJob or RayService holds ({} when none)."""
    spec = obj.get("spec") or {}
    field = CLUSTER_SPEC_FIELD.get(obj.get("kind", ""))
    found = spec if field is None else spec.get(field)
    return found if isinstance(found, dict) else {}


def clusters_of_object(op: KubeRay, obj: JSON) -> list[JSON]:
    """The live RayClusters of a user's Ray object: itself, or those KubeRay made for it."""
    ns, name = obj["metadata"].get("namespace") or "default", obj["metadata"]["name"]
    if obj["kind"] == "RayCluster":
        cluster = op.live(API, "rayclusters", ns, name)
        return [cluster] if cluster is not None else []
    parent = op.live(API, obj["kind"].lower() + "s", ns, name)
    return op.clusters_of(parent) if parent is not None else []


def gangs_of(op: KubeRay, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """``(RayCluster name, its pods)`` of each live cluster of ``obj``: each is one gang."""
    return [(c["metadata"]["name"], op.owned("v1", "pods", c["metadata"].get("namespace") or "",
                                              c["metadata"]["uid"])) for c in clusters_of_object(op, obj)]


def refused_writes(op: KubeRay) -> list[tuple[str, str, str]]:
    """KubeRay's refused writes and its clusters' autoscalers'."""
    return [*op.errors, *op.autoscaler_errors]


def _autoscaling(obj: JSON) -> bool:
    return cluster_spec_of(obj).get("enableInTreeAutoscaling") is True


async def _scale_each_group(op: KubeRay, obj: JSON, up: bool) -> None:
    for cluster in clusters_of_object(op, obj):
        if (cluster.get("spec") or {}).get("enableInTreeAutoscaling") is not True:
            continue
        autoscaler = RayAutoscaler(op, cluster["metadata"].get("namespace") or "", cluster["metadata"]["name"])
        for group in (cluster.get("spec") or {}).get("workerGroupSpecs") or []:
            low = group.get("minReplicas") or 0
            target = min(group.get("maxReplicas", low), desired_workers(group) + 2) if up else low
            await autoscaler.scale(str(group.get("groupName", "")), target)
        if not up:
            await autoscaler.clean_up()


async def autoscaler_scale_up(op: KubeRay, obj: JSON) -> None:
    """Each worker group scaled up by 2 (to at most ``maxReplicas``)."""
    await _scale_each_group(op, obj, up=True)


async def autoscaler_scale_down(op: KubeRay, obj: JSON) -> None:
    """Each worker group scaled down to ``minReplicas`` with the stopped workers in ``workersToDelete``, then the
    list cleared (``safe_to_scale``)."""
    await _scale_each_group(op, obj, up=False)


async def node_loss(op: KubeRay, obj: JSON) -> None:
    """The nodes of one worker of each group and of the head are lost; KubeRay makes them again."""
    for cluster in clusters_of_object(op, obj):
        pods = op.owned("v1", "pods", cluster["metadata"].get("namespace") or "", cluster["metadata"]["uid"])
        seen: set[str] = set()
        for pod in pods:
            group = pod["metadata"]["labels"].get("ray.io/group", "")
            if group not in seen:
                seen.add(group)
                await op.lose_node(pod)


async def _user_image_bump(op: KubeRay, obj: JSON) -> JSON | None:
    """A user's UPDATE (as an admin, through admission) of the stored ``obj`` with a new image for its head's Ray
    container: a new cluster spec for KubeRay. Refused: an entry of ``op.errors``."""
    ns = obj["metadata"].get("namespace") or "default"
    stored = op.live(API, obj["kind"].lower() + "s", ns, obj["metadata"]["name"])
    if stored is None:
        return None
    head = cluster_spec_of(stored)["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["image"] = f"{head.get('image', 'rayproject/ray')}-upgraded"
    return await op.update(stored, API, obj["kind"].lower() + "s", stored, "UserUpdateRefused",
                           user={"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]})


async def rayservice_upgrade(op: KubeRay, obj: JSON) -> None:
    """A new image in ``spec.rayClusterConfig``: KubeRay makes the pending cluster (``replicas`` nil under the
    incremental upgrade), the pending cluster's autoscaler scales it up to the RayService's replicas, and it is
    promoted; the old cluster is deleted."""
    if await _user_image_bump(op, obj) is None:
        return
    await op.idle()
    service = op.live(API, "rayservices", obj["metadata"].get("namespace") or "default", obj["metadata"]["name"])
    pending = ((service or {}).get("status") or {}).get("pendingServiceStatus", {}).get("rayClusterName")
    if not service or not pending:
        return
    if incremental_upgrade(service, op.gates):
        autoscaler = RayAutoscaler(op, service["metadata"]["namespace"], pending)
        for group in cluster_spec_of(service).get("workerGroupSpecs") or []:
            await autoscaler.scale(str(group.get("groupName", "")), group.get("replicas") or 0)
    await op.promote(service)


async def raycluster_recreate(op: KubeRay, obj: JSON) -> None:
    """A new image in a RayCluster with ``upgradeStrategy.type: Recreate``: KubeRay deletes every pod and makes
    them again."""
    await _user_image_bump(op, obj)
    await op.idle()


async def rayjob_finish(op: KubeRay, obj: JSON) -> None:
    """The Ray job succeeds; KubeRay runs the RayJob's deletion policy (:meth:`KubeRay.finish`)."""
    await op.finish(obj, "SUCCEEDED")


def _deletes_after_success(obj: JSON) -> bool:
    return obj.get("kind") == "RayJob" and deletion_policy(obj, "SUCCEEDED") != "DeleteNone"


AUTOSCALER = "ray-project/ray python/ray/autoscaler/_private/kuberay/node_provider.py"
LATER_WRITES = (
    LaterWrite("autoscaler scale-up within maxReplicas", f"{AUTOSCALER} _scale_request_to_patch_payload, "
               "_submit_raycluster_patch (Ray 2.x): JSON patch of rayclusters/<name>, replace "
               "/spec/workerGroupSpecs/<i>/replicas", "spec.enableInTreeAutoscaling: true (KubeRay runs the "
               "autoscaler sidecar, common/pod.go, v1.7.0)", _autoscaling, autoscaler_scale_up),
    LaterWrite("autoscaler scale-down to minReplicas with workersToDelete, then the list cleared",
               f"{AUTOSCALER} _scale_request_to_patch_payload, worker_delete_patch, safe_to_scale; KubeRay "
               "raycluster_controller.go reconcilePods deletes workersToDelete (v1.7.0)",
               "spec.enableInTreeAutoscaling: true", _autoscaling, autoscaler_scale_down),
    LaterWrite("pods made again after a node loss", "KubeRay raycluster_controller.go reconcilePods (v1.7.0): a "
               "group below its desired pods, no head; kubernetes pkg/controller/podgc gcOrphaned deletes the pods",
               "always", lambda obj: bool(cluster_spec_of(obj)), node_loss),
    LaterWrite("RayService upgrade: pending cluster (replicas nil when incremental), scaled up, promoted",
               "KubeRay rayservice_controller.go reconcileRayCluster, shouldPrepareNewCluster, "
               "constructRayClusterForRayService, cleanUpRayClusterInstance (v1.7.0)",
               "upgradeStrategy.type unset or NewCluster (ENABLE_ZERO_DOWNTIME not false), or "
               "NewClusterWithIncrementalUpgrade with the gate RayServiceIncrementalUpgrade (Beta, on in v1.7.0)",
               lambda obj: obj.get("kind") == "RayService" and ((obj.get("spec") or {}).get("upgradeStrategy") or {})
               .get("type") != "None", rayservice_upgrade),
    LaterWrite("RayCluster Recreate upgrade: every pod deleted and made again",
               "KubeRay raycluster_controller.go shouldRecreatePodsForUpgrade, reconcilePods (v1.7.0)",
               "spec.upgradeStrategy.type: Recreate (v1.5.0 on)",
               lambda obj: obj.get("kind") == "RayCluster" and ((obj.get("spec") or {}).get("upgradeStrategy") or {})
               .get("type") == "Recreate", raycluster_recreate),
    LaterWrite("RayJob deletion policy once the job succeeded: DeleteWorkers (suspend: true on every worker "
               "group), DeleteCluster, DeleteSelf",
               "KubeRay rayjob_controller.go handleDeletionRules, executeDeletionPolicy, suspendWorkerGroups, "
               "deleteClusterResources (v1.7.0)",
               "spec.deletionStrategy with the gate RayJobDeletionPolicy (Beta, on since v1.6.0), or "
               "shutdownAfterJobFinishes", _deletes_after_success, rayjob_finish),
)

LATER = Emulated("kuberay", install, ((API, "RayCluster"), (API, "RayJob"), (API, "RayService")), LATER_WRITES,
                 gangs_of, refused_writes)
