"""Kubernetes 1.35: the Workload API's first alpha (``scheduling.k8s.io/v1alpha1``, KEP-4671) only.

1.35 serves ``workloads`` whose ``spec.podGroups`` embed the gangs, and pods name their Workload in
``spec.workloadRef``; 1.36 replaced both (``v1alpha2``: PodGroup objects, pod ``spec.schedulingGroup``). admit writes
only the later shapes, so on 1.35 the fix is the cluster's version or the Coscheduling backend, never "upgrade
admit"; and a pod template that already names a native gang (either field) is left to it, as the other native
fields are.
"""

from __future__ import annotations

import asyncio
import copy
import sys

import pytest

from admit.backends.workload_api.discovery import BackendUnavailable, configure_backends
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.admission import Admission
from admit.webhook.app import create_app
from tests.helpers import admission_review, apply_answer, example

EXTRA = Config(extra_gang_backends=frozenset({"workload-api"}))


async def test_the_fake_serves_only_1_35_workloads_when_asked_for_v1alpha1():
    async with FakeKubeAPI(workload_api="v1alpha1") as fake, fake.api_client() as api_client:
        from kubernetes_asyncio import client

        doc = await client.CustomObjectsApi(api_client).get_api_resources("scheduling.k8s.io", "v1alpha1")
    assert {r.name for r in doc.resources} == {"workloads"}


async def test_admit_serve_on_1_35_says_to_run_1_36_or_the_coscheduling_backend_not_to_upgrade_admit(tmp_path):
    async with FakeKubeAPI(workload_api="v1alpha1") as fake:
        with pytest.raises(BackendUnavailable) as e:
            async with fake.api_client() as api_client:
                await configure_backends(api_client, Config(gang_backend="workload-api"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "serve", "--gang-backend", "workload-api", "--api-server", fake.url,
            "--tls-cert-file", str(tmp_path / "none.crt"), "--tls-key-file", str(tmp_path / "none.key"),
            "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    message = str(e.value)
    assert message.startswith("--gang-backend workload-api: run Kubernetes 1.36 or later, or use the coscheduling "
                              "backend (--gang-backend coscheduling")
    assert "scheduling.k8s.io/v1alpha1 (Kubernetes 1.35)" in message and "upgrade admit" not in message
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "run Kubernetes 1.36 or later" in lines[0]
    assert "upgrade admit" not in lines[0] and "GenericWorkload=true,GangScheduling=true" not in lines[0]


async def test_a_workload_asking_for_the_native_backend_on_1_35_is_refused_naming_what_the_cluster_serves(
        aiohttp_client):
    async with FakeKubeAPI(workload_api="v1alpha1") as fake:
        api_client = fake.api_client()
        config = await configure_backends(api_client, EXTRA)
        assert config.workload_api_version == "" and config.workload_api_served == ("v1alpha1",)
        client = await aiohttp_client(create_app(Admission(config, KubeAPI(api_client))))
        dep = example("pause-gang-deployment.yaml")
        dep["metadata"]["annotations"]["gang.admit.dev/backend"] = "workload-api"
        validated = await client.post("/validate", json=admission_review(dep))  # /mutate passes it on unchanged
        answer = (await validated.json())["response"]
        await api_client.close()
    assert answer["allowed"] is False and answer["status"]["code"] == 400
    message = answer["status"]["message"]
    assert "serves only scheduling.k8s.io/v1alpha1 (Kubernetes 1.35)" in message
    assert message.startswith("Run Kubernetes 1.36 or later, or use the coscheduling backend")
    assert "--feature-gates" not in message  # 1.36/1.37 gates would not help a 1.35 cluster


def _job_naming(field: str) -> dict:
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "allreduce", "namespace": "ml", "annotations": {"gang.admit.dev/min-member": "4"}},
        "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox"}]}}}}
    ref = ({"name": "allreduce", "podGroup": "workers"} if field == "workloadRef"
           else {"podGroupName": "allreduce"})
    job["spec"]["template"]["spec"][field] = ref
    return job


@pytest.mark.parametrize("field", ["workloadRef", "schedulingGroup"])
async def test_a_job_whose_template_names_a_native_gang_gets_no_coscheduling_gang_besides(field, aiohttp_client):
    # 1.35's spec.workloadRef, 1.36's spec.schedulingGroup (here naming the Job's own name, as a user writes it):
    # Coscheduling's label, scheduler and PodGroup besides would make two gangs wait on each other's pods.
    async with FakeKubeAPI(workload_api="v1alpha1") as fake, fake.api_client() as api_client:
        config = Config()
        client = await aiohttp_client(create_app(Admission(config, KubeAPI(api_client))))
        job = _job_naming(field)
        mutation = (await (await client.post("/mutate", json=admission_review(job))).json())["response"]
        stored = apply_answer(copy.deepcopy(job), {"response": mutation})
        answer = (await (await client.post("/validate", json=admission_review(stored))).json())["response"]
        pod_groups = fake.objects("podgroups")
    template = stored["spec"]["template"]
    assert "patch" not in mutation and "labels" not in template.get("metadata", {})
    assert "schedulerName" not in template["spec"] and pod_groups == []
    assert answer["allowed"] is True
    [warning] = [w for w in answer["warnings"] if field in w]
    assert warning == (f"remove gang.admit.dev/min-member or the pod template's spec.{field}: it names a native gang, "
                       "so admit makes no gang of its own besides (no label, scheduler or PodGroup) and only checks "
                       "the size")


def test_a_job_naming_a_native_gang_is_still_refused_below_its_min_member():
    from admit.webhook.admissionreview import parse_review
    from admit.webhook.validate import validate
    from admit.jsonio import dumps

    job = _job_naming("workloadRef")
    job["spec"]["parallelism"] = job["spec"]["completions"] = 2
    verdict = validate(parse_review(dumps(admission_review(job))), Config())
    assert verdict.decision.allowed is False and "minMember 4" in verdict.decision.message
