"""The fake Kubernetes API, exercised through the real kubernetes_asyncio client (the way admit uses it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
PG = ("scheduling.x-k8s.io", "v1alpha1")


@pytest.fixture
async def api():
    async with FakeKubeAPI() as server:
        yield server


@pytest.fixture
async def kube(api):
    async with api.api_client() as c:
        yield c




def pod(name, labels=None, **meta):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, **meta),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
    )


def podgroup(name, min_member=2, labels=None):
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"minMember": min_member},
    }


def deployment(name, replicas=2):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
            ),
        ),
    )


def lease(name, holder, renew="2024-05-01T12:00:00.000000Z"):
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15, renew_time=renew),
    )


# ---------------------------------------------------------------------------------------------------- CRUD


async def test_create_returns_201_with_uid_and_resource_version(api, kube):
    created, status, _ = await client.CoreV1Api(kube).create_namespaced_pod_with_http_info("team-a", pod("p1"))
    assert status == 201
    assert created.metadata.uid and int(created.metadata.resource_version) > 0
    assert created.metadata.namespace == "team-a"
    assert created.metadata.generation == 1
    assert created.status.phase == "Pending"
    stored = api.get("v1", "Pod", "team-a", "p1")
    assert stored["metadata"]["creationTimestamp"].endswith("Z") and stored["kind"] == "Pod"


async def test_resource_versions_increase_across_all_writes(kube):
    core = client.CoreV1Api(kube)
    a = await core.create_namespaced_pod("default", pod("a"))
    b = await core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="b")))
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)


async def test_creating_an_existing_name_is_409_already_exists_status(kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("p1"))
    assert err.value.status == 409
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists" and body["code"] == 409
    assert body["details"] == {"name": "p1", "kind": "pods"}

    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    with pytest.raises(ApiException) as err:
        await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    body = json.loads(err.value.body)
    assert body["details"] == {"name": "g", "group": "scheduling.x-k8s.io", "kind": "podgroups"}
    assert body["message"] == 'podgroups.scheduling.x-k8s.io "g" already exists'


async def test_reading_a_missing_object_is_404_not_found_status(kube):
    with pytest.raises(ApiException) as err:
        await client.AppsV1Api(kube).read_namespaced_deployment("nope", "default")
    assert err.value.status == 404
    body = json.loads(err.value.body)
    assert body["reason"] == "NotFound" and body["message"] == 'deployments.apps "nope" not found'


async def test_generate_name_gets_a_random_suffix(kube):
    core = client.CoreV1Api(kube)
    a = await core.create_namespaced_pod("default", pod(None, generate_name="worker-"))
    b = await core.create_namespaced_pod("default", pod(None, generate_name="worker-"))
    assert a.metadata.name.startswith("worker-") and len(a.metadata.name) == len("worker-") + 5
    assert a.metadata.name != b.metadata.name


async def test_invalid_names_and_label_values_are_422(kube):
    core = client.CoreV1Api(kube)
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("Upper_Case"))
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("p", labels={"scheduling.x-k8s.io/pod-group": "x" * 64}))
    assert err.value.status == 422 and "63 characters" in json.loads(err.value.body)["message"]


async def test_delete_returns_the_object_and_then_404(api, kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("default", pod("p1"))
    deleted = await core.delete_namespaced_pod("p1", "default")
    assert deleted.metadata.name == "p1"
    assert api.get("v1", "pods", "default", "p1") is None
    with pytest.raises(ApiException) as err:
        await core.delete_namespaced_pod("p1", "default")
    assert err.value.status == 404


async def test_finalizers_hold_deletion_until_the_last_one_is_removed(api, kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm", finalizers=["example.com/hold"])))
    await core.delete_namespaced_config_map("cm", "default")
    held = api.get("v1", "configmaps", "default", "cm")
    assert held["metadata"]["deletionTimestamp"]
    await core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    assert api.get("v1", "configmaps", "default", "cm") is None


async def test_secret_string_data_is_stored_base64_in_data_and_bad_base64_is_400(kube):
    core = client.CoreV1Api(kube)
    s = await core.create_namespaced_secret(
        "default", client.V1Secret(metadata=client.V1ObjectMeta(name="tls"), string_data={"ca.crt": "PEM"}))
    assert s.data == {"ca.crt": "UEVN"} and s.string_data is None
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_secret(
            "default", client.V1Secret(metadata=client.V1ObjectMeta(name="bad"), data={"k": "not base64!"}))
    assert err.value.status == 400


# ---------------------------------------------------------------------------------------------------- updates


async def test_custom_object_merge_patch_and_json_patch_update_a_podgroup(api, kube):
    crd = client.CustomObjectsApi(kube)
    created = await crd.create_namespaced_custom_object(*PG, "ns1", "podgroups", podgroup("g", 2))
    assert created["metadata"]["generation"] == 1

    merged = await crd.patch_namespaced_custom_object(
        *PG, "ns1", "podgroups", "g", {"spec": {"minMember": 3}, "metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json")
    assert merged["spec"]["minMember"] == 3 and merged["metadata"]["labels"] == {"a": "b"}
    assert merged["metadata"]["generation"] == 2
    assert int(merged["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert api.requests[-1].content_type == "application/merge-patch+json"

    patched = await crd.patch_namespaced_custom_object(
        *PG, "ns1", "podgroups", "g", [{"op": "replace", "path": "/spec/minMember", "value": 4}])
    assert patched["spec"]["minMember"] == 4 and patched["metadata"]["generation"] == 3
    assert api.requests[-1].content_type == "application/json-patch+json"
    assert api.requests[-1].body == [{"op": "replace", "path": "/spec/minMember", "value": 4}]

    with pytest.raises(ApiException) as err:  # a failing "test" op is 422, as in kube-apiserver
        await crd.patch_namespaced_custom_object(
            *PG, "ns1", "podgroups", "g", [{"op": "test", "path": "/spec/minMember", "value": 99}])
    assert err.value.status == 422


async def test_custom_objects_api_sends_a_dict_patch_as_json_patch_which_is_400(api, kube):
    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    with pytest.raises(ApiException) as err:
        await crd.patch_namespaced_custom_object(*PG, "default", "podgroups", "g", {"spec": {"minMember": 5}})
    assert err.value.status == 400
    assert api.requests[-1].content_type == "application/json-patch+json"


async def test_strategic_merge_patch_merges_webhooks_by_name_for_ca_bundle_injection(api, kube):
    adm = client.AdmissionregistrationV1Api(kube)
    hook = {"name": "pods.admit.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"namespace": "admit", "name": "admit", "path": "/mutate"}}}
    await adm.create_mutating_webhook_configuration(
        {"metadata": {"name": "admit"}, "webhooks": [hook, {**hook, "name": "jobs.admit.dev"}]})
    result = await adm.patch_mutating_webhook_configuration(
        "admit", {"webhooks": [{"name": "jobs.admit.dev", "clientConfig": {"caBundle": "Q0E="}}]})
    assert api.requests[-1].content_type == "application/strategic-merge-patch+json"
    by_name = {w.name: w for w in result.webhooks}
    assert by_name["jobs.admit.dev"].client_config.ca_bundle == "Q0E="
    assert by_name["jobs.admit.dev"].client_config.service.path == "/mutate"
    assert by_name["pods.admit.dev"].client_config.ca_bundle is None
    with pytest.raises(ApiException) as err:  # PEM text instead of base64
        await adm.patch_mutating_webhook_configuration(
            "admit", {"webhooks": [{"name": "jobs.admit.dev", "clientConfig": {"caBundle": "-----BEGIN"}}]})
    assert err.value.status == 400


async def test_a_server_side_apply_is_415_before_the_body_is_read_or_the_object_looked_up(api, kube):
    # handlers/patch.go PatchResource checks the media type first: a YAML body is not a 400, a missing object not a 404
    await client.CoreV1Api(kube).create_namespaced_pod("default", pod("p2"))
    async with aiohttp.ClientSession() as http:
        for name in ("missing", "p2"):
            async with http.patch(f"{api.url}/api/v1/namespaces/default/pods/{name}", params={"fieldManager": "me"},
                                  data=b"apiVersion: v1\nkind: Pod\n",
                                  headers={"Content-Type": "application/apply-patch+yaml"}) as r:
                assert r.status == 415, (name, await r.text())
                assert "application/apply-patch+yaml" in (await r.json())["message"]


async def test_unsupported_patch_content_types_are_415(kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}},
                                        _content_type="application/apply-patch+yaml")
    assert err.value.status == 415
    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    with pytest.raises(ApiException) as err:  # CRDs do not support strategic merge patch
        await crd.patch_namespaced_custom_object(*PG, "default", "podgroups", "g", {"spec": {"minMember": 1}},
                                                 _content_type="application/strategic-merge-patch+json")
    assert err.value.status == 415


async def test_lease_replace_with_a_stale_resource_version_is_409_conflict(kube):
    coord = client.CoordinationV1Api(kube)
    first = await coord.create_namespaced_lease("admit", lease("admit-controller", "pod-a"))
    first.spec.holder_identity = "pod-b"
    first.spec.renew_time = "2024-05-01T12:00:05.000000Z"
    second = await coord.replace_namespaced_lease("admit-controller", "admit", first)
    assert second.spec.holder_identity == "pod-b"
    assert second.metadata.resource_version != first.metadata.resource_version

    first.spec.holder_identity = "pod-c"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        await coord.replace_namespaced_lease("admit-controller", "admit", first)
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "Conflict"
    assert (await coord.read_namespaced_lease("admit-controller", "admit")).spec.holder_identity == "pod-b"


async def test_lease_times_must_be_micro_time_with_six_fraction_digits_and_a_zone(kube):
    coord = client.CoordinationV1Api(kube)
    for bad in ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.123Z", "2024-05-01T12:00:00.123456"):
        with pytest.raises(ApiException) as err:
            await coord.create_namespaced_lease("admit", lease("l", "me", renew=bad))
        assert err.value.status == 400
    ok = await coord.create_namespaced_lease("admit", lease("l", "me", renew="2024-05-01T12:00:00.123456+00:00"))
    assert ok.spec.renew_time.microsecond == 123456


async def test_custom_resource_put_without_resource_version_is_422(kube):
    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    with pytest.raises(ApiException) as err:
        await crd.replace_namespaced_custom_object(*PG, "default", "podgroups", "g", podgroup("g", 9))
    assert err.value.status == 422


async def test_a_write_that_changes_nothing_keeps_the_resource_version(kube):
    core = client.CoreV1Api(kube)
    created = await core.create_namespaced_pod("default", pod("p1", labels={"a": "b"}))
    same = await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    assert same.metadata.resource_version == created.metadata.resource_version


async def test_dry_run_returns_the_result_but_stores_nothing(api, kube):
    crd = client.CustomObjectsApi(kube)
    out = await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"), dry_run="All")
    assert out["metadata"]["name"] == "g" and out["metadata"]["uid"]
    assert api.objects("podgroups") == []
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    patched = await crd.patch_namespaced_custom_object(
        *PG, "default", "podgroups", "g", {"spec": {"minMember": 7}}, dry_run="All",
        _content_type="application/merge-patch+json")
    assert patched["spec"]["minMember"] == 7
    assert api.get("scheduling.x-k8s.io/v1alpha1", "PodGroup", "default", "g")["spec"]["minMember"] == 2
    await crd.delete_namespaced_custom_object(*PG, "default", "podgroups", "g", dry_run="All")
    assert len(api.objects("podgroups")) == 1
    assert api.requests[-1].query["dryRun"] == "All"


async def test_scale_subresource_reads_and_writes_spec_replicas(api, kube):
    apps = client.AppsV1Api(kube)
    await apps.create_namespaced_deployment("default", deployment("web", 2))
    scale = await apps.read_namespaced_deployment_scale("web", "default")
    assert scale.spec.replicas == 2 and scale.status.selector == "app=web"
    await apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 5}})
    assert api.get("apps/v1", "deployments", "default", "web")["spec"]["replicas"] == 5
    scale = await apps.read_namespaced_deployment_scale("web", "default")
    scale.spec.replicas = 0
    out = await apps.replace_namespaced_deployment_scale("web", "default", scale)
    assert out.spec.replicas == 0
    assert api.requests_for("deployments/scale", "PUT")[0].subresource == "scale"


async def test_the_statefulset_controller_deletes_the_highest_ordinals_on_a_scale_down():
    from tests.emulations.kcm import FakeControlPlane

    async with FakeControlPlane(statefulset_controller=True) as api:
        api.put({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
                 "spec": {"replicas": 4, "podManagementPolicy": "Parallel", "selector": {"matchLabels": {"app": "db"}},
                          "template": {"metadata": {"labels": {"app": "db"}},
                                       "spec": {"containers": [{"name": "db", "image": "db"}]}}}})
        await api.settle()
        await api.statefulsets.idle()
        assert [p["metadata"]["name"] for p in api.objects("pods")] == ["db-0", "db-1", "db-2", "db-3"]
        async with api.api_client() as kube:
            await client.AppsV1Api(kube).patch_namespaced_stateful_set_scale("db", "default",
                                                                              {"spec": {"replicas": 2}})
        await api.settle()
        await api.statefulsets.idle()
        assert [p["metadata"]["name"] for p in api.objects("pods")] == ["db-0", "db-1"]


async def test_status_subresource_changes_only_status_and_main_writes_keep_status(api, kube):
    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", {**podgroup("g"), "status": {"x": 1}})
    assert "status" not in api.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "default", "g")
    out = await crd.patch_namespaced_custom_object_status(
        *PG, "default", "podgroups", "g", {"status": {"phase": "Running"}, "spec": {"minMember": 9}},
        _content_type="application/merge-patch+json")
    assert out["status"] == {"phase": "Running"} and out["spec"]["minMember"] == 2
    assert out["metadata"]["generation"] == 1
    out = await crd.patch_namespaced_custom_object(
        *PG, "default", "podgroups", "g", {"status": {"phase": "Lost"}}, _content_type="application/merge-patch+json")
    assert out["status"] == {"phase": "Running"}


# ---------------------------------------------------------------------------------------------------- list


async def test_list_filters_by_label_selector_and_field_selector(kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("a", pod("p1", labels={"app": "x", "tier": "web"}))
    await core.create_namespaced_pod("a", pod("p2", labels={"app": "y"}))
    await core.create_namespaced_pod("b", pod("p3", labels={"app": "x", "gang.admit.dev/managed": "true"}))

    async def names(selector=None, namespace="a", field_selector=None):
        if namespace is None:
            res = await core.list_pod_for_all_namespaces(label_selector=selector, field_selector=field_selector)
        else:
            res = await core.list_namespaced_pod(namespace, label_selector=selector, field_selector=field_selector)
        assert res.metadata.resource_version and res.kind == "PodList"
        assert all(p.kind is None and p.api_version is None for p in res.items)  # as kube-apiserver's PodList
        return sorted(p.metadata.name for p in res.items)

    assert await names() == ["p1", "p2"]
    assert await names("app=x") == ["p1"]
    assert await names("app==x", namespace=None) == ["p1", "p3"]
    assert await names("app!=x") == ["p2"]
    assert await names("tier") == ["p1"]
    assert await names("!tier") == ["p2"]
    assert await names("app in (x, y),tier notin (db)") == ["p1", "p2"]
    assert await names("app notin (x)", namespace=None) == ["p2"]
    assert await names("gang.admit.dev/managed=true", namespace=None) == ["p3"]
    assert await names(namespace=None, field_selector="metadata.name=p2") == ["p2"]
    assert await names(namespace=None, field_selector="metadata.namespace!=a") == ["p3"]


async def test_list_of_custom_objects_is_a_kind_list_with_typed_items(kube):
    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g1", labels={"m": "1"}))
    await crd.create_namespaced_custom_object(*PG, "other", "podgroups", podgroup("g2"))
    res = await crd.list_cluster_custom_object(*PG, "podgroups", label_selector="m=1")
    assert res["kind"] == "PodGroupList" and res["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert [(i["kind"], i["metadata"]["name"]) for i in res["items"]] == [("PodGroup", "g1")]


async def test_a_listed_built_in_object_carries_no_api_version_or_kind_in_any_list_path_as_kube_apiserver_lists_it(api):
    """kube-apiserver encodes a typed list's items without TypeMeta (kubernetes/kubernetes#3030): only the list says
    ``PodList``/``v1``. A GET, a write's answer and a watch event's object carry both."""
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "a", "labels": {"app": "x"}},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2", "namespace": "a", "labels": {"app": "y"}},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    async with aiohttp.ClientSession() as http:
        async def get(path, **query):
            async with http.get(api.url + path, params=query) as r:
                assert r.status == 200
                return await r.json()

        for path, query in (("/api/v1/namespaces/a/pods", {}), ("/api/v1/pods", {}),
                            ("/api/v1/namespaces/a/pods", {"labelSelector": "app=x"}),
                            ("/api/v1/pods", {"fieldSelector": "metadata.name=p2"}),
                            ("/api/v1/namespaces/a/pods", {"limit": "1"})):
            doc = await get(path, **query)
            assert (doc["kind"], doc["apiVersion"]) == ("PodList", "v1") and doc["items"]
            assert [sorted(set(i) & {"apiVersion", "kind"}) for i in doc["items"]] == [[]] * len(doc["items"])
        doc = await get("/api/v1/namespaces/a/pods", limit="1", **{"continue": doc["metadata"]["continue"]})
        assert [i["metadata"]["name"] for i in doc["items"]] == ["p2"] and "kind" not in doc["items"][0]
        single = await get("/api/v1/namespaces/a/pods/p1")
        assert (single["kind"], single["apiVersion"]) == ("Pod", "v1")
        async with http.get(api.url + "/api/v1/namespaces/a/pods", params={"watch": "true", "timeoutSeconds": "1"}) as r:
            events = [json.loads(line) for line in (await r.text()).splitlines()]
        assert [(e["type"], e["object"]["kind"], e["object"]["apiVersion"]) for e in events] == [("ADDED", "Pod", "v1")] * 2
        async with http.delete(api.url + "/api/v1/namespaces/a/pods", params={"labelSelector": "app=y"}) as r:
            deleted = await r.json()
        assert deleted["kind"] == "PodList" and [i["metadata"]["name"] for i in deleted["items"]] == ["p2"]
        assert not set(deleted["items"][0]) & {"apiVersion", "kind"}
    listed = api.list_objects("v1", "pods", "a")
    assert [i["metadata"]["name"] for i in listed] == ["p1"] and "apiVersion" not in listed[0]
    assert api.objects("pods", "a")[0]["kind"] == "Pod"  # the stored object, whole, for a test's checks


# ---------------------------------------------------------------------------------------------------- watch


async def test_watch_streams_added_modified_and_deleted(api, kube):
    core = client.CoreV1Api(kube)
    seen = []

    async def consume():
        async with watch.Watch() as w:
            async for ev in w.stream(core.list_namespaced_pod, "default", timeout_seconds=5):
                seen.append((ev["type"], ev["object"].metadata.name))
                if ev["type"] == "DELETED":
                    return

    task = asyncio.create_task(consume())
    await eventually(lambda: api.open_watches == 1)
    await core.create_namespaced_pod("default", pod("p1"))
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    await core.delete_namespaced_pod("p1", "default")
    await asyncio.wait_for(task, 3)
    assert seen == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    watch_req = api.requests_for("pods", "watch")[0]
    assert watch_req.query["watch"] == "True"  # kubernetes_asyncio sends Python's str(True)
    await eventually(lambda: api.open_watches == 0)


async def test_watch_of_custom_objects_yields_dicts_and_honours_the_label_selector(api, kube):
    crd = client.CustomObjectsApi(kube)
    seen = []

    async def consume():
        async with watch.Watch() as w:
            async for ev in w.stream(crd.list_namespaced_custom_object, *PG, "default", "podgroups",
                                     label_selector="gang=yes", timeout_seconds=5):
                seen.append((ev["type"], ev["object"]["metadata"]["name"]))
                if ev["type"] == "DELETED":
                    return

    task = asyncio.create_task(consume())
    await eventually(lambda: api.open_watches == 1)
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("other"))
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g", labels={"gang": "yes"}))
    # leaving the selector is seen as DELETED, like the real watch cache
    await crd.patch_namespaced_custom_object(*PG, "default", "podgroups", "g", {"metadata": {"labels": None}},
                                             _content_type="application/merge-patch+json")
    await asyncio.wait_for(task, 3)
    assert seen == [("ADDED", "g"), ("DELETED", "g")]


async def test_watch_from_a_resource_version_replays_later_events_and_initial_state_without_one(api, kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("default", pod("old"))
    listed = await core.list_namespaced_pod("default")
    await core.create_namespaced_pod("default", pod("new"))
    async with watch.Watch() as w:
        events = [(e["type"], e["object"].metadata.name) async for e in w.stream(
            core.list_namespaced_pod, "default", resource_version=listed.metadata.resource_version,
            timeout_seconds=0.2)]
    assert events == [("ADDED", "new")]
    async with watch.Watch() as w:
        events = [(e["type"], e["object"].metadata.name)
                  async for e in w.stream(core.list_namespaced_pod, "default", timeout_seconds=0.2)]
    assert events == [("ADDED", "old"), ("ADDED", "new")]


async def test_watch_from_a_compacted_resource_version_raises_api_exception_410(api, kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("default", pod("p1"))
    old_rv = (await core.list_namespaced_pod("default")).metadata.resource_version
    await core.create_namespaced_pod("default", pod("p2"))
    api.compact()
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, "default", resource_version=old_rv, timeout_seconds=5):
                pass
    assert err.value.status == 410 and err.value.reason.startswith("Expired: too old resource version")
    # Without timeout_seconds, Watch retries a 410 once with the same resourceVersion and then raises.
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, "default", resource_version=old_rv):
                pass
    assert err.value.status == 410
    assert len(api.requests_for("pods", "watch")) == 3
    # The current resourceVersion is still fine after a compaction.
    async with watch.Watch() as w:
        events = [e async for e in w.stream(core.list_namespaced_pod, "default",
                                            resource_version=api.resource_version, timeout_seconds=0.1)]
    assert events == []


async def test_drop_watches_ends_the_stream(api, kube):
    core = client.CoreV1Api(kube)
    ended = asyncio.Event()

    async def consume():
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, "default", timeout_seconds=30):
                pass
        ended.set()

    task = asyncio.create_task(consume())
    await eventually(lambda: api.open_watches == 1)
    await api.drop_watches()
    await asyncio.wait_for(ended.wait(), 2)
    assert api.open_watches == 0
    await task


async def test_abrupt_drop_watches_surfaces_as_a_client_payload_error(api, kube):
    core = client.CoreV1Api(kube)

    async def consume():
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, "default", timeout_seconds=30):
                pass

    task = asyncio.create_task(consume())
    await eventually(lambda: api.open_watches == 1)
    await api.drop_watches(abrupt=True)
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(task, 2)


async def test_watch_ends_after_timeout_seconds_and_sends_bookmarks_when_allowed(api, kube):
    core = client.CoreV1Api(kube)
    started = time.monotonic()
    got = []

    async def consume():
        async with watch.Watch() as w:
            async for ev in w.stream(core.list_namespaced_pod, "default", timeout_seconds=1,
                                     allow_watch_bookmarks=True):
                got.append(ev)

    task = asyncio.create_task(consume())
    await eventually(lambda: api.open_watches == 1)
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "kube-system"}})
    api.send_bookmarks()
    await asyncio.wait_for(task, 3)
    assert 0.9 < time.monotonic() - started < 2.5
    assert [e["type"] for e in got] == ["BOOKMARK"]
    assert got[0]["raw_object"]["metadata"]["resourceVersion"] == api.resource_version
    assert api.requests_for("pods", "watch")[0].query["allowWatchBookmarks"] == "True"


# ---------------------------------------------------------------------------------------------------- faults


async def test_fail_answers_the_next_matching_requests_with_a_status(api, kube):
    crd = client.CustomObjectsApi(kube)
    api.fail("POST", "podgroups", status=500, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
        assert err.value.status == 500 and json.loads(err.value.body)["reason"] == "InternalError"
    await crd.create_namespaced_custom_object(*PG, "default", "podgroups", podgroup("g"))
    api.fail("get", "podgroups", status=429, name="g")
    with pytest.raises(ApiException) as err:
        await crd.get_namespaced_custom_object(*PG, "default", "podgroups", "g")
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "1"
    assert (await crd.get_namespaced_custom_object(*PG, "default", "podgroups", "g"))["metadata"]["name"] == "g"
    assert [r.status for r in api.requests_for("podgroups")] == [500, 500, 201, 429, 200]


async def test_a_failed_watch_request_raises_api_exception_from_the_stream(api, kube):
    core = client.CoreV1Api(kube)
    api.fail("watch", "pods", status=503)
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, "default", timeout_seconds=1):
                pass
    assert err.value.status == 503
    await core.list_namespaced_pod("default")  # a list is not a watch: unaffected


async def test_delay_slows_only_matching_requests(api, kube):
    core = client.CoreV1Api(kube)
    api.delay("GET", "pods", 0.2, times=1)
    started = time.monotonic()
    await core.list_namespaced_pod("default")
    assert time.monotonic() - started >= 0.2
    started = time.monotonic()
    await core.list_namespaced_pod("default")
    await core.list_namespaced_config_map("default")
    assert time.monotonic() - started < 0.2


async def test_forbid_answers_403_forbidden_until_allowed(api, kube):
    core = client.CoreV1Api(kube)
    api.forbid("secrets")
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_secret("admit-tls", "admit")
    body = json.loads(err.value.body)
    assert err.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"].startswith('secrets "admit-tls" is forbidden: User "system:anonymous" cannot get')
    api.allow("secrets")
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_secret("admit-tls", "admit")
    assert err.value.status == 404


# ---------------------------------------------------------------------------------------------------- GC


async def test_gc_emulation_deletes_objects_whose_owners_do_not_exist():
    async with FakeKubeAPI(gc_orphans_after=0.02) as api, api.api_client() as kube:
        crd = client.CustomObjectsApi(kube)
        batch = client.BatchV1Api(kube)
        job = await batch.create_namespaced_job("default", client.V1Job(
            metadata=client.V1ObjectMeta(name="j"),
            spec=client.V1JobSpec(template=client.V1PodTemplateSpec(spec=client.V1PodSpec(
                restart_policy="Never", containers=[client.V1Container(name="c", image="busybox")])))))

        def owned(name, uid):
            body = podgroup(name)
            body["metadata"]["ownerReferences"] = [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": uid, "controller": True}]
            return body

        await crd.create_namespaced_custom_object(*PG, "default", "podgroups", owned("kept", job.metadata.uid))
        await crd.create_namespaced_custom_object(*PG, "default", "podgroups", owned("orphan", "no-such-uid"))
        await eventually(lambda: [o["metadata"]["name"] for o in api.objects("podgroups")] == ["kept"])
        assert api.gc_deleted[0]["name"] == "orphan"
        await batch.delete_namespaced_job("j", "default")
        await eventually(lambda: api.objects("podgroups") == [])


async def test_gc_emulation_is_off_by_default(api, kube):
    body = podgroup("g")
    body["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "gone"}]
    await client.CustomObjectsApi(kube).create_namespaced_custom_object(*PG, "default", "podgroups", body)
    await asyncio.sleep(0.05)
    assert len(api.objects("podgroups")) == 1


# ---------------------------------------------------------------------------------------------------- the rest


async def test_put_get_and_delete_object_work_on_the_store_directly_and_emit_watch_events(api, kube):
    crd = client.CustomObjectsApi(kube)
    seen = []

    async def consume():
        async with watch.Watch() as w:
            async for ev in w.stream(crd.list_cluster_custom_object, *PG, "podgroups", timeout_seconds=5):
                seen.append(ev["type"])
                if ev["type"] == "DELETED":
                    return

    task = asyncio.create_task(consume())
    await eventually(lambda: api.open_watches == 1)
    stored = api.put({**podgroup("g"), "status": {"phase": "Scheduled"}})
    assert stored["metadata"]["namespace"] == "default" and stored["metadata"]["uid"]
    again = api.put({**stored, "spec": {"minMember": 4}})
    assert again["metadata"]["uid"] == stored["metadata"]["uid"] and again["metadata"]["generation"] == 2
    assert (await crd.get_namespaced_custom_object(*PG, "default", "podgroups", "g"))["status"]["phase"] == "Scheduled"
    assert api.delete_object("scheduling.x-k8s.io/v1alpha1", "PodGroup", "default", "g")["metadata"]["name"] == "g"
    await asyncio.wait_for(task, 3)
    assert seen == ["ADDED", "MODIFIED", "DELETED"]


async def test_events_v1_accepts_micro_time_event_time(api, kube):
    ev = client.EventsV1Event(
        metadata=client.V1ObjectMeta(generate_name="admit-"), event_time="2024-05-01T12:00:00.000001Z",
        reason="PodGroupCreated", note="created", type="Normal", action="Create",
        reporting_controller="admit.dev/webhook", reporting_instance="admit-0",
        regarding=client.V1ObjectReference(kind="Job", name="j", namespace="default"))
    created = await client.EventsV1Api(kube).create_namespaced_event("default", ev)
    assert created.reason == "PodGroupCreated"
    assert len(api.objects("events", api_version="events.k8s.io/v1")) == 1


async def test_requests_log_records_method_path_query_body_and_resource(api, kube):
    await client.CoreV1Api(kube).create_namespaced_pod("ns1", pod("p1"), field_manager="admit")
    rec = api.requests[-1]
    assert (rec.method, rec.path, rec.resource, rec.namespace, rec.name, rec.verb) == (
        "POST", "/api/v1/namespaces/ns1/pods", "pods", "ns1", None, "create")
    assert rec.query == {"fieldManager": "admit"} and rec.content_type == "application/json"
    assert rec.body["metadata"]["name"] == "p1" and rec.status == 201
    assert api.requests_for("pods", "POST") == [rec] and api.requests_for("pods", "GET") == []
    api.clear_requests()
    assert api.requests == []


async def test_discovery_and_version_endpoints(api, kube):
    info = await client.VersionApi(kube).get_code()
    assert info.git_version.startswith("v1.")
    groups = await client.ApisApi(kube).get_api_versions()
    assert "scheduling.x-k8s.io" in [g.name for g in groups.groups]
    resources = await client.AppsV1Api(kube).get_api_resources()
    assert {"deployments", "deployments/scale", "statefulsets"} <= {r.name for r in resources.resources}
    core = await client.CoreV1Api(kube).get_api_resources()
    ns = next(r for r in core.resources if r.name == "namespaces")
    assert ns.namespaced is False


async def test_discovery_gives_the_short_names_kubectl_resolves_deploy_sts_po_and_pg_from(api):
    # `kubectl --server $ADMIT_FAKE_API get deploy` said `the server doesn't have a resource type "deploy"`: kubectl
    # maps a short name to its resource only through discovery's shortNames, as kube-apiserver serves them.
    async with aiohttp.ClientSession() as http:
        docs = {}
        for path in ("/api/v1", "/apis/apps/v1", "/apis/scheduling.x-k8s.io/v1alpha1", "/apis/batch/v1"):
            async with http.get(api.url + path) as r:
                assert r.status == 200
                docs[path] = {res["name"]: res for res in (await r.json())["resources"]}
    assert docs["/apis/apps/v1"]["deployments"]["shortNames"] == ["deploy"]
    assert docs["/apis/apps/v1"]["statefulsets"]["shortNames"] == ["sts"]
    assert docs["/api/v1"]["pods"]["shortNames"] == ["po"]
    assert docs["/apis/scheduling.x-k8s.io/v1alpha1"]["podgroups"]["shortNames"] == ["pg", "pgs"]
    assert "shortNames" not in docs["/apis/batch/v1"]["jobs"]  # Jobs have none (omitempty, as kube-apiserver)
    assert "shortNames" not in docs["/apis/apps/v1"]["deployments/scale"]


async def test_registered_resources_are_served(api, kube):
    api.register("example.com", "v1", "Widget", "widgets")
    crd = client.CustomObjectsApi(kube)
    await crd.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", {"apiVersion": "example.com/v1", "kind": "Widget",
                                                    "metadata": {"name": "w"}})
    assert api.get("example.com/v1", "widgets", "default", "w")["kind"] == "Widget"
    core = client.CoreV1Api(kube)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team-a")))
    assert (await core.read_namespace("team-a")).metadata.name == "team-a"


async def test_stats_endpoint_counts_requests_by_method_and_resource_and_resets(api, kube):
    core = client.CoreV1Api(kube)
    await core.create_namespaced_pod("default", pod("p1"))
    await core.read_namespaced_pod("p1", "default")
    await core.read_namespaced_pod("p1", "default")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api.url}/_fake/stats") as r:
            stats = await r.json()
        assert stats["total"] == 3 and stats["counts"] == {"GET pods": 2, "POST pods": 1}
        assert {"method": "GET", "resource": "pods", "count": 2} in stats["by"]
        async with http.post(f"{api.url}/_fake/reset-stats") as r:
            assert r.status == 200
        async with http.get(f"{api.url}/_fake/stats") as r:
            assert (await r.json())["total"] == 0


def test_module_runs_standalone_and_stops_on_sigterm():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with subprocess.Popen([sys.executable, "-m", "admit.testing.fake_kube", "--port", "0"],
                          stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT) as proc:
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")

            async def probe():
                async with aiohttp.ClientSession() as http:
                    async with http.get(f"{url}/api/v1/namespaces/default/pods") as r:
                        assert (await r.json())["kind"] == "PodList"
                    async with http.get(f"{url}/_fake/stats") as r:
                        return await r.json()

            assert asyncio.run(probe())["counts"] == {"GET pods": 1}
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
