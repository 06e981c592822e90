"""Fixtures for the operator tests: the fake kube-apiserver calling admit's webhooks as the chart registers them, the
Kubernetes controllers (Deployment, Job, StatefulSet) emulated, and an operator emulation installed on top
(``tests/emulations``). Everything a test checks was made by the emulations through admission."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from kubernetes_asyncio import client as k8s

from admit.config import Config
from admit.testing.fake_kube import FakeKubeAPI
from tests.webhook_stack import fake_cluster

PG = ("scheduling.x-k8s.io/v1alpha1", "podgroups")


class Cluster:
    """``fake`` (the FakeKubeAPI), ``user`` (a user's ApiClient), ``operator`` (the installed emulation)."""

    def __init__(self, fake: FakeKubeAPI, user: Any, operator: Any) -> None:
        self.fake = fake
        self.user = user
        self.operator = operator

    async def create(self, obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        """Create a custom object as ``kubectl create`` does, then wait for every controller to settle."""
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = self.fake.resource_type(obj["apiVersion"], obj["kind"]).plural
        created = await k8s.CustomObjectsApi(self.user).create_namespaced_custom_object(
            group, version, namespace, plural, obj)
        await self.fake.settle()
        return created

    async def replace(self, obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = self.fake.resource_type(obj["apiVersion"], obj["kind"]).plural
        replaced = await k8s.CustomObjectsApi(self.user).replace_namespaced_custom_object(
            group, version, namespace, plural, obj["metadata"]["name"], obj)
        await self.fake.settle()
        return replaced

    def pods(self, namespace: str = "default") -> list[dict[str, Any]]:
        return sorted(self.fake.objects("pods", namespace), key=lambda p: p["metadata"]["name"])

    def pod_groups(self, namespace: str = "default") -> dict[str, dict[str, Any]]:
        return {pg["metadata"]["name"]: pg for pg in self.fake.objects("podgroups", namespace, PG[0])}

    def events(self, reason: str | None = None) -> list[str]:
        return [e["message"] for e in self.fake.objects("events", "default", "v1")
                if reason is None or e.get("reason") == reason]


@contextlib.asynccontextmanager
async def operator_cluster(aiohttp_server: Any, install: Any, *, config: Config | None = None,
                           **options: Any) -> AsyncIterator[Cluster]:
    """A fake cluster with ``install(fake, **options)`` run on it (the emulation's ``install``)."""
    async with fake_cluster(aiohttp_server, config or Config(), deployment_controller=True, job_controller=True,
                            statefulset_controller=True) as (fake, user):
        yield Cluster(fake, user, install(fake, **options))
