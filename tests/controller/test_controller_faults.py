"""The PodGroup controller under ordinary control-plane trouble: a watch that goes silent or lags, a
workload deleted or updated while the controller's cache is behind, the webhook writing the same PodGroup, a
moment of lost leadership, many finished pods, thousands of cached workloads.

Each test reproduces a fault the issue measured against the fake API (watch control: ``hold_watches`` keeps one
kind's streams open but silent, ``release_watches`` lets them catch up; ``gc_orphans_after=0.025`` emulates the
garbage collector). Timings scaled down as in ``test_controller.py``.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from admit.webhook.admission import Admission
from admit.backends.common import stamped_generation as pod_group_generation
from admit.controller.claims import claim_of, resolvable_copy, resolvable_object
from admit.backends.coscheduling.podgroup import desired_pod_group
from admit.webhook.validate import ScaleCheck, scale_verdict
from admit.kube.watchcache import Resource
from admit.kube.client import KubeAPI
from admit.controller.workqueue import WorkQueue
from tests.helpers import GC_ORPHANS_AFTER, eventually
from tests.controller.test_controller import (  # noqa: F401 - fixtures
    CONFIG,
    DEPLOYMENTS,
    GRACE,
    controllers,
    create_workload,
    deployment,
    events,
    kube,
    managed_pg,
    pg_of,
    request,
)

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)


def owned(fake) -> bool:
    return bool((pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))


async def hold(fake, plural: str) -> None:
    """Wait until the controller's watch of ``plural`` is open, then hold it (open, silent)."""
    await eventually(lambda: fake.hold_watches(plural) > 0)


# ======================================================================================================================
# Section 3: a dead watch, and the orphan sweep that trusted it
# ======================================================================================================================


async def test_a_group_whose_workload_a_silent_watch_missed_is_not_deleted_as_an_orphan(fake, kube, controllers):
    """With the Deployments watch half-open, a Deployment stored in that window had its
    PodGroup deleted by the orphan sweep. Now the sweep reads the owner live first."""
    controller = await controllers()
    await hold(fake, "deployments")
    fake.put(managed_pg("web", min_member=3))  # created at admission, without an owner (the GC race)
    await create_workload(kube, deployment())  # stored; the silent watch never says so
    # Counted once the live read of the owner has answered (after the grace period): wait for it.
    await eventually(lambda: controller.gangs["coscheduling"].guards.stale_skips >= 1, timeout=GRACE + 2)
    await asyncio.sleep(0.1)
    assert pg_of(fake) is not None and fake.requests_for("podgroups", "delete") == []
    fake.release_watches("deployments")  # the watch catches up: the group is adopted
    await eventually(lambda: owned(fake))


# ======================================================================================================================
# Section 4: destructive and owner-setting writes decided from a cache
# ======================================================================================================================


async def test_a_group_is_not_adopted_by_a_workload_recreated_under_another_uid_the_cache_has_not_seen(
        fake, kube, controllers):
    controller = await controllers()
    await hold(fake, "deployments")
    first = await create_workload(kube, deployment())
    fake.release_watches("deployments")
    await eventually(lambda: owned(fake))
    await hold(fake, "deployments")
    fake.delete_object("apps/v1", "deployments", "team", "web")
    second = await create_workload(kube, deployment())  # same name, new uid; the cache still has the first
    await eventually(lambda: pg_of(fake) is None)  # garbage-collected with the first
    await eventually(lambda: controller.gangs["coscheduling"].guards.stale_skips >= 1, timeout=2)  # counted once the live read has answered
    await asyncio.sleep(0.3)
    assert pg_of(fake) is None  # nothing created with the first uid
    fake.release_watches("deployments")
    await eventually(lambda: owned(fake))
    assert [r["uid"] for r in pg_of(fake)["metadata"]["ownerReferences"]] == [second["metadata"]["uid"]]
    assert first["metadata"]["uid"] != second["metadata"]["uid"]


# ======================================================================================================================
# Section 5: the webhook and the controller never undo each other
# ======================================================================================================================


async def test_the_controller_never_reverts_a_spec_the_webhook_wrote_from_a_newer_workload(fake, kube, controllers):
    """On a spec-changing UPDATE the validating webhook patches the PodGroup before the
    workload is stored; the controller, still seeing the old workload, patched it back (and an Event read
    "minMember 5 -> 3"), then forward again."""
    controller = await controllers()
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    stored_obj = await create_workload(kube, deployment())
    await eventually(lambda: owned(fake) and controller.cache.get("team", "web") is not None)
    assert pod_group_generation(pg_of(fake), CONFIG) == 1
    # kubectl scale --replicas=5 via an UPDATE: kube-apiserver bumps metadata.generation (the Deployment strategy's
    # PrepareForUpdate), then calls the validating webhook with the object about to be stored.
    updated = copy.deepcopy(stored_obj)
    updated["spec"]["replicas"] = 5
    updated["metadata"]["generation"] = stored_obj["metadata"]["generation"] + 1
    fake.clear_requests()
    verdict = await admission.validate(request(updated, "Deployment", "apps", "deployments", "UPDATE"))
    assert verdict.allowed
    assert pg_of(fake)["spec"]["minMember"] == 5 and pod_group_generation(pg_of(fake), CONFIG) == 2
    await asyncio.sleep(GRACE / 2)  # the controller sees the patched PodGroup, and still the generation-1 Deployment
    assert pg_of(fake)["spec"]["minMember"] == 5
    # kube-apiserver stores the update; the controller's cache catches up.
    await kube.request("PUT", DEPLOYMENTS.path("team", "web"), body=updated)
    await asyncio.sleep(0.5)
    assert pg_of(fake)["spec"]["minMember"] == 5
    assert len(fake.requests_for("podgroups", "patch")) == 1  # the webhook's; none from the controller
    await controller.recorder.flush()
    assert not [e for e in events(fake) if e[1] == "PodGroupUpdated"]


async def test_a_spec_the_webhook_wrote_for_an_update_that_was_never_stored_is_put_back_after_the_grace_period(
        fake, kube, controllers):
    """The other side of the stamp: a later admission step refused the update the webhook saw, so the workload
    stays at its old generation; after the grace period the controller writes its spec back."""
    controller = await controllers()
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    stored_obj = await create_workload(kube, deployment())
    await eventually(lambda: owned(fake) and controller.cache.get("team", "web") is not None)
    refused = copy.deepcopy(stored_obj)
    refused["spec"]["replicas"] = 5
    refused["metadata"]["generation"] = stored_obj["metadata"]["generation"] + 1
    await admission.validate(request(refused, "Deployment", "apps", "deployments", "UPDATE"))
    assert pg_of(fake)["spec"]["minMember"] == 5
    took = await eventually(lambda: pg_of(fake)["spec"]["minMember"] == 3, timeout=GRACE + 2)
    assert took >= GRACE * 0.8
    assert pod_group_generation(pg_of(fake), CONFIG) == 1


# ======================================================================================================================
# Section 6: the smaller faults
# ======================================================================================================================


def bare_pod(name: str, phase: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "labels": {"scheduling.x-k8s.io/pod-group": "solo"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": phase}}


async def test_a_shared_group_with_a_pending_pod_behind_a_hundred_finished_ones_is_kept(fake, controllers):
    """The sweep read one page of 100 pods; 101 finished pods ahead of a Pending one got the
    group deleted under the Pending pod."""
    for i in range(101):
        fake.put(bare_pod(f"a-{i:03}", "Succeeded"))
    fake.put(bare_pod("b-waiting", "Pending"))
    fake.put(managed_pg("solo", owner="/Pod", min_member=2))
    await controllers()
    await asyncio.sleep(GRACE + 0.6)
    assert pg_of(fake, "solo") is not None and fake.requests_for("podgroups", "delete") == []
    fake.delete_object("v1", "pods", "team", "b-waiting")  # now only finished pods: deleted after the grace period
    await eventually(lambda: pg_of(fake, "solo") is None, timeout=GRACE * 4)


async def test_a_write_refused_in_a_moment_of_lost_leadership_is_tried_again_when_the_lease_is_renewed(
        fake, kube, controllers):
    """A reconcile that met "not leader" was dropped, though the replica went on leading
    after a late renewal. The elector's clock is moved past the renew deadline for a moment (as a renewal that
    takes too long does), then back."""
    controller = await controllers(lease_duration=6.0, renew_deadline=4.0, retry_period=1.0)
    offset = 4.5
    real = controller.elector.clock
    controller.elector.clock = lambda: real() + offset
    assert not controller.elector.is_leader() and controller.working
    reconciles = controller.gangs["coscheduling"].reconciles
    await create_workload(kube, deployment())
    await eventually(lambda: controller.gangs["coscheduling"].reconciles > reconciles)
    await asyncio.sleep(0.1)
    assert pg_of(fake) is None  # refused: the Lease looked lost
    offset = 0.0  # the renewal lands in time
    assert controller.elector.is_leader()
    took = await eventually(lambda: pg_of(fake) is not None, timeout=3)
    assert took < 2.0


async def test_the_work_queue_gives_the_loop_back_between_keys():
    queue = WorkQueue()
    for i in range(300):
        queue.add(("team", f"pg-{i}"))
    ticks = 0
    stop = False

    async def other_work() -> None:  # stands for admissions on the same loop
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other_work())
    seen = []
    for _ in range(300):
        key = await queue.get()
        seen.append(ticks)
        queue.done(key)
    stop = True
    await task
    assert len(set(seen)) >= 250  # the other work ran between (almost) every two keys


async def test_the_caches_keep_small_records_and_a_relist_keeps_the_same_claims(fake, kube, controllers):
    """Every replica cached whole objects (managedFields, templates, status), each claim kept
    its workload dict, and a relist replaced the store without refreshing the claims (two copies alive)."""
    controller = await controllers()
    big = deployment()
    big["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "x" * 3000
    big["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                                         "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
    await create_workload(kube, big)
    await eventually(lambda: owned(fake) and "ownerReferences" in (controller.gangs["coscheduling"].managed["PodGroup"].get("team", "web") or
                                                                 {"metadata": {}})["metadata"])
    workloads = controller.workloads[DEPLOYMENTS]
    record = workloads.get("team", "web")
    assert set(record) == {"apiVersion", "kind", "metadata", "claim", "object"}
    assert isinstance(record["object"], bytes)  # one compact JSON bytes object, decoded only by a */scale check
    copy_ = resolvable_object(record)  # what a scale check reads: no managedFields, no last-applied, requests only
    assert "managedFields" not in copy_["metadata"] and set(copy_["metadata"]["annotations"]) == {
        "gang.admit.dev/min-member"}
    assert copy_["spec"]["template"]["spec"] == {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1"}}}], "schedulerName": "scheduler-plugins-scheduler"}
    assert set(record["metadata"]) <= {"name", "namespace", "uid", "resourceVersion", "generation",
                                       "creationTimestamp", "deletionTimestamp"}
    claim = record["claim"]
    assert not claim.plan.targets and "spec" not in claim.workload
    pg = controller.gangs["coscheduling"].managed["PodGroup"].get("team", "web")
    assert "status" not in pg and "managedFields" not in pg["metadata"]
    assert set(pg["metadata"]["annotations"]) == {"gang.admit.dev/owner", "gang.admit.dev/workload-generation"}
    # A 410 relist: the unchanged Deployment keeps its record, so the one claim in the index is still the cached one.
    fake.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump", "namespace": "team"}})
    fake.compact()
    await fake.drop_watches()
    await eventually(lambda: workloads.lists == 2)
    assert workloads.get("team", "web") is record
    assert controller._claims[("apps/v1", "Deployment", "team", "web")] is claim


@pytest.mark.parametrize("workloads", [120])
async def test_a_resync_recomputes_no_claim_and_gives_the_loop_back(fake, kube, controllers, workloads):
    for i in range(workloads):
        fake.put(deployment(f"w{i:03}"))
    controller = await controllers(resync_period=0.5)
    await eventually(lambda: len(controller.gangs["coscheduling"].managed["PodGroup"]) == workloads, timeout=20)
    before = dict(controller._claims)
    reconciles = controller.gangs["coscheduling"].reconciles
    cache = controller.workloads[DEPLOYMENTS]
    await eventually(lambda: controller.gangs["coscheduling"].reconciles >= reconciles + workloads, timeout=5)  # a resync went round
    assert all(controller._claims[k] is c for k, c in before.items())
    assert cache.lists == 1


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
@pytest.mark.parametrize("replicas", [1, 2, 6, 0])
def test_the_reduced_copy_a_scale_check_reads_resolves_like_the_whole_workload(kind, replicas):
    """The cache keeps a reduced copy of each scalable gang workload for ``*/scale`` checks without a read
    (``cacheview``); it must give the same verdict and the same PodGroup as the stored object."""
    obj = deployment(replicas=4, annotations={"gang.admit.dev/schedule-timeout-seconds": "90"}, cpu="1500m")
    obj["kind"] = kind
    obj["metadata"].update(uid="u-1", generation=3, resourceVersion="41",
                           managedFields=[{"manager": "kubectl", "operation": "Update"}])
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    spec = obj["spec"]["template"]["spec"]
    spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": {"limits": {"memory": "1Gi"}}},
                              {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                               "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]
    spec["overhead"] = {"cpu": "100m"}
    spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    if kind == "StatefulSet":
        obj["spec"]["podManagementPolicy"] = "Parallel"
        obj["spec"]["serviceName"] = "web"
    resource = Resource("apps", "v1", "statefulsets" if kind == "StatefulSet" else "deployments", kind)
    reduced = resolvable_copy(obj, CONFIG)
    assert desired_pod_group(claim_of(reduced, resource, CONFIG).plan, CONFIG) == desired_pod_group(
        claim_of(obj, resource, CONFIG).plan, CONFIG)
    check = ScaleCheck("apps", "v1", kind, resource.plural, "team", "web", replicas)
    whole, small = scale_verdict(obj, check, CONFIG), scale_verdict(reduced, check, CONFIG)
    assert (small.decision.allowed, small.decision.message) == (whole.decision.allowed, whole.decision.message)
    assert (small.ensure is None) == (whole.ensure is None)
    if whole.ensure is not None:
        assert desired_pod_group(small.ensure, CONFIG) == desired_pod_group(whole.ensure, CONFIG)
