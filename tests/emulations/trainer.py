"""Kubeflow Trainer v2, emulated from kubeflow/trainer (tag ``v2.3.0``; the webhooks read at master ``8c0f505``,
2026-08-21; ``runtimePatches`` since v2.2.0).

What the TrainJob controller makes from a TrainJob (``pkg/controller/trainjob_controller.go`` ``Reconcile`` ->
``pkg/runtime/core/trainingruntime.go`` ``NewObjects`` -> the framework's ``RunComponentBuilderPlugins``), every
write through the fake's admission chain as the ``kubeflow-trainer-controller-manager`` service account:

- **the JobSet** ``<trainjob>``: built as Trainer v2.3.0's runtime framework builds it
  (:func:`tests.emulations.trainer_runtime.trainjob_jobset`, written from Trainer's ``newRuntimeInfo``, its
  ``mlPolicy`` plugins and ``plugins/jobset``; its docstring names each). Created once; not rebuilt while the
  TrainJob and the JobSet are not suspended (``jobset.go`` ``Build``). A refusal is a Warning Event
  ``TrainJobResourcesCreationFailed`` on the TrainJob, the message cut to 950 characters (``Reconcile``), and an
  entry of :attr:`TrainerOperator.errors`;
- with ``podGroupPolicy.coscheduling``, **a scheduler-plugins PodGroup** ``<trainjob>``, with
  ``podGroupPolicy.volcano`` **a Volcano PodGroup** (``scheduling.volcano.sh/v1beta1``): minMember the pod sets'
  counts, minResources their requests, a controller ownerReference to the TrainJob (``coscheduling.go`` /
  ``volcano.go`` ``Build``: :func:`tests.emulations.trainer_runtime.pod_group`). PodGroups are not admitted (no
  webhook matches them), so they are stored directly.

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
Not emulated: what ``trainer_runtime`` leaves out (its docstring), the JobSet's active-replicatedJob check of the immutability rule (the fake's JobSets have no status),
TrainJob status, suspension and resumption, runtime webhooks.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timezone
from typing import Any

from .kit import put_event
from .trainer_runtime import GROUP, RUNTIME_PLURALS, build_jobset, pod_group, runtime_info, runtime_ref, trainjob_jobset
from admit.testing.fake_kube import AdmissionChain, ApiError, Controller, FakeKubeAPI, allowed, denied, patched

__all__ = ["TrainerOperator", "install", "is_domain_prefixed_path", "USER", "trainjob_jobset", "runtime_manifest"]

JSON = dict[str, Any]
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


class TrainerOperator(Controller):
    """The TrainJob controller (module docstring), syncing per TrainJob.

    Attributes:
        errors: ``(namespace, trainjob, message)`` of every failed build (also the Warning Event).
    """

    what = "TrainJob controller"
    watches = ((GROUP, "v1alpha1", "trainjobs"),)

    def runtime(self, trainjob: JSON) -> JSON | None:
        """The TrainJob's runtime as stored, or None."""
        _, plural, namespace, name = runtime_ref(trainjob)
        return self.api.get(f"{GROUP}/v1alpha1", plural, namespace, name) if plural else None

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        trainjob = self._live(f"{GROUP}/v1alpha1", "trainjobs", ns, name)
        if trainjob is None:
            return
        runtime = self.runtime(trainjob)
        if runtime is None:
            kind, _, _, runtime_name = runtime_ref(trainjob)
            self._failed(trainjob, f"unsupported runtime: {kind} {runtime_name} not found")
            return
        info = runtime_info(trainjob, runtime)
        if api.get("jobset.x-k8s.io/v1alpha2", "jobsets", ns, name) is None:
            try:
                await api.admitted_create(api.resource_type("jobset.x-k8s.io/v1alpha2", "jobsets"), ns,
                                          build_jobset(info, trainjob), dry_run=False, user=USER)
            except ApiError as e:
                self._failed(trainjob, e.message)
                return
        pg = pod_group(info, trainjob)
        if pg is not None and api.get(pg["apiVersion"], "podgroups", ns, name) is None:
            api.put(pg)

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
        kind = runtime_ref(new)[0]
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


TORCH_POLICY: JSON = {"numNodes": 1, "torch": {}}
"""``manifests/base/runtimes/torch_distributed.yaml``'s ``mlPolicy``."""


def runtime_manifest(name: str, replicated_jobs: list[JSON], *, ml_policy: JSON | None = TORCH_POLICY,
                     pod_group_policy: JSON | None = None) -> JSON:
    """A ClusterTrainingRuntime shaped like ``manifests/base/runtimes`` (for tests); ``ml_policy=None``: a runtime
    without ``mlPolicy`` (Trainer's ``plainml`` plugin then sizes the trainer Job)."""
    spec: JSON = {"template": {"spec": {"replicatedJobs": copy.deepcopy(replicated_jobs)}}}
    if ml_policy is not None:
        spec["mlPolicy"] = copy.deepcopy(ml_policy)
    if pod_group_policy is not None:
        spec["podGroupPolicy"] = pod_group_policy
    return json.loads(json.dumps({"apiVersion": f"{GROUP}/v1alpha1", "kind": "ClusterTrainingRuntime",
                                  "metadata": {"name": name}, "spec": spec}))
