"""The Kubeflow training-operator v1 (TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob, MPIJob v1) and the
mpi-operator (MPIJob ``kubeflow.org/v2beta1``) as the fake API runs them: the PodGroup each writes with gang
scheduling on, and the Pods (and, for the mpi-operator, the launcher Job) each creates, through the fake's
admission chain as the operator's ServiceAccount.

**training-operator** (kubeflow/training-operator tag ``v1.9.0``; the same code as kubeflow/trainer ``release-1.9``):

- ``--gang-scheduler-name`` (``cmd/training-operator.v1/main.go``): ``volcano`` picks Volcano's PodGroup, any other
  non-empty name scheduler-plugins' (``common.GenSchedulerPluginsSetupFunc``), empty turns gang scheduling off.
- ``pkg/controller.v1/common/job.go`` ``ReconcileJobs``: with gang scheduling on, ``SyncPodGroup``
  (``common/scheduling.go``) before any pod: PodGroup ``<job>``, minMember = ``schedulingPolicy.minAvailable``
  else every replica, ``scheduleTimeoutSeconds`` from the policy, the job's **annotations** copied, a controller
  ownerReference to the job; an existing PodGroup of that name is updated when its spec differs, **without an
  ownership check** (``if diff := cmp.Diff(oldPodGroup, podGroup)``, ``UpdatePodGroup``). A finished job's PodGroup
  is deleted (not emulated: no job finishes here).
- ``common/pod.go`` ``createNewPod``: one Pod per replica and index, named ``GenGeneralName`` =
  ``<job>-<replica type, lower case>-<index>`` (no generateName), the template's labels plus
  ``training.kubeflow.org/operator-name`` (``<kind>-controller``), ``job-name``, ``replica-type`` (lower case),
  ``replica-index`` and ``job-role: master`` for the master role (``IsMasterRole``: Chief/Master, else Worker 0);
  ``restartPolicy`` from the replica spec (``core.SetRestartPolicy``; ``ExitCode`` -> ``Never``); with gang
  scheduling ``control/podgroup_control.go`` ``SchedulerPluginsControl.DecoratePodTemplateSpec``: schedulerName
  = the gang scheduler **only when the template has none**, label ``scheduling.x-k8s.io/pod-group: <job>``; a
  controller ownerReference (``GenOwnerReference``). ``SetClusterSpec`` (TF_CONFIG, MASTER_ADDR, ...) is not
  emulated.

**mpi-operator** (kubeflow/mpi-operator ``caa3c47``, v0.8.2):

- ``--gang-scheduling`` (``cmd/mpi-operator/app/options/options.go``): ``volcano`` or a scheduler-plugins scheduler
  name.
- ``pkg/controller/mpi_job_controller.go`` ``syncHandler``, in this order: the Service ``<job>``, the ConfigMap
  ``<job>-config``, the Secret ``<job>-ssh`` (stored directly here: admit never sees them); unless suspended, the
  PodGroup (``getOrCreatePodGroups``: ``podgroup.go`` ``newPodGroup``, name ``<job>``, minMember
  ``calculateMinAvailable`` = minAvailable else workers + 1; an existing PodGroup **not controlled by the MPIJob**
  stops the sync with the Event ``ErrResourceExists`` and no worker is made; one that is, is updated when its spec
  differs); then the workers ``<job>-worker-<i>`` (``newWorker``: the Worker template's labels plus
  ``training.kubeflow.org/operator-name: mpi-operator``, ``job-name``, ``job-role: worker``, ``replica-index``;
  hostname, subdomain; ``decoratePodTemplateSpec``: schedulerName **always** overwritten, the pod-group label);
  then the launcher Job ``<job>-launcher`` (``newLauncherJob``: labels ``{app: <job>}`` only, a controller
  ownerReference, the Launcher template with ``job-role: launcher``, decorated likewise) when
  ``launcherCreationPolicy`` is ``AtStartup`` or every worker is Ready (never here: no kubelet). The launcher's Pod
  is the fake Job controller's (``FakeControlPlane(job_controller=True)``, ``kcm.py``).

**Later writes** of the training-operator (:data:`LATER`): a suspended job's pods deleted (``job.go``
``ReconcileJobs`` -> ``CleanUpResources``) and made again on resume, a failed pod of a restarting replica deleted and
made again (``pod.go`` ``ReconcilePods``); with Kueue's and a GitOps tool's writes.

Not emulated: status, ``cleanPodPolicy``, the mpi-operator's suspension changes, elastic scaling, Volcano PodGroups (the
Volcano path of both only when the fake serves ``scheduling.volcano.sh/v1beta1``: not done here), the operators'
validating and defaulting webhooks (they check replica specs and containers, none of what admit writes).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .kit import OperatorEmulation, Sync, clear_start_time, controller_ref, owned_by, service_account
from .gitops import reapply_write
from .later import Emulated, LaterWrite
from admit.testing.fake_kube import ApiError

if TYPE_CHECKING:
    from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI, ResourceType

__all__ = ["TrainingOperator", "MPIOperator", "install_training_operator", "install_mpi_operator", "training_operator_pod", "mpi_worker_pod", "mpi_launcher_job",
           "REPLICA_SPECS"]

JSON = dict[str, Any]
PG_API = "scheduling.x-k8s.io/v1alpha1"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
REPLICA_SPECS = {"tfjobs": "tfReplicaSpecs", "pytorchjobs": "pytorchReplicaSpecs", "xgboostjobs": "xgbReplicaSpecs",
                 "paddlejobs": "paddleReplicaSpecs", "jaxjobs": "jaxReplicaSpecs", "mpijobs": "mpiReplicaSpecs"}


def _min_member(job: JSON, everyone: int) -> int:
    policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy") or {}
    return policy["minAvailable"] if policy.get("minAvailable") is not None else everyone


def _pod_group(job: JSON, min_member: int, *, annotations: bool) -> JSON:
    meta = job["metadata"]
    policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy") or {}
    spec: JSON = {"minMember": min_member}
    if policy.get("scheduleTimeoutSeconds") is not None:
        spec["scheduleTimeoutSeconds"] = policy["scheduleTimeoutSeconds"]
    pg_meta: JSON = {"name": meta["name"], "namespace": meta.get("namespace"), "ownerReferences": [controller_ref(job)]}
    if annotations and meta.get("annotations"):
        pg_meta["annotations"] = dict(meta["annotations"])
    return {"apiVersion": PG_API, "kind": "PodGroup", "metadata": pg_meta, "spec": spec}


def _is_master(replicas: JSON, rtype: str, index: int) -> bool:
    """``IsMasterRole`` of the TFJob and PyTorchJob controllers: Chief/Master, else Worker 0."""
    types = {t.lower() for t in replicas}
    if types & {"chief", "master"}:
        return rtype.lower() in ("chief", "master")
    return rtype.lower() == "worker" and index == 0


def training_operator_pod(job: JSON, rtype: str, index: int, gang_scheduler: str) -> JSON:
    """The Pod ``createNewPod`` makes for replica ``rtype`` ``index`` of stored ``job`` (module docstring)."""
    plural = job["kind"].lower() + "s"
    replicas = (job.get("spec") or {}).get(REPLICA_SPECS[plural]) or {}
    rspec = replicas[rtype]
    template = copy.deepcopy(rspec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    labels = tmeta.setdefault("labels", {})
    labels.update({"training.kubeflow.org/operator-name": f"{job['kind'].lower()}-controller",
                   "training.kubeflow.org/job-name": job["metadata"]["name"].replace("/", "-"),
                   "training.kubeflow.org/replica-type": rtype.lower(),
                   "training.kubeflow.org/replica-index": str(index)})
    if job["kind"] in ("TFJob", "PyTorchJob") and _is_master(replicas, rtype, index):
        labels["training.kubeflow.org/job-role"] = "master"
    spec = template.setdefault("spec", {})
    policy = rspec.get("restartPolicy") or ""
    spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    if not spec["restartPolicy"]:
        del spec["restartPolicy"]
    if gang_scheduler:  # SchedulerPluginsControl.DecoratePodTemplateSpec
        if not spec.get("schedulerName"):
            spec["schedulerName"] = gang_scheduler
        labels[GROUP_LABEL] = job["metadata"]["name"]
    name = f"{job['metadata']['name']}-{rtype.lower()}-{index}".replace("/", "-")
    meta: JSON = {"name": name, "namespace": job["metadata"].get("namespace"), "labels": labels,
                  "ownerReferences": [controller_ref(job)]}
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _mpi_template(job: JSON, rtype: str, role: str, gang_scheduling: str) -> JSON:
    """The ``rtype`` template with ``defaultLabels(job, role)``, decorated for gang scheduling
    (``SchedulerPluginsCtrl.decoratePodTemplateSpec``: schedulerName always overwritten, the pod-group label)."""
    template = copy.deepcopy(((job["spec"].get("mpiReplicaSpecs") or {}).get(rtype) or {}).get("template") or {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"training.kubeflow.org/operator-name": "mpi-operator",
                   "training.kubeflow.org/job-name": job["metadata"]["name"],
                   "training.kubeflow.org/job-role": role})
    template.setdefault("spec", {})
    if gang_scheduling:
        template["spec"]["schedulerName"] = gang_scheduling
        labels[GROUP_LABEL] = job["metadata"]["name"]
    return template


def mpi_worker_pod(job: JSON, index: int, gang_scheduling: str = "") -> JSON:
    """``newWorker``: Pod ``<job>-worker-<index>`` of stored MPIJob ``job`` (module docstring)."""
    name = job["metadata"]["name"]
    template = _mpi_template(job, "Worker", "worker", gang_scheduling)
    template["metadata"]["labels"]["training.kubeflow.org/replica-index"] = str(index)
    template["spec"].update(hostname=f"{name}-worker-{index}", subdomain=name)
    pod: JSON = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{name}-worker-{index}", "namespace": job["metadata"].get("namespace"),
                              "labels": template["metadata"]["labels"], "ownerReferences": [controller_ref(job)]},
                 "spec": template["spec"]}
    if template["metadata"].get("annotations"):
        pod["metadata"]["annotations"] = dict(template["metadata"]["annotations"])
    return pod


def mpi_launcher_job(job: JSON, gang_scheduling: str = "") -> JSON:
    """``newLauncherJob``: Job ``<job>-launcher`` of stored MPIJob ``job``, labels ``{app: <job>}`` only; the
    ``runPolicy``'s ``ttlSecondsAfterFinished``, ``activeDeadlineSeconds`` and ``backoffLimit``, and ``suspend``
    when the MPIJob is suspended."""
    name = job["metadata"]["name"]
    template = _mpi_template(job, "Launcher", "launcher", gang_scheduling)
    template["spec"].update(hostname=f"{name}-launcher", subdomain=name)
    template["spec"].setdefault("restartPolicy", "OnFailure")
    run = (job.get("spec") or {}).get("runPolicy") or {}
    spec: JSON = {"template": template, "podReplacementPolicy": "Failed"}
    spec.update({k: run[v] for k, v in (("ttlSecondsAfterFinished", "ttlSecondsAfterFinished"),
                                         ("activeDeadlineSeconds", "activeDeadlineSeconds"),
                                         ("backoffLimit", "backoffLimit")) if run.get(v) is not None})
    if run.get("suspend"):
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-launcher", "namespace": job["metadata"].get("namespace"),
                         "labels": {"app": name}, "ownerReferences": [controller_ref(job)]},
            "spec": spec}


class TrainingOperator(OperatorEmulation):
    """The emulated training-operator v1 (module docstring).

    Args:
        api: the fake.
        gang_scheduler_name: ``--gang-scheduler-name`` (``""``: gang scheduling off). ``volcano`` is not emulated.
    """

    component = "training-operator"

    def __init__(self, api: "FakeKubeAPI", *, gang_scheduler_name: str = "") -> None:
        super().__init__(api, service_account("kubeflow", "training-operator"))
        if gang_scheduler_name.lower() == "volcano":
            raise ValueError("the training-operator's Volcano path is not emulated")
        self.gang_scheduler_name = gang_scheduler_name
        for plural in REPLICA_SPECS:
            self.watch("kubeflow.org/v1", plural, self._sync_kind(plural))

    def _sync_kind(self, plural: str) -> Sync:
        async def sync(ns: str, name: str) -> None:
            job = self.live("kubeflow.org/v1", plural, ns, name)
            if job is None:
                return
            replicas = (job.get("spec") or {}).get(REPLICA_SPECS[plural]) or {}
            if self._suspend_or_restart(job, replicas):
                return
            counts = {rtype: (r or {}).get("replicas", 1) for rtype, r in replicas.items()}
            if self.gang_scheduler_name:
                self._sync_pod_group(job, _min_member(job, sum(counts.values())))
            have = {p["metadata"]["name"] for p in self.owned("v1", "pods", ns, job["metadata"]["uid"])}
            for rtype, count in counts.items():
                for index in range(count):
                    pod = training_operator_pod(job, rtype, index, self.gang_scheduler_name)
                    if pod["metadata"]["name"] not in have:
                        if await self.create(job, "v1", "pods", pod, "FailedCreatePod") is None:
                            return
        return sync

    def observe(self, rt: Any, ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """A job written, or one of its pods (``pytorchjob_controller.go`` ``SetupWithManager``: the Pod watch with
        ``handler.TypedEnqueueRequestForOwner(..., handler.OnlyControllerOwner())`` enqueues the controlling job)."""
        if rt.key == ("", "v1", "pods"):
            for ref in (obj or old or {}).get("metadata", {}).get("ownerReferences") or []:
                plural = f"{str(ref.get('kind', '')).lower()}s"
                if ref.get("controller") and ref.get("apiVersion") == "kubeflow.org/v1" and plural in REPLICA_SPECS:
                    super().observe(self.api.resource_type("kubeflow.org/v1", plural), ns, ref["name"], ref)
            return
        super().observe(rt, ns, name, obj, old)

    def _suspend_or_restart(self, job: JSON, replicas: JSON) -> bool:
        """``ReconcileJobs`` for a suspended job (``CleanUpResources``: every pod deleted; True), else
        ``ReconcilePods``' restart of each failed pod whose replica restarts (``OnFailure``, ``Always``, or
        ``ExitCode`` with a retryable code, ``IsRetryableExitCode``: 128 and above): deleted, so this sync makes it
        again under the same name."""
        ns, uid = job["metadata"]["namespace"], job["metadata"]["uid"]
        suspended = bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
        policy = {rtype.lower(): (r or {}).get("restartPolicy") for rtype, r in replicas.items()}
        for pod in self.owned("v1", "pods", ns, uid):
            status = pod.get("status") or {}
            code = next((((c.get("state") or {}).get("terminated") or {}).get("exitCode", 0xbeef)
                         for c in status.get("containerStatuses") or []), 0xbeef)
            rule = policy.get(str((pod["metadata"].get("labels") or {}).get("training.kubeflow.org/replica-type")))
            if suspended or (status.get("phase") == "Failed" and (
                    rule in ("OnFailure", "Always") or (rule == "ExitCode" and code >= 128))):
                self.api.delete_object("v1", "pods", ns, pod["metadata"]["name"])
        return suspended

    def _sync_pod_group(self, job: JSON, min_member: int) -> None:
        """``SyncPodGroup``: create, or update the spec of whatever PodGroup has the job's name."""
        meta = job["metadata"]
        want = _pod_group(job, min_member, annotations=True)
        have = self.api.get(PG_API, "podgroups", meta.get("namespace"), meta["name"])
        if have is None:
            self.api.put(want)
        elif {k: have["spec"].get(k) for k in want["spec"]} != want["spec"]:
            have["spec"].update(want["spec"])
            self.api.put(have)


class MPIOperator(OperatorEmulation):
    """The emulated mpi-operator v0.8 (module docstring).

    Args:
        api: the fake (a ``FakeControlPlane(job_controller=True)`` for the launcher's Pod).
        gang_scheduling: ``--gang-scheduling`` (``""``: off). ``volcano`` is not emulated.
    """

    component = "mpi-operator"
    API = "kubeflow.org/v2beta1"

    def __init__(self, api: "FakeKubeAPI", *, gang_scheduling: str = "") -> None:
        super().__init__(api, service_account("mpi-operator", "mpi-operator"))
        if gang_scheduling.lower() == "volcano":
            raise ValueError("the mpi-operator's Volcano path is not emulated")
        self.gang_scheduling = gang_scheduling
        self.watch(self.API, "mpijobs", self._sync)

    async def _sync(self, ns: str, name: str) -> None:
        job = self.live(self.API, "mpijobs", ns, name)
        if job is None:
            return
        meta, spec = job["metadata"], job.get("spec") or {}
        bodies: list[JSON] = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                               "spec": {"clusterIP": "None", "selector": {"training.kubeflow.org/job-name": name}}},
                              {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"}},
                              {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-ssh"}}]
        for body in bodies:
            try:
                self.api.resource_type(body["apiVersion"], body["kind"])
            except KeyError:
                continue  # a kind the fake does not serve
            if self.api.get(body["apiVersion"], body["kind"], ns, body["metadata"]["name"]) is None:
                body["metadata"].update(namespace=ns, ownerReferences=[controller_ref(job)])
                self.api.put(body)
        suspended = bool((spec.get("runPolicy") or {}).get("suspend"))
        if not suspended and not await self._workers(job):
            return
        launcher = self.live("batch/v1", "jobs", ns, f"{name}-launcher")
        policy = spec.get("launcherCreationPolicy") or "AtStartup"
        if launcher is None and policy == "AtStartup":
            await self.create(job, "batch/v1", "jobs", mpi_launcher_job(job, self.gang_scheduling), "MPIJobFailed")
        elif launcher is not None and bool(launcher["spec"].get("suspend")) != suspended:
            await self._suspend_launcher(job, launcher, suspended)
        if suspended:  # cleanUpWorkerPods -> deleteWorkerPods (the PodGroup too, with the operator's own gang)
            for pod in self.owned("v1", "pods", ns, meta["uid"]):
                if pod["metadata"]["name"].startswith(f"{name}-worker-"):
                    self.api.delete_object("v1", "pods", ns, pod["metadata"]["name"])

    async def _suspend_launcher(self, job: JSON, launcher: JSON, suspended: bool) -> None:
        """``syncHandler``: the launcher Job's ``spec.suspend`` aligned with the MPIJob's; on a resume its
        ``startTime`` cleared first (``UpdateStatus``, :func:`kit.clear_start_time`), then its template's scheduling
        directives synced (``syncLauncherSchedulingDirectives``: labels and annotations merged, nodeSelector,
        tolerations and schedulingGates replaced by the MPIJob's Launcher template's). An Update through admission
        as the operator; a refusal is kept in :attr:`errors`."""
        if not suspended:  # "we must clear it [StartTime] first via a status sub-resource update"
            launcher = clear_start_time(self.api, launcher)
        new = copy.deepcopy(launcher)
        new["spec"]["suspend"] = suspended
        if not suspended:
            desired, template = mpi_launcher_job(job, self.gang_scheduling)["spec"]["template"], new["spec"]["template"]
            meta = template.setdefault("metadata", {})
            for key in ("labels", "annotations"):  # mergeMaps(launcher's, desired's)
                meta[key] = {**(meta.get(key) or {}), **(desired["metadata"].get(key) or {})}
                if not meta[key]:
                    del meta[key]
            for key in ("nodeSelector", "tolerations", "schedulingGates"):
                template["spec"].pop(key, None)
                if desired["spec"].get(key):
                    template["spec"][key] = desired["spec"][key]
        ns = launcher["metadata"]["namespace"]
        try:
            await self.api.admitted_update(self.api.resource_type("batch/v1", "jobs"), ns, launcher["metadata"]["name"],
                                           new, dry_run=False, user=self.user)
        except ApiError as e:
            self.errors.append((ns, job["metadata"]["name"], f"launcher Job update refused: {e.message}"))

    async def _workers(self, job: JSON) -> bool:
        """The PodGroup (with the operator's own gang scheduling) and the workers (``getOrCreatePodGroups``,
        ``getOrCreateWorker``); False when the sync stops there."""
        meta, spec = job["metadata"], job.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        workers = ((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 0) or 0
        if self.gang_scheduling:
            want = _pod_group(job, _min_member(job, workers + 1), annotations=False)
            have = self.api.get(PG_API, "podgroups", ns, name)
            if have is None:
                self.api.put(want)
            elif not owned_by(have, meta["uid"]):
                message = f'Resource "{name}" of Kind "PodGroup" already exists and is not managed by MPIJob'
                self.errors.append((ns, name, message))
                self.event(job, "Warning", "ErrResourceExists", message)
                return False
            elif {k: have["spec"].get(k) for k in want["spec"]} != want["spec"]:
                have["spec"].update(want["spec"])
                self.api.put(have)
        have_pods = {p["metadata"]["name"] for p in self.owned("v1", "pods", ns, meta["uid"])}
        for i in range(workers):
            pod = mpi_worker_pod(job, i, self.gang_scheduling)
            if pod["metadata"]["name"] in have_pods:
                continue
            if await self.create(job, "v1", "pods", pod, "MPIJobFailed") is None:
                return False
        return True

    def observe(self, rt: "ResourceType", ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """A write of an MPIJob; or a deleted Pod or Job an MPIJob controls (``handleObject``: a lost worker, a
        deleted launcher), which syncs that MPIJob again."""
        super().observe(rt, ns, name, obj, old)
        if obj is None and old is not None and rt.key in (("", "v1", "pods"), ("batch", "v1", "jobs")):
            for ref in old["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == "MPIJob" and ref.get("apiVersion") == self.API:
                    self._loops[self.api.resource_type(self.API, "mpijobs").key].changed(ns, ref["name"])


def install_training_operator(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None, *,
                              gang_scheduler_name: str = "") -> TrainingOperator:
    """Run the training-operator on ``api``. Its webhooks (``pkg/webhooks``: the jobs' validators, on replica specs
    and container names) check nothing admit writes, so ``chain`` is not used."""
    return api.add_controller(TrainingOperator(api, gang_scheduler_name=gang_scheduler_name))


def install_mpi_operator(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None, *,
                         gang_scheduling: str = "") -> MPIOperator:
    """Run the mpi-operator on ``api`` (a ``FakeControlPlane(job_controller=True)`` for the launcher's Pod). It
    registers no admission webhook."""
    return api.add_controller(MPIOperator(api, gang_scheduling=gang_scheduling))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): what the training-operator, Kueue, a user and a GitOps tool send after
# the CREATE
# ----------------------------------------------------------------------------------------------------------------------

USER_WRITER = {"username": "alice", "groups": ["system:authenticated"]}
KF_API = "kubeflow.org/v1"


def _install_later(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None) -> TrainingOperator:
    """The training-operator without gang scheduling (``--gang-scheduler-name`` unset: admit gangs the jobs)."""
    return install_training_operator(api, chain)


def _note(op: TrainingOperator, obj: JSON, problem: str | None) -> None:
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


async def _settle(op: TrainingOperator) -> None:
    await op.api.settle()
    await op.idle()


def _plural(obj: JSON) -> str:
    return f"{obj['kind'].lower()}s"


def replica_pod_sets(job: JSON) -> list[tuple[str, JSON]]:
    """A Kubeflow job's pod sets for Kueue: one per replica type, in ``OrderedReplicaTypes`` order (here the
    spec's), named after it in lower case (``kubeflowjob.PodSets``)."""
    specs = (job.get("spec") or {}).get(REPLICA_SPECS[_plural(job)]) or {}
    return [(rtype.lower(), (specs[rtype] or {}).setdefault("template", {})) for rtype in specs]


async def _set_suspend(op: TrainingOperator, obj: JSON, value: bool) -> None:
    api, ns, name, plural = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"], _plural(obj)
    stored = api.get(KF_API, plural, ns, name)
    if stored is None:
        return
    stored["spec"].setdefault("runPolicy", {})["suspend"] = value
    try:
        await api.admitted_update(api.resource_type(KF_API, plural), ns, name, stored, dry_run=False,
                                  user=USER_WRITER)
    except ApiError as e:
        _note(op, obj, f"the user's runPolicy.suspend: {str(value).lower()} refused: {e.message}")
    await _settle(op)


async def suspend_and_resume(op: TrainingOperator, obj: JSON) -> None:
    """A user suspends the running job and resumes it (``runPolicy.suspend``): ``ReconcileJobs`` ->
    ``CleanUpResources`` deletes its pods (and, with the operator's own gang scheduling, its PodGroup; not here),
    then the resumed job's pods are created again (``ReconcilePods``)."""
    await _set_suspend(op, obj, True)
    await _set_suspend(op, obj, False)


async def a_replica_fails_and_restarts(op: TrainingOperator, obj: JSON) -> None:
    """One replica's pod fails (``Failed``, exit code 137, as the kubelet reports it) and the operator restarts it
    (``ReconcilePods``: ``OnFailure``, ``Always`` or a retryable ``ExitCode`` -> ``DeletePod``; the next sync
    creates it again under the same name)."""
    api, ns = op.api, obj["metadata"]["namespace"]
    job = api.get(KF_API, _plural(obj), ns, obj["metadata"]["name"])
    pods = sorted(op.owned("v1", "pods", ns, job["metadata"]["uid"]), key=lambda p: p["metadata"]["name"]) \
        if job is not None else []
    if not pods:
        return
    pod = pods[-1]
    api.put({**pod, "apiVersion": "v1", "kind": "Pod", "status": {"phase": "Failed", "containerStatuses": [
        {"name": pod["spec"]["containers"][0]["name"], "state": {"terminated": {"exitCode": 137}}}]}})
    await _settle(op)


async def kueue_evicts_and_readmits(op: TrainingOperator, obj: JSON) -> None:
    """Kueue (v0.19.2 ``pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go``: ``Suspend``,
    ``RestorePodSetsInfo``, ``RunWithPodSetsInfo`` on ``runPolicy.suspend`` and each replica's template; through
    ``tests.emulations.kueue``) evicts the running job and admits it again."""
    from . import kueue

    api, ns, name, plural = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"], _plural(obj)
    workload = api.get(KF_API, plural, ns, name)
    if workload is None:
        return
    suspend = ("spec", "runPolicy", "suspend")
    if not ((workload["spec"].get("runPolicy") or {}).get("suspend")):
        _note(op, obj, await kueue.stop(api, KF_API, plural, ns, name, replica_pod_sets, workload,
                                        suspend_path=suspend))
        await _settle(op)
    _note(op, obj, await kueue.start(api, KF_API, plural, ns, name, replica_pod_sets, suspend_path=suspend))
    await _settle(op)


async def gitops_reapply(op: TrainingOperator, obj: JSON) -> None:
    """A GitOps tool re-applies the user's manifest (``tests.emulations.gitops``)."""
    from . import gitops

    _note(op, obj, await gitops.reapply(op.api, obj, _plural(obj)))


def gangs_of(op: TrainingOperator, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The job's live pods (not finished), one gang; none without pods."""
    job = op.api.get(KF_API, _plural(obj), obj["metadata"]["namespace"], obj["metadata"]["name"])
    if job is None:
        return []
    pods = [p for p in op.owned("v1", "pods", obj["metadata"]["namespace"], job["metadata"]["uid"])
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return [(f"{obj['kind']} {obj['metadata']['name']}", pods)] if pods else []


def refused_writes(op: TrainingOperator) -> list[tuple[str, str, str]]:
    """The operator's refused pod creates and the later writes' problems."""
    return list(op.errors)


def _restarts(obj: JSON) -> bool:
    specs = (obj.get("spec") or {}).get(REPLICA_SPECS.get(_plural(obj), "")) or {}
    return any((r or {}).get("restartPolicy") in ("OnFailure", "Always", "ExitCode") for r in specs.values())


_V1 = "kubeflow/trainer release-1.9 (training-operator v1.9)"
LATER_WRITES = (
    reapply_write(gitops_reapply),
    LaterWrite("user suspends and resumes", f"{_V1} pkg/controller.v1/common/job.go ReconcileJobs, "
               "CleanUpResources; pkg/controller.v1/common/pod.go ReconcilePods", "spec.runPolicy.suspend",
               lambda obj: True, suspend_and_resume),
    LaterWrite("a replica fails and restarts", f"{_V1} pkg/controller.v1/common/pod.go ReconcilePods (DeletePod "
               "of a failed pod, createNewPod)", "replica restartPolicy OnFailure, Always or ExitCode (retryable "
               "exit codes: pkg/util/train IsRetryableExitCode)", _restarts, a_replica_fails_and_restarts),
    LaterWrite("Kueue evicts and re-admits", "kubernetes-sigs/kueue pkg/controller/jobs/kubeflow/kubeflowjob/"
               "kubeflowjob_controller.go RunWithPodSetsInfo, RestorePodSetsInfo, Suspend (v0.19.2)",
               "Kueue's kubeflow.org integrations (integrations.frameworks), a kueue.x-k8s.io/queue-name label",
               lambda obj: True, kueue_evicts_and_readmits),
)

LATER = Emulated("kubeflow", _install_later, tuple((KF_API, kind) for kind in (
    "PyTorchJob", "TFJob")), LATER_WRITES, gangs_of, refused_writes)
