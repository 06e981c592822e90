"""The Kubernetes client admission uses: proxy resolved once, not per request; one time budget per request."""

import time

import pytest
from kubernetes_asyncio import client

from admit.config import Config
from admit.kube.client import Budget, KubeAPI, KubeError, resolve_proxy_once
from admit.testing.fake_kube import FakeKubeAPI


async def test_without_proxy_variables_requests_skip_the_per_request_environment_lookups(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    async with FakeKubeAPI() as fake:
        api_client = fake.api_client()
        resolve_proxy_once(api_client)
        assert api_client.rest_client.pool_manager.trust_env is False
        assert api_client.rest_client.proxy is None
        # still talks to the API server
        assert await KubeAPI(api_client, Config()).get_object("scheduling.x-k8s.io", "v1alpha1", "podgroups", "default",
                                                              "missing", 2.0) is None
        await api_client.close()


async def test_an_https_proxy_variable_becomes_the_clients_explicit_proxy(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.corp.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    api_client = client.ApiClient(client.Configuration(host="https://api.cluster.example:6443"))
    resolve_proxy_once(api_client)
    assert api_client.rest_client.proxy == "http://proxy.corp.example:3128"
    assert api_client.rest_client.proxy_headers["Proxy-Authorization"].startswith("Basic ")
    assert api_client.rest_client.pool_manager.trust_env is False
    await api_client.close()


async def test_no_proxy_keeps_the_api_server_direct(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("NO_PROXY", "api.cluster.example")
    api_client = client.ApiClient(client.Configuration(host="https://api.cluster.example:6443"))
    resolve_proxy_once(api_client)
    assert api_client.rest_client.proxy is None
    await api_client.close()


def test_the_api_budget_gives_each_call_what_is_left_and_refuses_one_once_it_is_used_up(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    budget = Budget(2.5)
    assert budget.left() == 2.5
    clock[0] += 2.0  # a create, then a read, took two seconds
    assert budget.left() == 0.5
    clock[0] += 0.5
    with pytest.raises(KubeError) as used_up:
        budget.left()
    assert (used_up.value.status, used_up.value.reason) == (0, "Timeout")
    assert used_up.value.message == "API budget of 2.5s used up"
