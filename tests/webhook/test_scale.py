"""``*/scale`` over HTTP (``kubectl scale``, the HorizontalPodAutoscaler), with and without the controller running.

A scale is answered from the controller's watch cache of gang workloads; a workload that is no gang
needs no read at all; a live read happens only while that cache has not listed, and its failure refuses (failure mode
``deny``) only a workload known to be a gang. One rule for the scale path and the workload path (a
target from 1 to minMember - 1 is refused, up from zero too), and an ``auto`` gang's PodGroup takes the new size in
the same admission, before its pods exist.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from admit.config import Config
from tests.helpers import admission_review, apply_answer, eventually, scale_review

CONFIG = Config()
PG_API = "scheduling.x-k8s.io/v1alpha1"


def deployment(name: str = "web", replicas: int = 4, min_member: str | None = "3", *, stored: bool = True
               ) -> dict[str, Any]:
    """A Deployment as stored: with ``min_member``, after admit's mutating webhook (managed label, group label,
    schedulerName); without it, as a user wrote it."""
    labels: dict[str, str] = {"app": name}
    tpl_labels: dict[str, str] = {"app": name}
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if min_member is not None:
        labels["gang.admit.dev/managed"] = "true"
        tpl_labels["scheduling.x-k8s.io/pod-group"] = name
        annotations["gang.admit.dev/min-member"] = min_member
        spec["schedulerName"] = "scheduler-plugins-scheduler"
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team", "labels": labels, "annotations": annotations},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": tpl_labels}, "spec": spec}},
    }


def managed_pg(name: str = "web", min_member: int = 1) -> dict[str, Any]:
    return {"apiVersion": PG_API, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team", "labels": {"app.kubernetes.io/managed-by": "admit"},
                         "annotations": {"gang.admit.dev/owner": f"apps/Deployment/{name}"}},
            "spec": {"minMember": min_member, "minResources": {"cpu": "100m", "memory": "64Mi"}}}


async def post(client, review):
    resp = await client.post("/validate", json=review)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["response"]["uid"] == review["request"]["uid"]
    return body["response"]


def reads(fake):
    return [r for r in fake.requests_for("deployments") if r.verb != "watch" and r.verb != "list"]


# ---------------------------------------------------------------------------------------------- with the controller


async def test_a_scale_of_a_deployment_that_is_no_gang_needs_no_read_even_while_the_api_fails(webhook, fake):
    client = await webhook(controller=True)
    fake.put(deployment("api", min_member=None))
    fake.fail("GET", "deployments", 429, times=None)  # API Priority and Fairness under pressure
    fake.clear_requests()
    answer = await post(client, scale_review("api", "team", new=1, old=4))
    assert answer["allowed"] is True and "warnings" not in answer
    assert reads(fake) == []


async def test_a_gang_scaled_below_min_member_is_refused_from_the_cache_without_a_read(webhook, fake):
    client = await webhook(controller=True)
    fake.put(deployment("web", replicas=4, min_member="3"))
    await eventually(lambda: client.view.workload("apps", "v1", "deployments", "Deployment", "team", "web")[1])
    # The controller creates the group with its owner after a live read of the Deployment: let it finish first.
    await eventually(lambda: (fake.get(PG_API, "podgroups", "team", "web") or {}).get("metadata", {}).get(
        "ownerReferences"))
    await asyncio.sleep(0.1)
    fake.clear_requests()
    answer = await post(client, scale_review("web", "team", new=1, old=4))
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert "to 1 replica goes below its gang minMember 3" in answer["status"]["message"]
    assert (await post(client, scale_review("web", "team", new=3, old=4)))["allowed"] is True
    assert reads(fake) == []


async def test_a_scale_from_zero_below_min_member_is_refused_like_the_same_deployment_update(webhook, fake):
    client = await webhook(controller=True)
    fake.put(deployment("web", replicas=0, min_member="3"))
    await eventually(lambda: client.view.workload("apps", "v1", "deployments", "Deployment", "team", "web")[1])
    answer = await post(client, scale_review("web", "team", new=2, old=0))
    assert answer["allowed"] is False and "to 2 replicas goes below its gang minMember 3" in answer["status"]["message"]
    assert (await post(client, scale_review("web", "team", new=3, old=0)))["allowed"] is True


async def test_an_auto_gang_scaled_from_zero_has_its_pod_group_at_the_new_size_before_the_answer(webhook, fake):
    client = await webhook(controller=True)
    fake.put(managed_pg("web", min_member=1))
    fake.put(deployment("web", replicas=0, min_member="auto"))
    await eventually(lambda: client.view.workload("apps", "v1", "deployments", "Deployment", "team", "web")[1])
    await eventually(lambda: client.view.get("team", "web"))
    answer = await post(client, scale_review("web", "team", new=4, old=0))
    assert answer["allowed"] is True
    # Read right after the answer, before the scale is stored: no pod can exist yet, and the group already waits for 4.
    pg = fake.get(PG_API, "podgroups", "team", "web")
    assert pg["spec"]["minMember"] == 4 and pg["spec"]["minResources"] == {"cpu": "400m", "memory": "256Mi"}
    # kube-apiserver then stores the scale; the controller, keeping the group in step, ends at the same size.
    fake.put(deployment("web", replicas=4, min_member="auto"))
    await eventually(lambda: client.view.workload("apps", "v1", "deployments", "Deployment", "team", "web")[1][
        "spec"]["replicas"] == 4)
    await eventually(lambda: fake.get(PG_API, "podgroups", "team", "web")["spec"]["minMember"] == 4)


async def test_while_the_cache_has_not_listed_a_failed_read_refuses_only_a_known_gang(webhook, fake):
    fake.put(managed_pg("web", min_member=3))
    fake.fail("list", "deployments", 500, times=None)  # the workload cache never lists
    client = await webhook(controller=True)
    await eventually(lambda: client.view.get("team", "web"))
    fake.fail("get", "deployments", 500, times=None)
    gang = await post(client, scale_review("web", "team", new=1, old=4))
    assert gang["allowed"] is False and gang["status"]["code"] == 503
    assert "failure mode 'deny'" in gang["status"]["message"]
    other = await post(client, scale_review("api", "team", new=1, old=4))
    assert other["allowed"] is True
    assert any(w.startswith("nothing to change: scale allowed unchecked, admit could not read Deployment team/api")
               and "does not know it as a gang" in w for w in other["warnings"])


async def test_while_the_cache_has_not_listed_a_live_read_still_judges_the_gang(webhook, fake):
    fake.put(deployment("web", replicas=4, min_member="3"))
    fake.fail("list", "deployments", 500, times=None)
    client = await webhook(controller=True)
    fake.clear_requests()
    answer = await post(client, scale_review("web", "team", new=2, old=4))
    assert answer["allowed"] is False and "minMember 3" in answer["status"]["message"]
    assert [r.verb for r in reads(fake)] == ["get"]


# ---------------------------------------------------------------------------------------------- without the controller


@pytest.mark.parametrize("status", [429, 500])
async def test_without_the_controller_a_failed_read_of_a_workload_not_known_as_a_gang_allows_the_scale(
        webhook, fake, status):
    client = await webhook(controller=False)
    fake.put(deployment("api", min_member=None))
    # a 429 whose Retry-After outlasts the budget (a shorter one is retried: tests/webhook/test_throttling.py)
    fake.fail("get", "deployments", status, times=1, retry_after=30 if status == 429 else None)
    answer = await post(client, scale_review("api", "team", new=1, old=4))
    assert answer["allowed"] is True
    assert any("could not read Deployment team/api" in w and "allowed" in w for w in answer["warnings"])


async def test_without_the_controller_a_scale_from_zero_reads_the_parent_and_is_refused_below_min_member(webhook, fake):
    client = await webhook(controller=False)
    fake.put(deployment("web", replicas=0, min_member="3"))
    answer = await post(client, scale_review("web", "team", new=2, old=0))
    assert answer["allowed"] is False and "minMember 3" in answer["status"]["message"]


async def test_without_the_controller_an_auto_gang_scaled_up_gets_its_pod_group_resized(webhook, fake):
    client = await webhook(controller=False)
    fake.put(managed_pg("web", min_member=1))
    fake.put(deployment("web", replicas=0, min_member="auto"))
    assert (await post(client, scale_review("web", "team", new=4, old=0)))["allowed"] is True
    assert fake.get(PG_API, "podgroups", "team", "web")["spec"]["minMember"] == 4


async def test_a_dry_run_scale_of_an_auto_gang_writes_nothing(webhook, fake):
    client = await webhook(controller=False)
    fake.put(managed_pg("web", min_member=1))
    fake.put(deployment("web", replicas=0, min_member="auto"))
    before = copy.deepcopy(fake.get(PG_API, "podgroups", "team", "web"))
    assert (await post(client, scale_review("web", "team", new=4, old=0, dry_run=True)))["allowed"] is True
    assert fake.get(PG_API, "podgroups", "team", "web")["spec"] == before["spec"]
    patches = fake.requests_for("podgroups", "patch")
    assert patches and all(r.query.get("dryRun") == "All" for r in patches)


async def test_a_scale_to_zero_pauses_a_gang_with_no_read(webhook, fake):
    client = await webhook(controller=False)
    fake.put(deployment("web", replicas=4, min_member="3"))
    fake.clear_requests()
    assert (await post(client, scale_review("web", "team", new=0, old=4)))["allowed"] is True
    assert fake.requests == []


@pytest.mark.parametrize("failure_mode,allowed", [("deny", False), ("allow", True)])
async def test_when_an_auto_gangs_pod_group_cannot_be_resized_the_failure_mode_decides(webhook, fake, failure_mode,
                                                                                        allowed):
    client = await webhook(controller=True, failure_mode=failure_mode)
    fake.put(managed_pg("web", min_member=1))
    fake.put(deployment("web", replicas=0, min_member="auto"))
    await eventually(lambda: client.view.workload("apps", "v1", "deployments", "Deployment", "team", "web")[1])
    fake.fail("patch", "podgroups", 500, times=None)
    fake.fail("create", "podgroups", 500, times=None)
    answer = await post(client, scale_review("web", "team", new=4, old=0))
    assert answer["allowed"] is allowed
    if allowed:
        assert any("failure mode 'allow'" in w for w in answer["warnings"])
    else:
        assert answer["status"]["code"] == 503 and "failure mode 'deny'" in answer["status"]["message"]


@pytest.mark.fake_api(workload_api="v1alpha2")
async def test_while_the_cache_has_not_listed_a_failed_read_refuses_a_gang_known_by_another_backends_objects(
        webhook, fake):
    """The known gang is any enabled backend's: here the Workload and PodGroup (scheduling.k8s.io) the admission of a
    workload-api Deployment made, cached by its gang controller and owned by the Deployment."""
    fake.fail("list", "deployments", 500, times=None)  # the workload cache never lists
    client = await webhook(controller=True, gang_backend="workload-api", workload_api_version="v1alpha2")
    user = deployment("web", min_member=None)
    user["metadata"]["annotations"] = {"gang.admit.dev/min-member": "3"}
    mutated = apply_answer(user, await (await client.post("/mutate", json=admission_review(user))).json())
    assert mutated["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "web"}
    assert (await post(client, admission_review(mutated)))["allowed"] is True
    await eventually(lambda: client.view.gang_object("scheduling.k8s.io", "Workload", "team", "web"))
    assert client.view.get("team", "web") is None  # no Coscheduling PodGroup: the old check knew no gang here
    fake.fail("get", "deployments", 500, times=None)
    gang = await post(client, scale_review("web", "team", new=1, old=4))
    assert gang["allowed"] is False and gang["status"]["code"] == 503
    other = await post(client, scale_review("api", "team", new=1, old=4))
    assert other["allowed"] is True
    assert any("does not know it as a gang" in w for w in other["warnings"])
