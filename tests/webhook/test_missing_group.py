"""A Pod labelled for a PodGroup that does not exist, over HTTP with the controller running.

The Coscheduling plugin keeps such a pod waiting at Permit forever. admit never refuses it, but says which PodGroup
in which namespace is missing and what to create; when a stored gang workload claims the group, the controller
re-creates it (tests/controller/test_controller.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from admit.config import Config
from tests.helpers import admission_review, eventually, requests_caused

CONFIG = Config()
PG_API = "scheduling.x-k8s.io/v1alpha1"


def adhoc_pod(group: str = "adhoc") -> dict[str, Any]:
    """A bare Pod labelled by hand for a PodGroup, as in the scheduler-plugins docs."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "adhoc-0", "namespace": "team", "labels": {"scheduling.x-k8s.io/pod-group": group}},
        "spec": {"schedulerName": "scheduler-plugins-scheduler",
                 "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
    }


def replicaset_pod(group: str) -> dict[str, Any]:
    """A Pod of a Deployment created before admit was installed: its template was labelled by hand."""
    pod = adhoc_pod(group)
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "legacy-web-6d4b9c7f5-"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                           "name": "legacy-web-6d4b9c7f5", "uid": "0b6f1c1e-5e2a-4d4e-8a59-3c7d1b2a9e10",
                                           "controller": True, "blockOwnerDeletion": True}]
    return pod


async def validate(client, pod, **kw):
    review = admission_review(pod, **kw)
    resp = await client.post("/validate", json=review)
    assert resp.status == 200
    answer = (await resp.json())["response"]
    assert answer["uid"] == review["request"]["uid"]
    return answer


async def test_a_pod_labelled_for_a_pod_group_that_does_not_exist_is_allowed_with_a_warning_saying_what_to_create(
        webhook, fake):
    client = await webhook()
    fake.clear_requests()
    answer = await validate(client, adhoc_pod())
    assert answer["allowed"] is True
    [warning] = answer["warnings"]
    assert warning == ("create PodGroup adhoc (scheduling.x-k8s.io/v1alpha1), annotate the pod's workload with "
                       "gang.admit.dev/min-member, or correct label scheduling.x-k8s.io/pod-group: that PodGroup does "
                       "not exist, so the pod waits")
    # The cache's miss is confirmed with one read of that PodGroup (a watch may lag behind a PodGroup just created).
    assert [(r.verb, r.name) for r in requests_caused(fake, "podgroups")] == [("get", "adhoc")]


async def test_a_pod_of_a_workload_created_before_admit_was_installed_gets_the_same_warning(webhook):
    client = await webhook()
    answer = await validate(client, replicaset_pod("legacy-web"), strip_namespace=True)
    assert answer["allowed"] is True
    assert any(w.startswith("create PodGroup legacy-web (") for w in answer["warnings"])


async def test_a_pod_of_an_existing_hand_written_pod_group_gets_no_warning_and_costs_no_read(webhook, fake):
    fake.put({"apiVersion": PG_API, "kind": "PodGroup", "metadata": {"name": "adhoc", "namespace": "team"},
              "spec": {"minMember": 2}})
    client = await webhook()
    await eventually(lambda: client.view.pod_group("team", "adhoc")[1])
    fake.clear_requests()
    answer = await validate(client, adhoc_pod())
    assert answer["allowed"] is True and "warnings" not in answer
    assert requests_caused(fake, "podgroups") == []


async def test_a_pod_group_the_watch_has_not_delivered_yet_gives_no_warning(webhook, fake):
    client = await webhook()
    fake.delay("watch", "podgroups", 5.0, times=None)  # new watch streams (and so new events) come late
    await fake.drop_watches()
    fake.put({"apiVersion": PG_API, "kind": "PodGroup", "metadata": {"name": "adhoc", "namespace": "team"},
              "spec": {"minMember": 1}})
    assert client.view.pod_group("team", "adhoc")[1] is None
    answer = await validate(client, adhoc_pod())
    assert answer["allowed"] is True and "warnings" not in answer


@pytest.mark.parametrize("failure_mode", ["deny", "allow"])
async def test_a_missing_group_never_refuses_the_pod_even_when_the_api_fails(webhook, fake, failure_mode):
    client = await webhook(failure_mode=failure_mode)
    fake.fail("get", "podgroups", 500, times=None)
    answer = await validate(client, adhoc_pod())
    assert answer["allowed"] is True and "warnings" not in answer


async def test_a_dry_run_pod_gets_no_missing_group_check(webhook, fake):
    client = await webhook()
    fake.clear_requests()
    answer = await validate(client, adhoc_pod(), dry_run=True)
    assert answer["allowed"] is True and "warnings" not in answer
    assert requests_caused(fake, "podgroups") == []


async def test_without_the_controller_a_labelled_pod_costs_no_read_and_gets_no_warning(webhook, fake):
    client = await webhook(controller=False)
    answer = await validate(client, adhoc_pod())
    assert answer["allowed"] is True and "warnings" not in answer
    assert fake.requests == []
