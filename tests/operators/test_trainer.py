"""Kubeflow Trainer end to end on the fake (tests/emulations/trainer.py): the user's TrainJob goes through
admit's webhooks and Trainer's (its defaulter and its validator, which checks what admit wrote), the Trainer
emulation builds the JobSet from the runtime, the JobSet emulation makes the Jobs and the Job controller the pods."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any, AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import ApiException

from admit.config import Config

from tests.emulations import jobset as jobset_operator
from tests.emulations import kueue
from tests.emulations import trainer as trainer_operator
from tests.emulations.trainer import runtime_manifest
from tests.operator_stack import gang_problems
from tests.operators.conftest import operator_cluster

PG_LABEL = "scheduling.x-k8s.io/pod-group"
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def node_job(name: str = "node", *, labels: dict | None = None, depends_on: list | None = None,
             gpus: str = "1") -> dict[str, Any]:
    rj: dict[str, Any] = {"name": name, "template": {"metadata": {"labels": labels or {}}, "spec": {"template": {
        "spec": {"containers": [{"name": "node", "image": "pytorch/pytorch",
                                 "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}}}}}
    if depends_on:
        rj["dependsOn"] = depends_on
    return rj


def initializer(name: str) -> dict[str, Any]:
    return {"name": name, "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name}},
                                       "spec": {"template": {"spec": {"containers": [
                                           {"name": name, "image": f"ghcr.io/kubeflow/trainer/{name}"}]}}}}}


TORCH = runtime_manifest("torch-distributed", [node_job(labels=ANCESTOR)])
# manifests/base/runtimes/deepspeed_distributed.yaml: the launcher (the trainer step) after the nodes are Ready
DEEPSPEED = runtime_manifest(
    "deepspeed-distributed",
    [node_job(), node_job("launcher", labels=ANCESTOR, depends_on=[{"name": "node", "status": "Ready"}], gpus="0")],
    ml_policy={"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                      "runLauncherAsNode": True}})
# manifests/base/runtimes/torchtune/*: two initializers the trainer waits to complete
INITIALIZERS = [initializer("dataset-initializer"), initializer("model-initializer"),
                node_job(labels=ANCESTOR, depends_on=[{"name": "dataset-initializer", "status": "Complete"},
                                                      {"name": "model-initializer", "status": "Complete"}])]


def trainjob(runtime: str, num_nodes: int = 4, min_member: str = "auto", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": "default", "labels": {"team": "research"},
                         "annotations": {"gang.admit.dev/min-member": min_member, "example.com/cost": "a1"}},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": num_nodes}, **extra}}


def install(fake):
    jobset_operator.install(fake)
    return trainer_operator.install(fake)


@pytest.fixture
async def cluster(aiohttp_server):
    """The fake cluster with the JobSet and Trainer emulations; a test stores the runtimes it needs."""
    async with operator_cluster(aiohttp_server, install) as cluster:
        yield cluster


def message(refused: pytest.ExceptionInfo) -> str:
    return json.loads(refused.value.body)["message"]


async def test_a_ganged_trainjob_passes_trainers_webhook_and_its_pods_join_the_gang_admit_made(cluster):
    # Trainer's validator requires a domain-prefixed runtimePatches manager: admit's "gang.admit.dev" was refused,
    # so no ganged TrainJob was ever created.
    cluster.fake.put(TORCH)
    await cluster.create(trainjob("torch-distributed"))
    stored = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    (entry,) = stored["spec"]["runtimePatches"]
    assert entry["manager"] == "gang.admit.dev/admit" and entry["time"]  # Trainer's defaulter ran after admit
    jobset = cluster.fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", "default", "llm")
    assert jobset["metadata"]["annotations"]["gang.admit.dev/min-member"] == "auto"
    pods = cluster.pods()
    assert len(pods) == 4 and {p["metadata"]["labels"][PG_LABEL] for p in pods} == {"llm"}
    (pg,) = cluster.pod_groups().values()
    assert pg["spec"]["minMember"] == 4
    assert cluster.operator.errors == []


async def test_changing_the_gang_of_a_running_trainjob_is_refused_by_admit_with_the_fix(cluster):
    # Trainer refuses any runtimePatches change of an unsuspended TrainJob; admit used to write the replace anyway.
    cluster.fake.put(TORCH)
    await cluster.create(trainjob("torch-distributed"))
    stored = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    stored["metadata"]["annotations"]["gang.admit.dev/min-member"] = "2"
    with pytest.raises(ApiException) as refused:
        await cluster.replace(stored)
    text = message(refused)
    assert 'admission webhook "workloads.validate.admit.dev" denied the request' in text
    assert "Set spec.suspend: true in this same update" in text
    stored["spec"]["suspend"] = True  # the fix: Trainer accepts it, and so does admit
    replaced = await cluster.replace(stored)
    assert replaced["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]["annotations"] \
        == {"gang.admit.dev/min-member": "2"}


async def test_annotating_a_running_trainjob_is_refused_by_admit_with_the_fix_and_never_by_trainer(cluster):
    # admit wrote the runtimePatches entry into the running TrainJob, so Trainer's validator refused the user's
    # `kubectl annotate` with "RuntimePatches can only be modified when the TrainJob is suspended", a field the user
    # never wrote; and even suspended, the JobSet Trainer built at creation cannot take admit's label any more.
    cluster.fake.put(TORCH)
    plain = trainjob("torch-distributed")
    del plain["metadata"]["annotations"]["gang.admit.dev/min-member"]
    await cluster.create(plain)
    assert len(cluster.pods()) == 4 and cluster.pod_groups() == {}
    stored = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    stored["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    with pytest.raises(ApiException) as refused:
        await cluster.replace(stored)
    text = message(refused)
    assert 'admission webhook "workloads.validate.admit.dev" denied the request' in text
    assert "denied the request: Delete the TrainJob and create it again" in text and "RuntimePatches" not in text
    after = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    assert "runtimePatches" not in after["spec"] and cluster.operator.errors == []


async def test_a_suspended_trainjob_resumed_with_new_gang_annotations_in_one_update_is_taken_as_trainer_takes_it(
        cluster):
    # Trainer's rule is "suspended before or after the update": Kueue resumes and patches in one request.
    cluster.fake.put(TORCH)
    await cluster.create(trainjob("torch-distributed", suspend=True))
    stored = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    stored["metadata"]["annotations"]["gang.admit.dev/min-member"] = "2"
    stored["spec"]["suspend"] = False
    replaced = await cluster.replace(stored)
    assert replaced["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]["annotations"] \
        == {"gang.admit.dev/min-member": "2"}


async def test_a_re_apply_of_a_ganged_trainjob_that_drops_admits_entry_gets_it_back_and_trainer_takes_it(cluster):
    # GitOps re-applies the user's manifest (kubectl replace): no runtimePatches in it. admit puts its entry back as
    # stored, Trainer's defaulter keeps its time, and Trainer's immutability check sees no change.
    cluster.fake.put(TORCH)
    await cluster.create(trainjob("torch-distributed"))
    stored = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    before = stored["spec"]["runtimePatches"]
    manifest = trainjob("torch-distributed")
    manifest["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    replaced = await cluster.replace(manifest)
    assert replaced["spec"]["runtimePatches"] == before


async def test_a_trainjob_whose_launcher_waits_for_the_nodes_is_refused_at_the_trainjob_with_a_fix_trainer_takes(
        cluster):
    # deepspeed-distributed: the launcher starts after the nodes are Ready, so a gang of all 3 pods deadlocks. The
    # refusal came at the JobSet Trainer made, where the user never sees it.
    cluster.fake.put(DEEPSPEED)
    with pytest.raises(ApiException) as refused:
        await cluster.create(trainjob("deepspeed-distributed", num_nodes=3))
    text = message(refused)
    assert text.startswith('admission webhook "workloads.validate.admit.dev" denied the request: Use a runtime whose '
                           "trainer replicatedJobs start together, or set gang.admit.dev/min-member on TrainJob "
                           "default/llm")
    assert text.endswith("(TrainJob default/llm: the JobSet Trainer builds from ClusterTrainingRuntime "
                         "deepspeed-distributed would be refused, so the TrainJob would never run)")
    assert "only 2 of its 3 pods start before the others" in text
    assert "set gang.admit.dev/min-member to at most 2" in text
    # the fix, at creation: Trainer accepts it, the gang is the 2 nodes that start first
    await cluster.create(trainjob("deepspeed-distributed", num_nodes=3, min_member="2"))
    assert cluster.operator.errors == []
    pods = cluster.pods()
    assert len(pods) == 2 and {p["metadata"]["labels"][PG_LABEL] for p in pods} == {"llm"}
    assert cluster.pod_groups()["llm"]["spec"]["minMember"] == 2


async def test_a_trainjob_with_a_min_member_above_its_nodes_is_refused_at_the_trainjob(cluster):
    for runtime in (TORCH,):
        cluster.fake.put(runtime)
    with pytest.raises(ApiException) as refused:
        await cluster.create(trainjob("torch-distributed", num_nodes=4, min_member="5"))
    text = message(refused)
    assert "TrainJob default/llm: the JobSet Trainer builds" in text
    assert "spec.trainer.numNodes of TrainJob default/llm" in text
    assert cluster.fake.objects("trainjobs", "default", "trainer.kubeflow.org/v1alpha1") == []


async def test_trainers_own_coscheduling_with_initializers_is_refused_at_the_trainjob_as_the_deadlock_it_is(
        cluster):
    runtime = runtime_manifest("torchtune-llama", INITIALIZERS,
                               pod_group_policy={"coscheduling": {"scheduleTimeoutSeconds": 120}})
    cluster.fake.put(runtime)
    with pytest.raises(ApiException) as refused:
        await cluster.create(trainjob("torchtune-llama", num_nodes=2))
    text = message(refused)
    assert "Trainer makes PodGroup llm itself with minMember 4" in text
    assert "dataset-initializer, model-initializer" in text and "Use a runtime without podGroupPolicy" in text


async def test_the_same_initializers_without_trainers_gang_get_admits_gang_of_the_trainer_nodes_only(cluster):
    for runtime in (runtime_manifest("torchtune-llama", INITIALIZERS),):
        cluster.fake.put(runtime)
    await cluster.create(trainjob("torchtune-llama", num_nodes=2))
    pods = cluster.pods()  # the initializers run first; the trainer Job waits for them to complete
    assert len(pods) == 2 and all(PG_LABEL not in p["metadata"]["labels"] for p in pods)
    assert cluster.pod_groups()["llm"]["spec"]["minMember"] == 2


async def test_trainers_volcano_policy_is_left_to_trainer_with_no_second_gang(cluster):
    runtime = runtime_manifest("torch-volcano", [node_job(labels=ANCESTOR)], pod_group_policy={"volcano": {}})
    cluster.fake.put(runtime)
    created = await cluster.create(trainjob("torch-volcano"))
    assert created["metadata"]["name"] == "llm"
    pods = cluster.pods()
    assert len(pods) == 4
    assert all(PG_LABEL not in p["metadata"]["labels"] for p in pods)
    assert all(p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llm" for p in pods)
    assert all(p["spec"].get("schedulerName") in (None, "default-scheduler") for p in pods)
    assert cluster.pod_groups() == {}  # no scheduler-plugins PodGroup: Volcano's is Trainer's
    assert cluster.fake.get("scheduling.volcano.sh/v1beta1", "podgroups", "default", "llm")["spec"]["minMember"] == 4


async def test_a_trainjob_on_a_runtime_without_ml_policy_gets_its_num_nodes_as_trainers_plainml_plugin_sets_them(
        cluster):
    # Trainer's plainml plugin sizes the trainer Job from spec.trainer.numNodes when the runtime has no mlPolicy;
    # admit read one pod there and refused min-member 3 on a TrainJob Trainer runs with 3 nodes.
    cluster.fake.put(runtime_manifest("plain", [node_job(labels=ANCESTOR)], ml_policy=None))
    await cluster.create(trainjob("plain", num_nodes=3, min_member="3"))
    assert cluster.operator.errors == []
    jobset = cluster.fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", "default", "llm")
    (node,) = jobset["spec"]["replicatedJobs"]
    assert (node["replicas"], node["template"]["spec"]["parallelism"], node["template"]["spec"]["completions"]) == \
        (1, 3, 3)
    pods = cluster.pods()
    assert len(pods) == 3 and {p["metadata"]["labels"][PG_LABEL] for p in pods} == {"llm"}
    assert cluster.pod_groups()["llm"]["spec"]["minMember"] == 3


INITIALIZED = [initializer("dataset-initializer"), initializer("model-initializer"), node_job(labels=ANCESTOR)]
RUNTIME_SHAPES = {
    "no mlPolicy": ([node_job(labels=ANCESTOR)], None),
    "no mlPolicy, parallelism 2 on a helper Job": (
        [node_job(labels=ANCESTOR), {**node_job("helper"), "template": {"spec": {
            "parallelism": 2, "template": {"spec": {"containers": [{"name": "helper", "image": "busybox"}]}}}}}],
        None),
    "plainml (numNodes only)": ([node_job(labels=ANCESTOR)], {"numNodes": 2}),
    "torch": ([node_job(labels=ANCESTOR)], {"numNodes": 1, "torch": {}}),
    "jax": ([node_job(labels=ANCESTOR)], {"numNodes": 1, "jax": {}}),
    "xgboost": ([node_job(labels=ANCESTOR)], {"numNodes": 1, "xgboost": {}}),
    "mpi, launcher as node": (DEEPSPEED["spec"]["template"]["spec"]["replicatedJobs"],
                              DEEPSPEED["spec"]["mlPolicy"]),
    "mpi": (DEEPSPEED["spec"]["template"]["spec"]["replicatedJobs"],
            {"numNodes": 1, "mpi": {"numProcPerNode": 1, "runLauncherAsNode": False}}),
    "initializers": (INITIALIZED, {"numNodes": 1, "torch": {}}),
    "initializers, no mlPolicy": (INITIALIZED, None),
}


@pytest.mark.parametrize("shape", sorted(RUNTIME_SHAPES))
@pytest.mark.parametrize("num_nodes", [1, 3])
def test_admit_counts_the_pods_of_each_job_of_the_jobset_trainer_builds_for_every_runtime_shape(shape, num_nodes):
    from admit.families.trainer import trainer_jobset

    rjobs, ml_policy = RUNTIME_SHAPES[shape]
    runtime = runtime_manifest("r", rjobs, ml_policy=ml_policy)
    job = trainjob("r", num_nodes=num_nodes)
    job["metadata"]["uid"] = "3b1d0f4e"

    def counts(jobset):
        return {rj["name"]: (rj.get("replicas", 1), rj["template"]["spec"]["parallelism"],
                             rj["template"]["spec"]["completions"]) for rj in jobset["spec"]["replicatedJobs"]}

    built = trainer_operator.trainjob_jobset(job, runtime)  # the emulation, from Trainer's code
    assert counts(trainer_jobset(job, runtime)) == counts(built)


# ---------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/trainer.py LATER): the user's suspend and resume, Kueue's admission and eviction,
# a GitOps re-apply; each allowed, the pods after it in the one gang that can form
# ---------------------------------------------------------------------------------------------------------------------

LATER_NS = "ml"


@contextlib.asynccontextmanager
async def later_cluster(aiohttp_server: Any, obj: dict[str, Any]) -> AsyncIterator[tuple[Any, Any]]:
    """Trainer, JobSet and the Job controller with the garbage collector (``trainer.LATER.install``), ``obj``
    created by a user."""
    from tests.operator_stack import operator_cluster as stack

    async with stack(aiohttp_server, Config(), trainer_operator.LATER.install, gc_orphans_after=0.01) as (fake, op,
                                                                                                          user):
        await k8s.CustomObjectsApi(user).create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", LATER_NS, "trainjobs", obj)
        await trainer_operator._settle(op)
        yield fake, op


def later_trainjob(**spec: Any) -> dict[str, Any]:
    obj = trainjob("torch-distributed", num_nodes=3, **spec)
    obj["metadata"]["namespace"] = LATER_NS
    return obj


def gang_of(fake: Any, op: Any, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The TrainJob's live pods, after checking they form one gang that can form and nothing was refused."""
    gangs = trainer_operator.gangs_of(op, obj)
    for _, pods in gangs:
        assert gang_problems(fake, LATER_NS, pods, Config()) == []
    assert trainer_operator.refused_writes(op) == []
    return [p for _, pods in gangs for p in pods]


async def test_a_ganged_trainjob_suspended_and_resumed_by_its_user_gets_its_pods_back_in_the_same_gang(aiohttp_server):
    obj = later_trainjob()
    async with later_cluster(aiohttp_server, obj) as (fake, op):
        assert len(gang_of(fake, op, obj)) == 3
        await trainer_operator._update(op, obj, trainer_operator._set_suspend(True), trainer_operator.USER_WRITER,
                                       "suspend")
        assert gang_of(fake, op, obj) == []
        assert fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", LATER_NS, "llm")["spec"]["suspend"] is True
        await trainer_operator._update(op, obj, trainer_operator._set_suspend(False), trainer_operator.USER_WRITER,
                                       "resume")
        pods = gang_of(fake, op, obj)
        assert len(pods) == 3 and {p["metadata"]["labels"][PG_LABEL] for p in pods} == {"llm"}


async def test_kueue_admitting_evicting_and_readmitting_a_queued_trainjob_keeps_its_pods_in_the_gang(aiohttp_server):
    obj = later_trainjob(suspend=True, runtimePatches=[copy.deepcopy(trainer_operator.KUEUE_ENTRY)])
    obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    async with later_cluster(aiohttp_server, obj) as (fake, op):
        assert gang_of(fake, op, obj) == []
        stored = fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", LATER_NS, "llm")
        assert [p["manager"] for p in stored["spec"]["runtimePatches"]] == ["kueue.x-k8s.io/manager",
                                                                            "gang.admit.dev/admit"]
        await trainer_operator.kueue_evicts_and_readmits(op, obj)
        pods = gang_of(fake, op, obj)
        assert len(pods) == 3 and {p["metadata"]["labels"][PG_LABEL] for p in pods} == {"llm"}
        assert all(p["spec"]["nodeSelector"] == kueue.FLAVOR["nodeLabels"] for p in pods)


async def test_a_gitops_re_apply_of_the_trainjob_manifest_changes_nothing(aiohttp_server):
    obj = later_trainjob()
    async with later_cluster(aiohttp_server, obj) as (fake, op):
        before = fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", LATER_NS, "llm")
        await trainer_operator.gitops_reapply(op, obj)
        after = fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", LATER_NS, "llm")
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert len(gang_of(fake, op, obj)) == 3


async def test_removing_the_gang_annotations_of_a_running_trainjob_warns_that_its_jobset_stays_ganged(cluster):
    # admit keeps its runtimePatches entry (taking it off is what Trainer refuses while the TrainJob runs), so the
    # removal un-ganged nothing, unsaid.
    cluster.fake.put(TORCH)
    await cluster.create(trainjob("torch-distributed"))
    stored = cluster.fake.get("trainer.kubeflow.org/v1alpha1", "trainjobs", "default", "llm")
    del stored["metadata"]["annotations"]["gang.admit.dev/min-member"]
    count = len(cluster.fake.admission.warnings)
    replaced = await cluster.replace(stored)
    warnings = [w for _, _, w in cluster.fake.admission.warnings[count:]]
    assert any(w.startswith("remove spec.runtimePatches entry manager gang.admit.dev/admit too") and len(w) <= 256
               for w in warnings), warnings
    assert [p["manager"] for p in replaced["spec"]["runtimePatches"]] == ["gang.admit.dev/admit"]
    assert cluster.operator.errors == []
