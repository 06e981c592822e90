"""The webhook over HTTP with the controller running, against the fake Kubernetes API: what ``admit serve``
wires together (``Admission`` with the controller's caches, the controller leading), for tests of whole field
cases. Timings scaled down as in ``tests/controller/test_controller.py``."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from admit.webhook.admission import Admission
from admit.config import Config
from admit.controller.manager import ControllerSettings, Manager
from admit.kube.client import KubeAPI
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI
from tests.emulations.kcm import DeploymentController, FakeControlPlane, JobController, running
from admit.kube.watchcache import KubeRaw
from tests.helpers import FAST_CONTROLLER, eventually

PG_API = "scheduling.x-k8s.io/v1alpha1"
FAST = FAST_CONTROLLER


class Stack:
    """``client``: aiohttp test client of the webhook app; ``controller``; ``fake``; ``kube``: a REST client for the
    test itself (what kubectl or another controller would do)."""

    def __init__(self, client: Any, controller: Manager, fake: FakeKubeAPI, kube: KubeRaw) -> None:
        self.client = client
        self.controller = controller
        self.fake = fake
        self.kube = kube

    async def post(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        """POST ``review`` to ``path``; returns the answer's ``response`` (checks HTTP 200 and the echoed uid)."""
        resp = await self.client.post(path, json=review)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["response"]["uid"] == review["request"]["uid"]
        return body["response"]

    def pod_group(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.fake.get(PG_API, "podgroups", namespace, name)

    def pod_group_posts(self) -> list[Any]:
        return self.fake.requests_for("podgroups", "POST")


@contextlib.asynccontextmanager
async def webhook_with_controller(aiohttp_client: Any, fake: FakeKubeAPI, **config: Any) -> AsyncIterator[Stack]:
    """Start the controller (leading, caches synced) and the webhook app on it; stop both on exit. Admission reads
    the controller's caches through its ``ControllerView`` as ``admit serve`` wires it (also the workload cache a
    ``*/scale`` or an HPA is checked against)."""
    cfg = Config(**config)
    controller = Manager(fake.api_client(), cfg, ControllerSettings(identity="a", lease_namespace="admit", **FAST),
                         own_client=True)
    await controller.start()
    async with fake.api_client() as admission_client, fake.api_client() as test_client:
        try:
            await eventually(lambda: controller.working)
            app = create_app(Admission(cfg, KubeAPI(admission_client), controller.cache))
            client = await aiohttp_client(app)
            yield Stack(client, controller, fake, KubeRaw(test_client, timeout=2.0))
        finally:
            await controller.stop()


@contextlib.asynccontextmanager
async def fake_cluster(aiohttp_server: Any, config: Config, *, chart_values: dict[str, Any] | None = None,
                       **fake_options: Any) -> AsyncIterator[tuple[FakeControlPlane, Any]]:
    """A fake kube-apiserver whose writes go through admit's webhooks (admit's own app on loopback, with the fake as
    its Kubernetes API) registered as the chart renders them for ``chart_values`` (tests/support/chart.py), with
    ``fake_options`` for ``FakeControlPlane`` (e.g. ``deployment_controller=True``); yields ``(fake, a user's
    ApiClient)``. More webhooks (an operator's) can be added to ``fake.admission``."""
    from tests.support.chart import admission_chain

    fake = FakeControlPlane(**fake_options)
    await fake.start()
    api_client = fake.api_client()
    try:
        server = await aiohttp_server(create_app(Admission(config, KubeAPI(api_client))))
        fake.admission = admission_chain(str(server.make_url("")), values=chart_values)
        async with fake.api_client() as user:
            yield fake, user
    finally:
        await fake.stop()
        await api_client.close()


@contextlib.asynccontextmanager
async def cluster_with_controller(aiohttp_client: Any, fake: FakeKubeAPI, *, chart_values: dict[str, Any] | None = None,
                                  **config: Any) -> AsyncIterator[Stack]:
    """:func:`webhook_with_controller`, and the fake kube-apiserver sends its writes through that webhook as the chart
    registers it for ``chart_values`` (tests/support/chart.py: rules, namespaceSelector, matchConditions): what a
    user, a GitOps tool or a controller writes is admitted by admit while admit's controller runs, as in a cluster.
    ``stack.kube`` writes as a user would."""
    from tests.support.chart import admission_chain

    async with webhook_with_controller(aiohttp_client, fake, **config) as stack:
        fake.admission = admission_chain(str(stack.client.server.make_url("")), values=chart_values)
        # A write now goes through the chart's webhooks: the first of a process compiles their CEL matchConditions
        # (cel-python, seconds on a loaded machine), so a user's write waits as long as kubectl would.
        stack.kube.timeout = 30.0
        try:
            yield stack
        finally:
            for emulated in (running(fake, JobController), running(fake, DeploymentController)):
                if emulated is not None:  # no sync may call the webhook once it is gone
                    emulated.stop()
            await fake.admission.close()
            fake.admission = None
