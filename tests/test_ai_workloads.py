"""The AI workloads as their operators run them: a TrainJob's JobSet on a runtime with initializers (Kubeflow
Trainer), the RayClusters KubeRay makes for a RayService upgrade and a RayJob retry, and GPUs served through DRA.

Objects are shaped as the operators make them: Trainer's JobSet from the ``torchtune`` / ``torch-distributed``
ClusterTrainingRuntimes (``dataset-initializer`` and ``model-initializer`` then ``node`` with ``dependsOn ...
status: Complete``, the ``trainer.kubeflow.org/trainjob-ancestor-step`` labels, a controller ownerReference to the
TrainJob), KubeRay's RayCluster from ``constructRayClusterForRayService`` / ``constructRayClusterForRayJob``
(``<parent>-raycluster-<5 characters>``, the parent's labels and annotations copied, ``ray.io/originated-from-*``
labels, a controller ownerReference).
"""

import copy

from admit.config import Config
from admit.families.jobset import gang_members, replicated_jobs
from admit.mutate import mutate
from admit.validate import validate
from tests.test_families import LABEL, SCHED, cluster, request  # noqa: F401 - cluster is a fixture

CONFIG = Config()
TRAINJOB_OWNER = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llama-sft",
                  "uid": "3c1b7e0a-5d2f-4e8a-9b61-0f2d4c6e8a10", "controller": True, "blockOwnerDeletion": True}


def _initializer(name, image, uri):
    return {
        "name": name, "replicas": 1,
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name}},
            "spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": name, "image": image, "env": [{"name": "STORAGE_URI", "value": uri}],
                                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
                                "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}],
                "volumes": [{"name": "initializer", "persistentVolumeClaim": {"claimName": "llama-sft-initializer"}}],
            }}},
        },
    }


def trainer_jobset(num_nodes=4, node_depends_on=None, extra_rjobs=(), annotations=None):
    """The JobSet Kubeflow Trainer makes for TrainJob ``llama-sft`` on a torchtune-style runtime: the runtime's
    template, ``numNodes`` written into the ``node`` Job's parallelism and completions, the TrainJob's
    ``runtimePatches`` metadata (admit's gang annotations), a controller ownerReference to the TrainJob."""
    node = {
        "name": "node", "replicas": 1,
        "dependsOn": node_depends_on if node_depends_on is not None else [
            {"name": "dataset-initializer", "status": "Complete"},
            {"name": "model-initializer", "status": "Complete"}],
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"parallelism": num_nodes, "completions": num_nodes, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "node", "image": "ghcr.io/kubeflow/trainer/torchtune-trainer",
                                "command": ["tune", "run"],
                                "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                                              "limits": {"nvidia.com/gpu": "2"}},
                                "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}],
                "volumes": [{"name": "initializer", "persistentVolumeClaim": {"claimName": "llama-sft-initializer"}}],
            }}},
        },
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {
            "name": "llama-sft", "namespace": "ml",
            "labels": {"trainer.kubeflow.org/trainjob-name": "llama-sft"},
            "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})},
            "ownerReferences": [dict(TRAINJOB_OWNER)],
        },
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["node"]},
            "replicatedJobs": [
                _initializer("dataset-initializer", "ghcr.io/kubeflow/trainer/dataset-initializer",
                             "hf://tatsu-lab/alpaca"),
                _initializer("model-initializer", "ghcr.io/kubeflow/trainer/model-initializer",
                             "hf://meta-llama/Llama-3.2-1B-Instruct"),
                *extra_rjobs,
                node,
            ],
        },
    }


def _pod_template(js, name):
    (rj,) = [rj for rj in js["spec"]["replicatedJobs"] if rj["name"] == name]
    return rj["template"]["spec"]["template"]


# ======================================================================================================================
# JobSet dependsOn / Kubeflow Trainer
# ======================================================================================================================


async def test_a_trainjob_on_an_initializer_runtime_gangs_only_its_node_pods(cluster):
    mutated, answer, verdict = await cluster.admit(trainer_jobset(num_nodes=4))
    assert verdict["allowed"], verdict
    # minMember = numNodes; minResources = the 4 node pods only
    assert cluster.pod_group("ml", "llama-sft")["spec"] == {
        "minMember": 4, "minResources": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}}
    node = _pod_template(mutated, "node")
    assert node["metadata"]["labels"][LABEL] == "llama-sft" and node["spec"]["schedulerName"] == SCHED
    for step in ("dataset-initializer", "model-initializer"):  # no label: Coscheduling would count them
        template = _pod_template(mutated, step)
        assert LABEL not in (template.get("metadata") or {}).get("labels", {})
        assert "schedulerName" not in template["spec"]
    warnings = answer["response"].get("warnings") or []
    assert any("dataset-initializer, model-initializer complete before the others start" in w
               and "TrainJob ml/llama-sft" in w for w in warnings), warnings


def test_a_chain_of_complete_steps_leaves_the_last_replicated_job_as_the_gang():
    # dataset-initializer -> model-initializer (Complete) -> node (Complete), as the torchtune runtime
    js = trainer_jobset(num_nodes=2)
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
    js["spec"]["replicatedJobs"][2]["dependsOn"] = [{"name": "model-initializer", "status": "Complete"}]
    verdict = validate(request(js), CONFIG)
    assert verdict.decision.allowed and verdict.ensure.min_member == 2
    assert [t.where for t in verdict.ensure.targets] == ["replicatedJob node"]


def test_with_depends_on_ready_the_earlier_replicated_job_stays_a_member_and_the_old_rule_holds():
    # the JobSet docs' "depends-on" sample: initializer (Complete) -> launcher; workers wait for the launcher Ready
    launcher = copy.deepcopy(_initializer("launcher", "busybox:1.36", "none"))
    launcher["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
    js = trainer_jobset(num_nodes=3, extra_rjobs=[launcher],
                        node_depends_on=[{"name": "launcher", "status": "Ready"}])
    del js["spec"]["replicatedJobs"][1]  # no model-initializer
    steps, members, first = gang_members(replicated_jobs(js, "JobSet ml/llama-sft"), in_order=False)
    assert [rj["name"] for rj in steps] == ["dataset-initializer"]
    assert [rj["name"] for rj in members] == ["launcher", "node"] and [rj["name"] for rj in first] == ["launcher"]
    refused = validate(request(js), CONFIG).decision
    assert not refused.allowed and "only 1 of its 4 pods start" in refused.message


def test_a_member_that_waits_for_a_step_that_waits_for_a_member_does_not_start_first():
    rjobs = [{"name": "a", "index": 0, "depends_on": []},
             {"name": "s", "index": 1, "depends_on": [("a", "Ready")]},
             {"name": "t", "index": 2, "depends_on": [("s", "Complete")]}]
    steps, members, first = gang_members(rjobs, in_order=False)
    assert [rj["name"] for rj in steps] == ["s"] and [rj["name"] for rj in members] == ["a", "t"]
    assert [rj["name"] for rj in first] == ["a"]


def test_a_refused_trainer_jobset_names_the_trainjob_and_a_fix_on_the_trainjob():
    # node waits for a launcher to be Ready: only the launcher starts first, so one gang of all pods deadlocks
    launcher = copy.deepcopy(_initializer("launcher", "busybox:1.36", "none"))
    js = trainer_jobset(num_nodes=2, extra_rjobs=[launcher], node_depends_on=[{"name": "launcher", "status": "Ready"}])
    decision = validate(request(js), CONFIG).decision
    assert not decision.allowed
    assert "made by Kubeflow Trainer for TrainJob ml/llama-sft" in decision.message
    assert "gang.admit.dev/min-member on TrainJob ml/llama-sft" in decision.message
    assert "startupPolicyOrder" not in decision.message  # the runtime's JobSet template is not the user's
    # fewer pods than minMember: the fix is the TrainJob's numNodes
    small = validate(request(trainer_jobset(num_nodes=2, annotations={"gang.admit.dev/min-member": "4"})), CONFIG)
    assert not small.decision.allowed
    assert "Raise spec.trainer.numNodes of TrainJob ml/llama-sft" in small.decision.message


def test_the_mutation_of_a_trainer_jobset_leaves_the_initializer_templates_as_trainer_wrote_them():
    js = trainer_jobset()
    paths = {op["path"] for op in mutate(request(js), CONFIG).patch}
    assert paths and not any(p.startswith(("/spec/replicatedJobs/0", "/spec/replicatedJobs/1")) for p in paths), paths
