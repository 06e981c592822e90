"""The Kubeflow training-operator v1 and the mpi-operator end to end on the fake API: the user's annotated job goes
in, the operator emulation (``tests/emulations/kubeflow.py``) makes its PodGroup (with gang scheduling on),
Pods and launcher Job through admission, and the gang is checked as a user would. Both operator flags
(``--gang-scheduler-name``, ``--gang-scheduling``) are run with admit's matching ``--kubeflow-gang-by-operator``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admit.config import Config
from tests.emulations.kubeflow import (MPIOperator, TrainingOperator, install_mpi_operator,
                                              install_training_operator)
from tests.helpers import eventually
from tests.operator_stack import PG, gang_problems, lost, operator_cluster, pod_groups_of, pods_of

NS = "research"
SCHED = "scheduler-plugins-scheduler"


def container(name: str, cpu: str = "1") -> dict[str, Any]:
    return {"name": name, "image": "kubeflow/pytorch-dist-mnist:latest", "resources": {"requests": {"cpu": cpu}}}


def pytorchjob(workers: int = 3, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "mnist", "namespace": NS,
                         "annotations": {"gang.admit.dev/min-member": "auto", **annotations}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": {"metadata": {"labels": {"team": "nlp"}},
                                        "spec": {"containers": [container("pytorch")]}}},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure",
                           "template": {"spec": {"containers": [container("pytorch", "2")]}}}}}}


def tfjob() -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "dist", "namespace": NS, "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"tfReplicaSpecs": {
                "PS": {"replicas": 1, "template": {"spec": {"containers": [container("tensorflow")]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [container("tensorflow")]}}}}}}


def mpijob(workers: int = 2, policy: str = "AtStartup") -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "namespace": NS, "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"slotsPerWorker": 1, "launcherCreationPolicy": policy, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [container("launcher")]}}},
                "Worker": {"replicas": workers, "template": {"metadata": {"annotations": {"example.com/rack": "r1"}},
                                                             "spec": {"containers": [container("worker")]}}}}}}


async def create(user: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from kubernetes_asyncio import client as k8s

    group, version = obj["apiVersion"].split("/")
    return await k8s.CustomObjectsApi(user).create_namespaced_custom_object(
        group, version, NS, obj["kind"].lower() + "s", copy.deepcopy(obj))


def all_pods(fake: Any) -> list[dict[str, Any]]:
    return fake.objects("pods", NS)


@pytest.mark.parametrize("gang_by_operator", [False, True], ids=["admit-gangs", "operator-gangs"])
@pytest.mark.parametrize("job", [pytorchjob(), tfjob()], ids=["PyTorchJob", "TFJob"])
async def test_the_training_operator_makes_every_replica_pod_in_one_gang(aiohttp_server, job, gang_by_operator):
    config = Config(kubeflow_gang_by_operator=gang_by_operator)

    def operator(fake: Any, chain: Any) -> TrainingOperator:
        return install_training_operator(fake, chain, gang_scheduler_name=SCHED if gang_by_operator else "")

    async with operator_cluster(aiohttp_server, config, operator) as (fake, op, user):
        written = await create(user, job)
        replicas = sum(r["replicas"] for r in next(iter(job["spec"].values())).values())
        await eventually(lambda: len(all_pods(fake)) >= replicas)
        await op.idle()
        assert op.errors == []
        pods = pods_of(fake, NS, written["metadata"]["uid"])
        assert len(pods) == replicas
        assert gang_problems(fake, NS, pods, config) == []
        assert pod_groups_of(fake, NS) == [job["metadata"]["name"]]  # one gang object, whoever wrote it
        pg = fake.get(*PG, NS, job["metadata"]["name"])
        assert pg["spec"]["minMember"] == replicas
        writer = "training-operator" if gang_by_operator else "admit"
        assert (pg["metadata"]["ownerReferences"][0]["kind"] == job["kind"]) if gang_by_operator else \
            pg["metadata"]["annotations"]["gang.admit.dev/owner"].endswith(f"/{job['metadata']['name']}"), writer
        assert lost(job, written) == {}
        if job["kind"] == "PyTorchJob":
            master = next(p for p in pods if p["metadata"]["name"] == "mnist-master-0")
            assert master["metadata"]["labels"]["team"] == "nlp"
            assert master["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"


@pytest.mark.parametrize("gang_by_operator", [False, True], ids=["admit-gangs", "operator-gangs"])
async def test_the_mpi_operator_makes_its_workers_and_launcher_in_one_gang(aiohttp_server, gang_by_operator):
    config = Config(kubeflow_gang_by_operator=gang_by_operator)

    def operator(fake: Any, chain: Any) -> MPIOperator:
        return install_mpi_operator(fake, chain, gang_scheduling=SCHED if gang_by_operator else "")

    async with operator_cluster(aiohttp_server, config, operator, job_controller=True) as (fake, op, user):
        written = await create(user, mpijob())
        await eventually(lambda: len(all_pods(fake)) >= 3)
        await op.idle()
        assert op.errors == [] and fake.jobs.errors == []
        pods = all_pods(fake)
        roles = sorted(p["metadata"]["labels"]["training.kubeflow.org/job-role"] for p in pods)
        assert roles == ["launcher", "worker", "worker"]
        assert gang_problems(fake, NS, pods, config) == []
        assert pod_groups_of(fake, NS) == ["pi"]
        assert fake.get(*PG, NS, "pi")["spec"]["minMember"] == 3
        (launcher,) = fake.objects("jobs", NS)
        assert launcher["metadata"]["name"] == "pi-launcher" and launcher["metadata"]["labels"] == {"app": "pi"}
        worker = next(p for p in pods if p["metadata"]["name"] == "pi-worker-0")
        assert worker["metadata"]["annotations"]["example.com/rack"] == "r1"
        assert lost(mpijob(), written) == {}


async def test_a_suspended_and_resumed_mpijob_has_its_launcher_resynced_and_its_workers_made_again_in_one_gang(
        aiohttp_server):
    from tests.emulations import mpi

    async with operator_cluster(aiohttp_server, Config(), mpi.install) as (fake, op, user):
        written = await create(user, mpijob())
        await fake.settle()
        await op.idle()
        await mpi._set_suspend(op, written, True)
        assert fake.get("batch/v1", "jobs", NS, "pi-launcher")["spec"]["suspend"] is True
        assert [p["metadata"]["name"] for p in all_pods(fake)] == []  # cleanUpWorkerPods; the Job controller
        await mpi._set_suspend(op, written, False)
        launcher = fake.get("batch/v1", "jobs", NS, "pi-launcher")
        assert launcher["spec"]["suspend"] is False
        assert launcher["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"
        pods = all_pods(fake)
        assert len(pods) == 3 and gang_problems(fake, NS, pods, Config()) == [] and mpi.refused_writes(op) == []


async def test_an_mpijob_waiting_for_its_workers_gets_a_gang_its_workers_alone_can_form(aiohttp_server):
    # WaitForWorkersReady: the launcher is created only once every worker is Ready, so it cannot be counted
    async with operator_cluster(aiohttp_server, Config(), install_mpi_operator, job_controller=True) as (fake, op, user):
        await create(user, mpijob(workers=3, policy="WaitForWorkersReady"))
        await eventually(lambda: len(all_pods(fake)) >= 3)
        await op.idle()
        pods = all_pods(fake)
        assert sorted(p["metadata"]["name"] for p in pods) == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
        assert fake.objects("jobs", NS) == []  # no launcher: no worker is ever Ready in the fake
        assert gang_problems(fake, NS, pods, Config(), can_exist_together=3) == []
        assert fake.get(*PG, NS, "pi")["spec"]["minMember"] == 3


async def test_an_mpi_operator_with_gang_scheduling_beside_admit_in_its_default_mode_makes_no_worker(aiohttp_server):
    # admit's PodGroup pi is not controlled by the MPIJob until admit's controller adopts it (not running here):
    # the mpi-operator refuses to go on (getOrCreatePodGroups), which is why the flag must match
    # admit's --kubeflow-gang-by-operator (docs/compatibility.md).
    def operator(fake: Any, chain: Any) -> MPIOperator:
        return install_mpi_operator(fake, chain, gang_scheduling=SCHED)

    async with operator_cluster(aiohttp_server, Config(), operator, job_controller=True) as (fake, op, user):
        await create(user, mpijob())
        await eventually(lambda: op.errors)
        await op.idle()
        assert all_pods(fake) == []
        assert "already exists and is not managed by MPIJob" in op.errors[0][2]


# ---------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/kubeflow.py LATER): the user's suspend and resume, a replica's restart, Kueue's
# eviction and re-admission, a GitOps re-apply; each allowed, the pods after it in the one gang that can form
# ---------------------------------------------------------------------------------------------------------------------

from tests.emulations import kubeflow as kubeflow_operator  # noqa: E402
from tests.emulations import kueue  # noqa: E402


def later_gang(fake: Any, op: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's live pods, after checking they form one gang that can form and nothing was refused."""
    gangs = kubeflow_operator.gangs_of(op, job)
    for _, pods in gangs:
        assert gang_problems(fake, NS, pods, Config()) == []
    assert kubeflow_operator.refused_writes(op) == []
    return [p for _, pods in gangs for p in pods]


async def test_a_ganged_pytorchjob_suspended_restarted_and_requeued_keeps_its_pods_in_the_gang(aiohttp_server):
    job = pytorchjob(workers=2)
    async with operator_cluster(aiohttp_server, Config(), kubeflow_operator.LATER.install,
                                gc_orphans_after=0.01) as (fake, op, user):
        await create(user, job)
        await fake.settle()
        await op.idle()
        assert len(later_gang(fake, op, job)) == 3
        await kubeflow_operator.suspend_and_resume(op, job)
        assert sorted(p["metadata"]["name"] for p in later_gang(fake, op, job)) == [
            "mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in later_gang(fake, op, job)}
        await kubeflow_operator.a_replica_fails_and_restarts(op, job)  # OnFailure: mnist-worker-1 made again
        after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in later_gang(fake, op, job)}
        assert after.keys() == before.keys() and after["mnist-worker-1"] != before["mnist-worker-1"]
        await kubeflow_operator.kueue_evicts_and_readmits(op, job)
        pods = later_gang(fake, op, job)
        assert len(pods) == 3 and all(p["spec"]["nodeSelector"] == kueue.FLAVOR["nodeLabels"] for p in pods)
        assert {p["metadata"]["labels"][kueue.POD_SET_LABEL] for p in pods} == {"master", "worker"}
        await kubeflow_operator.gitops_reapply(op, job)
        assert kubeflow_operator.refused_writes(op) == []
