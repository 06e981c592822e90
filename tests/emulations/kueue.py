"""Kueue's writes to a workload it queues, emulated from kubernetes-sigs/kueue (tag ``v0.19.2``): the stop (evict,
preempt) and the start (admit) of ``pkg/controller/jobframework/reconciler.go``, for the later writes of
tests/emulations/later.py.

- **Start** (``JobReconciler.startJob``, when the Workload is admitted): ``clientutil.Patch`` of the job with
  ``GenericJob.RunWithPodSetsInfo``: ``spec.suspend: false`` and, per pod set, ``podset.Merge``
  (``pkg/podset/podset.go``) of the admission's ``PodSetInfo`` into the pod template: its labels, annotations and
  nodeSelector added (a clash with a different value is an error, "conflict for labels"), its tolerations and
  schedulingGates appended. The info (``getPodSetsInfoFromStatus``, ``podset.FromAssignment``): the label
  ``kueue.x-k8s.io/podset: <pod set>``, the ResourceFlavor's ``nodeLabels`` as nodeSelector and its
  ``tolerations``; with ``TopologyAwareScheduling`` (a feature gate) and a topology assignment also the annotation
  ``kueue.x-k8s.io/workload`` and the gate ``kueue.x-k8s.io/topology`` (not emulated: no topology here). A batch/v1
  Job with ``kueue.x-k8s.io/job-min-parallelism`` (partial admission) also gets ``spec.parallelism`` = the admitted
  count, and ``spec.completions`` too with ``kueue.x-k8s.io/job-completions-equal-parallelism: "true"``
  (``pkg/controller/jobs/job/job_controller.go`` ``Job.RunWithPodSetsInfo``, ``syncCompletionWithParallelism``).
- **Stop** (``JobReconciler.stopJob``, on eviction or preemption): ``job.Suspend()`` (``spec.suspend: true``) and
  ``RestorePodSetsInfo``: each pod template's labels, annotations, nodeSelector, tolerations and schedulingGates
  set back to the Workload's pod set (``podset.RestorePodSpec``), which Kueue took from the job as stored when it
  made the Workload (``jobframework`` ``ConstructWorkload``): after every mutating webhook of the job's CREATE,
  admit's marks included. A Job gets the ``kueue.x-k8s.io/stopping`` annotation too (``Job.Stop``), and its labels
  the Job controller manages (``managedLabels``: ``job-name``, ``controller-uid``, with and without
  ``batch.kubernetes.io/``) are kept from the stored template (``Job.RestorePodSetsInfo``); a partially admitted one
  gets its ``parallelism`` (and a following ``completions``) back, and between the two its ``status.startTime``
  is cleared (``Job.Stop``'s ``PatchStatus``, :func:`kit.clear_start_time`: else kube-apiserver keeps the template
  of a Job that ran immutable).

Each write is a PATCH through the fake's admission chain as Kueue's ServiceAccount
(``kueue-system:kueue-controller-manager``), here an UPDATE of the whole object (what a merge patch amounts to).
This module knows only the pod-template paths of each kind (``pod_sets``); the kinds' own emulations call it.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from .kit import clear_start_time, service_account
from admit.testing.fake_kube import ApiError, FakeKubeAPI

__all__ = ["USER", "POD_SET_LABEL", "FLAVOR", "PodSets", "jobset_pod_sets", "job_pod_sets", "merge", "restore",
           "start", "stop"]

JSON = dict[str, Any]
USER = service_account("kueue-system", "kueue-controller-manager")
POD_SET_LABEL = "kueue.x-k8s.io/podset"
STOPPING = "kueue.x-k8s.io/stopping"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
COMPLETIONS_FOLLOW = "kueue.x-k8s.io/job-completions-equal-parallelism"
#: ``managedLabels`` of kueue ``pkg/controller/jobs/job/job_controller.go``: the labels the Job strategy adds.
JOB_MANAGED_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/job-name",
                      "batch.kubernetes.io/controller-uid")


def _completions_follow(obj: JSON) -> bool:
    return str((obj["metadata"].get("annotations") or {}).get(COMPLETIONS_FOLLOW, "")).lower() == "true"
#: A ResourceFlavor as Kueue's docs write one for GPU nodes: its ``nodeLabels`` and ``tolerations``.
FLAVOR: JSON = {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}

PodSets = Callable[[JSON], list[tuple[str, JSON]]]
"""``pod_sets(obj) -> [(pod set name, its pod template (a dict inside obj, changed in place)), ...]``."""


def jobset_pod_sets(js: JSON) -> list[tuple[str, JSON]]:
    """A JobSet's pod sets: one per replicatedJob, named after it (``pkg/controller/jobs/jobset`` ``PodSets``)."""
    return [(str(r.get("name")), r.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}))
            for r in (js.get("spec") or {}).get("replicatedJobs") or []]


def job_pod_sets(job: JSON) -> list[tuple[str, JSON]]:
    """A batch/v1 Job's one pod set, ``main`` (``pkg/controller/jobs/job`` ``PodSets``)."""
    return [("main", job.setdefault("spec", {}).setdefault("template", {}))]


def _info(pod_set: str) -> JSON:
    return {"labels": {POD_SET_LABEL: pod_set}, "annotations": {}, "nodeSelector": dict(FLAVOR["nodeLabels"]),
            "tolerations": copy.deepcopy(FLAVOR["tolerations"]), "schedulingGates": []}


def merge(template: JSON, info: JSON) -> None:
    """``podset.Merge``: ``info``'s labels, annotations and nodeSelector added to ``template``, its tolerations and
    schedulingGates appended (those already there are not repeated); in place. Raises ValueError on a clash (Kueue's
    "conflict for labels")."""
    meta, spec = template.setdefault("metadata", {}), template.setdefault("spec", {})
    for where, key in ((meta, "labels"), (meta, "annotations"), (spec, "nodeSelector")):
        have = where.get(key) or {}
        for k, v in info[key].items():
            if k in have and have[k] != v:
                raise ValueError(f"conflict for {key}: {k}")
        if have or info[key]:
            where[key] = {**have, **info[key]}
    for key in ("tolerations", "schedulingGates"):
        have = list(spec.get(key) or [])
        added = [x for x in info[key] if x not in have]
        if have or added:
            spec[key] = have + added


def restore(template: JSON, original: JSON) -> None:
    """``podset.RestorePodSpec``: ``template``'s labels, annotations, nodeSelector, tolerations and schedulingGates
    set to ``original``'s (the Workload's pod set), in place."""
    for part, keys in (("metadata", ("labels", "annotations")),
                       ("spec", ("nodeSelector", "tolerations", "schedulingGates"))):
        target, source = template.setdefault(part, {}), original.get(part) or {}
        for key in keys:
            if source.get(key):
                target[key] = copy.deepcopy(source[key])
            else:
                target.pop(key, None)


async def _write(api: FakeKubeAPI, api_version: str, plural: str, obj: JSON) -> str | None:
    meta = obj["metadata"]
    try:
        await api.admitted_update(api.resource_type(api_version, plural), meta.get("namespace"), meta["name"], obj,
                                  dry_run=False, user=USER)
    except ApiError as e:
        return f"Kueue's patch of {plural} {meta.get('namespace')}/{meta['name']} refused: {e.message}"
    return None


def _suspend(obj: JSON, path: tuple[str, ...], value: bool) -> None:
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


async def start(api: FakeKubeAPI, api_version: str, plural: str, ns: str, name: str, pod_sets: PodSets,
                admitted_count: int | None = None, *, suspend_path: tuple[str, ...] = ("spec", "suspend")) -> str | None:
    """Kueue admits the stored object's Workload and starts it (module docstring); the refusal's message, or None.
    ``admitted_count``: a partially admitted Job's count (``spec.parallelism``); ``suspend_path``: where the kind
    keeps ``suspend`` (a Kubeflow job's ``spec.runPolicy.suspend``)."""
    obj = api.get(api_version, plural, ns, name)
    if obj is None:
        return None
    _suspend(obj, suspend_path, False)
    if admitted_count is not None:
        obj["spec"]["parallelism"] = admitted_count
        if _completions_follow(obj):
            obj["spec"]["completions"] = admitted_count
    for pod_set, template in pod_sets(obj):
        merge(template, _info(pod_set))
    return await _write(api, api_version, plural, obj)


async def stop(api: FakeKubeAPI, api_version: str, plural: str, ns: str, name: str, pod_sets: PodSets,
               workload: JSON, *, job: bool = False, suspend_path: tuple[str, ...] = ("spec", "suspend")) -> str | None:
    """Kueue evicts the stored object (module docstring): suspended, its pod templates restored from ``workload``
    (the object as Kueue read it when it made the Workload); the refusal's message, or None. ``job``: a batch/v1
    Job (``Job.Stop``: suspended with the ``kueue.x-k8s.io/stopping`` annotation, then restored, a partially admitted
    one with its ``parallelism`` back, and the annotation removed, in a second patch)."""
    obj = api.get(api_version, plural, ns, name)
    if obj is None:
        return None
    _suspend(obj, suspend_path, True)
    if job:  # Job.Stop: suspended with the stopping annotation first, restored in a second patch
        obj["metadata"].setdefault("annotations", {})[STOPPING] = "true"
        refused = await _write(api, api_version, plural, obj)
        obj = api.get(api_version, plural, ns, name)
        if refused is not None or obj is None:
            return refused
        obj = copy.deepcopy(clear_start_time(api, obj))  # "Reset start time if necessary" (PatchStatus)
        obj["metadata"]["annotations"].pop(STOPPING, None)
        if MIN_PARALLELISM in (obj["metadata"].get("annotations") or {}):
            obj["spec"]["parallelism"] = (workload.get("spec") or {}).get("parallelism", 1)
            if _completions_follow(obj):
                obj["spec"]["completions"] = obj["spec"]["parallelism"]
    originals = dict(pod_sets(copy.deepcopy(workload)))
    for pod_set, template in pod_sets(obj):
        if pod_set in originals:
            if job:  # RestorePodSetsInfo: the managed labels as they are now (cleanLabels took them out of the pod set)
                have = (template.get("metadata") or {}).get("labels") or {}
                kept = originals[pod_set].setdefault("metadata", {}).setdefault("labels", {})
                kept.update({k: v for k, v in have.items() if k in JOB_MANAGED_LABELS})
            restore(template, originals[pod_set])
    return await _write(api, api_version, plural, obj)
