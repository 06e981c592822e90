"""The mpi-operator's later writes to an MPIJob (kubeflow.org/v2beta1) through a real kube-apiserver, which calls
admit's webhooks as the chart registers them (tier ``apiserver``: the mpi-operator does not run; its workers and
launcher Job are shaped by the emulation's code, ``tests/emulations/kubeflow.py`` ``mpi_worker_pod`` /
``mpi_launcher_job``, written from kubeflow/mpi-operator v0.8.2 ``pkg/controller/mpi_job_controller.go``). Checked:
a user's suspend and resume, the operator's launcher Update of each (``syncHandler``,
``syncLauncherSchedulingDirectives``) and its workers made again, all allowed, every pod in the job's gang."""

from __future__ import annotations

import pytest

from tests.emulations.kubeflow import mpi_launcher_job, mpi_worker_pod
from tests.real.support import clear_start_time, container, update

pytestmark = pytest.mark.needs("apiserver")

MERGE = "application/merge-patch+json"


def mpijob(ns: str) -> dict:
    """The mpi-operator's pi example: a Launcher and two Workers, ganged by admit (``min-member: auto``)."""
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "namespace": ns, "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"}, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [container(name="launcher")]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [container(name="worker")]}}}}}}


def test_suspending_and_resuming_an_mpijob_goes_through_and_its_pods_join_its_gang_again(plane, ns):
    cp = plane.cp
    jobs, pods = f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs", f"/api/v1/namespaces/{ns}/pods"
    stored = cp.rest("POST", jobs, body=mpijob(ns))
    assert cp.rest("GET", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/pi")["spec"][
        "minMember"] == 3
    for i in range(2):  # getOrCreateWorker, then the launcher (AtStartup)
        cp.rest("POST", pods, body=mpi_worker_pod(stored, i))
    launcher_path = f"/apis/batch/v1/namespaces/{ns}/jobs/pi-launcher"
    cp.rest("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=mpi_launcher_job(stored))
    # The user suspends it; the operator suspends the launcher and deletes the workers (cleanUpWorkerPods). Its
    # Update is of the launcher as its cache holds it: the Job controller, running the launcher meanwhile, moves its
    # resourceVersion, and a Conflict is retried.
    cp.rest("PATCH", f"{jobs}/pi", body={"spec": {"runPolicy": {"suspend": True}}}, content_type=MERGE)
    update(cp, launcher_path, lambda job: job["spec"].update(suspend=True))
    for i in range(2):
        cp.rest("DELETE", f"{pods}/pi-worker-{i}", query={"gracePeriodSeconds": 0})
    # Resumed: the launcher's startTime cleared (UpdateStatus), its scheduling directives synced from the MPIJob and
    # unsuspended, the workers made again.
    resumed = cp.rest("PATCH", f"{jobs}/pi", body={"spec": {"runPolicy": {"suspend": False}}}, content_type=MERGE)
    desired = mpi_launcher_job(resumed)["spec"]["template"]
    clear_start_time(cp, launcher_path)

    def resume(job: dict) -> None:
        job["spec"]["template"]["metadata"]["labels"].update(desired["metadata"]["labels"])
        job["spec"]["suspend"] = False

    launcher = update(cp, launcher_path, resume)
    made = [cp.rest("POST", pods, body=mpi_worker_pod(resumed, i)) for i in range(2)]
    assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in made} == {"pi"}
    assert launcher["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"
    assert cp.rest("GET", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/pi")["spec"][
        "minMember"] == 3
