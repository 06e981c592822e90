"""LeaderWorkerSet end to end on the fake (tests/emulations/lws.py): the user's LWS goes in, the LWS
emulation makes its StatefulSets through admission as LWS v0.10 (and v0.9) does, the StatefulSet controller makes
the pods, LWS's pod webhook adds the group index, and admit's pod webhook is reinvoked after it."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.emulations import lws as lws_operator
from tests.operators.conftest import operator_cluster

NAME_LABEL, GROUP_INDEX = lws_operator.NAME, lws_operator.GROUP_INDEX
PG_LABEL = "scheduling.x-k8s.io/pod-group"


def leaderworkerset(min_member: str = "auto", *, replicas: int = 2, size: int = 4, annotations: dict | None = None,
                    labels: dict | None = None, **spec: Any) -> dict[str, Any]:
    """The issue's LWS (vLLM serving): ``replicas`` groups of ``size`` GPU pods."""
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "default",
                     "labels": {"team": "inference", **(labels or {})},
                     "annotations": {"gang.admit.dev/min-member": min_member, "example.com/owner": "ml-platform",
                                     **(annotations or {})}},
        "spec": {"replicas": replicas, **spec,
                 "leaderWorkerTemplate": {"size": size, "workerTemplate": {
                     "metadata": {"labels": {"app": "vllm"}},
                     "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai",
                                              "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}},
    }


def group_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(PG_LABEL)


@pytest.mark.parametrize("version", ["0.10", "0.9"])
async def test_an_lws_with_a_fixed_min_member_gets_its_pods_in_one_gang_per_group_with_lws_copying_its_metadata(
        aiohttp_server, version):
    # LWS v0.10 copies the LWS's annotations onto the leader StatefulSet (replicas = groups = 2), and
    # admit refused it as a StatefulSet gang of 2 below minMember 4: no pod ever existed.
    async with operator_cluster(aiohttp_server, lws_operator.install, version=version) as cluster:
        await cluster.create(leaderworkerset("4"))
        assert cluster.operator.errors == []
        pods = cluster.pods()
        assert [p["metadata"]["name"] for p in pods] == [
            "vllm-0", "vllm-0-1", "vllm-0-2", "vllm-0-3", "vllm-1", "vllm-1-1", "vllm-1-2", "vllm-1-3"]
        assert {p["metadata"]["name"]: group_of(p) for p in pods} == {
            p["metadata"]["name"]: f"vllm-{p['metadata']['labels'][GROUP_INDEX]}-"
                                   f"{p['metadata']['labels'][lws_operator.REVISION]}" for p in pods}
        groups = cluster.pod_groups()
        assert sorted(groups) == sorted({group_of(p) for p in pods})
        assert all(pg["spec"]["minMember"] == 4 for pg in groups.values())
        leader_sts = cluster.fake.get("apps/v1", "statefulsets", "default", "vllm")
        if version == "0.10":  # the shape the fix is for: the LWS's metadata on LWS's StatefulSets
            assert leader_sts["metadata"]["annotations"]["gang.admit.dev/min-member"] == "4"
            assert cluster.fake.get("apps/v1", "statefulsets", "default", "vllm-1")["metadata"]["labels"]["team"] == \
                "inference"
        # admit left LWS's StatefulSets as LWS wrote them: no label or schedulerName of its own on their templates
        template = leader_sts["spec"]["template"]
        assert PG_LABEL not in template["metadata"]["labels"]


async def test_an_lws_with_auto_in_lws_v0_10_creation_order_gets_every_worker_and_one_gang_per_group(aiohttp_server):
    # The same with auto: the leader StatefulSet was labelled for one gang of all leaders, and the worker
    # StatefulSet refused ("already belongs to LeaderWorkerSet"): no worker was ever created.
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        await cluster.create(leaderworkerset("auto"))
        assert cluster.operator.errors == [] and cluster.fake.statefulsets.errors == []
        pods = cluster.pods()
        assert len(pods) == 8
        by_group: dict[str, list[str]] = {}
        for p in pods:
            by_group.setdefault(group_of(p), []).append(p["metadata"]["name"])
        assert sorted(len(v) for v in by_group.values()) == [4, 4]
        assert {name: pg["spec"]["minMember"] for name, pg in cluster.pod_groups().items()} == \
            {name: 4 for name in by_group}


async def test_the_worker_statefulset_of_a_leader_pod_as_kube_apiserver_lists_it_is_owned_by_that_pod(aiohttp_server):
    # The real tier's failure: kube-apiserver lists Pods without apiVersion/kind, and the emulation read the
    # owner's kind from the object (KeyError: 'apiVersion'); LWS takes it from its scheme (GVKForObject).
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        await cluster.create(leaderworkerset("4", replicas=1))
        stored = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", "vllm")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{cluster.fake.url}/api/v1/namespaces/default/pods",
                                params={"labelSelector": f"{NAME_LABEL}=vllm,{lws_operator.WORKER_INDEX}=0"}) as r:
                (leader,) = (await r.json())["items"]
        assert "apiVersion" not in leader and "kind" not in leader
        owner = {"apiVersion": "v1", "kind": "Pod", "name": "vllm-0", "uid": leader["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        assert lws_operator.worker_statefulset(stored, leader)["metadata"]["ownerReferences"] == [owner]
        made = cluster.fake.get("apps/v1", "statefulsets", "default", "vllm-0")  # by the emulation, from its list
        assert made["metadata"]["ownerReferences"] == [owner] and cluster.operator.errors == []
        assert lws_operator.leader_statefulset(stored)["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"


async def bind(cluster, name: str, node: str) -> None:
    """What kube-scheduler's binding does to a pod: ``spec.nodeName``."""
    pod = cluster.fake.get("v1", "pods", "default", name)
    pod["spec"]["nodeName"] = node
    cluster.fake.put(pod)
    await cluster.fake.settle()


async def test_an_lws_with_exclusive_topology_gangs_the_leader_first_so_its_workers_can_ever_be_created(
        aiohttp_server):
    # LWS creates a group's workers only once its leader is scheduled; admit's gang of
    # size 4 kept the leader waiting for workers that were waiting for it.
    exclusive = {lws_operator.EXCLUSIVE: "cloud.google.com/gke-nodepool"}
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        await cluster.create(leaderworkerset("auto", replicas=1, annotations=exclusive))
        (leader,) = cluster.pods()
        (pg,) = cluster.pod_groups().values()
        # the gang can form with the pods that can exist now (the leader), and covers the whole group's resources
        assert pg["spec"]["minMember"] == 1 and pg["spec"]["minResources"] == {"nvidia.com/gpu": "4"}
        assert group_of(leader) == pg["metadata"]["name"]
        await bind(cluster, "vllm-0", "node-a")
        pods = cluster.pods()
        assert [p["metadata"]["name"] for p in pods] == ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-0-3"]
        assert {group_of(p) for p in pods} == {pg["metadata"]["name"]}
        assert len(cluster.pod_groups()) == 1


async def test_an_lws_with_exclusive_topology_and_a_min_member_above_one_is_refused_with_the_fix(aiohttp_server):
    exclusive = {lws_operator.EXCLUSIVE: "cloud.google.com/gke-nodepool"}
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        from kubernetes_asyncio.client import ApiException

        with pytest.raises(ApiException) as refused:
            await cluster.create(leaderworkerset("4", replicas=1, annotations=exclusive))
        message = json.loads(refused.value.body)["message"]
        assert "only once its leader pod is scheduled" in message
        assert 'Set gang.admit.dev/min-member to "auto"' in message
        assert cluster.fake.objects("statefulsets", "default") == []


async def test_a_new_lws_revision_gets_new_gangs_so_old_pods_never_count_toward_the_new_quorum(aiohttp_server):
    # LWS names its own PodGroups <lws>-<group>-<revision>; admit's <lws>-<group> was reused
    # across revisions, so during a rolling update the old revision's terminating pods counted for the new leader.
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        created = await cluster.create(leaderworkerset("auto", replicas=1))
        old_group = {group_of(p) for p in cluster.pods()}
        assert len(old_group) == 1
        lws = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", "vllm")
        template = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        template["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v2"
        await cluster.replace(lws)
        # the rolling update: the leader StatefulSet has the new template, and LWS's partitioned update deletes and
        # re-creates the leader pod; the old workers are still there (terminating)
        cluster.fake.delete_object("v1", "pods", "default", "vllm-0")
        await cluster.fake.settle()
        leader = cluster.fake.get("v1", "pods", "default", "vllm-0")
        assert leader["metadata"]["labels"][lws_operator.REVISION] != \
            cluster.fake.get("v1", "pods", "default", "vllm-0-1")["metadata"]["labels"][lws_operator.REVISION]
        assert group_of(leader) not in old_group
        assert group_of(leader) in cluster.pod_groups() and old_group <= set(cluster.pod_groups())
        assert created["metadata"]["name"] == "vllm"


async def test_annotating_a_serving_lws_warns_that_lws_rolls_every_group_over(aiohttp_server):
    # admit's group-spec annotation and schedulerName change spec.leaderWorkerTemplate, which LWS takes as a new
    # revision: every serving group was deleted and recreated, and nothing said so.
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        plain = leaderworkerset(replicas=2, size=2)
        del plain["metadata"]["annotations"]["gang.admit.dev/min-member"]
        await cluster.create(plain)
        before = cluster.fake.get("apps/v1", "statefulsets", "default", "vllm")["spec"]["template"]["metadata"]
        stored = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", "vllm")
        stored["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
        await cluster.replace(stored)
        warnings = " ".join(w for _, _, w in cluster.fake.admission.warnings)
        assert "annotate a serving LWS only when rolling all its groups is acceptable" in warnings
        assert "LWS recreates all 2 groups, each then ganged" in warnings
        after = cluster.fake.get("apps/v1", "statefulsets", "default", "vllm")["spec"]["template"]["metadata"]
        assert after["labels"][lws_operator.REVISION] != before["labels"][lws_operator.REVISION]  # the roll is real
        # a later update that leaves the templates alone says nothing more
        count = len(cluster.fake.admission.warnings)
        stored = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", "vllm")
        stored["metadata"]["labels"]["tier"] = "gold"
        await cluster.replace(stored)
        assert not any("new revision" in w for _, _, w in cluster.fake.admission.warnings[count:])


def surging(name: str, max_surge: int) -> dict[str, Any]:
    """Ten single-pod groups (index 9 is the last one without a surge, 10 the first surge group)."""
    lws = leaderworkerset("auto", replicas=10, size=1,
                          rolloutStrategy={"type": "RollingUpdate",
                                           "rollingUpdateConfiguration": {"maxSurge": max_surge, "maxUnavailable": 1}})
    lws["metadata"]["name"] = name
    return lws


async def test_a_rolling_update_with_max_surge_gangs_the_surge_groups_whose_names_fit(aiohttp_server):
    # LWS's rolling update makes groups at index replicas and above (rollingUpdateParameters: burstReplicas); their
    # PodGroups <lws>-<index>-<revision> get a longer index.
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        name = "v" * 49  # <49>-10-<10-character revision> is 63 characters
        await cluster.create(surging(name, 1))
        lws = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", name)
        lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v2"
        await cluster.replace(lws)
        surge = cluster.fake.get("v1", "pods", "default", f"{name}-10")
        revision = surge["metadata"]["labels"][lws_operator.REVISION]
        assert len(revision) == 10 and group_of(surge) == f"{name}-10-{revision}"
        assert group_of(surge) in cluster.pod_groups()


async def test_an_lws_whose_surge_group_names_pass_63_characters_is_refused_at_the_users_write(aiohttp_server):
    # The CREATE check counted spec.replicas only: the surge group <50>-10-<revision> (64 characters) was made by
    # the rolling update, and its pods were silently left out of any gang.
    from kubernetes_asyncio.client import ApiException

    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        name = "v" * 50
        await cluster.create(surging(name, 0))  # without a surge the last group is <50>-9-<revision>: it fits
        lws = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", name)
        lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] = 1
        lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v2"
        with pytest.raises(ApiException) as refused:
            await cluster.replace(lws)
        text = json.loads(refused.value.body)["message"]
        assert "spec.replicas 10 + maxSurge 1" in text and "denied the request: Use a shorter LeaderWorkerSet name" in text
        assert cluster.fake.get("v1", "pods", "default", f"{name}-10") is None
        with pytest.raises(ApiException):
            await cluster.create(surging("w" * 50, 1))


async def test_removing_the_gang_annotations_of_a_serving_lws_warns_first_that_lws_rolls_every_group_over(
        aiohttp_server):
    # Removing them made admit take its group spec off the template, a new revision: every serving group was
    # recreated, unsaid. The same rule as adding them now warns, with the fix first.
    async with operator_cluster(aiohttp_server, lws_operator.install) as cluster:
        await cluster.create(leaderworkerset(replicas=2, size=2))
        before = cluster.fake.get("apps/v1", "statefulsets", "default", "vllm")["spec"]["template"]["metadata"]
        stored = cluster.fake.get("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "default", "vllm")
        del stored["metadata"]["annotations"]["gang.admit.dev/min-member"]
        count = len(cluster.fake.admission.warnings)
        await cluster.replace(stored)
        warnings = [w for _, _, w in cluster.fake.admission.warnings[count:]]
        assert any(w.startswith("remove the gang annotations only when rolling every group is acceptable") and
                   "recreates all 2 groups without a gang" in w and len(w) <= 256 for w in warnings), warnings
        after = cluster.fake.get("apps/v1", "statefulsets", "default", "vllm")["spec"]["template"]["metadata"]
        assert after["labels"][lws_operator.REVISION] != before["labels"][lws_operator.REVISION]  # the roll is real
