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

import jsonpatch
import pytest

from admit.webhook.admission import Admission
from admit.config import Config
from admit.controller.claims import owner_reference
from admit.families.jobset import gang_members, replicated_jobs
from admit.families.ray import cluster_group_name
from admit.gang.plan import check_group_name
from admit.kube.client import KubeAPI
from admit.webhook.mutate import mutate
from admit.webhook.validate import validate
from admit.kube.watchcache import Resource
from tests.helpers import GC_ORPHANS_AFTER, eventually, example
from tests.controller.test_controller import controllers, kube  # noqa: F401 - fixtures: the controller over the fake API
from tests.families.test_families import LABEL, PG_API, SCHED, cluster, request  # noqa: F401 - cluster is a fixture

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)

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
    # an explanation, not a mistake: a note (admit review -v), never kubectl's Warning: line
    warnings = answer["response"].get("warnings") or []
    assert not any("complete before the others start" in w for w in warnings), warnings
    notes = validate(request(trainer_jobset(num_nodes=4)), CONFIG).decision.notes
    assert any("dataset-initializer, model-initializer complete before the others start" in n
               and "TrainJob ml/llama-sft" in n for n in notes), notes


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
    assert "Raise spec.trainer.numNodes of TrainJob ml/llama-sft, or lower gang.admit.dev/min-member on TrainJob " \
        "ml/llama-sft" in small.decision.message


def test_the_mutation_of_a_trainer_jobset_leaves_the_initializer_templates_as_trainer_wrote_them():
    js = trainer_jobset()
    paths = {op["path"] for op in mutate(request(js), CONFIG).patch}
    assert paths and not any(p.startswith(("/spec/replicatedJobs/0", "/spec/replicatedJobs/1")) for p in paths), paths


# ======================================================================================================================
# Ray: one gang per RayCluster, also the ones KubeRay makes
# ======================================================================================================================

RAYSERVICE_UID = "6b1f3c2e-9a4d-4e7b-8c15-2d3e4f5a6b7c"


def kuberay_cluster(parent, name, uid=RAYSERVICE_UID, spec_change=None):
    """The RayCluster KubeRay makes for ``parent`` (a RayService or RayJob as stored): ``constructRayClusterFor*``
    copies its labels and annotations (plus KubeRay's own), the cluster spec, and sets a controller ownerReference."""
    kind = parent["kind"]
    meta = parent["metadata"]
    spec = copy.deepcopy(parent["spec"]["rayClusterConfig" if kind == "RayService" else "rayClusterSpec"])
    if spec_change:
        spec_change(spec)
    annotations = dict(meta.get("annotations") or {})
    if kind == "RayService":
        annotations.update({"ray.io/hash-without-replicas-and-workers-to-delete": "JNMPLEPBLPAPEONPGIJOCHCOJHDHDNMI",
                            "ray.io/num-worker-groups": str(len(spec["workerGroupSpecs"])),
                            "ray.io/kuberay-version": "v1.4.2"})
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {
            "name": name, "namespace": meta["namespace"],
            "labels": {**(meta.get("labels") or {}), "ray.io/originated-from-cr-name": meta["name"],
                       "ray.io/originated-from-crd": kind},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": kind, "name": meta["name"], "uid": uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
    }


def _more_workers(spec):
    spec["workerGroupSpecs"][0]["replicas"] = 4  # the upgrade: a new image and more workers
    spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.47.0"


async def test_a_rayservice_upgrade_gives_the_pending_cluster_its_own_pod_group(cluster):
    service, _, verdict = await cluster.admit(example("rayservice-sample.yaml"))
    assert verdict["allowed"] and cluster.pod_groups() == []
    serving, _, verdict = await cluster.admit(kuberay_cluster(service, "rayservice-sample-raycluster-7hd2x"))
    assert verdict["allowed"]
    # the upgrade: KubeRay makes the pending cluster from the new spec, under a new name, beside the serving one
    pending, _, verdict = await cluster.admit(
        kuberay_cluster(service, "rayservice-sample-raycluster-q9w2m", spec_change=_more_workers))
    assert verdict["allowed"]
    assert cluster.pod_groups() == ["rayservice-sample-raycluster-7hd2x", "rayservice-sample-raycluster-q9w2m"]
    assert cluster.pod_group("ray", "rayservice-sample-raycluster-7hd2x")["spec"]["minMember"] == 3
    assert cluster.pod_group("ray", "rayservice-sample-raycluster-q9w2m")["spec"] == {
        "minMember": 5, "minResources": {"cpu": "6", "memory": "12Gi"}}
    for stored in (serving, pending):  # each cluster's pods carry its own group: none counts toward the other's
        name = stored["metadata"]["name"]
        templates = [stored["spec"]["headGroupSpec"]["template"],
                     *(g["template"] for g in stored["spec"]["workerGroupSpecs"])]
        assert {t["metadata"]["labels"][LABEL] for t in templates} == {name}


async def test_a_pod_group_annotation_or_label_a_kuberay_cluster_inherited_does_not_merge_two_clusters(cluster):
    job = example("rayjob-sample.yaml")
    job["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "shared-name"
    job, answer, verdict = await cluster.admit(job)
    assert verdict["allowed"]
    assert any(w.startswith("remove annotation gang.admit.dev/pod-group: KubeRay copies it onto every RayCluster")
               for w in answer["response"].get("warnings") or [])
    # a template labelled by an older admit with the RayJob's group: each retry cluster still gets its own
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"] = {"labels": {LABEL: "rayjob-sample"}}
    for name in ("rayjob-sample-raycluster-x7k2p", "rayjob-sample-raycluster-b5n8c"):  # first try, then a retry
        stored, _, verdict = await cluster.admit(
            kuberay_cluster(job, name, uid="1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"))
        assert verdict["allowed"]
        assert stored["spec"]["headGroupSpec"]["template"]["metadata"]["labels"][LABEL] == name
    assert cluster.pod_groups() == ["rayjob-sample-raycluster-b5n8c", "rayjob-sample-raycluster-x7k2p"]


def test_a_refused_kuberay_cluster_names_the_rayservice_and_its_fields():
    service = example("rayservice-sample.yaml")
    service["metadata"]["annotations"]["gang.admit.dev/min-member"] = "6"
    made = kuberay_cluster(service, "rayservice-sample-raycluster-7hd2x")
    decision = validate(request(made), CONFIG).decision
    assert not decision.allowed
    assert "(made by KubeRay for RayService ray/rayservice-sample) runs 3 pods" in decision.message
    assert "Raise the replicas (and minReplicas) of spec.rayClusterConfig.workerGroupSpecs[*] of RayService " \
        "ray/rayservice-sample" in decision.message
    assert decision.message.startswith("Raise the replicas") and \
        "or lower gang.admit.dev/min-member on RayService ray/rayservice-sample: " in decision.message


def test_a_kuberay_cluster_with_kuberays_own_gang_label_is_still_left_to_kuberay():
    service = example("rayservice-sample.yaml")
    service["metadata"]["labels"] = {"ray.io/gang-scheduling-enabled": "true"}
    made = kuberay_cluster(service, "rayservice-sample-raycluster-7hd2x")
    assert mutate(request(made), CONFIG).patch == []
    verdict = validate(request(made), CONFIG)
    assert verdict.decision.allowed and verdict.ensure is None


def test_a_kuberay_cluster_name_too_long_for_a_label_value_gets_a_distinct_shortened_group():
    long = "an-inference-service-for-the-team-that-names-things-at-length-raycluster-"
    a, b = cluster_group_name(long + "7hd2x"), cluster_group_name(long + "q9w2m")
    assert len(long) > 63 and len(a) <= 63 and len(b) <= 63 and a != b
    assert check_group_name(a) is None and check_group_name(b) is None
    assert cluster_group_name("serve-raycluster-7hd2x") == "serve-raycluster-7hd2x"


async def test_the_controller_adopts_each_kuberay_clusters_pod_group_and_it_goes_with_that_cluster(fake, kube,
                                                                                                  controllers):
    """Against the fake API with its garbage-collector emulation: the RayService is stored, KubeRay makes the
    serving cluster, then during an upgrade the pending one, then deletes the old one (RayService
    ``cleanUpRayClusterInstance``): each PodGroup is made at its cluster's admission, adopted by that cluster, and
    collected with it, while the other cluster's PodGroup stays."""
    controller = await controllers()
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    service_res = Resource("ray.io", "v1", "rayservices", "RayService")
    cluster_res = Resource("ray.io", "v1", "rayclusters", "RayCluster")

    async def admit_and_store(obj, resource):
        mutated = jsonpatch.apply_patch(obj, admission.mutate(request(obj)).patch)
        assert (await admission.validate(request(mutated))).allowed
        return await kube.request("POST", resource.path("ray"), body=mutated)

    service = await admit_and_store(example("rayservice-sample.yaml"), service_res)
    uid = service["metadata"]["uid"]
    old = await admit_and_store(kuberay_cluster(service, "rayservice-sample-raycluster-7hd2x", uid=uid), cluster_res)
    new = await admit_and_store(kuberay_cluster(service, "rayservice-sample-raycluster-q9w2m", uid=uid,
                                                spec_change=_more_workers), cluster_res)

    def owners(name):
        pg = fake.get(PG_API, "podgroups", "ray", name)
        return pg and pg["metadata"].get("ownerReferences")

    for stored in (old, new):
        await eventually(lambda: owners(stored["metadata"]["name"]))
        assert owners(stored["metadata"]["name"]) == [owner_reference(stored)]
    assert fake.get(PG_API, "podgroups", "ray", "rayservice-sample") is None  # the RayService has none
    # the upgrade is done: KubeRay deletes the old cluster, and the garbage collector its PodGroup
    fake.delete_object("ray.io/v1", "rayclusters", "ray", "rayservice-sample-raycluster-7hd2x")
    await eventually(lambda: fake.get(PG_API, "podgroups", "ray", "rayservice-sample-raycluster-7hd2x") is None)
    assert [g["name"] for g in fake.gc_deleted] == ["rayservice-sample-raycluster-7hd2x"]
    assert fake.get(PG_API, "podgroups", "ray", "rayservice-sample-raycluster-q9w2m")["spec"]["minMember"] == 5


# ======================================================================================================================
# DRA: minResources holds only what the scheduler can count
# ======================================================================================================================

#: The DeviceClass NVIDIA's DRA driver (k8s-dra-driver-gpu) installs, with the KEP-5004 extended resource name.
GPU_DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com", "labels": {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"}},
    "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                             "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}


def gpu_deployment(replicas=4, gpu_resource="nvidia.com/gpu", claims=False):
    """A Deployment of inference pods asking for one GPU each, as the DRA driver's demos write them: by the extended
    resource name (KEP-5004), or (``claims``) through a ResourceClaimTemplate."""
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.9.1",
                 "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {gpu_resource: "1"}}}
    spec = {"containers": [container]}
    if claims:
        container["resources"] = {"requests": {"cpu": "4", "memory": "16Gi"}, "claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "serving", "annotations": {"gang.admit.dev/min-member": "auto"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "vllm"}},
                 "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": spec}},
    }


def test_a_resource_a_device_class_serves_or_the_implicit_device_class_name_is_left_out():
    from admit.gang.resources import countable_min_resources, device_class_record, dra_extended_resources

    served = dra_extended_resources([device_class_record(GPU_DEVICE_CLASS)])
    assert served == {"nvidia.com/gpu": "gpu.nvidia.com"}
    kept, left_out = countable_min_resources(
        {"cpu": "16", "nvidia.com/gpu": "4", "deviceclass.resource.kubernetes.io/nic.example.com": "4"}, served)
    assert kept == {"cpu": "16"}
    assert left_out == {"nvidia.com/gpu": "gpu.nvidia.com", "deviceclass.resource.kubernetes.io/nic.example.com":
                        "nic.example.com"}
    assert countable_min_resources({"cpu": "16", "nvidia.com/gpu": "4"}, {}) == (
        {"cpu": "16", "nvidia.com/gpu": "4"}, {})  # a device plugin's GPUs: node allocatable, counted


def test_without_a_cache_the_implicit_device_class_name_is_left_out_with_a_warning():
    verdict = validate(request(gpu_deployment(gpu_resource="deviceclass.resource.kubernetes.io/gpu.nvidia.com")),
                       CONFIG)
    assert verdict.decision.allowed
    assert verdict.ensure.min_resources == {"cpu": "16", "memory": "64Gi"}
    (warning,) = [w for w in verdict.decision.warnings if "minResources leaves out" in w]
    assert "deviceclass.resource.kubernetes.io/gpu.nvidia.com (DeviceClass gpu.nvidia.com)" in warning


def test_gpus_requested_through_resource_claims_are_not_counted_and_it_is_said_once():
    verdict = validate(request(gpu_deployment(claims=True)), CONFIG)
    assert verdict.ensure.min_resources == {"cpu": "16", "memory": "64Gi"}
    assert len([w for w in verdict.decision.warnings if "spec.resourceClaims (DRA)" in w]) == 1
    # a JobSet whose two replicatedJobs both use claims: still one warning
    js = trainer_jobset(num_nodes=2)
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    warnings = validate(request(js), CONFIG).decision.warnings
    assert len([w for w in warnings if "spec.resourceClaims (DRA)" in w]) == 1


async def test_a_dra_gpu_deployment_gets_a_pod_group_without_the_gpus_and_the_controller_keeps_it_so(fake, kube,
                                                                                                      controllers):
    """Against the fake API: the DRA driver's DeviceClass is stored, the controller's DeviceClass cache sees it, the
    Deployment's PodGroup leaves nvidia.com/gpu out (with the warning), and adoption and reconcile never write it
    back."""
    controller = await controllers()
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    await kube.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", body=GPU_DEVICE_CLASS)
    await eventually(lambda: controller.dra_extended_resources == {"nvidia.com/gpu": "gpu.nvidia.com"})
    user = gpu_deployment()
    mutated = jsonpatch.apply_patch(user, admission.mutate(request(user)).patch)
    decision = await admission.validate(request(mutated))
    assert decision.allowed
    assert any("minResources leaves out nvidia.com/gpu (DeviceClass gpu.nvidia.com)" in w for w in decision.warnings)
    assert fake.get(PG_API, "podgroups", "serving", "vllm")["spec"] == {
        "minMember": 4, "minResources": {"cpu": "16", "memory": "64Gi"}}
    stored = await kube.request("POST", Resource("apps", "v1", "deployments", "Deployment").path("serving"),
                                body=mutated)
    await eventually(lambda: fake.get(PG_API, "podgroups", "serving", "vllm")["metadata"].get("ownerReferences"))
    assert fake.get(PG_API, "podgroups", "serving", "vllm")["metadata"]["ownerReferences"] == [owner_reference(stored)]
    reconciles = controller.gangs["coscheduling"].reconciles
    controller.gangs["coscheduling"].loop.queue.add(("serving", "vllm"))  # one more pass over the key: it must find nothing to change
    await eventually(lambda: controller.gangs["coscheduling"].reconciles > reconciles)
    assert fake.get(PG_API, "podgroups", "serving", "vllm")["spec"]["minResources"] == {"cpu": "16", "memory": "64Gi"}


def test_without_a_device_class_a_device_plugins_gpus_stay_in_min_resources():
    verdict = validate(request(gpu_deployment()), CONFIG)
    assert verdict.ensure.min_resources == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
    assert not any("minResources leaves out" in w for w in verdict.decision.warnings)
