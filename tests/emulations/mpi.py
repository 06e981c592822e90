"""The writes to an MPIJob (``kubeflow.org/v2beta1``) after its CREATE, for the later writes of
tests/emulations/later.py: the mpi-operator's (kubeflow/mpi-operator ``caa3c47``, v0.8.2;
``pkg/controller/mpi_job_controller.go``, emulated by ``tests.emulations.kubeflow.MPIOperator`` without its own gang
scheduling, ``--gang-scheduling`` unset: admit gangs the job), Kueue's and a GitOps tool's.

- **Suspend and resume** (``runPolicy.suspend``, a user's or Kueue's write): ``syncHandler`` aligns the launcher
  Job's ``spec.suspend`` with the MPIJob's (an Update), and on a resume first syncs the launcher template's scheduling
  directives (``syncLauncherSchedulingDirectives``); ``cleanUpWorkerPods`` (``deleteWorkerPods``) deletes the
  workers of a suspended MPIJob and ``getOrCreateWorker`` makes them again on the resume; the fake's Job controller
  deletes a suspended launcher's pod and makes it again.
- **A worker lost** (node loss, an eviction: its Pod deleted): ``handleObject`` enqueues the MPIJob and
  ``getOrCreateWorker`` makes ``<job>-worker-<i>`` again.
- **The launcher Job deleted** (``kubectl delete job``, a clean-up tool): ``syncHandler`` finds no launcher of a job
  not done and makes it again (``newLauncherJob``, ``launcherCreationPolicy: AtStartup``).
- **The launcher's pod fails**: the launcher Job's ``backoffLimit`` (``runPolicy.backoffLimit``, ``newLauncherJob``)
  lets the Job controller replace it.
- **Kueue's eviction and re-admission** (kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobs/mpijob/
  mpijob_controller.go``: ``Suspend`` on ``runPolicy.suspend``, ``RunWithPodSetsInfo`` / ``RestorePodSetsInfo`` on
  the Launcher and Worker templates, pod sets ``launcher`` and ``worker`` in ``orderedReplicaTypes`` order).
- **A GitOps re-apply** of the user's manifest (``tests.emulations.gitops``).

Not emulated: ``cleanPodPolicy`` and ``ttlSecondsAfterFinished`` at the end (no job finishes here), a change of the
worker count (a user's write: admit judges that UPDATE of the MPIJob), ``launcherCreationPolicy: WaitForWorkersReady``
(no worker is ever Ready without a kubelet), ``runLauncherAsWorker``, ``runPolicy.managedBy`` (MultiKueue).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .gitops import reapply_write
from .kcm import JobController, ensure_running, running
from .kubeflow import MPIOperator, install_mpi_operator
from .later import Emulated, LaterWrite
from admit.testing.fake_kube import ApiError

if TYPE_CHECKING:
    from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI

__all__ = ["install", "LATER"]

JSON = dict[str, Any]
API = MPIOperator.API
USER = {"username": "alice", "groups": ["system:authenticated"]}
SOURCE = "kubeflow/mpi-operator v0.8.2 (caa3c47) pkg/controller/mpi_job_controller.go "


def install(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None) -> MPIOperator:
    """The mpi-operator without its own gang scheduling, and the fake's Job controller for the launcher's pod."""
    ensure_running(api, JobController)
    return install_mpi_operator(api, chain)


def _note(op: MPIOperator, obj: JSON, problem: str | None) -> None:
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


async def _settle(op: MPIOperator) -> None:
    await op.api.settle()
    await op.idle()


def _stored(op: MPIOperator, obj: JSON) -> JSON | None:
    return op.live(API, "mpijobs", obj["metadata"]["namespace"], obj["metadata"]["name"])


def _launcher(op: MPIOperator, obj: JSON) -> JSON | None:
    return op.live("batch/v1", "jobs", obj["metadata"]["namespace"], f"{obj['metadata']['name']}-launcher")


async def _set_suspend(op: MPIOperator, obj: JSON, value: bool) -> None:
    stored = _stored(op, obj)
    if stored is None:
        return
    stored["spec"].setdefault("runPolicy", {})["suspend"] = value
    try:
        await op.api.admitted_update(op.api.resource_type(API, "mpijobs"), stored["metadata"]["namespace"],
                                     stored["metadata"]["name"], stored, dry_run=False, user=USER)
    except ApiError as e:
        _note(op, obj, f"the user's runPolicy.suspend: {str(value).lower()} refused: {e.message}")
    await _settle(op)


async def suspend_and_resume(op: MPIOperator, obj: JSON) -> None:
    """A user suspends the running MPIJob and resumes it (module docstring)."""
    await _set_suspend(op, obj, True)
    await _set_suspend(op, obj, False)


async def a_worker_is_lost(op: MPIOperator, obj: JSON) -> None:
    """Worker 0's Pod is deleted (its node is gone) and the operator makes it again."""
    op.api.delete_object("v1", "pods", obj["metadata"]["namespace"], f"{obj['metadata']['name']}-worker-0")
    await _settle(op)


async def the_launcher_is_deleted(op: MPIOperator, obj: JSON) -> None:
    """The launcher Job is deleted (its pod goes with it, the garbage collector's) and the operator makes it again."""
    if _launcher(op, obj) is not None:
        op.api.delete_object("batch/v1", "jobs", obj["metadata"]["namespace"], f"{obj['metadata']['name']}-launcher")
    await _settle(op)


async def the_launcher_pod_fails(op: MPIOperator, obj: JSON) -> None:
    """The launcher's pod fails (exit code 1, as the kubelet reports it) and the Job controller replaces it."""
    launcher = _launcher(op, obj)
    pods = op.owned("v1", "pods", obj["metadata"]["namespace"], launcher["metadata"]["uid"]) if launcher else []
    for pod in pods[:1]:
        op.api.put({**pod, "apiVersion": "v1", "kind": "Pod", "status": {"phase": "Failed", "containerStatuses": [
            {"name": pod["spec"]["containers"][0]["name"], "state": {"terminated": {"exitCode": 1}}}]}})
    await _settle(op)


def mpi_pod_sets(job: JSON) -> list[tuple[str, JSON]]:
    """An MPIJob's pod sets for Kueue: ``launcher`` then ``worker`` (``orderedReplicaTypes``)."""
    specs = (job.get("spec") or {}).get("mpiReplicaSpecs") or {}
    return [(rtype.lower(), specs[rtype].setdefault("template", {})) for rtype in ("Launcher", "Worker")
            if specs.get(rtype)]


async def kueue_evicts_and_readmits(op: MPIOperator, obj: JSON) -> None:
    """Kueue evicts the running MPIJob and admits it again (``tests.emulations.kueue``)."""
    from . import kueue

    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    workload = _stored(op, obj)
    if workload is None:
        return
    suspend = ("spec", "runPolicy", "suspend")
    if not (workload["spec"].get("runPolicy") or {}).get("suspend"):
        _note(op, obj, await kueue.stop(op.api, API, "mpijobs", ns, name, mpi_pod_sets, workload,
                                        suspend_path=suspend))
        await _settle(op)
    _note(op, obj, await kueue.start(op.api, API, "mpijobs", ns, name, mpi_pod_sets, suspend_path=suspend))
    await _settle(op)


async def gitops_reapply(op: MPIOperator, obj: JSON) -> None:
    """A GitOps tool re-applies the user's manifest (``tests.emulations.gitops``)."""
    from . import gitops

    _note(op, obj, await gitops.reapply(op.api, copy.deepcopy(obj), "mpijobs"))


def gangs_of(op: MPIOperator, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The MPIJob's workers and its launcher's pods, live and not finished: one gang; none while it has none."""
    job, launcher = _stored(op, obj), _launcher(op, obj)
    if job is None:
        return []
    ns = obj["metadata"]["namespace"]
    pods = op.owned("v1", "pods", ns, job["metadata"]["uid"])
    pods += op.owned("v1", "pods", ns, launcher["metadata"]["uid"]) if launcher is not None else []
    pods = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return [(f"MPIJob {obj['metadata']['name']}", pods)] if pods else []


def refused_writes(op: MPIOperator) -> list[tuple[str, str, str]]:
    """The operator's refused writes, the later writes' problems, and the Job controller's refused pods."""
    jobs = running(op.api, JobController)
    return list(op.errors) + list(jobs.errors if jobs is not None else [])


LATER_WRITES = (
    reapply_write(gitops_reapply),
    LaterWrite("user suspends and resumes", SOURCE + "syncHandler (launcher suspend, syncLauncherSchedulingDirectives"
               "), cleanUpWorkerPods, getOrCreateWorker", "spec.runPolicy.suspend", lambda obj: True,
               suspend_and_resume),
    LaterWrite("a worker is lost and made again", SOURCE + "handleObject, getOrCreateWorker",
               "always (a Pod deleted: node loss, eviction)", lambda obj: True, a_worker_is_lost),
    LaterWrite("the launcher Job is deleted and made again", SOURCE + "syncHandler, newLauncherJob",
               "launcherCreationPolicy AtStartup (the default)", lambda obj: True, the_launcher_is_deleted),
    LaterWrite("the launcher's pod fails and is replaced", SOURCE + "newLauncherJob (runPolicy.backoffLimit); "
               "kubernetes pkg/controller/job/job_controller.go manageJob", "runPolicy.backoffLimit (Job default 6)",
               lambda obj: True, the_launcher_pod_fails),
    LaterWrite("Kueue evicts and re-admits", "kubernetes-sigs/kueue v0.19.2 pkg/controller/jobs/mpijob/"
               "mpijob_controller.go RunWithPodSetsInfo, RestorePodSetsInfo, Suspend", "Kueue's kubeflow.org/mpijob "
               "integration (integrations.frameworks), a kueue.x-k8s.io/queue-name label", lambda obj: True,
               kueue_evicts_and_readmits),
)

LATER = Emulated("mpi", install, ((API, "MPIJob"),), LATER_WRITES, gangs_of, refused_writes)
