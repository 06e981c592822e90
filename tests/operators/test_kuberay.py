"""KubeRay end to end on the fake API: the user's annotated RayJob / RayService / RayCluster goes in, the KubeRay
emulation (``tests/emulations/kuberay.py``) makes its RayClusters and Pods through admission, and the gangs are
checked as a user would (tests/operator_stack.py). Also where admit and KubeRay disagreed: the
operator-wide ``--batch-scheduler`` and the cluster names since v1.4.0."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from admit.backends.coscheduling.diagnose import diagnose
from admit.config import Config
from tests.emulations import kuberay
from tests.emulations.kuberay import SCHEDULER_NAMES, KubeRay
from tests.helpers import eventually
from tests.operator_stack import PG, events_about, gang_problems, lost, operator_cluster, pod_groups_of, pods_of, said

CONFIG = Config()
NS = "ml"


def cluster_spec(workers: int = 3) -> dict[str, Any]:
    return {
        "rayVersion": "2.9.0",
        "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                          "template": {"metadata": {"labels": {"team": "vision"}},
                                       "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.9.0",
                                                                "resources": {"requests": {"cpu": "1"}}}]}}},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": workers,
                              "maxReplicas": workers, "rayStartParams": {},
                              "template": {"metadata": {"annotations": {"example.com/cost-center": "42"}},
                                           "spec": {"containers": [{"name": "ray-worker",
                                                                    "image": "rayproject/ray:2.9.0",
                                                                    "resources": {"requests": {"cpu": "2"}}}]}}}],
    }


def rayjob(name: str = "train", workers: int = 3, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {},
                         "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": cluster_spec(workers)}}


def rayservice(name: str = "serve") -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": NS, "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster_spec(2)}}


def raycluster(name: str = "rc", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {},
                         "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": cluster_spec(4)}


async def create(user: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from kubernetes_asyncio import client as k8s

    plural = obj["kind"].lower() + "s"
    return await k8s.CustomObjectsApi(user).create_namespaced_custom_object("ray.io", "v1", NS, plural,
                                                                           copy.deepcopy(obj))


async def settle(fake: Any, op: KubeRay, *, clusters: int = 1) -> list[dict[str, Any]]:
    await eventually(lambda: len(fake.objects("rayclusters", NS)) >= clusters)
    await op.idle()
    return fake.objects("rayclusters", NS)


@pytest.mark.parametrize("user_object", [rayjob(), rayservice(), raycluster()], ids=["RayJob", "RayService",
                                                                                    "RayCluster"])
async def test_kuberay_makes_every_pod_of_an_annotated_ray_object_in_the_one_gang_admit_made(aiohttp_server,
                                                                                           user_object):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        written = await create(user, user_object)
        (cluster,) = await settle(fake, op)
        assert op.errors == []
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        workers = cluster["spec"]["workerGroupSpecs"][0]["replicas"]
        assert len(pods) == 1 + workers
        assert gang_problems(fake, NS, pods, CONFIG) == []
        # one gang object per gang: the cluster's own PodGroup, none for the RayJob/RayService
        assert pod_groups_of(fake, NS) == [cluster["metadata"]["name"]]
        pg = fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", NS, cluster["metadata"]["name"])
        assert pg["spec"]["minMember"] == 1 + workers
        # nothing the user wrote is lost: the stored object, and what KubeRay copied onto the pods
        assert lost(user_object, written) == {}
        head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
        worker = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
        assert head["metadata"]["labels"]["team"] == "vision"
        assert worker["metadata"]["annotations"]["example.com/cost-center"] == "42"
        # admit's reviews of KubeRay's writes came from KubeRay's ServiceAccount
        pod_reviews = [r for _, r, _ in fake.admission.reviews if r["kind"]["kind"] == "Pod"]
        assert pod_reviews and all(r["userInfo"]["username"].endswith(":kuberay-operator") for r in pod_reviews)


async def test_a_rayservice_upgrade_cluster_is_a_second_gang_of_its_own(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, rayservice())
        (first,) = await settle(fake, op)
        second = await op.new_pending_cluster(fake.get("ray.io/v1", "rayservices", NS, "serve"))
        await op.idle()
        assert second is not None and op.errors == []
        for cluster in (first, second):
            assert gang_problems(fake, NS, pods_of(fake, NS, cluster["metadata"]["uid"]), CONFIG) == []
        assert pod_groups_of(fake, NS) == sorted([first["metadata"]["name"], second["metadata"]["name"]])


# ----------------------------------------------------------------------------------------------------------------------
# KubeRay's batch scheduler is operator-wide since v1.3.0
# ----------------------------------------------------------------------------------------------------------------------


async def test_a_raycluster_labelled_ray_io_scheduler_name_is_ganged_because_kuberay_no_longer_reads_the_label(
        aiohttp_server):
    # KubeRay >= 1.3 ignores ray.io/scheduler-name: without --batch-scheduler its pods go to the template's
    # scheduler. Deferring on the label (as admit did) left them in no gang at all.
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, raycluster(labels={"ray.io/scheduler-name": "volcano"}))
        (cluster,) = await settle(fake, op)
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(pods) == 5
        assert gang_problems(fake, NS, pods, CONFIG) == []
        warnings = [w for kind, _, w in fake.admission.warnings if kind == "RayCluster"]  # a warning: remove it
        assert any("ray.io/scheduler-name" in w and "KubeRay ignores it" in w and "--batch-scheduler" in w for w in warnings), \
            warnings


@pytest.mark.parametrize("batch_scheduler", ["volcano", "yunikorn", "kai-scheduler"])
async def test_under_kuberay_batch_scheduler_the_raycluster_note_and_admit_status_name_the_operator_flag(
        aiohttp_server, batch_scheduler):
    def with_flag(fake: Any, chain: Any) -> KubeRay:
        return kuberay.install(fake, chain, batch_scheduler=batch_scheduler)

    async with operator_cluster(aiohttp_server, CONFIG, with_flag) as (fake, op, user):
        await create(user, raycluster())
        (cluster,) = await settle(fake, op)
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        # what KubeRay does: every pod goes to its batch scheduler, admit's gang is never used
        assert {p["spec"]["schedulerName"] for p in pods} == {SCHEDULER_NAMES[batch_scheduler]}
        # the user's own admission warning says so, with the fix (the operator setting)
        (warning,) = {w for w in said(fake, "RayCluster") if "--batch-scheduler" in w}
        assert "every head and worker pod" in warning and "scheduler-plugins" in warning
        # admit status names the operator flag for the pods KubeRay made
        rows = diagnose(pod_groups=fake.objects("podgroups", NS), pods=fake.objects("pods", NS), config=CONFIG)
        (row,) = [r for r in rows if r.group == "rc"]
        assert row.reason == "WrongScheduler"
        assert f"KubeRay's --batch-scheduler={batch_scheduler}" in row.message
        assert "unset it or set it to scheduler-plugins" in row.message


async def test_admits_controller_records_the_batch_scheduler_setting_as_an_event_on_the_raycluster(aiohttp_server):
    def with_flag(fake: Any, chain: Any) -> KubeRay:
        return kuberay.install(fake, chain, batch_scheduler="volcano")

    async with operator_cluster(aiohttp_server, CONFIG, with_flag, controller=True) as (fake, op, user):
        await create(user, rayjob())
        (cluster,) = await settle(fake, op)
        name = cluster["metadata"]["name"]
        await eventually(lambda: events_about(fake, NS, "RayCluster", name))
        (event,) = [e for e in events_about(fake, NS, "RayCluster", name) if e["reason"] == "OperatorSetting"]
        assert event["type"] == "Normal" and "--batch-scheduler" in event["note"]


async def test_under_kuberay_batch_scheduler_scheduler_plugins_the_pods_reach_admits_gang(aiohttp_server):
    def with_flag(fake: Any, chain: Any) -> KubeRay:
        return kuberay.install(fake, chain, batch_scheduler="scheduler-plugins")

    async with operator_cluster(aiohttp_server, CONFIG, with_flag) as (fake, op, user):
        await create(user, raycluster())
        (cluster,) = await settle(fake, op)
        assert gang_problems(fake, NS, pods_of(fake, NS, cluster["metadata"]["uid"]), CONFIG) == []
        assert pod_groups_of(fake, NS) == ["rc"]


async def test_a_raycluster_kuberay_gangs_itself_keeps_one_gang_kuberays(aiohttp_server):
    def with_flag(fake: Any, chain: Any) -> KubeRay:
        return kuberay.install(fake, chain, batch_scheduler="scheduler-plugins")

    async with operator_cluster(aiohttp_server, CONFIG, with_flag) as (fake, op, user):
        await create(user, raycluster(labels={"ray.io/gang-scheduling-enabled": "true"}))
        (cluster,) = await settle(fake, op)
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert gang_problems(fake, NS, pods, CONFIG) == []  # KubeRay labelled them for its own PodGroup rc
        assert pod_groups_of(fake, NS) == ["rc"]
        pg = fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", NS, "rc")
        assert "gang.admit.dev/owner" not in (pg["metadata"].get("annotations") or {})  # KubeRay's, not admit's
        assert pg["spec"]["minMember"] == 5


# ----------------------------------------------------------------------------------------------------------------------
# Cluster names <parent>-<5> since KubeRay v1.4.0
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("user_object", [rayjob(), rayservice()], ids=["RayJob", "RayService"])
async def test_the_parent_note_names_the_clusters_as_kuberay_names_them(aiohttp_server, user_object):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, user_object)
        (cluster,) = await settle(fake, op)
        parent = user_object["metadata"]["name"]
        assert re.fullmatch(rf"{parent}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", cluster["metadata"]["name"])
        (warning,) = {w for w in said(fake, user_object["kind"]) if "a gang of its own" in w}
        assert f"({parent}-<5 characters>; KubeRay v1.3 and older: {parent}-raycluster-<5 characters>;" in warning


# ----------------------------------------------------------------------------------------------------------------------
# Later writes: what KubeRay and the Ray autoscaler send after the CREATE (tests/emulations/kuberay.py LATER_WRITES)
# ----------------------------------------------------------------------------------------------------------------------

GC = 0.02  # the fake's garbage collector: a deleted RayCluster's pods go with it


def autoscaling_spec(min_replicas: int = 1, replicas: int = 3, max_replicas: int = 6) -> dict[str, Any]:
    """KubeRay's ray-cluster.autoscaler sample shape: one worker group the autoscaler moves within its bounds."""
    spec = cluster_spec(replicas)
    spec["enableInTreeAutoscaling"] = True
    spec["workerGroupSpecs"][0].update(minReplicas=min_replicas, maxReplicas=max_replicas)
    return spec


def with_min_member(obj: dict[str, Any], value: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["annotations"]["gang.admit.dev/min-member"] = value
    return obj


def autoscaling_raycluster(min_member: str = "auto", **shape: int) -> dict[str, Any]:
    obj = with_min_member(raycluster(), min_member)
    obj["spec"] = autoscaling_spec(**shape)
    return obj


def workers(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]


def refused(op: KubeRay) -> list[tuple[str, str, str]]:
    return kuberay.refused_writes(op)


async def refusal(user: Any, obj: dict[str, Any]) -> str:
    from kubernetes_asyncio.client.exceptions import ApiException

    with pytest.raises(ApiException) as raised:
        await create(user, obj)
    assert raised.value.status == 403, raised.value.body
    return raised.value.body


async def test_the_ray_autoscaler_scales_a_ganged_raycluster_down_to_min_replicas_and_up_again_through_admit(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, autoscaling_raycluster())
        (cluster,) = await settle(fake, op)
        autoscaler = kuberay.RayAutoscaler(op, NS, "rc")
        assert await autoscaler.scale("gpu", 1)  # idle workers released: replicas 1, two in workersToDelete
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(workers(pods)) == 1 and gang_problems(fake, NS, pods, CONFIG) == []
        assert await autoscaler.clean_up()
        assert fake.get("ray.io/v1", "rayclusters", NS, "rc")["spec"]["workerGroupSpecs"][0]["scaleStrategy"] == {
            "workersToDelete": []}
        assert await autoscaler.scale("gpu", 6)
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(workers(pods)) == 6 and gang_problems(fake, NS, pods, CONFIG) == []
        assert refused(op) == []
        # the autoscaler's JSON patches reached admit as its own UPDATEs, from the cluster's ServiceAccount
        patches = [r for _, r, _ in fake.admission.reviews
                   if r["kind"]["kind"] == "RayCluster" and r["operation"] == "UPDATE"]
        assert patches and {r["userInfo"]["username"] for r in patches} == {"system:serviceaccount:ml:rc"}
        assert fake.get(*PG, NS, "rc")["spec"]["minMember"] == 2  # 1 head + minReplicas 1: what it can keep


async def test_an_autoscaling_raycluster_whose_min_member_is_above_the_autoscalers_floor_is_refused_at_its_create(
        aiohttp_server):
    # Before, admit allowed it with a warning and then refused the autoscaler's own scale-down PATCH: idle GPU
    # workers were held for ever. Now the user's CREATE says what to change; the autoscaler never meets a refusal.
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        body = await refusal(user, autoscaling_raycluster("4"))
        assert "runs 2 pods (1 head + 1 worker at minReplicas, the fewest the Ray autoscaler keeps)" in body
        assert "Raise minReplicas of spec.workerGroupSpecs[*] so that head and workers reach 4" in body
        assert "or lower gang.admit.dev/min-member" in body
        # at the floor it is allowed, and every scale of the autoscaler within bounds is too
        await create(user, autoscaling_raycluster("2"))
        await settle(fake, op)
        autoscaler = kuberay.RayAutoscaler(op, NS, "rc")
        for target in (1, 6, 2, 1):
            assert await autoscaler.scale("gpu", target)
            assert await autoscaler.clean_up()
        assert refused(op) == []


async def test_a_rayjobs_autoscaling_cluster_above_the_floor_is_refused_at_the_rayjob_not_at_the_autoscaler(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        job = with_min_member(rayjob(), "4")
        job["spec"]["rayClusterSpec"] = autoscaling_spec()
        body = await refusal(user, job)
        assert "RayJob ml/train runs 2 pods" in body
        assert "minReplicas of spec.rayClusterSpec.workerGroupSpecs[*]" in body
        assert fake.objects("rayclusters", NS) == []


async def test_minresources_counts_the_autoscaler_sidecar_and_the_init_container_kuberay_adds_to_the_pods(
        aiohttp_server):
    from admit.gang.resources import pod_requests

    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        obj = autoscaling_raycluster("auto", min_replicas=2)
        small = {"requests": {"cpu": "100m", "memory": "128Mi"}}  # below wait-gcs-ready's 200m / 256Mi
        obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = small
        await create(user, obj)
        (cluster,) = await settle(fake, op)
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
        assert [c["name"] for c in head["spec"]["containers"]] == ["ray-head", "autoscaler"]
        # the gang is the head and 2 workers (the floor): minResources is what those pods, as KubeRay made them,
        # request: head 1 cpu + 500m autoscaler; each worker max(100m, 200m init) cpu, max(128Mi, 256Mi) memory
        pg = fake.get(*PG, NS, "rc")
        assert pg["spec"]["minMember"] == 3
        expected = pod_requests(head["spec"])
        for pod in workers(pods)[:2]:
            for name, value in pod_requests(pod["spec"]).items():
                expected[name] = expected.get(name, 0) + value
        assert pg["spec"]["minResources"] == {"cpu": "1900m", "memory": "1Gi"}
        assert {k: float(v) for k, v in expected.items()} == {"cpu": 1.9, "memory": float(1024**3)}


async def test_a_rayservice_incremental_upgrade_pending_cluster_with_nil_replicas_is_admitted_and_scaled_up(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install, gc_orphans_after=GC) as (fake, op, user):
        service = with_min_member(rayservice(), "2")
        service["spec"]["rayClusterConfig"] = autoscaling_spec(min_replicas=1, replicas=3)
        service["spec"]["upgradeStrategy"] = {"type": "NewClusterWithIncrementalUpgrade", "clusterUpgradeOptions": {
            "maxSurgePercent": 100, "stepSizePercent": 50, "intervalSeconds": 30, "gatewayClassName": "istio"}}
        await create(user, service)
        (active,) = await settle(fake, op)
        await kuberay.rayservice_upgrade(op, service)
        (pending,) = fake.objects("rayclusters", NS)
        assert pending["metadata"]["name"] != active["metadata"]["name"]
        created = next(r for _, r, _ in fake.admission.reviews if r["kind"]["kind"] == "RayCluster" and
                       r["operation"] == "CREATE" and r["object"]["metadata"]["name"] == pending["metadata"]["name"])
        # KubeRay wrote replicas nil; the CRD's default (0) is what admit saw; KubeRay runs minReplicas
        assert created["object"]["spec"]["workerGroupSpecs"][0]["replicas"] == 0
        assert refused(op) == []
        pods = pods_of(fake, NS, pending["metadata"]["uid"])
        assert len(workers(pods)) == 3 and gang_problems(fake, NS, pods, CONFIG) == []  # the autoscaler scaled it up


async def test_a_rayservice_whose_min_member_an_incremental_upgrade_cannot_reach_is_refused_at_its_create(
        aiohttp_server):
    # Before, admit allowed the RayService with a warning and refused the pending cluster KubeRay created with
    # replicas nil (1 head + minReplicas): the upgrade stalled with the refusal only in KubeRay's log.
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        service = with_min_member(rayservice(), "4")
        service["spec"]["rayClusterConfig"] = autoscaling_spec(min_replicas=1, replicas=3)
        service["spec"]["upgradeStrategy"] = {"type": "NewClusterWithIncrementalUpgrade"}
        body = await refusal(user, service)
        assert "RayService ml/serve runs 2 pods" in body and "spec.rayClusterConfig.workerGroupSpecs[*]" in body


@pytest.mark.parametrize("min_member", ["auto", "4"])
async def test_a_finished_rayjobs_delete_workers_policy_suspends_every_worker_group_through_admit(aiohttp_server,
                                                                                                 min_member):
    # Before, with an explicit min-member admit refused KubeRay's UPDATE (1 head left < 4) and KubeRay retried it
    # for ever: the workers of a finished job were never released.
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        job = with_min_member(rayjob(workers=3), min_member)
        job["spec"]["deletionStrategy"] = {"deletionRules": [
            {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}}]}
        await create(user, job)
        (cluster,) = await settle(fake, op)
        assert await op.finish(job) == "DeleteWorkers"
        assert refused(op) == []
        stored = fake.get("ray.io/v1", "rayclusters", NS, cluster["metadata"]["name"])
        assert all(g["suspend"] is True for g in stored["spec"]["workerGroupSpecs"])
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert [p["metadata"]["labels"]["ray.io/node-type"] for p in pods] == ["head"]
        # the head left is a gang that can form, also when its node is lost and KubeRay makes it again
        await op.lose_node(pods[0])
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(pods) == 1 and gang_problems(fake, NS, pods, CONFIG) == []


@pytest.mark.parametrize("policy", ["DeleteCluster", "DeleteSelf"])
async def test_a_finished_rayjobs_delete_cluster_and_delete_self_policies_go_through(aiohttp_server, policy):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install, gc_orphans_after=GC) as (fake, op, user):
        job = rayjob()
        job["spec"]["deletionStrategy"] = {"deletionRules": [
            {"policy": policy, "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 60}}]}
        await create(user, job)
        await settle(fake, op)
        assert await op.finish(job) == policy
        await eventually(lambda: fake.objects("pods", NS) == [])
        assert fake.objects("rayclusters", NS) == [] and refused(op) == []


async def test_kuberay_makes_pods_lost_with_their_node_again_in_the_same_gang(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, raycluster())
        (cluster,) = await settle(fake, op)
        await kuberay.node_loss(op, raycluster())
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(pods) == 5 and gang_problems(fake, NS, pods, CONFIG) == [] and refused(op) == []


async def test_a_raycluster_recreate_upgrade_makes_every_pod_again_in_the_gang(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        obj = raycluster()
        obj["spec"]["upgradeStrategy"] = {"type": "Recreate"}
        await create(user, obj)
        (cluster,) = await settle(fake, op)
        before = {p["metadata"]["name"] for p in pods_of(fake, NS, cluster["metadata"]["uid"])}
        await kuberay.raycluster_recreate(op, obj)
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(pods) == 5 and not before & {p["metadata"]["name"] for p in pods}
        assert all(p["spec"]["containers"][0]["image"].endswith("-upgraded") for p in pods
                   if p["metadata"]["labels"]["ray.io/node-type"] == "head")
        assert gang_problems(fake, NS, pods, CONFIG) == [] and refused(op) == []


# ----------------------------------------------------------------------------------------------------------------------
# A running Ray object annotated (kubectl annotate): decided from KubeRay's rules
# ----------------------------------------------------------------------------------------------------------------------


def without_gang(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["annotations"] = {}
    return obj


async def annotate(user: Any, fake: Any, obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """``kubectl annotate`` (an UPDATE of the stored object) with ``gang.admit.dev/min-member: auto``, and ``spec``
    fields changed in the same write."""
    from kubernetes_asyncio import client as k8s

    plural = obj["kind"].lower() + "s"
    stored = fake.get("ray.io/v1", plural, NS, obj["metadata"]["name"])
    stored["metadata"].setdefault("annotations", {})["gang.admit.dev/min-member"] = "auto"
    stored["spec"].update(spec)
    return await k8s.CustomObjectsApi(user).replace_namespaced_custom_object("ray.io", "v1", NS, plural,
                                                                            obj["metadata"]["name"], stored)


async def test_annotating_a_running_raycluster_is_refused_with_the_fix_since_kuberay_keeps_its_running_pods(
        aiohttp_server):
    from kubernetes_asyncio.client.exceptions import ApiException

    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, without_gang(raycluster()))
        (cluster,) = await settle(fake, op)
        with pytest.raises(ApiException) as raised:
            await annotate(user, fake, raycluster())
        body = raised.value.body
        assert raised.value.status == 403 and "RayCluster ml/rc is running" in body
        assert body.split("denied the request: ", 1)[1].startswith(
            "Delete the RayCluster and create it again with the annotation")
        assert "spec.suspend: true" in body and "spec.upgradeStrategy.type: Recreate" in body
        assert pod_groups_of(fake, NS) == []  # nothing half-done: no PodGroup its running pods stay outside of


async def test_annotating_a_running_raycluster_with_the_recreate_strategy_remakes_every_pod_in_the_gang(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        obj = without_gang(raycluster())
        obj["spec"]["upgradeStrategy"] = {"type": "Recreate"}
        await create(user, obj)
        (cluster,) = await settle(fake, op)
        await annotate(user, fake, obj)
        await op.idle()
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(pods) == 5 and gang_problems(fake, NS, pods, CONFIG) == []
        assert any("upgradeStrategy Recreate" in w for w in said(fake, "RayCluster"))


async def test_annotating_a_running_raycluster_while_suspending_it_gangs_every_pod_on_resume(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, without_gang(raycluster()))
        (cluster,) = await settle(fake, op)
        await annotate(user, fake, raycluster(), suspend=True)
        await op.idle()
        assert pods_of(fake, NS, cluster["metadata"]["uid"]) == []
        stored = fake.get("ray.io/v1", "rayclusters", NS, "rc")
        stored["spec"]["suspend"] = False
        from kubernetes_asyncio import client as k8s

        await k8s.CustomObjectsApi(user).replace_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "rc",
                                                                          stored)
        await op.idle()
        pods = pods_of(fake, NS, cluster["metadata"]["uid"])
        assert len(pods) == 5 and gang_problems(fake, NS, pods, CONFIG) == []


@pytest.mark.parametrize("user_object, when", [(rayjob(), "when it retries"), (rayservice(), "at its next upgrade")],
                         ids=["RayJob", "RayService"])
async def test_annotating_a_running_rayjob_or_rayservice_warns_when_it_takes_effect_and_leaves_its_cluster(
        aiohttp_server, user_object, when):
    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        await create(user, without_gang(user_object))
        (cluster,) = await settle(fake, op)
        await annotate(user, fake, user_object)
        await op.idle()
        (warning,) = [w for w in said(fake, user_object["kind"]) if "is running" in w]
        assert "KubeRay copies its annotations onto a RayCluster only when it makes one" in warning and when in warning
        assert fake.objects("rayclusters", NS) == [cluster] and refused(op) == []  # no restart, nothing refused


async def test_a_cluster_an_earlier_admit_let_in_above_the_floor_still_gets_its_autoscalers_scale_downs(
        aiohttp_server):
    # stored as an earlier admit let it in (a warning, no refusal): the autoscaler's PATCH leaves the floor as it was,
    # so it is judged as that write was, with the fix as a warning; a user's write that changes the floor is refused
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio.client.exceptions import ApiException

    async with operator_cluster(aiohttp_server, CONFIG, kuberay.install) as (fake, op, user):
        fake.put(autoscaling_raycluster("4"))
        await op.idle()
        autoscaler = kuberay.RayAutoscaler(op, NS, "rc")
        assert await autoscaler.scale("gpu", 1), refused(op)
        assert await autoscaler.clean_up(), refused(op)
        assert refused(op) == []
        assert any("min-member=4 is above the 2 pods the Ray autoscaler scales it down to" in w and
                   "as before this update: admit sizes its gang to 2" in w for w in said(fake, "RayCluster"))
        # the gang is sized to what the autoscaler keeps: the pods left can form it
        pods = pods_of(fake, NS, fake.get("ray.io/v1", "rayclusters", NS, "rc")["metadata"]["uid"])
        assert len(pods) == 2 and fake.get(*PG, NS, "rc")["spec"]["minMember"] == 2
        stored = fake.get("ray.io/v1", "rayclusters", NS, "rc")
        stored["spec"]["workerGroupSpecs"][0]["minReplicas"] = 0
        with pytest.raises(ApiException) as raised:
            await k8s.CustomObjectsApi(user).replace_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "rc",
                                                                              stored)
        assert raised.value.status == 403 and "the fewest the Ray autoscaler keeps" in raised.value.body
