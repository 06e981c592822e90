"""JobSet, emulated from kubernetes-sigs/jobset (read at ``08dfbdf``, 2026-08-18; releases up to v0.12).

What the JobSet controller makes from a JobSet, every write through the fake's admission chain as the
``jobset-controller-manager`` service account:

- **Jobs** ``<jobset>-<replicatedJob>-<index>`` (``pkg/util/placement/placement.go`` ``GenJobName``), ``replicas``
  of each replicatedJob (``pkg/controllers/jobset_controller.go`` ``reconcileReplicatedJobs`` ->
  ``constructJobsFromTemplate`` -> ``constructJob``): the replicatedJob's Job template (labels, annotations, spec)
  plus, on the Job and on its pod template, the labels and annotations of ``labelAndAnnotateObject``
  (``jobset.sigs.k8s.io/jobset-name``, ``jobset-uid``, ``replicatedjob-name``, ``restart-attempt`` =
  ``status.restarts``, ``replicatedjob-replicas``, ``global-replicas``, ``job-index``, ``job-key`` (sha1 of
  ``<namespace>/<job>``), ``job-global-index``, ``group-name``, ``group-replicas``, ``job-group-index``) and, as an
  annotation only, ``alpha.jobset.sigs.k8s.io/exclusive-topology`` (and ``node-selector``) from the JobSet or the
  replicatedJob's template; ``spec.suspend`` = the JobSet's; ``subdomain`` = the JobSet's name with DNS hostnames;
  a controller ownerReference to the JobSet. The JobSet's own labels and annotations are **not** copied (so the
  Jobs do not reach admit's workload webhook unless their template carries admit's keys). A replicatedJob with
  ``dependsOn`` is created only when its dependencies are Ready or Complete, which without a kubelet never happens
  here (``depends_on.go``); ``startupPolicyOrder: InOrder`` likewise creates only the first replicatedJob.
- Its **defaulting webhook** ``mjobset.kb.io`` (``pkg/webhooks/jobset_webhook.go`` ``Default``, CREATE):
  ``successPolicy: {operator: All}``, ``startupPolicy: {startupPolicyOrder: AnyOrder}``, ``completionMode:
  Indexed`` and ``restartPolicy: OnFailure`` on every Job template, ``network.enableDNSHostnames`` and
  ``publishNotReadyAddresses`` true.
- Its **validating webhook** ``vjobset.kb.io`` (``ValidateUpdate``): ``spec.replicatedJobs`` and ``spec.managedBy``
  are immutable (``apivalidation.ValidateImmutableField``), except, while the JobSet is suspended before or after
  the update, the pod templates' labels, annotations, nodeSelector, tolerations and schedulingGates (for Kueue).
- Its **pod webhooks** ``mpod.kb.io`` / ``vpod.kb.io`` (``pkg/webhooks/pod_webhook.go``) for pods with the
  ``jobset-name`` annotation and ``exclusive-topology`` (not ``node-selector``): the leader (completion index 0)
  gets the exclusive pod (anti-)affinities; a follower gets a nodeSelector for its leader's topology once the leader
  is scheduled, and is **refused** until then ("leader pod not yet scheduled, not creating follower pod. this is an
  expected, transient error"; "follower pod node selector not set"). The Job controller retries the follower when
  the leader's pod changes. The topology value is the leader's ``spec.nodeName`` (the fake has no Nodes).

Webhook configurations ``jobset-mutating-webhook-configuration`` / ``jobset-validating-webhook-configuration``
(kustomize ``namePrefix: jobset-``), ``failurePolicy: Fail``, no reinvocation. Not emulated: the headless Service,
success and failure policies (no restarts: ``failurePolicyRecreateAll``), coordinator labels, volume claim
policies, elastic JobSets, ``managedBy`` other controllers, the status.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from typing import Any

from .kcm import JobController, ensure_running
from .kit import Controller, clear_start_time, put_event
from .gitops import reapply_write
from .later import Emulated, LaterWrite
from admit.testing.fake_kube import AdmissionChain, ApiError, FakeKubeAPI, allowed, denied, patched

__all__ = ["JobSetOperator", "install", "JOBSET_NAME", "REPLICATED_JOB", "JOB_INDEX", "RESTART_ATTEMPT", "EXCLUSIVE",
           "NODE_SELECTOR", "JOB_KEY", "USER"]

JSON = dict[str, Any]
GROUP = "jobset.x-k8s.io"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
GROUP_NAME = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX = "jobset.sigs.k8s.io/job-group-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR = "alpha.jobset.sigs.k8s.io/node-selector"
PRIORITY = "jobset.sigs.k8s.io/priority"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MUTATING_CONFIGURATION = "jobset-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "jobset-validating-webhook-configuration"
USER = {"username": "system:serviceaccount:jobset-system:jobset-controller-manager",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:jobset-system", "system:authenticated"]}


def _group_name(rjob: JSON) -> str:
    return str(rjob.get("groupName") or "default")


def _label_and_annotate(meta: JSON, js: JSON, rjob: JSON, index: int) -> None:
    """``labelAndAnnotateObject`` on a Job's or its pod template's ``metadata`` (in place)."""
    rjobs = (js.get("spec") or {}).get("replicatedJobs") or []
    name, ns = js["metadata"]["name"], js["metadata"]["namespace"]
    job_name = f"{name}-{rjob['name']}-{index}"
    global_index = sum(int(r.get("replicas", 1)) for r in rjobs[:next(i for i, r in enumerate(rjobs)
                                                                    if r["name"] == rjob["name"])]) + index
    group = _group_name(rjob)
    in_group = [r for r in rjobs if _group_name(r) == group]
    group_index = sum(int(r.get("replicas", 1)) for r in in_group[:next(i for i, r in enumerate(in_group)
                                                                       if r["name"] == rjob["name"])]) + index
    keys = {
        JOBSET_NAME: name, JOBSET_UID: js["metadata"]["uid"], REPLICATED_JOB: rjob["name"],
        RESTART_ATTEMPT: str(int((js.get("status") or {}).get("restarts", 0))),
        REPLICATED_JOB_REPLICAS: str(rjob.get("replicas", 1)),
        GLOBAL_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in rjobs)), JOB_INDEX: str(index),
        JOB_KEY: hashlib.sha1(f"{ns}/{job_name}".encode()).hexdigest(), JOB_GLOBAL_INDEX: str(global_index),
        GROUP_NAME: group, GROUP_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in in_group)),
        JOB_GROUP_INDEX: str(group_index),
    }
    annotations = {**(meta.get("annotations") or {}), **keys}
    js_annotations = js["metadata"].get("annotations") or {}
    template_annotations = ((rjob.get("template") or {}).get("metadata") or {}).get("annotations") or {}
    for source in (js_annotations, template_annotations):
        if EXCLUSIVE in source:
            annotations[EXCLUSIVE] = source[EXCLUSIVE]
            if NODE_SELECTOR in source:
                annotations[NODE_SELECTOR] = source[NODE_SELECTOR]
    meta["labels"] = {**(meta.get("labels") or {}), **keys}
    meta["annotations"] = annotations


def construct_job(js: JSON, rjob: JSON, index: int) -> JSON:
    """``constructJob``: the Job for replica ``index`` of ``rjob`` (a stored JobSet: ``metadata.uid`` set)."""
    template = copy.deepcopy(rjob.get("template") or {})
    tmeta = template.get("metadata") or {}
    name = js["metadata"]["name"]
    meta: JSON = {"name": f"{name}-{rjob['name']}-{index}", "namespace": js["metadata"]["namespace"],
                  "labels": dict(tmeta.get("labels") or {}), "annotations": dict(tmeta.get("annotations") or {}),
                  "ownerReferences": [{"apiVersion": f"{GROUP}/v1alpha2", "kind": "JobSet", "name": name,
                                       "uid": js["metadata"]["uid"], "controller": True,
                                       "blockOwnerDeletion": True}]}
    spec = template.get("spec") or {}
    pod_template = spec.setdefault("template", {})
    _label_and_annotate(meta, js, rjob, index)
    _label_and_annotate(pod_template.setdefault("metadata", {}), js, rjob, index)
    if ((js.get("spec") or {}).get("network") or {}).get("enableDNSHostnames", True):
        pod_template.setdefault("spec", {})["subdomain"] = ((js.get("spec") or {}).get("network") or {}).get(
            "subdomain") or name
    spec["suspend"] = bool((js.get("spec") or {}).get("suspend"))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def _attempt(job: JSON) -> int:
    """The Job's ``jobset.sigs.k8s.io/restart-attempt`` label (``getChildJobs``; a bad value reads 0 here)."""
    value = (job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT, "0")
    return int(value) if str(value).isdigit() else 0


def _job_condition(job: JSON) -> str | None:
    """``"Failed"`` or ``"Complete"`` when the Job has that condition true (``JobFinished``), else None."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Failed", "Complete") and c.get("status") == "True":
            return str(c["type"])
    return None


def _merge_maps(old: JSON | None, new: JSON | None) -> JSON | None:
    """``collections.MergeMaps``: ``new``'s keys win."""
    merged = {**(old or {}), **(new or {})}
    return merged or None


def _merge_slices(old: list | None, new: list | None) -> list | None:
    """``collections.MergeSlices``: the items of both, each once."""
    merged = list(old or [])
    merged += [x for x in new or [] if x not in merged]
    return merged or None


def resumed_job(job: JSON, js: JSON) -> JSON:
    """``resumeJob``: the Job unsuspended, its pod template's labels, annotations, nodeSelector, tolerations and
    schedulingGates merged with its replicatedJob's ("Certain fields on the Job pod template may be mutated while a
    JobSet is suspended, for integration with Kueue")."""
    new = copy.deepcopy(job)
    rjob = next((r for r in (js.get("spec") or {}).get("replicatedJobs") or []
                 if r.get("name") == (job["metadata"].get("labels") or {}).get(REPLICATED_JOB)), None)
    if rjob is not None:
        want = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
        tmpl = new["spec"].setdefault("template", {})
        meta, spec = tmpl.setdefault("metadata", {}), tmpl.setdefault("spec", {})
        for where, source, key, merge in ((meta, want.get("metadata") or {}, "labels", _merge_maps),
                                          (meta, want.get("metadata") or {}, "annotations", _merge_maps),
                                          (spec, want.get("spec") or {}, "nodeSelector", _merge_maps),
                                          (spec, want.get("spec") or {}, "tolerations", _merge_slices),
                                          (spec, want.get("spec") or {}, "schedulingGates", _merge_slices)):
            value = merge(where.get(key), source.get(key))
            if value is None:
                where.pop(key, None)
            else:
                where[key] = value
    new["spec"]["suspend"] = False
    return new


class JobSetOperator(Controller):
    """The JobSet controller (module docstring), syncing per JobSet (``JobSetReconciler.reconcile``, v0.12.0): the
    Jobs of a previous restart attempt deleted, the failure policy applied, missing Jobs created, the Jobs suspended
    or resumed with the JobSet.

    Attributes:
        errors: ``(namespace, jobset, message)`` of every refused Job write (also a Warning Event
            ``JobCreationFailed`` on the JobSet).
    """

    what = "JobSet controller"
    watches = ((GROUP, "v1alpha2", "jobsets"),)

    def observe(self, rt: Any, ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """A JobSet written, or one of its Jobs written or deleted (``Owns(&batchv1.Job{})``)."""
        if rt.key == ("batch", "v1", "jobs"):
            for ref in (obj or old or {}).get("metadata", {}).get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "JobSet":
                    self.changed(ns, ref["name"])
            return
        super().observe(rt, ns, name, obj, old)

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        js = self._live(f"{GROUP}/v1alpha2", "jobsets", ns, name)
        if js is None:
            return
        status = js.get("status") or {}
        if status.get("terminalState"):  # jobSetFinished: its active Jobs deleted
            for job in self._owned("batch/v1", "jobs", ns, js["metadata"]["uid"]):
                if _job_condition(job) is None:
                    api.delete_object("batch/v1", "jobs", ns, job["metadata"]["name"])
            return
        restarts = int(status.get("restarts") or 0)
        owned = self._owned("batch/v1", "jobs", ns, js["metadata"]["uid"])
        previous = [j for j in owned if _attempt(j) < restarts]
        current = [j for j in owned if _attempt(j) >= restarts]
        for job in previous:  # deleteJobs (foreground: the fake removes the Job at once, its Pods by GC)
            api.delete_object("batch/v1", "jobs", ns, job["metadata"]["name"])
        if any(_job_condition(j) == "Failed" for j in current):
            self._failure_policy(js)
            return
        blocking = ((js.get("spec") or {}).get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
        if not (previous and blocking):  # constructJobsFromTemplate waits for the old attempt under BlockingRecreate
            if not await self._create_jobs(js, {j["metadata"]["name"] for j in owned}):
                return
        await self._suspend_or_resume(js, [j for j in current if _job_condition(j) is None])

    async def _create_jobs(self, js: JSON, existing: set[str]) -> bool:
        """``reconcileReplicatedJobs``: each missing Job created (``shouldCreateJob``: no Job of that name, of any
        attempt); False when a create was refused."""
        api, ns = self.api, js["metadata"]["namespace"]
        spec = js.get("spec") or {}
        jobs = api.resource_type("batch/v1", "jobs")
        rjobs = spec.get("replicatedJobs") or []
        if (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder":
            rjobs = rjobs[:1]  # the next waits for this one to be ready (startup_policy.go)
        for rjob in rjobs:
            if rjob.get("dependsOn"):
                continue  # depends_on.go: created once the dependencies are Ready/Complete (never, without kubelet)
            for index in range(int(rjob.get("replicas", 1))):
                job = construct_job(js, rjob, index)
                if job["metadata"]["name"] in existing:
                    continue
                try:
                    await api.admitted_create(jobs, ns, job, dry_run=False, user=USER)
                except ApiError as e:
                    self._record(js, f"job {job['metadata']['name']} creation failed with error: {e.message}")
                    return False
        return True

    async def _suspend_or_resume(self, js: JSON, active: list[JSON]) -> None:
        """``suspendJobs`` (every active Job suspended) or ``resumeJobsIfNecessary`` (each suspended Job of a
        replicatedJob whose dependencies are met resumed by :func:`resumed_job`), as Job UPDATEs."""
        api, ns = self.api, js["metadata"]["namespace"]
        jobs = api.resource_type("batch/v1", "jobs")
        suspended = bool((js.get("spec") or {}).get("suspend"))
        for job in sorted(active, key=lambda j: j["metadata"]["name"]):
            if bool((job.get("spec") or {}).get("suspend")) == suspended:
                continue
            if suspended:
                new = copy.deepcopy(job)
                new["spec"]["suspend"] = True
            else:  # resumeJob: the Job's startTime cleared first ("Kubernetes validates that a job template is
                # immutable so if the job has started i.e., startTime != nil), we must set it to nil first")
                new = resumed_job(clear_start_time(api, job), js)
            try:
                await api.admitted_update(jobs, ns, job["metadata"]["name"], new, dry_run=False, user=USER)
            except ApiError as e:
                self._record(js, f"{'suspending' if suspended else 'resuming'} job {job['metadata']['name']}: "
                                 f"{e.message}")
                return

    def _failure_policy(self, js: JSON) -> None:
        """``executeFailurePolicy`` with no rules (``RestartJobSet``): below ``maxRestarts`` a restart
        (``failurePolicyRecreateAll``: ``status.restarts`` and ``restartsCountTowardsMax`` + 1, so every Job of the
        attempt is deleted and re-created), else the JobSet fails (``terminalState: Failed``)."""
        status = dict(js.get("status") or {})
        max_restarts = int(((js.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts") or 0)
        if int(status.get("restartsCountTowardsMax") or 0) < max_restarts:
            status["restarts"] = int(status.get("restarts") or 0) + 1
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax") or 0) + 1
        else:
            status["terminalState"] = "Failed"
        new = copy.deepcopy(js)
        new["status"] = status
        rt = self.api.resource_type(f"{GROUP}/v1alpha2", "jobsets")
        self.api._update(rt, js["metadata"]["namespace"], js["metadata"]["name"], js, new,  # noqa: SLF001
                         subresource="status", dry_run=False, require_rv=False)

    def _record(self, js: JSON, message: str) -> None:
        self.errors.append((js["metadata"]["namespace"], js["metadata"]["name"], message))
        put_event(self.api, js, "Warning", "JobCreationFailed", message, "jobset-controller-manager")


async def default_jobset(request: JSON) -> JSON:
    """``mjobset.kb.io``: ``jobSetWebhook.Default``."""
    js = copy.deepcopy(request["object"])
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return patched(request, js)


_KUEUE_MUTABLE_META = ("annotations", "labels")
_KUEUE_MUTABLE_SPEC = ("nodeSelector", "tolerations", "schedulingGates")


async def validate_jobset(request: JSON) -> JSON:
    """``vjobset.kb.io``: ``jobSetWebhook.ValidateUpdate``'s immutability (CREATE is allowed here)."""
    old, new = request.get("oldObject"), request.get("object")
    if request["operation"] != "UPDATE" or not isinstance(old, dict) or not isinstance(new, dict):
        return allowed(request)
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    munged = copy.deepcopy(new_spec.get("replicatedJobs") or [])
    if old_spec.get("suspend") or new_spec.get("suspend"):
        olds = {r.get("name"): r for r in old_spec.get("replicatedJobs") or []}
        for rjob in munged:
            before = olds.get(rjob.get("name"))
            if before is None:
                continue
            tmpl = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
            old_tmpl = ((before.get("template") or {}).get("spec") or {}).get("template") or {}
            for key in _KUEUE_MUTABLE_META:
                tmpl.setdefault("metadata", {})[key] = (old_tmpl.get("metadata") or {}).get(key)
                if tmpl["metadata"][key] is None:
                    del tmpl["metadata"][key]
            for key in _KUEUE_MUTABLE_SPEC:
                value = (old_tmpl.get("spec") or {}).get(key)
                tmpl.setdefault("spec", {}).pop(key, None)
                if value is not None:
                    tmpl["spec"][key] = value
    errors = []
    if munged != (old_spec.get("replicatedJobs") or []):
        errors.append(f"spec.replicatedJobs: Invalid value: {json.dumps(munged)}: field is immutable")
    if new_spec.get("managedBy") != old_spec.get("managedBy"):
        errors.append(f"spec.managedBy: Invalid value: {json.dumps(new_spec.get('managedBy'))}: field is immutable")
    if errors:
        name = (new.get("metadata") or {}).get("name")
        return denied(request, f'JobSet.jobset.x-k8s.io "{name}" is invalid: ' + ", ".join(errors),
                      code=422, reason="Invalid")
    return allowed(request)


class _PodWebhooks:
    """``mpod.kb.io`` / ``vpod.kb.io`` (module docstring); they read the leader pod from the fake's store."""

    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api

    def _leader(self, pod: JSON) -> JSON | None:
        labels = pod["metadata"].get("labels") or {}
        ns = pod["metadata"].get("namespace") or ""
        for other in self.api.list_objects("v1", "pods", ns):  # the webhook's client.List of Pods
            olabels = other["metadata"].get("labels") or {}
            if (other["metadata"].get("deletionTimestamp") or (other.get("status") or {}).get("phase") in
                    ("Failed", "Succeeded")):
                continue
            if all(olabels.get(k) == labels.get(k) for k in (JOBSET_NAME, REPLICATED_JOB, JOB_INDEX)) and \
                    (other["metadata"].get("annotations") or {}).get(COMPLETION_INDEX) == "0":
                return other
        return None

    async def mutate(self, request: JSON) -> JSON:
        pod = copy.deepcopy(request["object"])
        annotations = pod["metadata"].get("annotations") or {}
        if JOBSET_NAME not in annotations or NODE_SELECTOR in annotations:
            return patched(request, request["object"])
        if pod.get("spec", {}).get("priority") is not None:
            pod["metadata"].setdefault("labels", {})[PRIORITY] = str(pod["spec"]["priority"])
        topology = annotations.get(EXCLUSIVE)
        if topology is None:
            return patched(request, pod)
        labels = pod["metadata"].get("labels") or {}
        if annotations.get(COMPLETION_INDEX) == "0":
            affinity = pod["spec"].setdefault("affinity", {})
            affinity.setdefault("podAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", []) \
                .append({"labelSelector": {"matchExpressions": [{"key": JOB_KEY, "operator": "In",
                                                                 "values": [labels.get(JOB_KEY)]}]},
                         "topologyKey": topology, "namespaceSelector": {}})
            affinity.setdefault("podAntiAffinity", {}).setdefault(
                "requiredDuringSchedulingIgnoredDuringExecution", []).append(
                {"labelSelector": {"matchExpressions": [
                    {"key": JOB_KEY, "operator": "Exists"},
                    {"key": JOB_KEY, "operator": "NotIn", "values": [labels.get(JOB_KEY)]},
                    {"key": PRIORITY, "operator": "In", "values": [labels.get(PRIORITY, "")]}]},
                 "topologyKey": topology, "namespaceSelector": {}})
        else:
            leader = self._leader(pod)
            node = (leader or {}).get("spec", {}).get("nodeName")
            if node:
                pod["spec"].setdefault("nodeSelector", {})[topology] = node
        return patched(request, pod)

    async def validate(self, request: JSON) -> JSON:
        pod = request["object"]
        annotations = pod["metadata"].get("annotations") or {}
        if JOBSET_NAME not in annotations or NODE_SELECTOR in annotations or EXCLUSIVE not in annotations:
            return allowed(request)
        if annotations.get(COMPLETION_INDEX) == "0":
            return allowed(request)
        selector = (pod.get("spec") or {}).get("nodeSelector")
        if not selector:
            return denied(request, "follower pod node selector not set")
        if annotations[EXCLUSIVE] not in selector:
            return denied(request, "follower pod node selector for topology domain not found. missing selector: "
                                   f"{annotations[EXCLUSIVE]}")
        leader = self._leader(pod)
        if leader is None or not (leader.get("spec") or {}).get("nodeName"):
            return denied(request, "leader pod not yet scheduled, not creating follower pod. this is an expected, "
                                   "transient error")
        return allowed(request)


def _rules(group: str, version: str, plural: str, operations: list[str]) -> list[JSON]:
    return [{"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": [plural]}]


def install(api: FakeKubeAPI, chain: AdmissionChain | None = None) -> JobSetOperator:
    """Run the JobSet emulation on ``api``: its controller and its webhooks in ``chain`` (default
    ``api.admission``). The Job controller must run too (``FakeControlPlane(job_controller=True)``, ``kcm.py``) for Pods
    to appear."""
    chain = chain if chain is not None else api.admission
    if chain is not None:
        pods = _PodWebhooks(api)
        base = {"failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"]}
        chain.add("Mutating", MUTATING_CONFIGURATION,
                  {**base, "name": "mjobset.kb.io", "rules": _rules(GROUP, "v1alpha2", "jobsets", ["CREATE"])},
                  default_jobset)
        chain.add("Mutating", MUTATING_CONFIGURATION,
                  {**base, "name": "mpod.kb.io", "rules": _rules("", "v1", "pods", ["CREATE"])}, pods.mutate)
        chain.add("Validating", VALIDATING_CONFIGURATION,
                  {**base, "name": "vjobset.kb.io", "rules": _rules(GROUP, "v1alpha2", "jobsets", ["CREATE", "UPDATE"])},
                  validate_jobset)
        chain.add("Validating", VALIDATING_CONFIGURATION,
                  {**base, "name": "vpod.kb.io", "rules": _rules("", "v1", "pods", ["CREATE", "UPDATE"])},
                  pods.validate)
    return api.add_controller(JobSetOperator(api))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): what the JobSet controller, Kueue, a user and a GitOps tool send after
# the CREATE
# ----------------------------------------------------------------------------------------------------------------------

USER_WRITER = {"username": "alice", "groups": ["system:authenticated"]}
API_VERSION = f"{GROUP}/v1alpha2"


def _install_with_jobs(api: FakeKubeAPI, chain: AdmissionChain | None = None) -> JobSetOperator:
    """:func:`install`, with the fake's Job controller (which makes the pods) when it is not running."""
    ensure_running(api, JobController)
    return install(api, chain)


def _note(op: JobSetOperator, obj: JSON, problem: str | None) -> None:
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


async def _settle(op: JobSetOperator) -> None:
    """Every controller idle, and the garbage collector's deletions (``gc_orphans_after``) done."""
    await op.api.settle()
    await asyncio.sleep(0.05)
    await op.api.settle()


async def _user_sets_suspend(op: JobSetOperator, obj: JSON, suspend: bool) -> None:
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    stored = api.get(API_VERSION, "jobsets", ns, name)
    if stored is None:
        return
    stored["spec"]["suspend"] = suspend
    try:
        await api.admitted_update(api.resource_type(API_VERSION, "jobsets"), ns, name, stored, dry_run=False,
                                  user=USER_WRITER)
    except ApiError as e:
        _note(op, obj, f"the user's spec.suspend: {str(suspend).lower()} refused: {e.message}")
    await _settle(op)


async def suspend_and_resume(op: JobSetOperator, obj: JSON) -> None:
    """A user suspends the running JobSet and resumes it (``spec.suspend`` true, then false): the JobSet controller
    suspends every active Job (``suspendJobs``), the Job controller deletes their pods, then resumes each Job
    (``resumeJobsIfNecessary`` -> :func:`resumed_job`) and the Job controller makes the pods again."""
    await _user_sets_suspend(op, obj, True)
    await _user_sets_suspend(op, obj, False)


async def kueue_evicts_and_readmits(op: JobSetOperator, obj: JSON) -> None:
    """Kueue (``tests.emulations.kueue``) admits a JobSet created suspended, or evicts a running one and admits it
    again: ``stopJob`` (suspended, pod templates restored from the Workload), then ``startJob`` (the flavor's
    nodeSelector and tolerations and the ``kueue.x-k8s.io/podset`` label merged in, unsuspended); the JobSet
    controller suspends and resumes the Jobs with them."""
    from . import kueue

    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    workload = api.get(API_VERSION, "jobsets", ns, name)
    if workload is None:
        return
    if not (workload.get("spec") or {}).get("suspend"):
        _note(op, obj, await kueue.stop(api, API_VERSION, "jobsets", ns, name, kueue.jobset_pod_sets, workload))
        await _settle(op)
    _note(op, obj, await kueue.start(api, API_VERSION, "jobsets", ns, name, kueue.jobset_pod_sets))
    await _settle(op)


async def restart_after_a_job_fails(op: JobSetOperator, obj: JSON) -> None:
    """One Job of the current attempt fails (its pods ``Failed``, as the kubelet reports them, and the Job controller's
    ``Failed`` condition, ``BackoffLimitExceeded``)
    and the JobSet controller applies ``failurePolicy`` (``executeFailurePolicy``: ``RestartJobSet`` when no rule
    matches): ``status.restarts`` + 1, every Job of the old attempt deleted (foreground) and re-created with
    ``restart-attempt`` = the new count (``Recreate``: each as soon as its old one is gone; ``BlockingRecreate``:
    once all are)."""
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    js = api.get(API_VERSION, "jobsets", ns, name)
    if js is None or (js.get("spec") or {}).get("suspend"):
        return
    restarts = int((js.get("status") or {}).get("restarts") or 0)
    jobs = [j for j in api.list_objects("batch/v1", "jobs", ns)
            if (j["metadata"].get("labels") or {}).get(JOBSET_NAME) == name and _attempt(j) == restarts]
    if not jobs:
        return
    job = sorted(jobs, key=lambda j: j["metadata"]["name"])[0]
    for pod in api.list_objects("v1", "pods", ns):  # the kubelet: its containers exited with an error
        if any(r.get("uid") == job["metadata"]["uid"] for r in pod["metadata"].get("ownerReferences") or []):
            api.put({**pod, "apiVersion": "v1", "kind": "Pod", "status": {**(pod.get("status") or {}),
                                                                          "phase": "Failed"}})
    job = api.get("batch/v1", "jobs", ns, job["metadata"]["name"]) or job
    failed = copy.deepcopy(job)
    failed.setdefault("status", {})["conditions"] = [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"}]
    api._update(api.resource_type("batch/v1", "jobs"), ns, job["metadata"]["name"], job, failed,  # noqa: SLF001
                subresource="status", dry_run=False, require_rv=False)
    await _settle(op)


async def gitops_reapply(op: JobSetOperator, obj: JSON) -> None:
    """A GitOps tool re-applies the user's manifest (``tests.emulations.gitops``)."""
    from . import gitops

    _note(op, obj, await gitops.reapply(op.api, obj, "jobsets"))


def _restarts(obj: JSON) -> bool:
    return int(((obj.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts") or 0) > 0


def gangs_of(op: JobSetOperator, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The JobSet's live pods (not finished, not being deleted), one gang; none while it has no pods."""
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    pods = [p for p in op.api.objects("pods", ns)
            if (p["metadata"].get("labels") or {}).get(JOBSET_NAME) == name
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return [(f"JobSet {name}", pods)] if pods else []


def refused_writes(op: JobSetOperator) -> list[tuple[str, str, str]]:
    """The JobSet controller's refused writes and the later writes' problems, and the fake Job controller's (the
    pods)."""
    jobs = getattr(op.api, "jobs", None)
    return [*op.errors, *(jobs.errors if jobs is not None else [])]


_JSC = "kubernetes-sigs/jobset pkg/controllers/jobset_controller.go"
LATER_WRITES = (
    reapply_write(gitops_reapply),
    LaterWrite("user suspends and resumes", f"{_JSC} suspendJobs, resumeJobsIfNecessary, resumeJob (v0.12.0); "
               "kubernetes pkg/controller/job/job_controller.go manageJob (pods deleted while suspended)",
               "spec.suspend (always on)", lambda obj: True, suspend_and_resume),
    LaterWrite("Kueue evicts and re-admits", "kubernetes-sigs/kueue pkg/controller/jobframework/reconciler.go "
               "stopJob, startJob; pkg/controller/jobs/jobset/jobset_controller.go RunWithPodSetsInfo, "
               "RestorePodSetsInfo; pkg/podset/podset.go Merge, RestorePodSpec (v0.19.2)",
               "the JobSet integration of Kueue (integrations.frameworks: jobset.x-k8s.io/jobset), a "
               "kueue.x-k8s.io/queue-name label", lambda obj: True, kueue_evicts_and_readmits),
    LaterWrite("restart after a Job fails (failurePolicy)", f"{_JSC} reconcile, getChildJobs, deleteJobs, "
               "constructJobsFromTemplate; pkg/controllers/failure_policy.go executeFailurePolicy, "
               "failurePolicyRecreateAll (v0.12.0)",
               "spec.failurePolicy.maxRestarts > 0, restartStrategy Recreate (default) or BlockingRecreate",
               _restarts, restart_after_a_job_fails),
)

LATER = Emulated("jobset", _install_with_jobs, ((API_VERSION, "JobSet"),), LATER_WRITES, gangs_of, refused_writes)
