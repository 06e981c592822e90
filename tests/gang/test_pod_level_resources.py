"""PodGroup ``minResources`` follows kube-scheduler's request arithmetic.

``PodRequests`` in kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go``: containers and sidecar
init containers summed, regular init containers as a floor, pod-level ``spec.resources`` (Kubernetes 1.34+) replacing
that aggregate for cpu, memory and hugepages, then ``spec.overhead`` added; pod-level requests defaulted from
pod-level limits as ``defaultPodRequests`` in ``pkg/apis/core/v1/defaults.go`` does for created pods. Over HTTP with
the controller running, on Job/Deployment templates shaped as users write them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from admit.gang.resources import pod_requests
from tests.helpers import GC_ORPHANS_AFTER, admission_review, apply_answer, eventually
from tests.webhook_stack import webhook_with_controller

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)

GI = 2**30
MI = 2**20


def job(name: str, pod_spec: dict[str, Any], parallelism: int = 3) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "annotations": {"gang.admit.dev/min-member": "auto"}},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"restartPolicy": "Never", **pod_spec}}},
    }


def container(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    out = {"name": name, "image": "ghcr.io/example/train:2.1", **extra}
    if resources:
        out["resources"] = resources
    return out


async def min_resources(stack: Any, obj: dict[str, Any]) -> dict[str, str] | None:
    """minResources of the PodGroup admission creates for ``obj`` (mutate, validate, then stored and adopted: the
    controller resolves the stored object the same way and must not change it)."""
    mutation = await stack.post("/mutate", admission_review(obj))
    mutated = apply_answer(obj, {"response": mutation})
    assert (await stack.post("/validate", admission_review(mutated)))["allowed"]
    name = obj["metadata"]["name"]
    at_admission = stack.pod_group("ml", name)["spec"].get("minResources")
    await stack.kube.request("POST", "/apis/batch/v1/namespaces/ml/jobs", body=mutated)
    await eventually(lambda: (stack.pod_group("ml", name) or {}).get("metadata", {}).get("ownerReferences"))
    assert stack.pod_group("ml", name)["spec"].get("minResources") == at_admission
    return at_admission


async def test_pod_level_requests_make_the_gang_of_three_12_cpus_and_24gi(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        pod_level = {"resources": {"requests": {"cpu": "4", "memory": "8Gi"}}}
        bare = job("pod-level", {**pod_level, "containers": [container("train"), container("logger")]})
        assert await min_resources(stack, bare) == {"cpu": "12", "memory": "24Gi"}
        # Small container requests too: the pod-level values still win (not 3 x (1500m, 256Mi)).
        small = job("pod-level-small", {**pod_level, "containers": [
            container("train", {"cpu": "1", "memory": "128Mi"}), container("logger", {"cpu": "500m",
                                                                                     "memory": "128Mi"})]})
        assert await min_resources(stack, small) == {"cpu": "12", "memory": "24Gi"}


async def test_pod_level_limits_alone_default_the_requests_as_kube_apiserver_does(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        # No container requests: the pod-level requests default to the pod-level limits.
        limits_only = job("limits-only", {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                                          "containers": [container("train")]})
        assert await min_resources(stack, limits_only) == {"cpu": "6", "memory": "12Gi"}
        # A container requests cpu: the pod-level cpu request defaults to the containers' aggregate; memory, which
        # no container requests, to the pod-level limit.
        mixed = job("mixed", {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                              "containers": [container("train", {"cpu": "500m"})]})
        assert await min_resources(stack, mixed) == {"cpu": "1500m", "memory": "12Gi"}


async def test_sidecars_overhead_and_extended_resources_around_pod_level_resources(aiohttp_client, fake):
    spec = {
        "resources": {"requests": {"cpu": "3", "memory": "6Gi"}},
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "initContainers": [
            container("fetch", {"cpu": "2", "memory": "512Mi"}),  # a regular init container: part of the aggregate
            container("proxy", {"cpu": "100m", "memory": "64Mi"}, restartPolicy="Always"),
        ],
        "containers": [container("train", {"cpu": "1", "memory": "1Gi"}, {"nvidia.com/gpu": "1"})],
    }
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        got = await min_resources(stack, job("sidecar", spec, parallelism=2))
    # cpu and memory: pod-level 3 / 6Gi replace the aggregate (2 / 1088Mi: kube-apiserver requires it to be no
    # larger, KEP-2837 validation), then the overhead is added; the GPU (not a pod-level
    # resource) comes from the containers, its limit standing for the request.
    assert got == {"cpu": "6500m", "memory": "12528Mi", "nvidia.com/gpu": "2"}


def test_without_pod_level_resources_sidecars_sum_and_init_containers_are_a_floor():
    spec = {
        "initContainers": [
            container("migrate", {"cpu": "2", "memory": "256Mi"}),
            container("proxy", {"cpu": "100m", "memory": "64Mi"}, restartPolicy="Always"),
            container("warmup", {"cpu": "500m", "memory": "3Gi"}),  # runs next to the proxy sidecar
        ],
        "containers": [container("app", {"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "250m"},
    }
    # containers + sidecar = 1100m / 1088Mi; init peaks: migrate 2 / 256Mi, warmup + proxy 600m / 3136Mi.
    assert pod_requests(spec) == {"cpu": Fraction(2) + Fraction(1, 4), "memory": 3136 * MI}


def test_hugepages_are_a_pod_level_resource_and_other_resources_are_not():
    spec = {"resources": {"requests": {"hugepages-2Mi": "1Gi", "ephemeral-storage": "50Gi"}},
            "containers": [container("c", {"cpu": "1", "hugepages-2Mi": "256Mi", "ephemeral-storage": "1Gi"})]}
    assert pod_requests(spec) == {"cpu": 1, "hugepages-2Mi": GI, "ephemeral-storage": GI}
