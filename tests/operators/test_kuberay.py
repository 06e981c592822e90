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
from tests.operator_stack import events_about, gang_problems, lost, operator_cluster, pod_groups_of, pods_of, said

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
        assert any("ray.io/scheduler-name" in w and "not read" in w and "--batch-scheduler" in w for w in warnings), \
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
