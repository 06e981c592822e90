"""Conformance of the built-in kinds' later writes (tests/emulations/builtin.py): kube-controller-manager's
HorizontalPodAutoscaler scaling a gang Deployment or StatefulSet through ``/scale``, with the Deployment, ReplicaSet
and StatefulSet controllers making the pods of each new count, through admit's webhooks as the chart registers
them. What is checked is what a user sees: the HPA's writes allowed (no ``FailedRescale``), the pods in one gang that
can form, and a refusal, where there is one, at the user's own write with the fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from admit.config import Config
from tests.emulations import builtin
from tests.operator_stack import events_about, gang_problems, operator_cluster

CONFIG = Config()
NS = "web"


def statefulset(min_member: str, replicas: int = 3) -> dict[str, Any]:
    """A ``Parallel`` StatefulSet as Helm charts write one."""
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": NS, "annotations": {"gang.admit.dev/min-member": min_member}},
            "spec": {"replicas": replicas, "serviceName": "db", "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [
                         {"name": "db", "image": "ghcr.io/acme/db:1.0", "resources": {"requests": {"cpu": "1"}}}]}}}}


def autoscaler(kind: str, name: str, low: int, high: int) -> dict[str, Any]:
    """``kubectl autoscale <kind> <name> --min=<low> --max=<high> --cpu-percent=80``."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                     "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 80}}}]}}


async def create(user: Any, obj: dict[str, Any]) -> None:
    group, _, version = obj["apiVersion"].rpartition("/")
    await k8s.CustomObjectsApi(user).create_namespaced_custom_object(group, version, NS, obj["kind"].lower() + "s",
                                                                     copy.deepcopy(obj))


async def test_an_hpa_applied_before_its_gang_statefulset_is_refused_at_the_statefulsets_create_not_at_the_scale_down(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, builtin.install) as (fake, hpas, user):
        await create(user, autoscaler("StatefulSet", "db", 1, 4))  # Helm's order: the HPA first
        with pytest.raises(ApiException) as refused:
            await create(user, statefulset("3"))
        assert refused.value.status == 403
        assert "Set spec.minReplicas of HorizontalPodAutoscaler web/db to at least 3" in refused.value.body
        await create(user, statefulset("auto"))  # the fix the message offers: auto follows each scale
        await fake.settle()
        await hpas.idle()
        await hpas.cycle(NS, "db", 0)  # the metrics far below target: down to minReplicas
        await fake.settle()
        await hpas.idle()
        pods = [p for p in fake.objects("pods", NS)]
        assert [p["metadata"]["name"] for p in pods] == ["db-0"]
        assert gang_problems(fake, NS, pods, CONFIG) == [] and hpas.refused() == []
        assert events_about(fake, NS, "HorizontalPodAutoscaler", "db") == []


async def test_the_hpa_scales_a_gang_deployment_within_its_bounds_and_every_new_pod_joins_the_gang(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, builtin.install) as (fake, hpas, user):
        deployment = statefulset("2", replicas=2)
        deployment["kind"] = "Deployment"
        deployment["metadata"]["name"] = "web"
        deployment["spec"] = {k: v for k, v in deployment["spec"].items() if k in ("replicas", "selector", "template")}
        await create(user, deployment)
        await create(user, autoscaler("Deployment", "web", 2, 6))
        for proposed, count in ((6, 4), (6, 6), (3, 3), (0, 2)):  # the scale-up limit: max(2 x current, 4)
            await hpas.cycle(NS, "web", proposed)
            await fake.settle()
            await hpas.idle()
            pods = fake.objects("pods", NS)
            assert len(pods) == count and gang_problems(fake, NS, pods, CONFIG) == [], (proposed, pods)
        assert hpas.refused() == []


def queued_job(min_member: str, **annotations: str) -> dict[str, Any]:
    """An Indexed Job of 4 pods queued by Kueue (its webhook creates it suspended)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                         "annotations": {"gang.admit.dev/min-member": min_member, **annotations}},
            "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed", "suspend": True,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "train", "image": "ghcr.io/acme/train:1.0",
                          "resources": {"requests": {"cpu": "1"}}}]}}}}


async def test_a_queued_job_whose_partial_admission_its_min_member_cannot_survive_is_refused_at_its_create(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, builtin.install) as (fake, kcm, user):
        with pytest.raises(ApiException) as refused:
            await create(user, queued_job("4", **{"kueue.x-k8s.io/job-min-parallelism": "2"}))
        assert refused.value.status == 403
        assert "Set kueue.x-k8s.io/job-min-parallelism to at least 4, or gang.admit.dev/min-member to auto" in \
            refused.value.body
        job = queued_job("auto", **{"kueue.x-k8s.io/job-min-parallelism": "2"})  # the fix: auto follows the count
        await create(user, job)
        await builtin.kueue_starts(kcm, {"kind": "List", "items": [job]})  # Kueue admits 2 of the 4 pods
        pods = fake.objects("pods", NS)
        assert len(pods) == 2 and gang_problems(fake, NS, pods, CONFIG) == [] and kcm.refused() == []


async def test_kueue_evicting_and_readmitting_a_gang_job_keeps_admits_label_and_scheduler_and_the_gang_forms_again(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, builtin.install) as (fake, kcm, user):
        job = queued_job("4")
        await create(user, job)
        applied = {"kind": "List", "items": [job]}
        await builtin.kueue_starts(kcm, applied)
        await builtin.kueue_evicts_and_readmits(kcm, applied)
        stored = fake.get("batch/v1", "jobs", NS, "train")
        template = stored["spec"]["template"]
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
        assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"  # Kueue's, merged on the start
        assert template["spec"]["schedulerName"] == CONFIG.scheduler_name and stored["spec"]["suspend"] is False
        pods = fake.objects("pods", NS)
        assert len(pods) == 4 and gang_problems(fake, NS, pods, CONFIG) == [] and kcm.refused() == []


async def test_a_gitops_re_apply_of_a_gang_statefulset_and_its_hpa_changes_nothing_and_is_allowed(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, builtin.install) as (fake, kcm, user):
        applied = {"kind": "List", "items": [statefulset("3"), autoscaler("StatefulSet", "db", 3, 5)]}
        for item in applied["items"]:
            await create(user, item)
        await fake.settle()
        await kcm.idle()
        before = fake.get("apps/v1", "statefulsets", NS, "db")
        await builtin.gitops_reapply(kcm, applied)  # Argo CD ServerSideApply=true: the same manifests again
        after = fake.get("apps/v1", "statefulsets", NS, "db")
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert after["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "db"
        assert kcm.refused() == []
