"""kube-apiserver's defaulting of built-in kinds, for :class:`~admit.testing.fake_kube.FakeKubeAPI`: applied to every
HTTP create, update and patch before the admission chain, as kube-apiserver defaults what it decodes (not to
``FakeKubeAPI.put``, which stores what a test gives). docs/fake-api.md lists the values, from kubernetes'
``SetDefaults_*``: ``pkg/apis/apps/v1/defaults.go`` (Deployments, StatefulSets with ``StatefulSetAutoDeletePVC``, on
since 1.27, ReplicaSets, DaemonSets), ``pkg/apis/batch/v1/defaults.go`` (``SetDefaults_Job``),
``pkg/apis/core/v1/defaults.go`` (``SetDefaults_PodSpec``, ``SetDefaults_Container``) for a Pod and every pod template
of these; and one custom resource's CRD defaults, KubeRay's worker groups (:func:`_default_ray_cluster_spec`). A
Job's generated selector and labels, set at CREATE only, are :func:`job_selector_and_labels`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["apply_defaults", "job_selector_and_labels", "DEFAULT_SCHEDULER", "JOB_UID_LABEL", "JOB_NAME_LABEL"]

JSON = dict[str, Any]

DEFAULT_SCHEDULER = "default-scheduler"
"""``v1.DefaultSchedulerName``: a pod's ``spec.schedulerName`` when it names none."""

MAX_INT32 = 2147483647

JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _image_pull_policy(image: str) -> str:
    """``SetDefaults_Container``: Always when the image's tag is ``latest`` (``ParseImageName`` gives ``latest`` to
    an image with neither tag nor digest), else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", DEFAULT_SCHEDULER)
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            if isinstance(c.get("image"), str):
                c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _template_spec(spec: JSON) -> Any:
    template = spec.get("template")
    return template.get("spec") if isinstance(template, dict) else None


def _strategy(spec: JSON, key: str, **rolling: Any) -> None:
    """``spec[key]`` defaults to type RollingUpdate, whose ``rollingUpdate`` gets ``rolling``'s values."""
    strategy = spec.setdefault(key, {})
    if not isinstance(strategy, dict):
        return
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        values = strategy.setdefault("rollingUpdate", {})
        if isinstance(values, dict):
            for k, v in rolling.items():
                values.setdefault(k, v)


def _default_ray_cluster_spec(cluster: Any) -> None:
    """The CRD defaults of each ``workerGroupSpecs`` item of a RayClusterSpec (ray-project/kuberay v1.7.0
    ``apis/ray/v1/raycluster_types.go`` ``WorkerGroupSpec``, ``+kubebuilder:default``), in a RayCluster's ``spec``, a
    RayJob's ``spec.rayClusterSpec`` and a RayService's ``spec.rayClusterConfig``: kube-apiserver applies a CRD's
    ``default`` values when it decodes a request, so the cluster a RayService's incremental upgrade creates with
    ``replicas`` nil (``constructRayClusterForRayService``) reaches admit with 0."""
    groups = cluster.get("workerGroupSpecs") if isinstance(cluster, dict) else None
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict):
            group.setdefault("replicas", 0)
            group.setdefault("minReplicas", 0)
            group.setdefault("maxReplicas", MAX_INT32)
            group.setdefault("numOfHosts", 1)


def apply_defaults(group: str, plural: str, obj: JSON) -> None:
    """Default ``obj`` (a decoded object of ``group``/``plural``, changed in place) as kube-apiserver does before
    admission (module docstring). Kinds not listed there are left as they are; malformed parts are skipped (the
    store's validation answers for them)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if group == "ray.io":
        _default_ray_cluster_spec(spec if plural == "rayclusters" else
                                  spec.get({"rayjobs": "rayClusterSpec", "rayservices": "rayClusterConfig"}.get(
                                      plural, "")))
        return
    if group == "" and plural == "pods":
        _default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
        return
    if group == "apps" and plural in ("deployments", "statefulsets", "replicasets", "daemonsets"):
        if plural != "daemonsets":
            spec.setdefault("replicas", 1)
        if plural == "deployments":
            _strategy(spec, "strategy", maxUnavailable="25%", maxSurge="25%")
            spec.setdefault("progressDeadlineSeconds", 600)
        elif plural == "daemonsets":
            _strategy(spec, "updateStrategy", maxUnavailable=1, maxSurge=0)
        elif plural == "statefulsets":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            strategy = spec.setdefault("updateStrategy", {})
            if isinstance(strategy, dict):
                if not strategy.get("type"):
                    strategy["type"] = "RollingUpdate"
                    strategy.setdefault("rollingUpdate", {})
                if strategy["type"] == "RollingUpdate" and isinstance(strategy.get("rollingUpdate"), dict):
                    strategy["rollingUpdate"].setdefault("partition", 0)
            retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
            if isinstance(retention, dict):
                retention.setdefault("whenDeleted", "Retain")
                retention.setdefault("whenScaled", "Retain")
        if plural != "replicasets":
            spec.setdefault("revisionHistoryLimit", 10)
        _default_pod_spec(_template_spec(spec))
        return
    if group == "batch" and plural == "jobs":
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        if spec.get("parallelism") is None:
            spec["parallelism"] = 1
        if spec.get("backoffLimit") is None:
            spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
        template = spec.get("template")
        meta = obj.setdefault("metadata", {})
        if isinstance(template, dict) and isinstance(meta, dict) and not meta.get("labels"):
            labels = (template.get("metadata") or {}).get("labels")
            if labels:
                meta["labels"] = dict(labels)
        _default_pod_spec(_template_spec(spec))


def job_selector_and_labels(job: JSON) -> None:
    """The Job strategy's ``PrepareForCreate`` (``pkg/registry/batch/job/strategy.go`` ``generateSelector``): unless
    ``spec.manualSelector``, the template gets ``batch.kubernetes.io/controller-uid`` and ``batch.kubernetes.io/
    job-name`` (and the legacy ``controller-uid`` and ``job-name``), and ``spec.selector`` matches the uid. Needs
    ``metadata.uid``; changes ``job`` in place."""
    spec = job.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    uid, name = job["metadata"]["uid"], job["metadata"].get("name", "")
    template = spec.setdefault("template", {})
    if not isinstance(template, dict):
        return
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({JOB_UID_LABEL: uid, JOB_NAME_LABEL: name, "controller-uid": uid, "job-name": name})
    if not spec.get("selector"):
        spec["selector"] = {"matchLabels": {JOB_UID_LABEL: uid}}
