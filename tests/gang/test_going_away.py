"""Workloads that are being deleted, and namespaces that are being deleted, are never held.

Over HTTP with the controller running (``tests/webhook_stack.py``), with AdmissionReviews shaped as kube-apiserver
sends them for the UPDATEs that finalizer removal makes (``oldObject`` with the finalizer, ``object`` without it,
``deletionTimestamp`` on both). A namespace being deleted is emulated by the fake answering PodGroup creates there
with kube-apiserver's NamespaceLifecycle refusal (403 Forbidden, "... because it is being terminated").
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest

from admit.kube.client import KubeError, namespace_terminating
from admit.gang.lifecycle import bookkeeping_only, going_away
from tests.helpers import GC_ORPHANS_AFTER, admission_review, apply_answer, eventually, example
from tests.webhook_stack import webhook_with_controller

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)

DEPLOYMENTS = "/apis/apps/v1/namespaces/ml/deployments"
SPARK = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/ml/sparkapplications"


def terminating_message(namespace: str, name: str) -> str:
    return (f'podgroups.scheduling.x-k8s.io "{name}" is forbidden: unable to create new content in namespace '
            f"{namespace} because it is being terminated")


async def admitted_and_stored(stack: Any, obj: dict[str, Any], path: str) -> dict[str, Any]:
    """``obj`` through /mutate, /validate and into the API, as ``kubectl apply`` would; returns the stored object
    once the controller has adopted its PodGroup."""
    mutated = apply_answer(obj, {"response": await stack.post("/mutate", admission_review(obj))})
    assert (await stack.post("/validate", admission_review(mutated)))["allowed"]
    stored = await stack.kube.request("POST", path, body=mutated)
    name = stored["metadata"]["name"]
    await eventually(lambda: (stack.pod_group("ml", name) or {}).get("metadata", {}).get("ownerReferences"))
    return stored


async def seen_by_controller(stack: Any, obj: dict[str, Any]) -> None:
    """Wait until the controller's workload cache holds ``obj``'s resourceVersion (its watch has caught up)."""
    kind, meta = obj["kind"], obj["metadata"]
    [cache] = [c for r, c in stack.controller.workloads.items() if r.kind == kind]
    await eventually(lambda: (cache.get(meta["namespace"], meta["name"]) or {}).get("metadata", {}).get(
        "deletionTimestamp") == meta.get("deletionTimestamp"))


def being_deleted(stored: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
    """``stored`` as kube-apiserver keeps it after a DELETE that finalizers hold: ``deletionTimestamp``, grace 0."""
    out = copy.deepcopy(stored)
    out["metadata"].update(deletionTimestamp="2026-11-30T16:20:00Z", deletionGracePeriodSeconds=0,
                           finalizers=finalizers)
    out["metadata"]["generation"] = out["metadata"].get("generation", 1) + 1
    return out


def finalizer_removed(old: dict[str, Any], finalizer: str) -> dict[str, Any]:
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = [f for f in old["metadata"]["finalizers"] if f != finalizer]
    return new


def gang_deployment(name: str = "trainer", min_member: str = "3") -> dict[str, Any]:
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"].update(name=name, namespace="ml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = min_member
    return dep


# ======================================================================================================================
# Pure rules
# ======================================================================================================================


def test_an_object_with_a_deletion_timestamp_is_going_away():
    assert going_away({"metadata": {"deletionTimestamp": "2026-11-30T16:20:00Z"}})
    assert not going_away({"metadata": {"name": "x"}}) and not going_away(None)


def test_an_update_of_status_or_finalizers_only_is_bookkeeping_but_a_no_op_update_is_not():
    old = gang_deployment()
    old["metadata"].update(resourceVersion="41", generation=3, finalizers=["example.com/protect"])
    new = copy.deepcopy(old)
    new["metadata"].update(resourceVersion="42", finalizers=[])
    new["status"] = {"replicas": 3, "readyReplicas": 3}
    assert bookkeeping_only(old, new)
    assert not bookkeeping_only(old, copy.deepcopy(old))  # kubectl apply of the same manifest: still a real UPDATE
    scaled = copy.deepcopy(new)
    scaled["spec"]["replicas"] = 4
    assert not bookkeeping_only(old, scaled)


def test_only_the_namespace_lifecycle_refusal_counts_as_a_terminating_namespace():
    refused = "create PodGroup ml/x: 403 Forbidden: " + terminating_message("ml", "x")
    assert namespace_terminating(KubeError(403, "Forbidden", refused))
    assert not namespace_terminating(KubeError(403, "Forbidden", 'podgroups.scheduling.x-k8s.io is forbidden: User '
                                                                 '"admit" cannot create'))
    assert not namespace_terminating(KubeError(500, "InternalError", terminating_message("ml", "x")))


# ======================================================================================================================
# The webhook, over HTTP, with the controller running
# ======================================================================================================================


async def test_removing_the_last_finalizer_of_a_deployment_under_foreground_deletion_is_allowed_and_writes_nothing(
        aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        stored = await admitted_and_stored(stack, gang_deployment(), DEPLOYMENTS)
        # The namespace is being deleted: a PodGroup create there would be refused.
        fake.fail("create", "podgroups", 403, times=None, message=terminating_message("ml", "trainer"))
        fake.clear_requests()
        # kubectl delete --cascade=foreground: deletionTimestamp and the foregroundDeletion finalizer are stored,
        old = being_deleted(stored, ["foregroundDeletion"])
        await seen_by_controller(stack, fake.put(old))
        # the garbage collector deletes the dependents (the PodGroup) first ...
        fake.delete_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "ml", "trainer")
        new = finalizer_removed(old, "foregroundDeletion")
        # ... then removes the foregroundDeletion finalizer: an UPDATE that reaches both webhooks.
        review = admission_review(new, "UPDATE", old=old)
        mutated = await stack.post("/mutate", review)
        validated = await stack.post("/validate", admission_review(new, "UPDATE", old=old))
        assert mutated == {"uid": review["request"]["uid"], "allowed": True}
        assert validated["allowed"] is True and "warnings" not in validated and "status" not in validated
        await asyncio.sleep(0.1)
        assert stack.pod_group_posts() == [] and stack.pod_group("ml", "trainer") is None


async def test_a_spark_application_whose_operator_removes_its_finalizer_in_a_dying_namespace_is_allowed(
        aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        app = example("spark-pi-scala.yaml")
        app["metadata"]["namespace"] = "ml"
        stored = await admitted_and_stored(stack, app, SPARK)
        fake.fail("create", "podgroups", 403, times=None, message=terminating_message("ml", "spark-pi"))
        old = being_deleted(stored, ["sparkoperator.k8s.io/finalizer"])
        await seen_by_controller(stack, fake.put(old))  # deleted; the operator's finalizer holds it
        fake.delete_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "ml", "spark-pi")
        old["status"] = {"applicationState": {"state": "RUNNING"}}
        new = finalizer_removed(old, "sparkoperator.k8s.io/finalizer")
        new["status"] = {"applicationState": {"state": "FAILED", "errorMessage": "driver pod deleted"}}
        fake.clear_requests()
        for path in ("/mutate", "/validate"):
            answer = await stack.post(path, admission_review(new, "UPDATE", old=old))
            assert answer["allowed"] is True and "patch" not in answer and "status" not in answer
        assert stack.pod_group_posts() == []


async def test_an_update_that_only_adds_a_finalizer_makes_no_pod_group_but_a_spec_change_does(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake, failure_mode="deny") as stack:
        stored = await admitted_and_stored(stack, gang_deployment(min_member="auto"), DEPLOYMENTS)
        await stack.controller.stop()  # nothing re-creates the group behind the webhook's back in this test
        fake.delete_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "ml", "trainer")
        fake.clear_requests()
        protected = copy.deepcopy(stored)
        protected["metadata"]["finalizers"] = ["example.com/protect"]
        for path in ("/mutate", "/validate"):
            answer = await stack.post(path, admission_review(protected, "UPDATE", old=stored))
            assert answer == {"uid": answer["uid"], "allowed": True}
        assert stack.pod_group_posts() == []
        scaled = copy.deepcopy(protected)
        scaled["spec"]["replicas"] = 4
        answer = await stack.post("/validate", admission_review(scaled, "UPDATE", old=protected))
        assert answer["allowed"] is True and len(stack.pod_group_posts()) == 1
        assert stack.pod_group("ml", "trainer")["spec"]["minMember"] == 4


async def test_a_spec_update_in_a_terminating_namespace_is_allowed_without_a_pod_group_even_in_deny_mode(
        aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake, failure_mode="deny") as stack:
        stored = await admitted_and_stored(stack, gang_deployment(min_member="auto"), DEPLOYMENTS)
        await stack.controller.stop()
        fake.delete_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "ml", "trainer")
        fake.fail("create", "podgroups", 403, times=None, message=terminating_message("ml", "trainer"))
        scaled = copy.deepcopy(stored)
        scaled["spec"]["replicas"] = 4
        answer = await stack.post("/validate", admission_review(scaled, "UPDATE", old=stored))
        assert answer["allowed"] is True
        assert answer["warnings"] == ["namespace ml is being deleted: admit created no PodGroup for Deployment "
                                      "ml/trainer"]
        # Any other refusal of the create is still an API failure: refused in deny mode, with the reason.
        fake.clear_faults()
        fake.fail("create", "podgroups", 403, times=None,
                  message='podgroups.scheduling.x-k8s.io is forbidden: User "system:serviceaccount:admit:admit" '
                          'cannot create resource "podgroups"')
        answer = await stack.post("/validate", admission_review(scaled, "UPDATE", old=stored))
        assert answer["allowed"] is False and answer["status"]["code"] == 503


# ======================================================================================================================
# The controller
# ======================================================================================================================


async def test_the_controller_does_not_retry_a_re_create_a_terminating_namespace_refuses(aiohttp_client, fake, caplog):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        await admitted_and_stored(stack, gang_deployment(), DEPLOYMENTS)
        await asyncio.sleep(0.6)  # the look the controller scheduled for the unadopted group (grace 0.5 s) is over
        # The namespace is being deleted: its PodGroups go first, the Deployment is not deleted yet.
        fake.fail("create", "podgroups", 403, times=None, message=terminating_message("ml", "trainer"))
        fake.clear_requests()
        with caplog.at_level(logging.INFO, "admit.controller"):
            fake.delete_object("scheduling.x-k8s.io/v1alpha1", "podgroups", "ml", "trainer")
            await eventually(lambda: stack.pod_group_posts())
            await asyncio.sleep(1.0)  # twice the retry backoff's cap in these tests: no retry comes
        # One refused POST (two if the controller's earlier look at the unadopted group fires late on a loaded
        # machine); a retry loop would make about five in that second (backoff 0.05 s doubling to 0.5 s).
        assert 1 <= len(stack.pod_group_posts()) <= 2
        notes = [r for r in caplog.records if "is being deleted" in r.getMessage()]
        assert [(r.levelno, r.getMessage()) for r in notes] == [
            (logging.INFO, "PodGroup ml/trainer not re-created for Deployment ml/trainer: its namespace is being "
                           "deleted")]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        await stack.controller.recorder.flush()
        reasons = [e["reason"] for e in fake.objects("events", api_version="events.k8s.io/v1")]
        assert "PodGroupSyncFailed" not in reasons
