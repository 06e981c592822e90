"""The Kubernetes client admission uses: proxy resolved once, not per request; one time budget per request; a throttled
answer (429, a 5xx with Retry-After) retried as client-go retries it, within that budget."""

import time

import pytest
from kubernetes_asyncio import client

from admit.config import Config
from admit.kube.client import Budget, KubeAPI, KubeError, resolve_proxy_once, retry_after_seconds
from admit.kube.watchcache import KubeRaw
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
        assert await KubeAPI(api_client).get_object("scheduling.x-k8s.io", "v1alpha1", "podgroups", "default",
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


@pytest.mark.parametrize("status, headers, wait", [
    (429, {"Retry-After": "1"}, 1.0),  # API Priority and Fairness, the max-in-flight filter
    (503, {"Retry-After": "3"}, 3.0),  # a Status with details.retryAfterSeconds
    (500, {"Retry-After": "0"}, 0.0),
    (429, {}, None),  # client-go's checkWait: no header, no wait (no retry)
    (503, {}, None),
    (409, {"Retry-After": "1"}, None),  # only 429 and 5xx
    (429, {"Retry-After": "Fri, 31 Dec 1999 23:59:59 GMT"}, None),  # strconv.Atoi fails on a date
    (429, {"Retry-After": "-1"}, None),
])
def test_retry_after_is_read_as_client_go_reads_it(status, headers, wait):
    assert retry_after_seconds(status, headers) == wait
    assert KubeError(status, "", "x", wait).throttled is (wait is not None)


async def test_the_controllers_client_retries_a_throttled_request_within_its_timeout_and_not_past_it(fake):
    async with fake.api_client() as api_client:
        raw = KubeRaw(api_client, timeout=2.0)
        fake.fail("list", "pods", 503, times=1, retry_after=1)
        assert (await raw.request("GET", "/api/v1/pods"))["items"] == []
        assert [r.status for r in fake.requests_for("pods")] == [503, 200]
        fake.clear_requests()
        fake.fail("list", "pods", 429, times=1, retry_after=2)  # 2 s cannot fit 2 s
        with pytest.raises(KubeError) as throttled:
            await raw.request("GET", "/api/v1/pods")
        assert (throttled.value.status, throttled.value.retry_after, throttled.value.throttled) == (429, 2.0, True)
        assert [r.status for r in fake.requests_for("pods")] == [429]
        fake.clear_requests()
        fake.fail("list", "pods", 500, times=1)  # no Retry-After: an error, not throttling
        with pytest.raises(KubeError):
            await raw.request("GET", "/api/v1/pods")
        assert [r.status for r in fake.requests_for("pods")] == [500]


async def test_a_throttled_call_is_retried_at_most_max_retries_times(fake, monkeypatch):
    import admit.kube.client as kube_client

    monkeypatch.setattr(kube_client, "MAX_RETRIES", 3)
    async with fake.api_client() as api_client:
        fake.fail("get", "podgroups", 429, times=None, retry_after=0)
        with pytest.raises(KubeError) as throttled:
            await KubeAPI(api_client).get_object("scheduling.x-k8s.io", "v1alpha1", "podgroups", "default",
                                                           "g", 5.0)
        assert throttled.value.status == 429
        assert len(fake.requests_for("podgroups")) == 4  # the call and three retries
