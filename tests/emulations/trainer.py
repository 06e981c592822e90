"""Kubeflow Trainer v2, emulated from kubeflow/trainer (tag ``v2.3.0``; the webhooks read at master ``8c0f505``,
2026-08-21; ``runtimePatches`` since v2.2.0).

What the TrainJob controller makes from a TrainJob (``pkg/controller/trainjob_controller.go`` ``Reconcile`` ->
``pkg/runtime/core/trainingruntime.go`` ``NewObjects`` -> the framework's ``RunComponentBuilderPlugins``), every
write through the fake's admission chain as the ``kubeflow-trainer-controller-manager`` service account:

- **the JobSet** ``<trainjob>``: built as Trainer v2.3.0's runtime framework builds it
  (:func:`tests.emulations.trainer_runtime.trainjob_jobset`, written from Trainer's ``newRuntimeInfo``, its
  ``mlPolicy`` plugins and ``plugins/jobset``; its docstring names each). Created once; applied again (server-side
  apply with field owner ``trainer``, ``reconcileObjects``: here :func:`tests.emulations.gitops.applied`, the
  fields of the built JobSet set onto the stored one) only while the TrainJob or the JobSet is suspended
  (``jobset.go`` ``Build``: "Do not update the JobSet if it already exists and is not suspended"), with the
  TrainJob's ``suspend``. A refusal is a Warning Event
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
TrainJob status, runtime webhooks. A TrainJob whose ``suspend`` is removed (not set to false) leaves the JobSet
suspended here (real server-side apply would drop the field Trainer owned).
"""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timezone
from typing import Any

from .gitops import applied, reapply_write
from .kit import Controller, put_event
from .later import Emulated, LaterWrite
from .trainer_runtime import GROUP, RUNTIME_PLURALS, build_jobset, pod_group, runtime_info, runtime_ref, trainjob_jobset
from admit.testing.fake_kube import AdmissionChain, ApiError, FakeKubeAPI, allowed, denied, patched

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
        jobset: the JobSet emulation running beside it, when installed together (``LATER``'s install).
    """

    what = "TrainJob controller"
    jobset: Any = None
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
        jobsets = api.resource_type("jobset.x-k8s.io/v1alpha2", "jobsets")
        existing = api.get("jobset.x-k8s.io/v1alpha2", "jobsets", ns, name)
        try:
            if existing is None:
                await api.admitted_create(jobsets, ns, build_jobset(info, trainjob), dry_run=False, user=USER)
            elif (trainjob.get("spec") or {}).get("suspend") or (existing.get("spec") or {}).get("suspend"):
                # Build: re-applied while the TrainJob or the JobSet is suspended (server-side apply, ForceOwnership)
                new = applied(existing, build_jobset(info, trainjob))
                if new != existing:
                    await api.admitted_update(jobsets, ns, name, new, dry_run=False, user=USER)
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


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): what Trainer, Kueue, a user and a GitOps tool send after the CREATE
# ----------------------------------------------------------------------------------------------------------------------

USER_WRITER = {"username": "alice", "groups": ["system:authenticated"]}
API_VERSION = f"{GROUP}/v1alpha1"
#: ``manifests/base/runtimes/torch_distributed.yaml``, its ``node`` Job labelled as the trainer step.
TORCH_RUNTIME = runtime_manifest("torch-distributed", [{
    "name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                 "spec": {"template": {"spec": {"containers": [
                                     {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                      "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}}}}])
#: The entry Kueue's TrainJob webhook appends (kueue v0.19.2 ``pkg/controller/jobs/trainjob/trainjob_webhook.go``
#: ``TrainJobWebhook.Default``), which its ``RunWithPodSetsInfo`` fills.
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
KUEUE_ENTRY: JSON = {"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}


def _install_later(api: FakeKubeAPI, chain: AdmissionChain | None = None) -> TrainerOperator:
    """Trainer with the JobSet emulation, the fake's Job controller and the torch runtime (:data:`TORCH_RUNTIME`)."""
    from . import jobset

    operator = jobset.LATER.install(api, chain)
    trainer = install(api, chain)
    trainer.jobset = operator
    api.put(copy.deepcopy(TORCH_RUNTIME))
    return trainer


def _note(op: TrainerOperator, obj: JSON, problem: str | None) -> None:
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


async def _settle(op: TrainerOperator) -> None:
    from . import jobset

    await jobset._settle(op.jobset)  # noqa: SLF001


async def _update(op: TrainerOperator, obj: JSON, change: Any, user: JSON, what: str) -> None:
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    stored = api.get(API_VERSION, "trainjobs", ns, name)
    if stored is None:
        return
    change(stored)
    try:
        await api.admitted_update(api.resource_type(API_VERSION, "trainjobs"), ns, name, stored, dry_run=False,
                                  user=user)
    except ApiError as e:
        _note(op, obj, f"{what} refused: {e.message}")
    await _settle(op)


def _set_suspend(value: bool) -> Any:
    def change(tj: JSON) -> None:
        tj["spec"]["suspend"] = value
    return change


async def suspend_and_resume(op: TrainerOperator, obj: JSON) -> None:
    """A user suspends the running TrainJob and resumes it (``spec.suspend`` true, then false): Trainer applies the
    JobSet again while either is suspended (``jobset.go`` ``Build``: "Do not update the JobSet if it already exists
    and is not suspended"), with ``suspend`` = the TrainJob's; the JobSet controller suspends and resumes its Jobs."""
    if (obj.get("spec") or {}).get("suspend"):
        await _update(op, obj, _set_suspend(False), USER_WRITER, "the user's resume")
    await _update(op, obj, _set_suspend(True), USER_WRITER, "the user's suspend")
    await _update(op, obj, _set_suspend(False), USER_WRITER, "the user's resume")


def _kueue_entry(tj: JSON) -> JSON | None:
    return next((p for p in (tj.get("spec") or {}).get("runtimePatches") or []
                 if isinstance(p, dict) and p.get("manager") == KUEUE_MANAGER), None)


def _kueue_admits(op: TrainerOperator) -> Any:
    """``TrainJob.RunWithPodSetsInfo``'s first write: Kueue's entry filled with a ``ReplicatedJobPatch`` per pod set
    (the child JobSet's replicatedJobs): the ``kueue.x-k8s.io/podset`` label, the flavor's nodeSelector and
    tolerations (``tests.emulations.kueue``)."""
    from . import kueue

    def change(tj: JSON) -> None:
        entry = _kueue_entry(tj)
        js = op.api.get("jobset.x-k8s.io/v1alpha2", "jobsets", tj["metadata"]["namespace"], tj["metadata"]["name"])
        if entry is None or js is None:
            return
        entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [
            {"name": r["name"], "template": {"spec": {"template": {
                "metadata": {"labels": {kueue.POD_SET_LABEL: r["name"]}},
                "spec": {"nodeSelector": dict(kueue.FLAVOR["nodeLabels"]),
                         "tolerations": copy.deepcopy(kueue.FLAVOR["tolerations"])}}}}}
            for r in js["spec"].get("replicatedJobs") or []]
    return change


def _kueue_restores(tj: JSON) -> None:
    """``TrainJob.RestorePodSetsInfo``: Kueue's entry's replicatedJobs cleared."""
    entry = _kueue_entry(tj)
    if entry is not None:
        entry["trainingRuntimeSpec"]["template"]["spec"].pop("replicatedJobs", None)


async def kueue_evicts_and_readmits(op: TrainerOperator, obj: JSON) -> None:
    """Kueue (v0.19.2 ``pkg/controller/jobs/trainjob/trainjob_controller.go``) admits a queued TrainJob, evicts it
    and admits it again: ``RunWithPodSetsInfo`` (Kueue's ``runtimePatches`` entry filled while still suspended, "a
    requirement from the trainjob admission webhook", then ``startJob``'s patch unsuspends), ``Stop`` (suspended,
    then the entry cleared by ``RestorePodSetsInfo``); Trainer re-applies the JobSet each time."""
    from . import kueue

    kueue_user = kueue.USER
    stored = op.api.get(API_VERSION, "trainjobs", obj["metadata"]["namespace"], obj["metadata"]["name"])
    if stored is None or _kueue_entry(stored) is None:
        return
    if not stored["spec"].get("suspend"):
        await _update(op, obj, _set_suspend(True), kueue_user, "Kueue's stop")
        await _update(op, obj, _kueue_restores, kueue_user, "Kueue's restore")
    for _ in range(2):
        await _update(op, obj, _kueue_admits(op), kueue_user, "Kueue's podset info")
        await _update(op, obj, _set_suspend(False), kueue_user, "Kueue's start")
        if _ == 0:
            await _update(op, obj, _set_suspend(True), kueue_user, "Kueue's stop")
            await _update(op, obj, _kueue_restores, kueue_user, "Kueue's restore")


async def gitops_reapply(op: TrainerOperator, obj: JSON) -> None:
    """A GitOps tool re-applies the user's manifest (``tests.emulations.gitops``)."""
    from . import gitops

    _note(op, obj, await gitops.reapply(op.api, obj, "trainjobs"))


def gangs_of(op: TrainerOperator, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The pods of the TrainJob's JobSet (``tests.emulations.jobset.gangs_of``)."""
    from . import jobset

    return jobset.gangs_of(op.jobset, obj)


def refused_writes(op: TrainerOperator) -> list[tuple[str, str, str]]:
    """Trainer's failed builds and the later writes' problems, the JobSet controller's and the Job controller's."""
    from . import jobset

    return [*op.errors, *jobset.refused_writes(op.jobset)]


def _queued(obj: JSON) -> bool:
    return _kueue_entry(obj) is not None


LATER_WRITES = (
    reapply_write(gitops_reapply),
    LaterWrite("user suspends and resumes", "kubeflow/trainer pkg/controller/trainjob_controller.go Reconcile, "
               "reconcileObjects (server-side apply, field owner trainer); pkg/runtime/framework/plugins/jobset/"
               "jobset.go Build (v2.3.0); then the JobSet controller's suspendJobs / resumeJob",
               "spec.suspend (always on)", lambda obj: True, suspend_and_resume),
    LaterWrite("Kueue admits, evicts and re-admits", "kubernetes-sigs/kueue pkg/controller/jobs/trainjob/"
               "trainjob_controller.go RunWithPodSetsInfo, Stop, RestorePodSetsInfo; trainjob_webhook.go Default "
               "(v0.19.2)", "the TrainJob integration of Kueue (integrations.frameworks: trainer.kubeflow.org/"
               "trainjob), a kueue.x-k8s.io/queue-name label", _queued, kueue_evicts_and_readmits),
)

LATER = Emulated("trainer", _install_later, ((API_VERSION, "TrainJob"),), LATER_WRITES, gangs_of, refused_writes)
