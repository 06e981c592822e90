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

Installed with :func:`install`. A refused create is a Warning Event on the RayCluster (``FailedToCreateHeadPod``, ``FailedToCreateWorkerPod``) or
on the RayJob/RayService (``FailedToCreateRayCluster``), as KubeRay's recorder, and an entry of
:attr:`KubeRay.errors`. Not emulated: Services, the autoscaler, scale-down (``workersToDelete``), pod deletion and
restarts, upgrades (``upgradeStrategy``), RayJob submission and retries, RayService's zero-downtime upgrade (a
second cluster is made only when a test calls :meth:`KubeRay.new_pending_cluster`), ``--enable-batch-scheduler``
(the pre-1.3 spelling of ``volcano``), the Workload API scheduler at HEAD (feature gate ``KubernetesWAS``).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .kit import OperatorEmulation, Sync, controller_ref, random_suffix, service_account

if TYPE_CHECKING:
    from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI

__all__ = ["KubeRay", "install", "BATCH_SCHEDULERS", "cluster_name", "cluster_for_parent", "ray_pod", "desired_workers",
           "SCHEDULER_NAMES"]

JSON = dict[str, Any]
API = "ray.io/v1"
GANG_LABEL = "ray.io/gang-scheduling-enabled"

#: ``--batch-scheduler`` value -> the first KubeRay release that accepts it (``getSchedulerFactory``).
BATCH_SCHEDULERS: dict[str, tuple[int, int]] = {"volcano": (1, 3), "yunikorn": (1, 3), "scheduler-plugins": (1, 4),
                                                 "kai-scheduler": (1, 5)}
#: ``--batch-scheduler`` value -> the ``schedulerName`` its plugin puts on every Pod (``Name()`` of each plugin).
SCHEDULER_NAMES: dict[str, str] = {"volcano": "volcano", "yunikorn": "yunikorn",
                                   "scheduler-plugins": "scheduler-plugins-scheduler", "kai-scheduler": "kai-scheduler"}


def cluster_name(parent: str, version: tuple[int, int] = (1, 7)) -> str:
    """``utils.GenerateRayClusterName``: ``<parent>-<5>`` since v1.4.0, ``<parent>-raycluster-<5>`` before."""
    return f"{parent}-{random_suffix()}" if version >= (1, 4) else f"{parent}-raycluster-{random_suffix()}"


def cluster_for_parent(parent: JSON, name: str) -> JSON | None:
    """The RayCluster KubeRay makes for RayJob or RayService ``parent`` (stored, with uid), or None for a RayJob
    without ``spec.rayClusterSpec`` (``constructRayClusterForRayJob`` / ``constructRayClusterForRayService``)."""
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
        annotations["ray.io/num-worker-groups"] = str(len(cluster_spec.get("workerGroupSpecs") or []))
        annotations["ray.io/kuberay-version"] = "v1.7.0"
    return {"apiVersion": API, "kind": "RayCluster",
            "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": labels,
                         "annotations": annotations, "ownerReferences": [controller_ref(parent)]},
            "spec": copy.deepcopy(cluster_spec)}


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
    if head:
        annotations["ray.io/ft-enabled"] = "false"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": _pod_name(meta["name"] if head else f"{meta['name']}-{group_name}",
                                                  node_type),
                        "namespace": meta.get("namespace"), "labels": labels, "annotations": annotations,
                        "ownerReferences": [controller_ref(cluster)]},
           "spec": template.get("spec") or {}}
    _add_metadata(cluster, pod, group_name, batch_scheduler)
    return pod


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

    Raises:
        ValueError: a batch scheduler that release does not know (KubeRay exits: "the scheduler is not supported").
    """

    component = "kuberay-operator"

    def __init__(self, api: "FakeKubeAPI", *, batch_scheduler: str | None = None,
                 version: tuple[int, int] = (1, 7)) -> None:
        super().__init__(api, service_account("ray-system", "kuberay-operator"))
        if batch_scheduler is not None and BATCH_SCHEDULERS.get(batch_scheduler, (99, 0)) > version:
            raise ValueError(f"the scheduler is not supported, name={batch_scheduler}")
        self.batch_scheduler = batch_scheduler
        self.version = version
        self.watch(API, "rayclusters", self._sync_cluster)
        self.watch(API, "rayjobs", self._sync_parent("rayjobs"))
        self.watch(API, "rayservices", self._sync_parent("rayservices"))

    def clusters_of(self, parent: JSON) -> list[JSON]:
        """The RayClusters controlled by stored ``parent``."""
        return self.owned(API, "rayclusters", parent["metadata"].get("namespace") or "", parent["metadata"]["uid"])

    def _sync_parent(self, plural: str) -> Sync:
        async def sync(ns: str, name: str) -> None:
            parent = self.live(API, plural, ns, name)
            if parent is None or self.clusters_of(parent):
                return
            await self.new_pending_cluster(parent)
        return sync

    async def new_pending_cluster(self, parent: JSON) -> JSON | None:
        """Make one more RayCluster for ``parent`` (a RayService upgrade's pending cluster, a RayJob retry's new
        cluster): a fresh ``GenerateRayClusterName``, the parent's metadata copied again."""
        body = cluster_for_parent(parent, cluster_name(parent["metadata"]["name"], self.version))
        if body is None:
            return None
        if self.batch_scheduler == "volcano" and parent["kind"] == "RayJob":
            self._volcano_pod_group(parent, body)
        return await self.create(parent, API, "rayclusters", body, "FailedToCreateRayCluster")

    async def _sync_cluster(self, ns: str, name: str) -> None:
        cluster = self.live(API, "rayclusters", ns, name)
        if cluster is None or (cluster.get("spec") or {}).get("suspend") is True:
            return
        self._submission(cluster)
        pods = self.owned("v1", "pods", ns, cluster["metadata"]["uid"])

        def of_group(group: str) -> int:
            return sum(1 for p in pods if p["metadata"]["labels"].get("ray.io/group") == group)

        if not [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]:
            if await self.create(cluster, "v1", "pods", ray_pod(cluster, None, self.batch_scheduler),
                                 "FailedToCreateHeadPod") is None:
                return
        for group in (cluster.get("spec") or {}).get("workerGroupSpecs") or []:
            for _ in range(desired_workers(group) - of_group(str(group.get("groupName", "")))):
                if await self.create(cluster, "v1", "pods", ray_pod(cluster, group, self.batch_scheduler),
                                     "FailedToCreateWorkerPod") is None:
                    return

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


def install(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None, *, batch_scheduler: str | None = None,
            version: tuple[int, int] = (1, 7)) -> KubeRay:
    """Run KubeRay on ``api`` (options as :class:`KubeRay`). KubeRay registers no webhook that touches what admit
    writes (its optional RayCluster validating webhook, ``utils/validation.go`` ``ValidateRayClusterMetadata`` /
    ``ValidateRayClusterSpec``, checks names, containers, replica bounds and GCS options, not template labels,
    annotations or ``schedulerName``), so ``chain`` is not used."""
    return api.add_controller(KubeRay(api, batch_scheduler=batch_scheduler, version=version))
