"""Every file in examples/ through the webhook over HTTP (table-driven), and the PodGroups ``admit review`` prints.

Each document goes as kube-apiserver would send it: ``/mutate``, the returned patch applied with ``jsonpatch``,
then ``/validate`` on the mutated object, PodGroups created in a fake Kubernetes API, the admitted object stored
(so a later document, e.g. a Spark executor after its driver, sees the cluster as it would be). Files under
``examples/denied/`` must be refused; every other file admitted, with a second mutation giving no patch.
"""

import copy
import json

import pytest

from admit.webhook.admission import Admission
from admit.gang.children import controller_ref
from admit.cli import main
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import EXAMPLES, PLURALS, admission_review, apply_answer, decode_patch

PG_API = "scheduling.x-k8s.io/v1alpha1"
LABEL = "scheduling.x-k8s.io/pod-group"
SPARK_APP_ID = "spark-5b1e0c4f9a7d4e2b8c3f6a9d0e1b2c47"

FILES = sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))

# file -> {PodGroup name: spec}: the numbers worked out in each example's header comment.
EXPECTED_GROUPS = {
    "spark-pi-scala.yaml": {
        # driver 1 cpu + 2048Mi + max(204, 384)Mi; 4 executors x (2 cpu, 4096Mi + max(409, 384)Mi)
        "spark-pi": {"minMember": 1, "minResources": {"cpu": "9", "memory": "20452Mi"}, "scheduleTimeoutSeconds": 300},
    },
    "pyspark-dynamic-allocation.yaml": {
        # driver 1 cpu + 1024Mi + 409Mi; 2 initial executors x (500m, 2048Mi + 819Mi + 512Mi pyspark)
        "pyspark-wordcount": {"minMember": 1, "minResources": {"cpu": "2", "memory": "8191Mi"}},
    },
    "spark-submit-pods.yaml": {
        # driver (1 cpu, 1408Mi) + 3 x the annotated executor (cpu=1, memory=1408Mi)
        SPARK_APP_ID: {"minMember": 1, "minResources": {"cpu": "4", "memory": "5632Mi"}},
    },
    "tfjob-ps-worker.yaml": {
        # 2 PS x (500m, 1536Mi) + 4 Worker x (2, 4Gi, 1 GPU)
        "dist-mnist": {"minMember": 6, "minResources": {"cpu": "9", "memory": "19Gi", "nvidia.com/gpu": "4"},
                       "scheduleTimeoutSeconds": 600},
    },
    "pytorchjob-elastic.yaml": {
        "elastic-imagenet": {"minMember": 2, "minResources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}},
    },
    "kueue-plain-pod-group.yaml": {
        # three members, Kueue's total count 3, 500m each; the later members find the group as the first made it
        "sample-group": {"minMember": 3, "minResources": {"cpu": "1500m"}},
    },
    "deployment-replicaset.yaml": {
        # the Deployment's group only: its ReplicaSet is a child (4 x 250m, 4 x 128Mi)
        "api": {"minMember": 4, "minResources": {"cpu": "1", "memory": "512Mi"}},
    },
    "mpijob-v2beta1.yaml": {
        "pi": {"minMember": 3, "minResources": {"cpu": "3", "memory": "3Gi"}},
    },
    "jobset-pytorch.yaml": {
        # 1 leader (1 cpu, 2Gi) + 3 workers x (2 cpu, 4Gi, 1 GPU)
        "pytorch": {"minMember": 4, "minResources": {"cpu": "7", "memory": "14Gi", "nvidia.com/gpu": "3"},
                    "scheduleTimeoutSeconds": 300},
    },
    "raycluster-autoscaler.yaml": {
        # autoscaler floor: 1 head (1 cpu, 2Gi, and KubeRay's autoscaler sidecar 500m, 512Mi) + minReplicas 1 worker
        # (1 cpu, 1Gi; its wait-gcs-ready init container, 200m / 256Mi, is below that)
        "raycluster-autoscaler": {"minMember": 2, "minResources": {"cpu": "2500m", "memory": "3584Mi"}},
    },
    "rayjob-sample.yaml": {
        # the RayCluster KubeRay made: 1 head (1 cpu, 2Gi) + 2 workers x (1 cpu, 1Gi)
        "rayjob-sample-raycluster-x7k2p": {"minMember": 3, "minResources": {"cpu": "3", "memory": "4Gi"}},
    },
    "rayservice-sample.yaml": {
        # the RayCluster KubeRay made: 1 head (2 cpu, 4Gi) + 2 workers x (1 cpu, 2Gi)
        "rayservice-sample-raycluster-7hd2x": {"minMember": 3, "minResources": {"cpu": "4", "memory": "8Gi"}},
    },
    "leaderworkerset-vllm-pods.yaml": {
        # group 0 of leaderworkerset-vllm.yaml: leader + 1 worker, each (4 cpu, 16Gi, 1 GPU); made by the leader pod
        # <lws>-<group index>-<template revision> (the pods carry template-revision-hash 5c7d9f8b6)
        "vllm-0-5c7d9f8b6": {"minMember": 2, "minResources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}},
    },
}


def documents(path):
    import yaml

    text = path.read_text()
    return [d for d in (yaml.safe_load_all(text) if path.suffix != ".json" else [json.loads(text)]) if d]


def group_labels(obj):
    """Every pod-group label value where the object's pods get their labels (none for a RayJob or RayService: each
    RayCluster KubeRay makes from it is a gang of its own, labelled at its own admission)."""
    spec = obj.get("spec") or {}
    if obj["kind"] in ("RayJob", "RayService"):
        return []
    if obj["kind"] == "Pod":
        maps = [obj["metadata"].get("labels") or {}]
    elif obj["kind"] == "JobSet":
        maps = [rj["template"]["spec"]["template"].get("metadata", {}).get("labels") or {}
                for rj in spec["replicatedJobs"]]
    elif obj["kind"] in ("RayCluster", "RayJob", "RayService"):
        cluster = {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec"),
                   "RayService": spec.get("rayClusterConfig")}[obj["kind"]]
        maps = [(g["template"].get("metadata") or {}).get("labels") or {}
                for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]]
    elif obj["kind"] == "SparkApplication":
        maps = [spec[role].get("labels") or {} for role in ("driver", "executor")]
    elif isinstance(spec.get("template"), dict):
        maps = [(spec["template"].get("metadata") or {}).get("labels") or {}]
    else:
        maps = [
            (rs.get("template", {}).get("metadata") or {}).get("labels") or {}
            for key, specs in spec.items() if key.endswith("ReplicaSpecs") for rs in specs.values()
        ]
    return [m.get(LABEL) for m in maps]


class FakeGroupCache:
    """The PodGroup cache the admission path reads, over the fake API's store (no HTTP)."""

    def __init__(self, fake):
        self.fake = fake

    def get(self, namespace, name):
        return self.fake.get(PG_API, "podgroups", namespace, name)


def stored_workloads():
    """The workloads of the top-level examples, as if applied before the AdmissionReview files' requests."""
    return [d for p in FILES if p.parent == EXAMPLES for d in documents(p) if d.get("kind") != "AdmissionReview"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
async def test_every_example_gets_its_verdict_over_http(path, aiohttp_client):
    denied_dir = path.parent.name == "denied"
    config = Config()
    async with FakeKubeAPI() as fake:
        async with fake.api_client() as api_client:
            client = await aiohttp_client(
                create_app(Admission(config, KubeAPI(api_client), cache=FakeGroupCache(fake)))
            )

            async def post(endpoint, review):
                resp = await client.post(endpoint, json=review)
                assert resp.status == 200, await resp.text()
                body = await resp.json()
                assert body["response"]["uid"] == review["request"]["uid"]
                return body

            docs = documents(path)
            if any(d.get("kind") == "AdmissionReview" for d in docs):
                # the Trainer runtime example (cluster-scoped), as Trainer's CRD serves it
                fake.register("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes",
                              namespaced=False, status=False)
                for w in stored_workloads():
                    try:
                        fake.put(w)
                    except KeyError:
                        pass  # a kind the fake does not serve (an Argo Workflow)
            verdicts = []
            for doc in docs:
                review = doc if doc.get("kind") == "AdmissionReview" else admission_review(doc)
                obj = review["request"].get("object")
                answer = await post("/mutate", review)
                assert answer["response"]["allowed"] is True  # the mutating webhook never refuses
                mutated = apply_answer(obj, answer) if obj is not None else None
                checked = copy.deepcopy(review)
                checked["request"]["object"] = mutated
                verdict = (await post("/validate", checked))["response"]
                verdicts.append(verdict["allowed"])
                if not verdict["allowed"]:
                    assert verdict["status"]["message"] and verdict["status"]["code"] in (400, 403, 409)
                    continue
                if doc.get("kind") != "AdmissionReview":
                    again = await post("/mutate", admission_review(mutated))
                    assert decode_patch(again) == [], f"second mutation of {doc['kind']} is not empty"
                    try:
                        fake.put(mutated)
                    except KeyError:
                        pass  # a kind the fake does not serve
            assert not any(verdicts) if denied_dir else all(verdicts)

            for name, spec in EXPECTED_GROUPS.get(path.name, {}).items():
                namespace = next(d["metadata"]["namespace"] for d in docs)
                pg = fake.get(PG_API, "podgroups", namespace, name)
                assert pg is not None, f"PodGroup {namespace}/{name} was not created"
                assert pg["spec"] == spec
                assert pg["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "admit"}
                assert "ownerReferences" not in pg["metadata"]  # adopted later by the controller
            if path.name in EXPECTED_GROUPS:
                (name,) = EXPECTED_GROUPS[path.name]
                for doc in docs:
                    meta = doc["metadata"]
                    if "name" in meta:
                        stored = [fake.get(doc["apiVersion"], doc["kind"], meta["namespace"], meta["name"])]
                    else:  # generateName only: the objects the fake named from it
                        stored = [o for o in fake.objects(PLURALS[doc["kind"]], meta["namespace"])
                                  if o["metadata"].get("generateName") == meta["generateName"]]
                    assert stored
                    for obj in stored:
                        assert set(group_labels(obj)) <= {name}, f"{doc['kind']} {obj['metadata']['name']}"
                        assert group_labels(obj) or obj["kind"] in ("RayJob", "RayService")


@pytest.mark.parametrize("name", sorted(EXPECTED_GROUPS))
def test_admit_review_json_prints_the_worked_out_pod_groups(name, capsys):
    assert main(["review", "--output", "json", str(EXAMPLES / name)]) == 0
    results = json.loads(capsys.readouterr().out)
    printed = {pg["metadata"]["name"]: pg["spec"] for r in results for pg in r["podGroups"]}
    assert printed == EXPECTED_GROUPS[name]
    for r in results:
        # every object is patched, except a child (a Deployment's ReplicaSet), whose template its parent's patch made
        assert r["allowed"] and (r["patch"] or controller_ref(r["object"]) is not None)
        labels = group_labels(r["object"])  # a RayJob's or RayService's templates stay as written
        assert set(labels) == set(EXPECTED_GROUPS[name]) or (not labels and r["object"]["kind"] in ("RayJob", "RayService"))


def test_admit_review_shows_the_spark_executor_joining_the_group_its_driver_made(capsys):
    assert main(["review", "--output", "json", str(EXAMPLES / "spark-submit-pods.yaml")]) == 0
    driver, executor = json.loads(capsys.readouterr().out)
    assert driver["podGroups"] and not executor["podGroups"]
    assert {"op": "add", "path": "/metadata/labels/scheduling.x-k8s.io~1pod-group", "value": SPARK_APP_ID} in (
        executor["patch"])
