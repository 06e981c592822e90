"""API Priority and Fairness throttling admit's writes: a 429 with ``Retry-After`` is retried
within the admission budget, as client-go retries it (``rest/with_retry.go`` ``checkWait``), and one that does not
fit the budget still answers through the failure mode in time. The fake kube-apiserver answers the injected 429
with ``Retry-After`` and ``details.retryAfterSeconds``, as kube-apiserver's filters do."""

import asyncio

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from admit.config import Config
from tests.helpers import admission_review, example
from tests.webhook_stack import fake_cluster

PG = ("scheduling.x-k8s.io/v1alpha1", "podgroups")


def gang_deployment() -> dict:
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["namespace"] = "team"
    return dep


async def test_one_429_with_retry_after_1_on_the_pod_group_post_no_longer_refuses_the_deployment(aiohttp_server):
    async with fake_cluster(aiohttp_server, Config()) as (fake, user):
        fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        fake.fail("POST", "podgroups", 429, times=1)  # API Priority and Fairness rejects the first POST
        loop = asyncio.get_running_loop()
        start = loop.time()
        created = await k8s.AppsV1Api(user).create_namespaced_deployment("team", gang_deployment())
        elapsed = loop.time() - start
        assert created.metadata.name == "pause"
        assert [(r.method, r.status) for r in fake.requests_for("podgroups")] == [("POST", 429), ("POST", 201)]
        assert fake.get(*PG, "team", "pause")["spec"]["minMember"] == 3
        assert 1.0 <= elapsed < 3.0  # waited the Retry-After, within the 3 s budget


async def test_a_429_whose_retry_after_outlasts_the_budget_answers_through_the_failure_mode_in_time(aiohttp_server):
    async with fake_cluster(aiohttp_server, Config(api_timeout_seconds=3.0)) as (fake, user):
        fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        fake.fail("POST", "podgroups", 429, times=None, retry_after=10)
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            await k8s.AppsV1Api(user).create_namespaced_deployment("team", gang_deployment())
            raise AssertionError("the Deployment was created without its PodGroup")
        except ApiException as refused:
            message = refused.body
        elapsed = loop.time() - start
        assert "failure mode 'deny'" in message and "429" in message
        assert [(r.method, r.status) for r in fake.requests_for("podgroups")] == [("POST", 429)]
        assert elapsed < 1.5  # no wait that cannot fit: answered at once, long before the webhook's timeout


async def test_a_throttled_retry_that_fits_is_made_and_one_that_does_not_fit_the_rest_of_the_budget_is_not(
        aiohttp_client, fake):
    from tests.webhook.test_server import make_client, post

    webhook = await make_client(aiohttp_client, fake, api_timeout_seconds=1.5)
    try:
        fake.fail("POST", "podgroups", 429, times=None)  # Retry-After: 1, every time
        loop = asyncio.get_running_loop()
        start = loop.time()
        body = await post(webhook, "/validate", admission_review(example("pause-gang-deployment.yaml")))
        elapsed = loop.time() - start
    finally:
        await webhook.api_client.close()
    assert body["response"]["allowed"] is False and body["response"]["status"]["code"] == 503
    # one retry after 1 s fits 1.5 s; a second would end after the budget, so it is not made
    assert [r.status for r in fake.requests_for("podgroups")] == [429, 429]
    assert 1.0 <= elapsed < 1.5
