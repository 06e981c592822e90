"""Kubeflow Trainer v2, emulated from kubeflow/trainer (read at master ``8c0f505``, 2026-08-21; tags up to v2.3.0;
``runtimePatches`` since v2.2.0).

What the TrainJob controller makes from a TrainJob (``pkg/controller/trainjob_controller.go`` ``Reconcile`` ->
``pkg/runtime/core/trainingruntime.go`` ``NewObjects`` -> the framework's ``RunComponentBuilderPlugins``), every
write through the fake's admission chain as the ``kubeflow-trainer-controller-manager`` service account:

- **the JobSet** ``<trainjob>``: :func:`admit.families.trainer.trainer_jobset` (one implementation, used by admit
  to judge a TrainJob at CREATE and by this emulation to build it; its docstring names the plugins it follows).
  Created once; not rebuilt while the TrainJob and the JobSet are not suspended (``jobset.go`` ``Build``). A
  refusal is a Warning Event ``TrainJobResourcesCreationFailed`` on the TrainJob, the message cut to 950 characters
  (``Reconcile``), and an entry of :attr:`TrainerOperator.errors`;
- with ``podGroupPolicy.coscheduling``, **a scheduler-plugins PodGroup** ``<trainjob>``: minMember = the pods of
  every pod set, minResources their requests, ``scheduleTimeoutSeconds`` the policy's, a controller ownerReference
  to the TrainJob (``plugins/coscheduling/coscheduling.go`` ``Build``); with ``podGroupPolicy.volcano``, **a
  Volcano PodGroup** ``<trainjob>`` (``scheduling.volcano.sh/v1beta1``, ``plugins/volcano/volcano.go`` ``Build``).
  PodGroups are not admitted (no webhook matches them), so they are stored directly.

Trainer's **webhooks** (``pkg/webhooks/trainjob_webhook.go``; configurations ``mutating-webhook-configuration`` /
``validating-webhook-configuration`` of ``manifests/base/webhook``, ``failurePolicy: Fail``):

- ``defaulter.trainjob.trainer.kubeflow.org`` (``TrainJobDefaulter.Default``): ``runtimePatches[*].time`` = now on
  CREATE for entries without one; on UPDATE kept for an entry equal to the old one (time aside), else now;
- ``validator.trainjob.trainer.kubeflow.org`` (``TrainJobValidator`` -> ``plugins/jobset/jobset.go`` ``Validate``):
  every ``runtimePatches[*].manager`` must be a domain-prefixed path (apimachinery ``IsDomainPrefixedPath``:
  ``spec.runtimePatches.manager: Invalid value: "<m>": must be a domain-prefixed path (such as "acme.io/foo")``);
  ``checkRuntimePatchesImmutability``: "RuntimePatches can only be modified when the TrainJob is suspended before
  or after the update"; an unknown runtime is "unsupported runtime". The CRD's ``self == oldSelf`` rules on
  ``spec.runtimeRef``, ``spec.trainer`` and ``spec.initializer`` ("field is immutable") are checked here too.

The answer is controller-runtime's for a plain error (``admission.Denied``: code 403, the aggregated message).
Not emulated: the JobSet's active-replicatedJob check of the immutability rule (the fake's JobSets have no status),
TrainJob status, suspension and resumption, ``runtimePatches`` of the spec (strategic merge), the initializer and
trainer environment and volumes, runtime webhooks, MPI's SSH Secret and ConfigMap, the Flux plugin.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timezone
from typing import Any

from admit.families.trainer import RUNTIME_PLURALS, runtime_ref, trainer_jobset
from admit.gang.quantity import add_resources, format_resources, scale_resources
from admit.gang.resources import pod_requests
from .kit import put_event
from admit.testing.fake_kube import AdmissionChain, ApiError, Controller, FakeKubeAPI, allowed, denied, patched

__all__ = ["TrainerOperator", "install", "is_domain_prefixed_path", "USER"]

JSON = dict[str, Any]
GROUP = "trainer.kubeflow.org"
USER = {"username": "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kubeflow-system", "system:authenticated"]}
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def is_domain_prefixed_path(value: str) -> str | None:
    """apimachinery ``util/validation`` ``IsDomainPrefixedPath``: None when valid, else the error detail."""
    host, sep, path = value.partition("/")
    if not value:
        return "Required value"
    if not sep or not host or not path:
        return f'Invalid value: "{value}": must be a domain-prefixed path (such as "acme.io/foo")'
    if len(host) > 253 or not _DNS1123_SUBDOMAIN.match(host):
        return (f'Invalid value: "{host}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
                "characters, '-' or '.', and must start and end with an alphanumeric character")
    if not _HTTP_PATH.match(path):
        return f'Invalid value: "{path}": must be a valid path'
    return None


def _pod_count(rj: JSON) -> int:
    return int(rj.get("replicas", 1)) * int(((rj.get("template") or {}).get("spec") or {}).get("parallelism", 1))


class TrainerOperator(Controller):
    """The TrainJob controller (module docstring), syncing per TrainJob.

    Attributes:
        errors: ``(namespace, trainjob, message)`` of every failed build (also the Warning Event).
    """

    what = "TrainJob controller"
    watches = ((GROUP, "v1alpha1", "trainjobs"),)

    def runtime(self, trainjob: JSON) -> JSON | None:
        kind, plural, namespace, name = runtime_ref(trainjob, trainjob["metadata"]["namespace"])
        if not plural:
            return None
        return self.api.get(f"{GROUP}/v1alpha1", plural, namespace or None, name)

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        trainjob = self._live(f"{GROUP}/v1alpha1", "trainjobs", ns, name)
        if trainjob is None:
            return
        runtime = self.runtime(trainjob)
        if runtime is None:
            self._failed(trainjob, f"unsupported runtime: {runtime_ref(trainjob, ns)[0]} "
                                   f"{runtime_ref(trainjob, ns)[3]} not found")
            return
        jobset = trainer_jobset(trainjob, runtime)
        existing = api.get("jobset.x-k8s.io/v1alpha2", "jobsets", ns, name)
        if existing is None:
            try:
                await api.admitted_create(api.resource_type("jobset.x-k8s.io/v1alpha2", "jobsets"), ns, jobset,
                                          dry_run=False, user=USER)
            except ApiError as e:
                self._failed(trainjob, e.message)
                return
        policy = (runtime.get("spec") or {}).get("podGroupPolicy") or {}
        if isinstance(policy.get("coscheduling"), dict) or isinstance(policy.get("volcano"), dict):
            self._pod_group(trainjob, jobset, policy)

    def _pod_group(self, trainjob: JSON, jobset: JSON, policy: JSON) -> None:
        """``coscheduling.go`` / ``volcano.go`` ``Build``: minMember and minResources over every pod set."""
        volcano = isinstance(policy.get("volcano"), dict)
        api_version = "scheduling.volcano.sh/v1beta1" if volcano else "scheduling.x-k8s.io/v1alpha1"
        meta = trainjob["metadata"]
        if self.api.get(api_version, "podgroups", meta["namespace"], meta["name"]) is not None:
            return
        members, total = 0, {}  # type: tuple[int, dict[str, Any]]
        for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
            count = _pod_count(rj)
            members += count
            pod_spec = ((((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
            total = add_resources(total, scale_resources(pod_requests(pod_spec), count))
        spec: JSON = {"minMember": members}
        if total:
            spec["minResources"] = format_resources(total)
        if not volcano:
            spec["scheduleTimeoutSeconds"] = (policy.get("coscheduling") or {}).get("scheduleTimeoutSeconds", 60)
        self.api.put({"apiVersion": api_version, "kind": "PodGroup",
                      "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                                   "ownerReferences": [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainJob",
                                                        "name": meta["name"], "uid": meta["uid"], "controller": True,
                                                        "blockOwnerDeletion": True}]},
                      "spec": spec})

    def _failed(self, trainjob: JSON, message: str) -> None:
        meta = trainjob["metadata"]
        self.errors.append((meta["namespace"], meta["name"], message))
        put_event(self.api, trainjob, "Warning", "TrainJobResourcesCreationFailed", message[:950], "trainjob-controller")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def default_trainjob(request: JSON) -> JSON:
    """``TrainJobDefaulter.Default``: the ``time`` of each ``runtimePatches`` entry."""
    obj = copy.deepcopy(request["object"])
    patches = (obj.get("spec") or {}).get("runtimePatches") or []
    old = {p.get("manager"): p for p in ((request.get("oldObject") or {}).get("spec") or {}).get("runtimePatches")
           or [] if isinstance(p, dict)} if request["operation"] == "UPDATE" else {}
    for patch in patches:
        if not isinstance(patch, dict):
            continue
        before = old.get(patch.get("manager"))
        if before is not None:
            same = {k: v for k, v in before.items() if k != "time"} == {k: v for k, v in patch.items() if k != "time"}
            patch["time"] = before.get("time") if same else _now()
        elif not patch.get("time"):
            patch["time"] = _now()
    return patched(request, obj)


class _Validator:
    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api

    async def __call__(self, request: JSON) -> JSON:
        """``TrainJobValidator.ValidateCreate`` / ``ValidateUpdate`` (module docstring)."""
        new, old = request["object"], request.get("oldObject")
        spec = new.get("spec") or {}
        errors: list[str] = []
        kind, plural, namespace, name = runtime_ref(new, request.get("namespace") or "")
        if kind not in RUNTIME_PLURALS:
            return denied(request, f"unsupported runtime: {kind}.{GROUP}")
        if isinstance(old, dict):
            for field in ("runtimeRef", "trainer", "initializer"):  # the CRD's x-kubernetes-validations
                if (old.get("spec") or {}).get(field) != spec.get(field):
                    errors.append(f"spec.{field}: Invalid value: \"object\": field is immutable")
            old_patches = (old.get("spec") or {}).get("runtimePatches")
            strip = [{k: v for k, v in p.items() if k != "time"} for p in spec.get("runtimePatches") or []
                     if isinstance(p, dict)]
            old_strip = [{k: v for k, v in p.items() if k != "time"} for p in old_patches or [] if isinstance(p, dict)]
            if strip != old_strip and not (old.get("spec") or {}).get("suspend") and not spec.get("suspend"):
                errors.append("spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob "
                              "is suspended before or after the update")
        for patch in spec.get("runtimePatches") or []:
            problem = is_domain_prefixed_path(str((patch or {}).get("manager") or ""))
            if problem:
                errors.append(f"spec.runtimePatches.manager: {problem}")
        if errors:
            return denied(request, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        return allowed(request)


def install(api: FakeKubeAPI, chain: AdmissionChain | None = None) -> TrainerOperator:
    """Run the Trainer emulation on ``api``: the runtime and Volcano resources served, the TrainJob controller, and
    Trainer's webhooks in ``chain`` (default ``api.admission``). The JobSet emulation and the Job controller make
    the Jobs and pods (``tests.emulations.jobset``)."""
    api.register(GROUP, "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False,
                 status=False)
    api.register(GROUP, "v1alpha1", "TrainingRuntime", "trainingruntimes", status=False)
    api.register("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups")
    chain = chain if chain is not None else api.admission
    if chain is not None:
        rules = [{"apiGroups": [GROUP], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                  "resources": ["trainjobs"]}]
        base = {"failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "rules": rules}
        chain.add("Mutating", "mutating-webhook-configuration",
                  {**base, "name": "defaulter.trainjob.trainer.kubeflow.org"}, default_trainjob)
        chain.add("Validating", "validating-webhook-configuration",
                  {**base, "name": "validator.trainjob.trainer.kubeflow.org"}, _Validator(api))
    return api.add_controller(TrainerOperator(api))


def runtime_manifest(name: str, replicated_jobs: list[JSON], *, ml_policy: JSON | None = None,
                     pod_group_policy: JSON | None = None) -> JSON:
    """A ClusterTrainingRuntime shaped like ``manifests/base/runtimes`` (for tests)."""
    spec: JSON = {"mlPolicy": ml_policy or {"numNodes": 1, "torch": {}},
                  "template": {"spec": {"replicatedJobs": copy.deepcopy(replicated_jobs)}}}
    if pod_group_policy is not None:
        spec["podGroupPolicy"] = pod_group_policy
    return json.loads(json.dumps({"apiVersion": f"{GROUP}/v1alpha1", "kind": "ClusterTrainingRuntime",
                                  "metadata": {"name": name}, "spec": spec}))
