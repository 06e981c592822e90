"""JobSet, LeaderWorkerSet, Ray (RayCluster, RayJob, RayService) and Kubeflow Trainer TrainJob gangs
(admit/families/), over HTTP with the fake Kubernetes API where PodGroups are made, as kube-apiserver would call the
webhooks: /mutate, the patch applied, then /validate on the mutated object."""

import copy
import json

import pytest

from admit.webhook.admission import Admission
from admit.config import Config
from admit.controller.claims import claim_of
from admit.kube.client import KubeAPI
from admit.webhook.mutate import mutate
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.validate import validate
from admit.kube.watchcache import Resource
from tests.helpers import admission_review, apply_answer, decode_patch, example, example_docs

CONFIG = Config()
PG_API = "scheduling.x-k8s.io/v1alpha1"
LABEL = "scheduling.x-k8s.io/pod-group"
SCHED = "scheduler-plugins-scheduler"
SPEC_KEY = "gang.admit.dev/group-spec"


def request(obj, operation="CREATE", **kw):
    return parse_review(dumps(admission_review(obj, operation, **kw)))


def pod_spec(cpu="1", memory="1Gi", gpu=None):
    res = {"requests": {"cpu": cpu, "memory": memory}}
    if gpu:
        res["limits"] = {"nvidia.com/gpu": gpu}
    return {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36", "resources": res}]}


def replicated_job(name, replicas=1, parallelism=1, completions=None, depends_on=None, **pod):
    job = {"parallelism": parallelism, "template": {"spec": pod_spec(**pod)}}
    if completions is not None:
        job["completions"] = completions
    rj = {"name": name, "replicas": replicas, "template": {"spec": job}}
    if depends_on:
        rj["dependsOn"] = [{"name": d, "status": "Ready"} for d in depends_on]
    return rj


def jobset(name="train", rjobs=None, annotations=None, order=None, owner=None, namespace="ml"):
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})}},
        "spec": {"replicatedJobs": rjobs or [replicated_job("driver"), replicated_job("workers", 2, 4, 4, cpu="2")]},
    }
    if order:
        obj["spec"]["startupPolicy"] = {"startupPolicyOrder": order}
    if owner:
        obj["metadata"]["ownerReferences"] = [owner]
    return obj


def lws(name="vllm", replicas=2, size=4, policy=None, annotations=None, leader=True):
    template = {"size": size,
                "workerTemplate": {"metadata": {"labels": {"app": name}}, "spec": pod_spec("2", "8Gi", "1")}}
    if leader:
        template["leaderTemplate"] = {"spec": pod_spec("1", "4Gi")}
    obj = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "serving",
                     "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": template},
    }
    if policy:
        obj["spec"]["startupPolicy"] = policy
    return obj


REV = "5c7d9f8b6"  # the pods' template-revision-hash: each group's PodGroup is <lws>-<group>-<revision>


def lws_pod(stored_lws, group, worker):
    """A pod as the LWS controller makes it from the (mutated) LWS: labels, template annotations, owner."""
    tmpl = stored_lws["spec"]["leaderWorkerTemplate"]
    source = tmpl["leaderTemplate"] if worker == 0 and "leaderTemplate" in tmpl else tmpl["workerTemplate"]
    name = stored_lws["metadata"]["name"]
    meta = copy.deepcopy(source.get("metadata") or {})
    meta["name"] = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    meta["namespace"] = stored_lws["metadata"]["namespace"]
    meta.setdefault("labels", {}).update({
        "leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/template-revision-hash": REV,
    })
    meta.setdefault("annotations", {})["leaderworkerset.sigs.k8s.io/size"] = str(tmpl["size"])
    owner = name if worker == 0 else f"{name}-{group}"
    meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner,
                                "uid": "0d5c3a52-8e63-4c63-9a55-2f3f1d0c7c11", "controller": True,
                                "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(source["spec"])}


def raycluster(name="ray", workers=None, labels=None, autoscaling=False, annotations=None, owner=None):
    obj = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "ray", "labels": dict(labels or {}),
                     "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})}},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod_spec("1", "2Gi")}},
            "workerGroupSpecs": workers if workers is not None else [
                {"groupName": "gpu", "replicas": 2, "minReplicas": 1, "maxReplicas": 4, "numOfHosts": 2,
                 "rayStartParams": {}, "template": {"spec": pod_spec("4", "16Gi", "1")}}],
        },
    }
    if autoscaling:
        obj["spec"]["enableInTreeAutoscaling"] = True
    if owner:
        obj["metadata"]["ownerReferences"] = [owner]
    return obj


class Cluster:
    """The webhook over HTTP in front of a fake Kubernetes API; ``admit`` plays kube-apiserver's part."""

    def __init__(self, client, fake):
        self.client, self.fake = client, fake

    async def _post(self, endpoint, review):
        resp = await self.client.post(endpoint, json=review)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["response"]["uid"] == review["request"]["uid"]
        return body

    async def admit(self, obj, operation="CREATE", old=None):
        """``(mutated object, mutate answer, validate answer)``; the object is stored when allowed."""
        review = admission_review(obj, operation, old=old)
        answer = await self._post("/mutate", review)
        mutated = apply_answer(obj, answer)
        checked = admission_review(mutated, operation, old=old)
        verdict = (await self._post("/validate", checked))["response"]
        if verdict["allowed"]:
            self.fake.put(mutated)
        return mutated, answer, verdict

    def pod_group(self, namespace, name):
        return self.fake.get(PG_API, "podgroups", namespace, name)

    def pod_groups(self):
        return sorted(pg["metadata"]["name"] for pg in self.fake.objects("podgroups", api_version=PG_API))


@pytest.fixture
async def cluster(aiohttp_client):
    async with FakeKubeAPI() as fake:
        async with fake.api_client() as api_client:
            client = await aiohttp_client(create_app(Admission(CONFIG, KubeAPI(api_client))))
            yield Cluster(client, fake)


# ======================================================================================================================
# JobSet
# ======================================================================================================================


async def test_a_jobset_with_min_member_auto_gets_one_pod_group_over_all_its_replicated_jobs(cluster):
    mutated, _, verdict = await cluster.admit(jobset())
    assert verdict["allowed"]
    # 1 driver + 2 x min(4, 4) workers; the driver (1 cpu, 1Gi) first, then 8 workers x (2 cpu, 1Gi)
    pg = cluster.pod_group("ml", "train")
    assert pg["spec"] == {"minMember": 9, "minResources": {"cpu": "17", "memory": "9Gi"}}
    for rj in mutated["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        assert pod["metadata"]["labels"][LABEL] == "train" and pod["spec"]["schedulerName"] == SCHED
    assert mutated["metadata"]["labels"]["gang.admit.dev/managed"] == "true"


async def test_the_jobs_a_jobset_creates_are_children_and_get_no_pod_group_of_their_own(cluster):
    parent, _, _ = await cluster.admit(jobset())
    rj = parent["spec"]["replicatedJobs"][1]
    job = {  # what the JobSet controller creates: the Job template, the JobSet's annotations, its ownerReference
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train-workers-0", "namespace": "ml",
                     "annotations": dict(parent["metadata"]["annotations"]),
                     "labels": {"jobset.sigs.k8s.io/jobset-name": "train",
                                "jobset.sigs.k8s.io/replicatedjob-name": "workers"},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
                                          "uid": "5e0a1f7c-0c57-4b43-8d9e-2b1c3a4d5e6f", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": copy.deepcopy(rj["template"]["spec"]),
    }
    _, answer, verdict = await cluster.admit(job)
    assert decode_patch(answer) == [] and verdict["allowed"]
    assert cluster.pod_groups() == ["train"]
    # the same Job without the owner would be a gang of its own (and refused: the name is taken by the JobSet's)
    job["metadata"]["ownerReferences"] = []
    assert validate(request(job), CONFIG).ensure is not None


def test_an_in_order_jobset_is_refused_with_both_fixes_unless_its_gang_fits_the_first_replicated_job():
    refused = validate(request(jobset(order="InOrder")), CONFIG).decision
    assert not refused.allowed
    assert "startupPolicyOrder: InOrder" in refused.message and "does not split" in refused.message
    assert refused.message.startswith("Set spec.startupPolicy.startupPolicyOrder to AnyOrder, or set "
                                      "gang.admit.dev/min-member to at most 1")
    too_big = validate(request(jobset(order="InOrder", annotations={"gang.admit.dev/min-member": "2"})), CONFIG)
    assert not too_big.decision.allowed and "deadlocks" in too_big.decision.message
    first_only = validate(request(jobset(order="InOrder", annotations={"gang.admit.dev/min-member": "1"})), CONFIG)
    assert first_only.decision.allowed and first_only.ensure.min_member == 1
    assert any("gangs the first 1 pod" in n for n in first_only.decision.notes)


def test_a_jobset_with_depends_on_counts_only_the_replicated_jobs_that_start_first():
    rjobs = [replicated_job("init", 1, 2, 2), replicated_job("node", 1, 4, 4, depends_on=["init"])]
    refused = validate(request(jobset(rjobs=rjobs)), CONFIG).decision
    assert not refused.allowed and "dependsOn" in refused.message and "only 2 of its 6 pods" in refused.message
    ok = validate(request(jobset(rjobs=rjobs, annotations={"gang.admit.dev/min-member": "2"})), CONFIG)
    assert ok.decision.allowed and ok.ensure.pod_group_spec()["minResources"] == {"cpu": "2", "memory": "2Gi"}


def test_a_jobset_below_its_min_member_is_refused_with_the_replicated_job_counts():
    obj = jobset(rjobs=[replicated_job("w", 2, 2)], annotations={"gang.admit.dev/min-member": "9"})
    decision = validate(request(obj), CONFIG).decision
    assert not decision.allowed and decision.code == 403
    assert "runs 4 pods (w 2 x 2)" in decision.message and "parallelism" in decision.message


def test_a_jobset_that_trainer_labelled_for_coscheduling_is_left_to_trainer():
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist",
             "uid": "9f1d2c3b-4a5e-4f60-8b7c-1d2e3f4a5b6c", "controller": True, "blockOwnerDeletion": True}
    obj = jobset("mnist", owner=owner)
    for rj in obj["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"] = {"labels": {LABEL: "mnist"}}
    assert mutate(request(obj), CONFIG).patch == []
    verdict = validate(request(obj), CONFIG)
    assert verdict.decision.allowed and verdict.ensure is None
    assert any(w.startswith("remove gang.admit.dev/min-member to silence this: its operator gangs this JobSet")
               for w in verdict.decision.warnings)
    assert any("Kubeflow Trainer" in n and "coscheduling" in n for n in verdict.decision.notes)


async def test_the_jobset_trainer_makes_from_an_annotated_trainjob_is_ganged_under_the_trainjobs_name(cluster):
    train, answer, verdict = await cluster.admit(example("trainjob-torch.yaml"))
    assert verdict["allowed"] and cluster.pod_groups() == []  # the TrainJob itself gets no PodGroup
    annotations = train["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]["annotations"]
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "pytorch-mnist",
             "uid": "9f1d2c3b-4a5e-4f60-8b7c-1d2e3f4a5b6c", "controller": True, "blockOwnerDeletion": True}
    js = jobset("pytorch-mnist", rjobs=[replicated_job("node", 1, 2, 2, cpu="2", memory="4Gi")],
                annotations=annotations, owner=owner)  # Trainer: the runtime's template + the patch's metadata
    _, _, verdict = await cluster.admit(js)
    assert verdict["allowed"]
    assert cluster.pod_group("ml", "pytorch-mnist")["spec"] == {
        "minMember": 2, "minResources": {"cpu": "4", "memory": "8Gi"}}


def test_a_trainjob_passes_its_gang_annotations_on_in_one_runtime_patch_and_a_second_pass_changes_nothing():
    obj = example("trainjob-torch.yaml")
    obj["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"] = "120"
    decision = mutate(request(obj), CONFIG)
    (entry_op,) = [op for op in decision.patch if op["path"] == "/spec/runtimePatches"]
    assert entry_op["value"] == [{"manager": "gang.admit.dev/admit", "trainingRuntimeSpec": {"template": {"metadata": {
        "annotations": {"gang.admit.dev/min-member": "auto", "gang.admit.dev/schedule-timeout-seconds": "120"}}}}}]
    mutated = apply_answer(obj, {"response": {"patch": _b64(decision.patch), "patchType": "JSONPatch"}})
    assert mutate(request(mutated), CONFIG).patch == []
    stored = copy.deepcopy(mutated)
    mutated["metadata"]["annotations"]["gang.admit.dev/min-member"] = "3"
    # Trainer lets runtimePatches change only while the TrainJob is suspended (checkRuntimePatchesImmutability)
    mutated["spec"]["suspend"] = True
    (replace,) = mutate(request(mutated, "UPDATE", old=stored), CONFIG).patch
    assert replace["op"] == "replace" and replace["path"] == "/spec/runtimePatches/0/trainingRuntimeSpec"
    del mutated["spec"]["suspend"]
    assert mutate(request(mutated, "UPDATE", old=stored), CONFIG).patch == []  # nothing Trainer would refuse
    refused = validate(request(mutated, "UPDATE", old=stored), CONFIG).decision
    assert not refused.allowed and "Set spec.suspend: true in this same update" in refused.message


def _b64(ops):
    import base64

    return base64.b64encode(json.dumps(ops).encode()).decode()


# ======================================================================================================================
# LeaderWorkerSet
# ======================================================================================================================


async def test_an_lws_gets_the_scheduler_and_the_group_spec_on_its_templates_and_no_pod_group_of_its_own(cluster):
    mutated, answer, verdict = await cluster.admit(lws())
    assert verdict["allowed"] and cluster.pod_groups() == []
    tmpl = mutated["spec"]["leaderWorkerTemplate"]
    spec = {"minMember": 4, "minResources": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "3"}}
    for key in ("leaderTemplate", "workerTemplate"):
        assert json.loads(tmpl[key]["metadata"]["annotations"][SPEC_KEY]) == spec
        assert tmpl[key]["spec"]["schedulerName"] == SCHED
        assert LABEL not in (tmpl[key]["metadata"].get("labels") or {})  # one template, many groups
    # one PodGroup per group is how admit gangs an LWS, not a mistake: a note, not a kubectl Warning: line
    assert "warnings" not in answer["response"]
    assert any("vllm-0 ... vllm-1" in n for n in validate(request(lws()), CONFIG).decision.notes)


async def test_each_lws_group_gets_its_own_pod_group_made_by_its_leader_pod_and_its_workers_join_it(cluster):
    stored, _, _ = await cluster.admit(lws(replicas=2, size=3))
    for group in (0, 1):
        leader, answer, verdict = await cluster.admit(lws_pod(stored, group, 0))
        assert verdict["allowed"] and leader["metadata"]["labels"][LABEL] == f"vllm-{group}-{REV}"
    assert cluster.pod_groups() == [f"vllm-0-{REV}", f"vllm-1-{REV}"]
    pg = cluster.pod_group("serving", f"vllm-1-{REV}")
    assert pg["spec"] == {"minMember": 3, "minResources": {"cpu": "5", "memory": "20Gi", "nvidia.com/gpu": "2"}}
    assert pg["metadata"]["annotations"]["gang.admit.dev/owner"] == "leaderworkerset.x-k8s.io/LeaderWorkerSet/vllm"
    worker, answer, verdict = await cluster.admit(lws_pod(stored, 1, 2))
    assert verdict["allowed"] and worker["metadata"]["labels"][LABEL] == f"vllm-1-{REV}"
    assert worker["spec"]["schedulerName"] == SCHED
    assert cluster.pod_groups() == [f"vllm-0-{REV}", f"vllm-1-{REV}"]


def test_every_pod_of_an_lws_group_asks_for_the_group_so_a_worker_re_creates_it_if_it_went_missing():
    stored = apply_answer(lws(), {"response": {"patch": _b64(mutate(request(lws()), CONFIG).patch),
                                               "patchType": "JSONPatch"}})
    for worker in (0, 1, 3):
        plan = validate(request(lws_pod(stored, 1, worker)), CONFIG).ensure
        assert plan is not None and plan.group_name == f"vllm-1-{REV}" and plan.min_member == 4


async def test_a_worker_admitted_after_its_group_was_deleted_re_creates_it(cluster):
    stored, _, _ = await cluster.admit(lws(replicas=1, size=2))
    await cluster.admit(lws_pod(stored, 0, 0))
    cluster.fake.delete_object(PG_API, "podgroups", "serving", f"vllm-0-{REV}")
    assert cluster.pod_groups() == []
    worker, _, verdict = await cluster.admit(lws_pod(stored, 0, 1))
    assert verdict["allowed"] and worker["metadata"]["labels"][LABEL] == f"vllm-0-{REV}"
    assert cluster.pod_groups() == [f"vllm-0-{REV}"]


def test_under_leader_ready_the_lws_gang_is_the_leader_alone_with_the_whole_groups_resources():
    verdict = validate(request(lws(replicas=1, size=4, policy="LeaderReady")), CONFIG)
    assert verdict.decision.allowed
    plan = mutate(request(lws(replicas=1, size=4, policy="LeaderReady")), CONFIG)
    (op,) = [o for o in plan.patch if o["path"].endswith("leaderTemplate/metadata")]
    # minMember 1; minResources = leader (1 cpu, 4Gi) + 3 workers (2 cpu, 8Gi, 1 GPU): LWS's provider does the same
    assert json.loads(op["value"]["annotations"][SPEC_KEY]) == {
        "minMember": 1, "minResources": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "3"}}
    refused = validate(request(lws(policy="LeaderReady", annotations={"gang.admit.dev/min-member": "4"})), CONFIG)
    assert not refused.decision.allowed and "LeaderReady" in refused.decision.message
    assert "LeaderCreated" in refused.decision.message


def test_an_lws_whose_gang_is_larger_than_a_group_or_that_names_one_pod_group_is_refused():
    too_big = validate(request(lws(size=2, annotations={"gang.admit.dev/min-member": "3"})), CONFIG).decision
    assert not too_big.allowed and "runs 2 pods" in too_big.message
    named = validate(request(lws(annotations={"gang.admit.dev/pod-group": "all"})), CONFIG).decision
    assert not named.allowed and named.code == 400 and "vllm-0, vllm-1" in named.message


def test_removing_the_annotation_from_an_lws_removes_the_group_spec_from_its_templates():
    old = apply_answer(lws(), {"response": {"patch": _b64(mutate(request(lws()), CONFIG).patch),
                                            "patchType": "JSONPatch"}})
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]["gang.admit.dev/min-member"]
    ops = mutate(request(new, "UPDATE", old=old), CONFIG).patch
    paths = {op["path"] for op in ops if op["op"] == "remove"}
    assert paths == {
        "/spec/leaderWorkerTemplate/leaderTemplate/metadata/annotations/gang.admit.dev~1group-spec",
        "/spec/leaderWorkerTemplate/workerTemplate/metadata/annotations/gang.admit.dev~1group-spec",
        "/metadata/labels/gang.admit.dev~1managed",
    }


def test_a_pod_with_a_malformed_group_spec_is_admitted_unchanged_with_a_warning():
    pod = lws_pod(lws(), 0, 0)
    pod["metadata"]["annotations"][SPEC_KEY] = "{not json"
    decision = mutate(request(pod), CONFIG)
    assert decision.patch == [] and any("not the group spec" in w for w in decision.warnings)
    assert validate(request(pod), CONFIG).ensure is None


# ======================================================================================================================
# Ray
# ======================================================================================================================


def test_a_raycluster_gang_is_the_head_plus_every_worker_times_num_of_hosts():
    verdict = validate(request(raycluster()), CONFIG)
    plan = verdict.ensure
    # 1 head + 2 replicas x 2 hosts; (1 cpu, 2Gi) + 4 x (4 cpu, 16Gi, 1 GPU)
    assert plan.min_member == 5 and plan.total_pods == 5
    assert plan.min_resources == {"cpu": "17", "memory": "66Gi", "nvidia.com/gpu": "4"}


def test_with_the_autoscaler_on_a_raycluster_gang_is_the_head_plus_the_workers_min_replicas():
    plan = validate(request(raycluster(autoscaling=True)), CONFIG).ensure
    assert plan.min_member == 3 and plan.total_pods == 5  # 1 head + minReplicas 1 x 2 hosts


def test_a_suspended_worker_group_and_replicas_outside_min_and_max_count_as_kuberay_counts_them():
    workers = [
        {"groupName": "a", "replicas": 9, "minReplicas": 0, "maxReplicas": 2, "template": {"spec": pod_spec()}},
        {"groupName": "b", "minReplicas": 1, "template": {"spec": pod_spec()}},
        {"groupName": "c", "replicas": 3, "suspend": True, "template": {"spec": pod_spec()}},
    ]
    assert validate(request(raycluster(workers=workers)), CONFIG).ensure.min_member == 4  # 1 + 2 + 1 + 0


def test_a_raycluster_that_kuberay_gangs_itself_is_left_to_kuberay():
    obj = raycluster(labels={"ray.io/gang-scheduling-enabled": "true"})
    assert mutate(request(obj), CONFIG).patch == []
    verdict = validate(request(obj), CONFIG)
    assert verdict.decision.allowed and verdict.ensure is None
    assert any("its operator gangs this RayCluster" in w for w in verdict.decision.warnings)
    assert any("KubeRay" in n for n in verdict.decision.notes)


def test_a_raycluster_naming_a_scheduler_by_the_label_kuberay_stopped_reading_in_1_3_is_ganged_with_a_warning():
    # admit used to defer on ray.io/scheduler-name as on the label above; KubeRay >= 1.3 reads only its
    # operator flag --batch-scheduler, so deferring left the cluster with no gang (tests/operators/test_kuberay.py).
    obj = raycluster(labels={"ray.io/scheduler-name": "volcano"})
    assert mutate(request(obj), CONFIG).patch != []
    verdict = validate(request(obj), CONFIG)
    assert verdict.decision.allowed and verdict.ensure is not None
    assert any(w.startswith("remove label ray.io/scheduler-name=volcano: KubeRay ignores it since v1.3.0")
               for w in verdict.decision.warnings)


async def test_the_raycluster_a_rayjob_creates_is_a_gang_of_its_own_named_after_it(cluster):
    job, answer, verdict = await cluster.admit(example("rayjob-sample.yaml"))
    assert verdict["allowed"] and cluster.pod_groups() == []  # the RayJob itself gets none
    assert not any(op["path"].startswith("/spec/rayClusterSpec") for op in decode_patch(answer))
    child = {  # KubeRay: the RayJob's cluster spec, labels and annotations, and a controller ownerReference
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rayjob-sample-raycluster-x7k2p", "namespace": "ray",
                     "annotations": dict(job["metadata"]["annotations"]),
                     "labels": {"ray.io/originated-from-crd": "RayJob",
                                "ray.io/originated-from-cr-name": "rayjob-sample"},
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rayjob-sample",
                                          "uid": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": copy.deepcopy(job["spec"]["rayClusterSpec"]),
    }
    stored, answer, verdict = await cluster.admit(child)
    assert verdict["allowed"]
    assert cluster.pod_groups() == ["rayjob-sample-raycluster-x7k2p"]
    head = stored["spec"]["headGroupSpec"]["template"]
    assert head["metadata"]["labels"][LABEL] == "rayjob-sample-raycluster-x7k2p" and head["spec"]["schedulerName"] == SCHED


def test_a_rayjob_on_an_existing_cluster_gangs_nothing_and_says_to_annotate_that_cluster():
    obj = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "adhoc", "namespace": "ray", "annotations": {"gang.admit.dev/min-member": "auto"}},
           "spec": {"entrypoint": "python job.py", "clusterSelector": {"ray.io/cluster": "shared"}}}
    verdict = validate(request(obj), CONFIG)
    assert verdict.decision.allowed and verdict.ensure is None
    assert any("annotate that RayCluster" in w for w in verdict.decision.warnings)


def test_a_rayservice_is_checked_but_gets_no_pod_group_and_keeps_its_templates():
    obj = {"apiVersion": "ray.io/v1", "kind": "RayService",
           "metadata": {"name": "serve", "namespace": "ray", "annotations": {"gang.admit.dev/min-member": "auto"}},
           "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": raycluster()["spec"]}}
    verdict = validate(request(obj), CONFIG)
    assert verdict.decision.allowed and verdict.ensure is None
    assert any("serve-raycluster-<5 characters>" in n and "a gang of its own" in n for n in verdict.decision.notes)
    assert not verdict.decision.warnings
    ops = mutate(request(obj), CONFIG).patch
    assert not any(op["path"].startswith("/spec/rayClusterConfig") for op in ops)
    too_big = dict(obj, metadata=dict(obj["metadata"], annotations={"gang.admit.dev/min-member": "9"}))
    refused = validate(request(too_big), CONFIG).decision  # refused on the user's object, before KubeRay makes any
    assert not refused.allowed and "RayService ray/serve runs 5 pods" in refused.message


def test_the_controller_claims_a_stored_jobset_and_rayclusters_but_not_a_child_or_an_lws():
    stored = lambda o: dict(o, metadata=dict(o["metadata"], uid="u-1", resourceVersion="7"))  # noqa: E731
    js = claim_of(stored(jobset()), Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"), CONFIG)
    assert js is not None and js.key == ("ml", "train") and js.identity == "jobset.x-k8s.io/JobSet/train"
    rc = claim_of(stored(raycluster()), Resource("ray.io", "v1", "rayclusters", "RayCluster"), CONFIG)
    assert rc is not None and rc.key == ("ray", "ray")
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "j", "uid": "u", "controller": True}
    made = claim_of(stored(raycluster("j-raycluster-q8v4z", owner=owner)),
                    Resource("ray.io", "v1", "rayclusters", "RayCluster"), CONFIG)  # KubeRay's: a gang of its own
    assert made is not None and made.key == ("ray", "j-raycluster-q8v4z")
    assert made.identity == "ray.io/RayCluster/j-raycluster-q8v4z"
    job = {"apiVersion": "batch/v1", "kind": "Job",  # a JobSet's Job stays a child
           "metadata": {"name": "train-workers-0", "namespace": "ml", "annotations": {"gang.admit.dev/min-member": "auto"},
                        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                             "name": "train", "uid": "u", "controller": True}]},
           "spec": {"parallelism": 2, "template": {"spec": pod_spec()}}}
    assert claim_of(stored(job), Resource("batch", "v1", "jobs", "Job"), CONFIG) is None
    assert claim_of(stored(lws()), Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
                    CONFIG) is None


def test_ignored_api_groups_leave_family_kinds_and_lws_pods_alone():
    config = Config(ignored_api_groups=frozenset({"jobset.x-k8s.io", "leaderworkerset.x-k8s.io"}))
    assert mutate(request(jobset()), config).patch == []
    stored = apply_answer(lws(), {"response": {"patch": _b64(mutate(request(lws()), CONFIG).patch),
                                               "patchType": "JSONPatch"}})
    assert mutate(request(lws_pod(stored, 0, 0)), config).patch == []
    assert validate(request(lws_pod(stored, 0, 0)), config).ensure is None


def test_the_lws_example_pods_carry_the_group_spec_the_lws_example_gets():
    lws_doc = example("leaderworkerset-vllm.yaml")
    mutated = apply_answer(lws_doc, {"response": {"patch": _b64(mutate(request(lws_doc), CONFIG).patch),
                                                  "patchType": "JSONPatch"}})
    written = mutated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"][SPEC_KEY]
    assert {p["metadata"]["annotations"][SPEC_KEY] for p in example_docs("leaderworkerset-vllm-pods.yaml")} == {written}
