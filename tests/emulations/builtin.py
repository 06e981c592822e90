"""The writes to the built-in workload kinds after their CREATE, for the later writes of tests/emulations/later.py:
the HorizontalPodAutoscaler's ``/scale`` writes to a Deployment or StatefulSet (with the controllers that turn the
new count into pods), Kueue's start and stop of a queued batch/v1 Job (``tests.emulations.kueue``, with the fake's
Job controller), and a GitOps tool's re-apply of the user's manifest (``tests.emulations.gitops``).

**The HorizontalPodAutoscaler controller** (kubernetes v1.36 ``pkg/controller/podautoscaler/horizontal.go``
``HorizontalController.reconcileAutoscaler``, every ``--horizontal-pod-autoscaler-sync-period``, 15 s): it reads
the target's Scale (``scaleForResourceMappings``) and writes ``Scales(ns).Update`` with ``spec.replicas`` set to the
desired count when it differs from the current one:

- the target at 0 replicas with ``minReplicas`` not 0: no write ("ScalingDisabled");
- above ``maxReplicas``: ``maxReplicas``; below ``minReplicas`` (1 when left out): ``minReplicas``;
- else the metrics' count (``computeReplicasForMetrics``; here the count a test proposes) bounded by
  ``convertDesiredReplicasWithRules``: at least ``minReplicas``, at most ``maxReplicas`` and at most
  ``calculateScaleUpLimit`` = max(2 x current, 4) (``scaleUpLimitFactor``, ``scaleUpLimitMinimum``). A scale-down
  is written once the recommendations of the stabilization window (5 minutes,
  ``--horizontal-pod-autoscaler-downscale-stabilization``) are all that low: a write here is that last cycle.

A refused write is the Warning Event ``FailedRescale`` ("New size: N; reason: ...; error: ...") on the HPA and an
entry of :attr:`KubeControllers.errors`. The write goes over the fake's HTTP API (its ``/scale``
subresource, as client-go's scale client sends it), whose admission review carries the fake's default user, not the
controller's ``horizontal-pod-autoscaler`` ServiceAccount (admit's scale rule names no user).

**The ReplicaSet controller** (``pkg/controller/replicaset/replica_set.go`` ``manageReplicas``): a ReplicaSet with
fewer pods than ``spec.replicas`` gets the missing ones (``controller.GetPodFromTemplate``: ``generateName
<rs>-``, the template's labels and annotations, a controller ownerReference), through admission as the
``replicaset-controller`` ServiceAccount, a refusal being the Warning Event ``FailedCreate``; one with more has the
newest deleted (``getPodsToDelete``: every pod here ranks the same but for its age). The fake's Deployment
controller makes the ReplicaSets and its StatefulSet controller the StatefulSets' pods.

**Kueue on a batch/v1 Job** (kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobs/job/job_controller.go``; Kueue's
``batch/job`` integration, on by default, for a Job labelled ``kueue.x-k8s.io/queue-name``, which Kueue's webhook
creates suspended): the start (``Job.RunWithPodSetsInfo``: unsuspended, the ResourceFlavor's nodeSelector and
tolerations and the ``kueue.x-k8s.io/podset`` label merged into the template; with
``kueue.x-k8s.io/job-min-parallelism`` the admitted count, here the fewest Kueue may admit, as ``spec.parallelism``)
and the stop of an eviction (``Job.Stop``: suspended with ``kueue.x-k8s.io/stopping``, then the template restored from
the Workload, ``Job.RestorePodSetsInfo``) followed by a new start; the fake's Job controller deletes a suspended Job's
pods and makes them again on the start.

Not emulated: the metrics (a test proposes the count), ``behavior`` policies (rates, per-direction windows: they slow
the writes, never leave the bounds), ``HPAScaleToZero`` (alpha: ``minReplicas`` 0), container resource metrics;
Kueue's topology-aware scheduling (its scheduling gate and annotation) and a partial re-admission.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .kcm import DeploymentController, JobController, StatefulSetController
from .kit import Controller, OperatorEmulation, put_event, service_account
from .gitops import reapply_write
from .later import Emulated, LaterWrite
from admit.testing.fake_kube import ApiError

if TYPE_CHECKING:
    from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI

__all__ = ["KubeControllers", "ReplicaSetController", "install", "LATER"]

JSON = dict[str, Any]
HPA_API = "autoscaling/v2"
#: ``scaleTargetRef.kind`` -> its resource (the RESTMapper's ``RESTMappings``), for the kinds emulated here.
PLURALS = {"Deployment": "deployments", "StatefulSet": "statefulsets", "Job": "jobs"}
RS_USER = service_account("kube-system", "replicaset-controller")


class ReplicaSetController(Controller):
    """The ReplicaSet controller's ``manageReplicas`` (module docstring)."""

    what = "ReplicaSet controller"
    component = "replicaset-controller"
    watches = (("apps", "v1", "replicasets"),)

    async def _sync(self, ns: str, name: str) -> None:
        rs = self._live("apps/v1", "replicasets", ns, name)
        if rs is None:
            return
        pods = sorted(self._owned("v1", "pods", ns, rs["metadata"]["uid"]),
                      key=lambda p: int(p["metadata"].get("resourceVersion") or 0))
        extra = len(pods) - int((rs.get("spec") or {}).get("replicas", 1))
        for pod in reversed(pods[len(pods) - extra:] if extra > 0 else []):
            self.api.delete_object("v1", "pods", ns, pod["metadata"]["name"])
        template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
        meta = {"generateName": f"{name}-", "namespace": ns,
                "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
                                     "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}
        if (template.get("metadata") or {}).get("annotations"):
            meta["annotations"] = dict(template["metadata"]["annotations"])
        for _ in range(-extra):
            try:
                await self.api.admitted_create(self.api.resource_type("v1", "pods"), ns, {
                    "apiVersion": "v1", "kind": "Pod", "metadata": copy.deepcopy(meta),
                    "spec": copy.deepcopy(template.get("spec") or {})}, dry_run=False, user=RS_USER)
            except ApiError as e:
                self._refused(rs, "FailedCreate", f"Error creating: {e.message}")
                return


class KubeControllers(OperatorEmulation):
    """kube-controller-manager as the later writes need it: the HPA controller's ``reconcileAutoscaler`` (module
    docstring), one cycle per :meth:`cycle`; the Deployment, ReplicaSet, StatefulSet and Job controllers that make
    the pods; what Kueue and a GitOps tool write is sent by the later writes themselves, kept in :attr:`errors`.

    Attributes:
        errors: ``(namespace, object, message)`` of every refused write (the HPA's, and the controllers' it runs).
        controllers: the Deployment, ReplicaSet and StatefulSet controllers it installed.
    """

    component = "horizontal-pod-autoscaler"

    def __init__(self, api: "FakeKubeAPI") -> None:
        super().__init__(api, service_account("kube-system", "horizontal-pod-autoscaler"))
        self.controllers: list[Controller] = [api.add_controller(c(api)) for c in (
            DeploymentController, ReplicaSetController, StatefulSetController, JobController)]
        #: ``(namespace, name)`` -> a queued Job as Kueue made its Workload of it (``ConstructWorkload``).
        self.workloads: dict[tuple[str, str], JSON] = {}

    async def cycle(self, ns: str, name: str, proposed: int) -> None:
        """One ``reconcileAutoscaler`` of HPA ``ns/name`` whose metrics propose ``proposed`` replicas."""
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        hpa = self.live(HPA_API, "horizontalpodautoscalers", ns, name)
        if hpa is None:
            return
        spec = hpa["spec"]
        ref = spec["scaleTargetRef"]
        group, _, version = ref["apiVersion"].rpartition("/")
        plural = PLURALS[ref["kind"]]
        low, high = spec.get("minReplicas", 1), spec["maxReplicas"]
        async with self.api.api_client() as api_client:
            scales = client.CustomObjectsApi(api_client)
            try:
                scale = await scales.get_namespaced_custom_object_scale(group, version, ns, plural, ref["name"])
            except ApiException:
                return  # FailedGetScale: no write
            current = scale["spec"].get("replicas", 0)
            if current == 0 and low != 0:
                return  # ScalingDisabled
            desired = high if current > high else low if current < low else \
                max(low, min(proposed, high, max(2 * current, 4)))
            if desired == current:
                return
            scale["spec"]["replicas"] = desired
            try:
                await scales.replace_namespaced_custom_object_scale(group, version, ns, plural, ref["name"], scale)
            except ApiException as e:
                message = f"New size: {desired}; reason: metrics; error: {e.body!s}"
                self.errors.append((ns, name, message))
                put_event(self.api, hpa, "Warning", "FailedRescale", message, self.component)

    def refused(self) -> list[tuple[str, str, str]]:
        """Its refused writes and those of the controllers it runs."""
        return list(self.errors) + [e for c in self.controllers for e in c.errors]


def install(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None) -> KubeControllers:
    """Run the HPA controller (and the Deployment, ReplicaSet, StatefulSet and Job controllers) on ``api``."""
    return api.add_controller(KubeControllers(api))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py). The user object is a ``List`` of what the user applies, in the order
# applied: a Deployment or StatefulSet and, maybe, its HorizontalPodAutoscaler (before it: Helm's and Argo CD's order
# for a StatefulSet); or a Job.
# ----------------------------------------------------------------------------------------------------------------------


def _items(obj: JSON) -> list[JSON]:
    return list(obj.get("items") or [obj])


def _hpa(obj: JSON) -> JSON | None:
    return next((o for o in _items(obj) if o["kind"] == "HorizontalPodAutoscaler"), None)


def _workload(obj: JSON) -> JSON:
    return next(o for o in _items(obj) if o["kind"] in PLURALS)


async def _scale_to(op: KubeControllers, obj: JSON, proposed: Any) -> None:
    hpa = _hpa(obj)
    assert hpa is not None
    await op.cycle(hpa["metadata"]["namespace"], hpa["metadata"]["name"], proposed(hpa["spec"]))
    await op.api.settle()
    await op.idle()


async def hpa_scales_up(op: KubeControllers, obj: JSON) -> None:
    """The metrics above target: the HPA scales up as far as ``maxReplicas`` (two cycles: the scale-up limit)."""
    for _ in range(2):
        await _scale_to(op, obj, lambda spec: spec["maxReplicas"])


async def hpa_scales_down(op: KubeControllers, obj: JSON) -> None:
    """The metrics far below target for the stabilization window: the HPA scales down to ``minReplicas``."""
    await _scale_to(op, obj, lambda spec: 0)


async def hpa_scales_within(op: KubeControllers, obj: JSON) -> None:
    """The metrics ask for a count between the bounds: the HPA writes it."""
    await _scale_to(op, obj, lambda spec: (spec.get("minReplicas", 1) + spec["maxReplicas"] + 1) // 2)


def _note(op: KubeControllers, obj: JSON, problem: str | None) -> None:
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


async def _settle(op: KubeControllers) -> None:
    await op.api.settle()
    await op.idle()


def _queued(obj: JSON) -> bool:
    work = _workload(obj)
    return work["kind"] == "Job" and "kueue.x-k8s.io/queue-name" in (work["metadata"].get("labels") or {})


async def kueue_starts(op: KubeControllers, obj: JSON) -> None:
    """Kueue admits the queued Job's Workload and starts it (``tests.emulations.kueue.start``), with the fewest
    pods ``kueue.x-k8s.io/job-min-parallelism`` lets it admit when the Job has that annotation."""
    from . import kueue

    work = _workload(obj)
    ns, name = work["metadata"]["namespace"], work["metadata"]["name"]
    stored = op.api.get("batch/v1", "jobs", ns, name)
    if stored is None:
        return
    op.workloads.setdefault((ns, name), copy.deepcopy(stored))
    low = (stored["metadata"].get("annotations") or {}).get(kueue.MIN_PARALLELISM)
    _note(op, work, await kueue.start(op.api, "batch/v1", "jobs", ns, name, kueue.job_pod_sets,
                                      int(low) if low else None))
    await _settle(op)


async def kueue_evicts_and_readmits(op: KubeControllers, obj: JSON) -> None:
    """Kueue evicts the running Job (``tests.emulations.kueue.stop``: its pods go) and admits it again, whole."""
    from . import kueue

    work = _workload(obj)
    ns, name = work["metadata"]["namespace"], work["metadata"]["name"]
    workload = op.workloads.get((ns, name))
    if workload is None or op.api.get("batch/v1", "jobs", ns, name) is None:
        return
    _note(op, work, await kueue.stop(op.api, "batch/v1", "jobs", ns, name, kueue.job_pod_sets, workload, job=True))
    await _settle(op)
    _note(op, work, await kueue.start(op.api, "batch/v1", "jobs", ns, name, kueue.job_pod_sets))
    await _settle(op)


async def gitops_reapply(op: KubeControllers, obj: JSON) -> None:
    """A GitOps tool re-applies the user's manifests (``tests.emulations.gitops``): the workload, then its HPA."""
    from . import gitops

    for item in sorted(_items(obj), key=lambda o: o["kind"] == "HorizontalPodAutoscaler"):
        plural = PLURALS.get(item["kind"], "horizontalpodautoscalers")
        _note(op, item, await gitops.reapply(op.api, item, plural))
    await _settle(op)


def gangs_of(op: KubeControllers, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The workload's live pods (a Deployment's through its ReplicaSets; a Job's not finished), one gang; none while
    it has none."""
    work = _workload(obj)
    ns, api = work["metadata"]["namespace"], op.api
    stored = api.get(work["apiVersion"], PLURALS[work["kind"]], ns, work["metadata"]["name"])
    if stored is None:
        return []
    owners = [stored["metadata"]["uid"]] if work["kind"] != "Deployment" else \
        [rs["metadata"]["uid"] for rs in op.owned("apps/v1", "replicasets", ns, stored["metadata"]["uid"])]
    pods = [p for uid in owners for p in op.owned("v1", "pods", ns, uid)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return [(f"{work['kind']} {work['metadata']['name']}", pods)] if pods else []


def refused_writes(op: KubeControllers) -> list[tuple[str, str, str]]:
    """The HPA's refused scales and the controllers' refused pods and ReplicaSets."""
    return op.refused()


_HPA = "kubernetes v1.36 pkg/controller/podautoscaler/horizontal.go reconcileAutoscaler, " \
    "convertDesiredReplicasWithRules, calculateScaleUpLimit; scaleNamespacer.Scales().Update"
_ON = "a HorizontalPodAutoscaler (autoscaling/v2) whose scaleTargetRef is the workload; kube-controller-manager's " \
    "horizontalpodautoscaling controller (on by default)"
_KUEUE = "kubernetes-sigs/kueue v0.19.2 pkg/controller/jobs/job/job_controller.go "
_QUEUED = "Kueue's batch/job integration (integrations.frameworks, on by default), a kueue.x-k8s.io/queue-name label"
LATER_WRITES = (
    reapply_write(gitops_reapply),
    LaterWrite("Kueue admits and starts the Job", _KUEUE + "Job.RunWithPodSetsInfo; pkg/podset/podset.go Merge",
               _QUEUED + "; partial admission: kueue.x-k8s.io/job-min-parallelism", _queued, kueue_starts),
    LaterWrite("Kueue evicts the Job and admits it again", _KUEUE + "Job.Stop, Job.RestorePodSetsInfo, "
               "Job.RunWithPodSetsInfo; pkg/controller/jobframework/reconciler.go stopJob, startJob", _QUEUED +
               "; eviction: preemption, waitForPodsReady, a deactivated Workload", _queued, kueue_evicts_and_readmits),
    LaterWrite("HPA scales up to maxReplicas", _HPA, _ON, lambda obj: _hpa(obj) is not None, hpa_scales_up),
    LaterWrite("HPA scales within its bounds", _HPA, _ON, lambda obj: _hpa(obj) is not None, hpa_scales_within),
    LaterWrite("HPA scales down to minReplicas", _HPA + " (after the downscale stabilization window)", _ON,
               lambda obj: _hpa(obj) is not None, hpa_scales_down),
)

LATER = Emulated("builtin", install, (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job"),
                                      (HPA_API, "HorizontalPodAutoscaler")), LATER_WRITES, gangs_of, refused_writes)
