"""The fake Kubernetes API's Workload API (scheduling.k8s.io v1alpha2 / v1beta1): served only when asked, field
shapes of the Kubernetes types enforced, and the immutability the 1.36.2 kube-apiserver showed."""

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from admit.testing.fake_kube import FakeKubeAPI

V1ALPHA2_PG = {"podGroupTemplateRef": {"workload": {"workloadName": "wl1", "podGroupTemplateName": "workers"}},
               "schedulingPolicy": {"gang": {"minCount": 3}}}
V1BETA1_PG = {"workloadRef": {"workloadName": "wl1", "templateName": "workers"},
              "schedulingPolicy": {"gang": {"minCount": 3}}}
WORKLOAD = {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}]}


def body(version, kind, spec, name="wl1"):
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": kind,
            "metadata": {"name": name, "namespace": "gang"}, "spec": spec}


async def test_a_default_fake_does_not_serve_the_workload_api_like_a_cluster_without_the_gate():
    async with FakeKubeAPI() as fake, fake.api_client() as api_client:
        with pytest.raises(ApiException) as e:
            await client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                "scheduling.k8s.io", "v1alpha2", "gang", "workloads", body("v1alpha2", "Workload", WORKLOAD))
        assert e.value.status == 404


@pytest.mark.parametrize("version,pg", [("v1alpha2", V1ALPHA2_PG), ("v1beta1", V1BETA1_PG)])
async def test_the_example_objects_are_accepted_and_the_pod_group_gets_its_default_disruption_mode(version, pg):
    async with FakeKubeAPI(workload_api=version) as fake, fake.api_client() as api_client:
        api = client.CustomObjectsApi(api_client)
        await api.create_namespaced_custom_object("scheduling.k8s.io", version, "gang", "workloads",
                                                  body(version, "Workload", WORKLOAD))
        stored = await api.create_namespaced_custom_object("scheduling.k8s.io", version, "gang", "podgroups",
                                                           body(version, "PodGroup", pg))
        assert stored["spec"]["disruptionMode"] == ("Pod" if version == "v1alpha2" else {"single": {}})


@pytest.mark.parametrize("version,pg", [("v1alpha2", V1BETA1_PG), ("v1beta1", V1ALPHA2_PG)])
async def test_a_pod_group_with_the_other_versions_reference_field_is_refused(version, pg):
    async with FakeKubeAPI(workload_api=version) as fake, fake.api_client() as api_client:
        with pytest.raises(ApiException) as e:
            await client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                "scheduling.k8s.io", version, "gang", "podgroups", body(version, "PodGroup", pg))
        assert e.value.status == 422 and "unknown field" in e.value.body


async def test_a_gang_without_a_positive_min_count_is_refused():
    async with FakeKubeAPI(workload_api="v1alpha2") as fake, fake.api_client() as api_client:
        bad = {"podGroupTemplates": [{"name": "w", "schedulingPolicy": {"gang": {"minCount": 0}}}]}
        with pytest.raises(ApiException) as e:
            await client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                "scheduling.k8s.io", "v1alpha2", "gang", "workloads", body("v1alpha2", "Workload", bad))
        assert e.value.status == 422 and "minCount" in e.value.body


@pytest.mark.parametrize("version,refused", [("v1alpha2", True), ("v1beta1", False)])
async def test_min_count_is_immutable_in_v1alpha2_and_mutable_in_v1beta1(version, refused):
    pg = V1ALPHA2_PG if version == "v1alpha2" else V1BETA1_PG
    ops = [{"op": "replace", "path": "/spec/schedulingPolicy/gang/minCount", "value": 4}]
    async with FakeKubeAPI(workload_api=version) as fake, fake.api_client() as api_client:
        api = client.CustomObjectsApi(api_client)
        await api.create_namespaced_custom_object("scheduling.k8s.io", version, "gang", "podgroups",
                                                  body(version, "PodGroup", pg))
        call = api.patch_namespaced_custom_object("scheduling.k8s.io", version, "gang", "podgroups", "wl1", ops,
                                                  _content_type="application/json-patch+json")
        if refused:
            with pytest.raises(ApiException) as e:
                await call
            assert e.value.status == 422 and "field is immutable" in e.value.body
        else:
            assert (await call)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
