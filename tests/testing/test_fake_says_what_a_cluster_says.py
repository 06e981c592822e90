"""The fake API says what kube-apiserver says where the walk-through shows it: admission warnings come back as
``Warning`` headers (kubectl prints them as ``Warning: ...``), and, with ``namespace_lifecycle`` (``admit serve
--dev``), a write into a namespace that does not exist is refused as the NamespaceLifecycle plugin refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from admit.config import Config
from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI, allowed, denied
from admit.testing.fake_kube.admission import warning_headers

RULES = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
          "scope": "*"}]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def pod(name: str = "p", namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def warner(*texts: str, refuse: bool = False) -> Any:
    async def call(request: dict[str, Any]) -> dict[str, Any]:
        if refuse:
            response = denied(request, "no")
            response["warnings"] = list(texts)
            return response
        return allowed(request, warnings=texts)
    return call


async def post_pod(fake: FakeKubeAPI, body: dict[str, Any]) -> aiohttp.ClientResponse:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{fake.url}/api/v1/namespaces/{body['metadata']['namespace']}/pods",
                                json=body) as resp:
            await resp.read()
            return resp


async def test_admission_warnings_come_back_as_warning_headers_as_kube_apiserver_sends_them():
    chain = AdmissionChain()
    chain.add("Validating", "a", {"name": "a.example.com", "rules": RULES, "failurePolicy": "Fail"},
              warner('set "x" to 1', "a back\\slash", 'set "x" to 1'))
    async with FakeKubeAPI(admission=chain) as fake:
        resp = await post_pod(fake, pod())
    assert resp.status == 201
    # net.NewWarningHeader: code 299, agent "-", the text quoted with " and \ escaped; each text once
    assert resp.headers.getall("Warning") == ['299 - "set \\"x\\" to 1"', '299 - "a back\\\\slash"']


async def test_a_refused_request_carries_the_webhooks_warnings_too():
    chain = AdmissionChain()
    chain.add("Validating", "a", {"name": "a.example.com", "rules": RULES, "failurePolicy": "Fail"},
              warner("rename annotation x to y: it is ignored", refuse=True))
    async with FakeKubeAPI(admission=chain) as fake:
        resp = await post_pod(fake, pod())
    assert resp.status == 403 and resp.headers.getall("Warning") == ['299 - "rename annotation x to y: it is ignored"']


def test_past_4096_runes_every_warning_is_cut_to_256_and_one_with_a_control_character_is_dropped():
    texts = ["a" * 2000, "b" * 2000, "bad\nline", "c" * 300]
    assert warning_headers(texts[:2]) == [f'299 - "{"a" * 2000}"', f'299 - "{"b" * 2000}"']
    assert warning_headers(texts) == [f'299 - "{x * 256}"' for x in "abc"]


async def test_with_namespace_lifecycle_a_write_into_a_missing_namespace_is_not_found():
    async with FakeKubeAPI(namespace_lifecycle=True) as fake, fake.api_client() as api:
        with pytest.raises(ApiException) as e:
            await k8s.CoreV1Api(api).create_namespaced_pod("nope", pod(namespace="nope"))
        await k8s.CoreV1Api(api).create_namespaced_pod("default", pod())  # kube-apiserver's own namespaces exist
        names = {n["metadata"]["name"] for n in fake.objects("namespaces")}
    import json

    assert e.value.status == 404 and json.loads(e.value.body)["message"] == 'namespaces "nope" not found'
    assert names == {"default", "kube-system", "kube-public", "kube-node-lease"}


async def test_without_namespace_lifecycle_the_fake_keeps_storing_anywhere():
    async with FakeKubeAPI() as fake, fake.api_client() as api:
        await k8s.CoreV1Api(api).create_namespaced_pod("anywhere", pod(namespace="anywhere"))
        assert fake.get("v1", "pods", "anywhere", "p") is not None


async def test_the_dev_fake_creates_the_namespaces_its_seed_workloads_use():
    from admit.cli.dev import store_walkthrough_workloads

    async with FakeKubeAPI(namespace_lifecycle=True) as fake:
        stored = store_walkthrough_workloads(fake, Config(), EXAMPLES)
        seeds = [o for o in fake.objects("deployments")]
        namespaces = {n["metadata"]["name"] for n in fake.objects("namespaces")}
    assert seeds and {d["metadata"]["namespace"] for d in seeds} <= namespaces
    assert any(s.startswith("Deployment ") for s in stored)


async def test_a_trainjob_sent_to_the_dev_fake_is_judged_against_the_runtime_trainer_installs(aiohttp_client):
    """As on a cluster with Kubeflow Trainer: the dev fake serves the runtimes' CRDs with TrainJob's and holds the
    runtime examples/trainjob-torch.yaml names, so admit's CREATE-time read finds it (without it, the answer warns
    "create ClusterTrainingRuntime torch-distributed ... admit could not find it")."""
    import yaml

    from admit.cli.dev import store_walkthrough_workloads
    from admit.kube.client import KubeAPI
    from admit.webhook.admission import Admission
    from admit.webhook.app import create_app
    from tests.helpers import admission_review

    config = Config()
    trainjob = yaml.safe_load((EXAMPLES / "trainjob-torch.yaml").read_text())
    async with FakeKubeAPI(namespace_lifecycle=True) as fake, fake.api_client() as api:
        stored = store_walkthrough_workloads(fake, config, EXAMPLES)
        client = await aiohttp_client(create_app(Admission(config, KubeAPI(api))))
        resp = await client.post("/validate", json=admission_review(trainjob))
        answer = (await resp.json())["response"]
    assert "ClusterTrainingRuntime torch-distributed" in stored
    assert answer["allowed"] is True
    assert not any("could not find" in w for w in answer.get("warnings") or []), answer


async def test_the_dev_fake_serves_nodes_so_a_status_read_lists_them_as_on_a_cluster():
    async with FakeKubeAPI(namespace_lifecycle=True) as fake, fake.api_client() as api:
        fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        nodes = await k8s.CoreV1Api(api).list_node()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
