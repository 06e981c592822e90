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

import copy
import hashlib
import json
from typing import Any

from .kit import put_event
from admit.testing.fake_kube import AdmissionChain, ApiError, Controller, FakeKubeAPI, allowed, denied, patched

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


class JobSetOperator(Controller):
    """The JobSet controller (module docstring), syncing per JobSet.

    Attributes:
        errors: ``(namespace, jobset, message)`` of every refused Job create (also a Warning Event
            ``JobCreationFailed`` on the JobSet).
    """

    what = "JobSet controller"
    watches = ((GROUP, "v1alpha2", "jobsets"),)

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        js = self._live(f"{GROUP}/v1alpha2", "jobsets", ns, name)
        if js is None:
            return
        spec = js.get("spec") or {}
        jobs = api.resource_type("batch/v1", "jobs")
        existing = {j["metadata"]["name"] for j in self._owned("batch/v1", "jobs", ns, js["metadata"]["uid"])}
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
                    message = f"job {job['metadata']['name']} creation failed with error: {e.message}"
                    self.errors.append((ns, name, message))
                    put_event(api, js, "Warning", "JobCreationFailed", message, "jobset-controller-manager")
                    return


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
    ``api.admission``). The Job controller must run too (``FakeKubeAPI(job_controller=True)``) for Pods to appear."""
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
