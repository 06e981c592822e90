"""The Kubernetes client admission uses: proxy resolved once, not per request."""

from kubernetes_asyncio import client

from admit.config import Config
from admit.kube import KubeAPI, resolve_proxy_once
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
        assert await KubeAPI(api_client, Config()).get_pod_group("default", "missing", 2.0) is None
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
