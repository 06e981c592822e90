"""kube-controller-manager's Deployment, Job and StatefulSet controllers for the fake API, and
:class:`FakeControlPlane`, the fake with them (each off unless asked for). Test code, not in admit's wheel: nothing
admit ships runs them (``admit serve --dev`` runs the fake API alone). Their writes go through admission with their
``userInfo``; a refused one is a Warning Event on the object synced and an entry of ``errors``. docs/fake-api.md
lists what each does and does not emulate.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any, TypeVar

from .kit import Controller
from admit.testing.fake_kube import ApiError, FakeKubeAPI
from admit.testing.fake_kube.objects import _GENERATE_CHARS, _now

__all__ = ["FakeControlPlane", "DeploymentController", "JobController", "StatefulSetController", "running",
           "ensure_running", "pod_template_hash", "CONTROLLER_USER", "JOB_CONTROLLER_USER", "JOB_INDEX",
           "JOB_TRACKING_FINALIZER"]

JSON = dict[str, Any]
_C = TypeVar("_C", bound=Controller)


class FakeControlPlane(FakeKubeAPI):
    """:class:`FakeKubeAPI` with kube-controller-manager's workload controllers, each off unless asked for.

    Args:
        deployment_controller, job_controller, statefulset_controller: run that controller, as :attr:`deployments`,
            :attr:`jobs`, :attr:`statefulsets`.
        workload_with_job: the ``WorkloadWithJob`` gate: the Job controller makes a Workload and PodGroup per Job
            (``JobController._scheduling_objects``).
        options: :class:`FakeKubeAPI`'s.
    """

    def __init__(self, *, deployment_controller: bool = False, job_controller: bool = False,
                 statefulset_controller: bool = False, workload_with_job: bool = False, **options: Any) -> None:
        super().__init__(**options)
        if deployment_controller:
            self.add_controller(DeploymentController(self))
        if job_controller:
            self.add_controller(JobController(self, workload_with_job=workload_with_job))
        if statefulset_controller:
            self.add_controller(StatefulSetController(self))

    @property
    def deployments(self) -> "DeploymentController | None":
        return running(self, DeploymentController)

    @property
    def jobs(self) -> "JobController | None":
        return running(self, JobController)

    @property
    def statefulsets(self) -> "StatefulSetController | None":
        return running(self, StatefulSetController)


def running(api: FakeKubeAPI, kind: type[_C]) -> _C | None:
    """The controller of class ``kind`` running on ``api`` (the first added), or None."""
    return next((c for c in api.controllers if isinstance(c, kind)), None)


def ensure_running(api: FakeKubeAPI, kind: type[_C]) -> _C:
    """The controller of class ``kind`` running on ``api``, added when none runs (for an operator emulation whose
    pods kube-controller-manager makes: JobSet's and the mpi-operator's Jobs, LWS's StatefulSets)."""
    found = running(api, kind)
    return found if found is not None else api.add_controller(kind(api))


CONTROLLER_USER = {"username": "system:serviceaccount:kube-system:deployment-controller",
                   "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}
JOB_CONTROLLER_USER = {**CONTROLLER_USER, "username": "system:serviceaccount:kube-system:job-controller"}


#: Annotations the Deployment controller does not copy onto ReplicaSets (``annotationsToSkip``).
ANNOTATIONS_TO_SKIP = frozenset({
    "kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/revision",
    "deployment.kubernetes.io/revision-history", "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas", "deprecated.deployment.rollback.to"})


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int as is, ``"N%"`` of ``total`` rounded up or down."""
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def rolling_bounds(spec: JSON) -> tuple[int, int]:
    """``(maxSurge, maxUnavailable)`` in pods for a Deployment ``spec`` (``ResolveFenceposts`` in
    ``util/deployment_util.go``: surge rounded up, unavailable down; both 0 make unavailable 1; 25% each when unset,
    as ``SetDefaults_Deployment``)."""
    replicas = spec.get("replicas", 1)
    rolling = ((spec.get("strategy") or {}).get("rollingUpdate")) or {}
    surge = scaled_value(rolling.get("maxSurge", "25%"), replicas, True)
    unavailable = scaled_value(rolling.get("maxUnavailable", "25%"), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def pod_template_hash(template: JSON) -> str:
    """A ``pod-template-hash`` value for ``template``: FNV-32a of the template, written with
    ``rand.SafeEncodeString`` (as ``controller.ComputeHash``; the bytes hashed differ: Go hashes a spew dump, this
    hashes canonical JSON, so values are stable here but not equal to a real cluster's)."""
    h = 0x811C9DC5
    for b in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return "".join(_GENERATE_CHARS[c % len(_GENERATE_CHARS)] for c in str(h).encode())


def controller_ref(api_version: str, kind: str, owner: JSON) -> JSON:
    """The controller ownerReference to ``owner`` (a stored object) that kube-controller-manager's controllers set
    (``metav1.NewControllerRef``: ``controller`` and ``blockOwnerDeletion`` true)."""
    meta = owner["metadata"]
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta["uid"], "controller": True,
            "blockOwnerDeletion": True}


def pod_from_template(owner: JSON, api_version: str, kind: str, meta: JSON, labels: JSON | None = None,
                      annotations: JSON | None = None) -> JSON:
    """``controller.GetPodFromTemplate`` (``pkg/controller/controller_utils.go``): a Pod of a copy of ``owner``'s
    ``spec.template``, with ``meta`` (its name or generateName, ...), the template's labels and annotations plus
    ``labels`` and ``annotations``, and :func:`controller_ref` to ``owner`` (of ``api_version`` and ``kind``)."""
    template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    pod_meta = {**meta, "namespace": owner["metadata"].get("namespace"),
                "labels": {**(tmeta.get("labels") or {}), **(labels or {})}}
    if tmeta.get("annotations") or annotations:
        pod_meta["annotations"] = {**(tmeta.get("annotations") or {}), **(annotations or {})}
    pod_meta["ownerReferences"] = [controller_ref(api_version, kind, owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}


class DeploymentController(Controller):
    """kubernetes ``pkg/controller/deployment`` (docs/fake-api.md: what it does, what it leaves out): the ReplicaSet
    ``<name>-<pod-template-hash>`` (``sync.go`` ``getNewReplicaSet``) with the annotations of
    ``util/deployment_util.go`` ``copyDeploymentAnnotationsToReplicaSet``; a new template is a rollout of
    ``strategy`` (``rolling.go`` ``NewRSNewReplicas``, ``reconcileOldReplicaSets``; ``recreate.go``), every pod
    available at once (no kubelet), each step a ReplicaSet write (``scaleReplicaSet``); a refused one is a Warning
    Event ``ReplicaSetCreateError`` (``sync.go``), not retried, and ``(namespace, deployment, message)`` in ``errors``.
    """

    what = "Deployment controller"
    component = "deployment-controller"
    watches = (("apps", "v1", "deployments"),)

    async def _sync(self, ns: str, name: str) -> None:
        dep = self._live("apps/v1", "deployments", ns, name)
        if dep is None:
            return
        uid = dep["metadata"]["uid"]
        owned = self._owned("apps/v1", "replicasets", ns, uid)
        spec = dep.get("spec") or {}
        replicas = spec.get("replicas", 1)
        template = copy.deepcopy(spec.get("template") or {})
        hash_ = pod_template_hash(template)
        rs_name = f"{name}-{hash_}"
        annotations = {k: v for k, v in ((dep["metadata"].get("annotations")) or {}).items()
                       if k not in ANNOTATIONS_TO_SKIP}
        surge, unavailable = rolling_bounds(spec)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        current = next((rs for rs in owned if rs["metadata"]["name"] == rs_name), None)
        old = sorted((rs for rs in owned if rs is not current), key=lambda rs: rs["metadata"].get("creationTimestamp"))

        def size(rs: JSON | None) -> int:
            return 0 if rs is None else (rs.get("spec") or {}).get("replicas", 0)

        try:
            if current is not None and any(current["metadata"].get("annotations", {}).get(k) != v
                                           for k, v in annotations.items()):
                current = await self._write(ns, current, annotations=annotations)
            if recreate and any(size(rs) for rs in old):
                for i, rs in enumerate(old):  # recreate.go: every old ReplicaSet to 0 before the new one
                    if size(rs):
                        old[i] = await self._write(ns, rs, replicas=0)
            for _ in range(4 * (replicas + 2)):  # each pass moves at least one pod; the bound is a safety net
                running_old = sum(size(rs) for rs in old)
                if current is None:
                    revision = 1 + max((int(rs["metadata"].get("annotations", {}).get(
                        "deployment.kubernetes.io/revision", "0") or 0) for rs in owned), default=0)
                    first = replicas if not running_old else max(0, min(replicas, replicas + surge - running_old))
                    current = await self._create(ns, dep, rs_name, hash_, template, annotations, revision, first,
                                                 replicas + surge)
                elif size(current) > replicas or (size(current) < replicas and not running_old):
                    current = await self._write(ns, current, replicas=replicas)  # a scale, not a rollout
                elif size(current) < replicas:
                    up = min(replicas + surge - running_old - size(current), replicas - size(current))
                    if up > 0:  # rolling.go reconcileNewReplicaSet
                        current = await self._write(ns, current, replicas=size(current) + up)
                running_old = sum(size(rs) for rs in old)
                down = running_old + size(current) - (replicas - unavailable)
                for i, rs in enumerate(old):  # reconcileOldReplicaSets: oldest first, every pod available
                    if down <= 0:
                        break
                    if size(rs):
                        cut = min(size(rs), down)
                        old[i] = await self._write(ns, rs, replicas=size(rs) - cut)
                        down -= cut
                if size(current) == replicas and not any(size(rs) for rs in old):
                    break
        except ApiError as e:
            message = f'Failed to create new replica set "{rs_name}": {e.message}' if current is None else \
                f'Failed to update replica set of deployment "{name}": {e.message}'
            self._refused(dep, "ReplicaSetCreateError", message)

    async def _create(self, ns: str, dep: JSON, rs_name: str, hash_: str, template: JSON, annotations: JSON,
                      revision: int, replicas: int, max_replicas: int) -> JSON:
        rss = self.api.resource_type("apps/v1", "replicasets")
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = hash_
        selector = copy.deepcopy((dep.get("spec") or {}).get("selector") or {})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = hash_
        spec = dep.get("spec") or {}
        annotations = {**annotations, "deployment.kubernetes.io/revision": str(revision),
                       "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                       "deployment.kubernetes.io/max-replicas": str(max_replicas)}
        owner = controller_ref("apps/v1", "Deployment", dep)
        body = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs_name, "namespace": ns, "labels": dict(template["metadata"]["labels"]),
                             "annotations": annotations, "ownerReferences": [owner]},
                "spec": {"replicas": replicas, "minReadySeconds": spec.get("minReadySeconds", 0), "selector": selector,
                         "template": template}}
        return await self.api.admitted_create(rss, ns, body, dry_run=False, user=CONTROLLER_USER)

    async def _write(self, ns: str, rs: JSON, *, replicas: int | None = None,
                     annotations: JSON | None = None) -> JSON:
        rss = self.api.resource_type("apps/v1", "replicasets")
        new = copy.deepcopy(rs)
        if replicas is not None:
            new.setdefault("spec", {})["replicas"] = replicas
        if annotations is not None:
            new["metadata"].setdefault("annotations", {}).update(annotations)
        return await self.api.admitted_update(rss, ns, rs["metadata"]["name"], new, dry_run=False,
                                              user=CONTROLLER_USER)


def _intervals(indexes: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: ``succeededIndexesToString`` (``pkg/controller/job/indexed_job_utils.go``)."""
    out: list[str] = []
    for i in indexes:
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _condition(type_: str, reason: str, message: str, now: str) -> JSON:
    return {"type": type_, "status": "True", "reason": reason, "message": message, "lastProbeTime": now,
            "lastTransitionTime": now}


JOB_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


class JobController(Controller):
    """kubernetes ``pkg/controller/job/job_controller.go`` for a Job that is not suspended (docs/fake-api.md: what
    it does, what it leaves out): the Pods of ``manageJob`` (``podControl.CreatePodsWithGenerateName``; an Indexed
    Job's index annotation, label and hostname as ``addCompletionIndexEnvVariables``/``podGenerator``) with the
    template's labels (kube-apiserver's ``fake_defaults.job_selector_and_labels``), the
    ``batch.kubernetes.io/job-tracking`` finalizer and a controller ownerReference; a refused one is a Warning Event
    ``FailedCreate`` and ``(namespace, job, message)`` in ``errors``, retried when one of the Job's Pods changes
    (``updatePod``). A Pod a test finishes (``status.phase``, as a kubelet would) is counted and replaced as
    ``syncJob`` and ``manageJob`` do (``wantActive``, ``backoffLimit``, the ``Complete`` and ``Failed`` conditions).
    """

    what = "Job controller"
    component = "job-controller"
    watches = (("batch", "v1", "jobs"),)
    pod_owner, pod_updates = "Job", True  # updatePod / deletePod enqueue the Job: a refused Pod is retried then

    def __init__(self, api: "FakeKubeAPI", *, workload_with_job: bool = False) -> None:
        super().__init__(api)
        #: The ``WorkloadWithJob`` gate: a Workload and PodGroup per Job (:meth:`_scheduling_objects`).
        self.workload_with_job = workload_with_job

    def workload_with_job_version(self) -> str | None:
        """The served Workload API version it writes with ``workload_with_job`` (the newest served: ``v1``,
        ``v1beta1``, ``v1alpha3``, then ``v1alpha2``), or None (gate off, or nothing served)."""
        if not self.workload_with_job:
            return None
        served = {rt.version for rt in self.api.resources if rt.group == "scheduling.k8s.io"
                  and rt.plural == "podgroups"}
        return next((v for v in ("v1", "v1beta1", "v1alpha3", "v1alpha2") if v in served), None)

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        pods = api.resource_type("v1", "pods")
        job = self._live("batch/v1", "jobs", ns, name)
        spec = (job or {}).get("spec") or {}
        if job is None or spec.get("managedBy") not in (None, "kubernetes.io/job-controller"):
            return  # another controller's (spec.managedBy, JobManagedBy: KEP-4368, e.g. MultiKueue)
        pods_of_job = self._owned("v1", "pods", ns, job["metadata"]["uid"])
        phase = lambda p: (p.get("status") or {}).get("phase")  # noqa: E731
        if spec.get("suspend"):  # manageJob: "Deleting all active pods in suspended job"
            for pod in pods_of_job:
                if phase(pod) not in ("Succeeded", "Failed"):
                    api.delete_object("v1", "pods", ns, pod["metadata"]["name"])
            return
        index_of = lambda p: (p["metadata"].get("annotations") or {}).get(JOB_INDEX)  # noqa: E731
        owned = [p for p in pods_of_job if not p["metadata"].get("deletionTimestamp")
                 and phase(p) not in ("Succeeded", "Failed")]
        group = self._scheduling_objects(job, has_pods=bool(pods_of_job))
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        indexed = spec.get("completionMode") == "Indexed"
        done = [p for p in pods_of_job if phase(p) == "Succeeded"]
        done_indexes = sorted({int(i) for i in map(index_of, done) if isinstance(i, str) and i.isdigit()})
        succeeded = len(done_indexes) if indexed else len(done)
        failed = sum(1 for p in pods_of_job if phase(p) == "Failed")
        finished = self._write_status(ns, name, job, len(owned), succeeded, failed, done_indexes if indexed else None)
        if finished:
            return
        if completions is None:  # manageJob: wantActive
            wanted = len(owned) if succeeded > 0 else parallelism
        else:
            wanted = max(0, min(parallelism, completions - succeeded))
        taken = {index_of(p) for p in owned} | {str(i) for i in done_indexes}
        free = iter(str(i) for i in range(completions or wanted) if str(i) not in taken)
        for _ in range(wanted - len(owned)):
            index = next(free, None) if indexed else None
            if indexed and index is None:
                break
            try:
                await api.admitted_create(pods, ns, self._pod(job, index, group), dry_run=False,
                                          user=JOB_CONTROLLER_USER)
            except ApiError as e:
                self._refused(job, "FailedCreate", f"Error creating: {e.message}")
                return

    def _scheduling_objects(self, job: JSON, has_pods: bool) -> str | None:
        """``WorkloadWithJob`` (``workload_with_job=True``, the Workload API served): the Job controller's own
        Workload and PodGroup for ``job`` as kubernetes ``pkg/controller/job/job_scheduling_manager.go`` makes them
        (docs/fake-api.md); returns the PodGroup its pods name, or None. 1.37 (``v1alpha3``, ``v1beta1``, ``v1``;
        ``shouldManageWorkloadForJob``, ``buildWorkloadItem``): a Job whose template names no ``schedulingGroup`` and
        whose controller owner is none or a CronJob; policy ``spec.scheduling.schedulingPolicy`` (a gang without
        ``minCount`` gets ``parallelism``, ``defaultMinCountForJob``), else Basic; template ``<job>-pgt-0``; the
        PodGroup's ``spec.workloadRef``. 1.36 (``v1alpha2``, ``isGangSchedulingEligible``): only an Indexed Job with
        ``completions == parallelism > 1``, a gang of ``parallelism``, template ``<job>-worker-0``,
        ``spec.podGroupTemplateRef``. Both only for a Job with no pods yet (``isNewJob``), found by name afterwards;
        names as ``computeWorkloadName`` / ``computePodGroupName`` with a stand-in hash (not fnv32a of the uid). Not
        emulated: a parent's delegated PodGroup (``scheduling.k8s.io/group-template-name``), the managed-by annotation
        (``batch.JobWorkloadManagedByAnnotation``, its key not in the sources read), ``syncGangMinCount``.
        UNCONFIRMED: that the pods name the PodGroup in ``spec.schedulingGroup`` (the pod-creation code was not read).
        """
        api = self.api
        version = self.workload_with_job_version()
        spec = job.get("spec") or {}
        template_spec = (spec.get("template") or {}).get("spec") or {}
        if version is None or template_spec.get("schedulingGroup") is not None:
            return None
        meta = job["metadata"]
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if owner is not None and not (owner.get("apiVersion", "").startswith("batch/") and owner.get("kind") == "CronJob"):
            return None
        parallelism = spec.get("parallelism", 1)
        if version == "v1alpha2":
            if not (parallelism > 1 and spec.get("completionMode") == "Indexed"
                    and spec.get("completions") == parallelism):
                return None
            template_name = f"{meta['name']}-worker-0"
            policy: JSON = {"gang": {"minCount": parallelism}}
        else:
            template_name = f"{meta['name']}-pgt-0"
            policy = copy.deepcopy(((spec.get("scheduling") or {}).get("schedulingPolicy")) or {"basic": {}})
            if isinstance(policy.get("gang"), dict) and policy["gang"].get("minCount") is None:
                policy["gang"]["minCount"] = max(1, parallelism)
        stand_in = hashlib.sha256(meta["uid"].encode()).hexdigest()[:10]
        workload_name = f"{meta['name'][:242]}-{stand_in}"
        pg_name = f"{workload_name}-{template_name}-{hashlib.sha256((workload_name + template_name).encode()).hexdigest()[:10]}"
        api_version = f"scheduling.k8s.io/{version}"
        ns = meta.get("namespace")
        job_ref = controller_ref("batch/v1", "Job", job)
        workload = api.get(api_version, "workloads", ns, workload_name)
        if workload is None:
            if has_pods:
                return None
            workload = api.put({"apiVersion": api_version, "kind": "Workload",
                                "metadata": {"name": workload_name, "namespace": ns, "ownerReferences": [job_ref]},
                                "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": meta["name"]},
                                         "podGroupTemplates": [{"name": template_name, "schedulingPolicy": policy}]}})
        if api.get(api_version, "podgroups", ns, pg_name) is None:
            if has_pods:
                return None
            ref: JSON = ({"podGroupTemplateRef": {"workload": {"workloadName": workload_name,
                                                               "podGroupTemplateName": template_name}}}
                         if version == "v1alpha2" else
                         {"workloadRef": {"workloadName": workload_name, "templateName": template_name}})
            api.put({"apiVersion": api_version, "kind": "PodGroup",
                     "metadata": {"name": pg_name, "namespace": ns, "ownerReferences": [
                         job_ref, {"apiVersion": api_version, "kind": "Workload", "name": workload_name,
                                   "uid": workload["metadata"]["uid"]}]},
                     "spec": {**ref, "schedulingPolicy": copy.deepcopy(policy)}})
        return pg_name

    def _write_status(self, ns: str, name: str, job: JSON, active: int, succeeded: int, failed: int,
                      indexes: list[int] | None) -> bool:
        """Write the Job's ``status`` as ``syncJob`` does (``startTime`` when it first runs, the counts,
        ``completedIndexes``, the terminal conditions) when it changed; True when the Job is finished (no pod is created any more)."""
        spec = job.get("spec") or {}
        completions = spec.get("completions")
        status: JSON = dict(job.get("status") or {})
        conditions = list(status.get("conditions") or [])
        finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)
        status.update(active=active, succeeded=succeeded, failed=failed)
        if not status.get("startTime") and not spec.get("suspend"):
            # "Job first start. Set StartTime only if the job is not in the suspended state." (syncJob); never
            # cleared on a suspend, so the template stays immutable (job_template_errors) until a client clears it
            status["startTime"] = _now()
        for key in ("active", "succeeded", "failed"):
            if not status[key]:
                del status[key]  # omitempty in batch/v1 JobStatus
        if indexes is not None:
            status["completedIndexes"] = _intervals(indexes)
        if not finished:
            now = _now()
            if failed > spec.get("backoffLimit", 6):
                conditions += [_condition(t, "BackoffLimitExceeded", "Job has reached the specified backoff limit", now)
                               for t in ("FailureTarget", "Failed")]
                finished = True
            elif (completions is not None and succeeded >= completions) or (
                    completions is None and succeeded > 0 and active == 0):
                conditions += [_condition(t, "CompletionsReached", "Reached expected number of succeeded pods", now)
                               for t in ("SuccessCriteriaMet", "Complete")]
                status["completionTime"] = now
                finished = True
            if conditions:
                status["conditions"] = conditions
        if status != (job.get("status") or {}):
            self.api._update(self.api.resource_type("batch/v1", "jobs"), ns, name, job,  # noqa: SLF001
                             {**job, "status": copy.deepcopy(status)}, subresource="status", dry_run=False,
                             require_rv=False)
        return finished

    @staticmethod
    def _pod(job: JSON, index: str | None, group: str | None = None) -> JSON:
        name = job["metadata"]["name"]
        indexed = {} if index is None else {JOB_INDEX: index}
        pod = pod_from_template(job, "batch/v1", "Job", {"generateName": f"{name}-" if index is None else
                                                         f"{name}-{index}-", "finalizers": [JOB_TRACKING_FINALIZER]},
                                indexed, indexed)
        if index is not None:
            pod["spec"].setdefault("hostname", f"{name}-{index}")
        if group is not None:  # WorkloadWithJob (_scheduling_objects; unconfirmed)
            pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        return pod


STS_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
STS_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
STS_REVISION_LABEL = "controller-revision-hash"
STATEFULSET_CONTROLLER_USER = {**CONTROLLER_USER,
                               "username": "system:serviceaccount:kube-system:statefulset-controller"}


class StatefulSetController(Controller):
    """kubernetes ``pkg/controller/statefulset`` (docs/fake-api.md: what it does, what it leaves out): the Pods
    ``<name>-<ordinal>`` from ``spec.ordinals.start`` (``stateful_set_control.go`` ``updateStatefulSet``,
    ``getStartOrdinal``), every missing one at once under ``Parallel``, only the first under ``OrderedReady``
    (``allowsBurst``, ``isRunningAndReady``: no kubelet makes a Pod Ready), each from the template as
    ``newStatefulSetPod``, ``initIdentity`` and ``getPodRevision`` make it (the revision hash is
    :func:`pod_template_hash`, not Go's). A refused CREATE is a Warning Event ``FailedCreate``
    (``stateful_pod_control.go`` ``recordPodEvent``) and an entry of ``errors``, not retried. A scale down deletes the
    Pods above the count, highest ordinal first (``processCondemned``).
    """

    what = "StatefulSet controller"
    component = "statefulset-controller"
    watches = (("apps", "v1", "statefulsets"),)
    pod_owner = "StatefulSet"  # a deleted Pod is re-created (updateStatefulSet)

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        sts = self._live("apps/v1", "statefulsets", ns, name)
        if sts is None:
            return
        spec = sts.get("spec") or {}
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        replicas = int(spec.get("replicas", 1))
        parallel = spec.get("podManagementPolicy") == "Parallel"
        pods = api.resource_type("v1", "pods")
        bucket = api._bucket(pods)  # noqa: SLF001
        revision = f"{name}-{pod_template_hash(spec.get('template') or {})}"
        ordinals = {int(p["metadata"]["labels"][STS_POD_INDEX_LABEL]): p["metadata"]["name"]
                    for p in self._owned("v1", "pods", ns, sts["metadata"]["uid"])}
        for ordinal in sorted(ordinals, reverse=True):  # processCondemned: above the replicas, highest first
            if not start <= ordinal < start + replicas:
                api.delete_object("v1", "pods", ns, ordinals[ordinal])
        for ordinal in range(start, start + replicas):
            pod_name = f"{name}-{ordinal}"
            if (ns, pod_name) in bucket:
                continue
            if not parallel and ordinal > start:
                return  # OrderedReady: the previous ordinal is never Running and Ready without a kubelet
            try:
                await api.admitted_create(pods, ns, self._pod(sts, pod_name, ordinal, revision), dry_run=False,
                                          user=STATEFULSET_CONTROLLER_USER)
            except ApiError as e:
                self._refused(sts, "FailedCreate", f"create Pod {pod_name} in StatefulSet {name} failed error: "
                                                   f"{e.message}")
                return

    @staticmethod
    def _pod(sts: JSON, pod_name: str, ordinal: int, revision: str) -> JSON:
        pod = pod_from_template(sts, "apps/v1", "StatefulSet", {"name": pod_name}, {
            STS_POD_NAME_LABEL: pod_name, STS_POD_INDEX_LABEL: str(ordinal), STS_REVISION_LABEL: revision})
        pod["spec"]["hostname"] = pod_name
        if (sts.get("spec") or {}).get("serviceName"):
            pod["spec"]["subdomain"] = sts["spec"]["serviceName"]
        return pod
