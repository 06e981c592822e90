"""Gang workloads created with ``generateName`` (Argo Workflows, Kubeflow Pipelines, Airflow).

kube-apiserver generates the name after the mutating webhooks and before the validating ones (``rest.BeforeCreate``
inside the store's create), and ``request.name`` stays empty in both phases. These tests replay that sequence over
HTTP with the controller running: ``/mutate`` on the object without a name, the patch applied, the name filled in,
``/validate``, the object stored; then the pods the Job controller makes from the stored template. The PodGroup admit
creates must be the one those pods point at, and ``admit review`` must decide the same.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from admit.cli import main
from admit.config import Config
from admit.webhook.mutate import mutate
from admit.gang.plan import generated_group_name
from admit.webhook.admissionreview import dumps, parse_review
from tests.helpers import GC_ORPHANS_AFTER, admission_review, apply_answer, eventually, example
from tests.webhook_stack import webhook_with_controller

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)

LABEL = "scheduling.x-k8s.io/pod-group"


def pipeline_job(**annotations: str) -> dict[str, Any]:
    """A Job as an Argo Workflows resource template creates it: generateName only, the workflow's labels."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": "train-",
            "namespace": "ml",
            "labels": {"workflows.argoproj.io/workflow": "nightly-7q2xv"},
            "annotations": {"gang.admit.dev/min-member": "auto", **annotations},
        },
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "train", "image": "ghcr.io/example/train:2.1",
                                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}],
                },
            },
        },
    }


def named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """``obj`` after kube-apiserver generated its name (between the two admission phases)."""
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = name
    return out


async def create_through_admission(stack: Any, obj: dict[str, Any], generated: str) -> tuple[dict, dict, dict]:
    """The kube-apiserver sequence for a CREATE with generateName; returns (mutate answer, validate answer, the
    object as stored)."""
    mutated_answer = await stack.post("/mutate", admission_review(obj, name=""))
    mutated = apply_answer(obj, {"response": mutated_answer})
    again = await stack.post("/mutate", admission_review(mutated, name=""))  # reinvocationPolicy: IfNeeded
    assert "patch" not in again
    with_name = named(mutated, generated)
    validated = await stack.post("/validate", admission_review(with_name, name=""))
    stored = stack.fake.put(with_name) if validated["allowed"] else None
    return mutated_answer, validated, stored


def job_pod(job: dict[str, Any], index: int) -> dict[str, Any]:
    """A pod as the Job controller creates it from the stored Job's template."""
    tpl = copy.deepcopy(job["spec"]["template"])
    meta = job["metadata"]
    labels = {**tpl["metadata"]["labels"], "batch.kubernetes.io/job-name": meta["name"],
              "batch.kubernetes.io/controller-uid": meta["uid"]}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"{meta['name']}-", "labels": labels,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": tpl["spec"],
    }


def test_the_generated_group_name_is_the_prefix_and_five_characters_from_the_review_uid():
    a = generated_group_name("train-", "0d1f6c2e-8a4b-4e55-9a57-3d2a1b0c9e8f")
    assert a == generated_group_name("train-", "0d1f6c2e-8a4b-4e55-9a57-3d2a1b0c9e8f")
    assert a != generated_group_name("train-", "5b7e9c1d-2f3a-4b6c-8d9e-0a1b2c3d4e5f")
    assert a.startswith("train-") and len(a) == 11 and set(a[6:]) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert len(generated_group_name("x" * 80, "u")) == 63  # cut to 58 + 5, as kube-apiserver cuts generateName


async def test_a_generate_name_job_gangs_its_pods_in_the_group_both_phases_agree_on(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        mutation, validation, stored = await create_through_admission(stack, pipeline_job(), "train-x7k2p")
        assert validation["allowed"] is True
        group = stored["spec"]["template"]["metadata"]["labels"][LABEL]
        assert group.startswith("train-") and group != "train-x7k2p"
        assert stored["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        # the name admit chose is explained offline (a note), not sent to kubectl as a warning
        assert not any("its PodGroup is named" in w for w in mutation.get("warnings", []))
        # The PodGroup is the one the template names, owned (annotation) by the Job's generated name ...
        [post] = stack.pod_group_posts()
        assert post.body["metadata"]["name"] == group
        assert post.body["metadata"]["annotations"] == {"gang.admit.dev/owner": "batch/Job/train-x7k2p"}
        assert post.body["spec"]["minMember"] == 3
        # ... and the controller adopts it for the stored Job.
        await eventually(lambda: (stack.pod_group("ml", group) or {}).get("metadata", {}).get("ownerReferences"))
        [ref] = stack.pod_group("ml", group)["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", "train-x7k2p", stored["metadata"]["uid"])
        # The Job controller's pods point at it, and admit finds it without an API call.
        stack.fake.clear_requests()
        for i in range(3):
            pod = job_pod(stored, i)
            assert pod["metadata"]["labels"][LABEL] == group
            for path in ("/mutate", "/validate"):
                answer = await stack.post(path, admission_review(pod, name="", strip_namespace=True, namespace="ml"))
                assert answer == {"uid": answer["uid"], "allowed": True}
        assert stack.fake.requests_for("podgroups") == []


async def test_a_generate_name_tfjob_from_a_pipeline_labels_every_replica_type_with_one_group(aiohttp_client, fake):
    tfjob = example("tfjob-ps-worker.yaml")
    del tfjob["metadata"]["name"]
    tfjob["metadata"]["generateName"] = "dist-mnist-"
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        _, validation, stored = await create_through_admission(stack, tfjob, "dist-mnist-k9rzt")
        assert validation["allowed"] is True
        groups = {spec["template"]["metadata"]["labels"][LABEL] for spec in stored["spec"]["tfReplicaSpecs"].values()}
        [group] = groups
        assert group.startswith("dist-mnist-") and group != "dist-mnist-k9rzt"
        assert stack.pod_group("ml", group)["spec"]["minMember"] == 6
        await eventually(lambda: (stack.pod_group("ml", group) or {}).get("metadata", {}).get("ownerReferences"))


async def test_a_generate_name_job_the_mutating_webhook_did_not_label_is_refused_with_the_hint(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        # The mutating webhook was skipped (e.g. its failurePolicy is Ignore and it timed out): /validate sees the
        # generated name but templates without the group label.
        answer = await stack.post("/validate", admission_review(named(pipeline_job(), "train-x7k2p"), name=""))
        assert answer["allowed"] is False and answer["status"]["code"] == 400
        message = answer["status"]["message"]
        assert "generateName 'train-'" in message and message.startswith("Set annotation gang.admit.dev/pod-group")
        assert stack.pod_group_posts() == []


async def test_a_generate_name_job_with_an_explicit_group_uses_that_name_without_a_warning(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        job = pipeline_job(**{"gang.admit.dev/pod-group": "nightly-train"})
        mutation, validation, stored = await create_through_admission(stack, job, "train-b4mzq")
        assert validation["allowed"] is True and "warnings" not in mutation
        assert stored["spec"]["template"]["metadata"]["labels"][LABEL] == "nightly-train"
        assert stack.pod_group("ml", "nightly-train")["spec"]["minMember"] == 3


async def test_a_bare_pod_with_generate_name_joins_the_group_admit_names_for_it(aiohttp_client, fake):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "probe-", "namespace": "ml",
                        "annotations": {"gang.admit.dev/min-member": "1"}},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        _, validation, stored = await create_through_admission(stack, pod, "probe-2xk8w")
        assert validation["allowed"] is True
        group = stored["metadata"]["labels"][LABEL]
        assert group.startswith("probe-") and stack.pod_group("ml", group) is not None


def test_admit_review_decides_a_generate_name_job_as_the_server_does_and_repeatably(tmp_path, capsys):
    f = tmp_path / "job.yaml"
    f.write_text(json.dumps(pipeline_job()))
    runs = []
    for _ in range(2):
        code = main(["review", "--output", "json", str(f)])
        runs.append((code, json.loads(capsys.readouterr().out)))
    assert runs[0] == runs[1]
    code, [r] = runs[0]
    assert code == 0 and r["allowed"] is True
    group = r["object"]["spec"]["template"]["metadata"]["labels"][LABEL]
    [pg] = r["podGroups"]
    assert pg["metadata"]["name"] == group and pg["spec"]["minMember"] == 3
    assert r["name"].startswith("train-") and r["name"] != group  # kube-apiserver's name, generated after /mutate
    assert pg["metadata"]["annotations"] == {"gang.admit.dev/owner": f"batch/Job/{r['name']}"}


def test_the_generated_name_follows_the_configured_prefix_and_label():
    config = Config(annotation_prefix="gang.example.com")
    job = pipeline_job()
    job["metadata"]["annotations"] = {"gang.example.com/min-member": "auto"}
    req = parse_review(dumps(admission_review(job, name="")))
    decision = mutate(req, config)
    ops = {op["path"]: op["value"] for op in decision.patch}
    labels = ops["/spec/template/metadata/labels/scheduling.x-k8s.io~1pod-group"]
    assert labels == generated_group_name("train-", req.uid)
    assert any(f"its PodGroup is named {labels!r}" in n and "gang.example.com/pod-group" in n for n in decision.notes)
    assert decision.warnings == []
