"""The guarantees every gang backend's controller gives, run over Coscheduling, the Workload API and the test Volcano
backend (``tests/backends/volcano.py``), each kept by the one ``gangs.GangController`` class as ``admit serve``
starts it (``manager.Manager``, one gang controller per enabled backend): a write that something keeps undoing backs off, a
write for a workload the cache still holds is made only once the workload read live agrees, and an annotation-only
change admission wrote ahead of the stored workload is never written back (``guards.WriteGuards``,
``common.ahead_of``). On the fake API with its garbage-collector emulation; timings scaled down as in
``test_controller.py``.
"""

from __future__ import annotations

import asyncio
import copy
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import jsonpatch
import pytest

from admit.backends.registry import backend_of
from admit.config import Config
from admit.controller.manager import ControllerSettings, Manager
from admit.kube.client import KubeAPI
from admit.kube.watchcache import KubeRaw, Resource
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import AdmissionRequest
from tests.backends import volcano
from tests.helpers import FAST_CONTROLLER, eventually, requests_caused

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
BACKENDS = ["coscheduling", "workload-api", volcano.NAME]


class Stack:
    """The fake API, admit's controllers as ``admit serve`` runs them for ``config``, and the admission path."""

    def __init__(self, fake: FakeKubeAPI, kube: KubeRaw, config: Config, main: Manager) -> None:
        self.fake, self.kube, self.config, self.main = fake, kube, config, main
        self.gangs = main.gangs[config.gang_backend]
        self.types = backend_of(config.gang_backend).object_types(config)
        self.admission = Admission(config, KubeAPI(kube.api_client, config), main.cache)

    def objects(self) -> list[dict[str, Any] | None]:
        """The gang's objects ``team/web``, in creation order (``None`` for a missing one)."""
        return [self.fake.get(f"{t.group}/{t.version}", t.plural, "team", "web") for t in self.types]

    def owned_by(self, uid: str) -> bool:
        return all(o is not None and [r.get("uid") for r in o["metadata"].get("ownerReferences") or []] == [uid]
                   for o in self.objects())

    def creates(self) -> int:
        return sum(len(self.fake.requests_for(t.plural, "create")) for t in self.types)

    def mutated(self) -> dict[str, Any]:
        """A gang Deployment of 3 as kube-apiserver stores it after admit's mutating webhook."""
        user = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "team", "annotations": {"gang.admit.dev/min-member": "3"}},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
        return jsonpatch.apply_patch(user, self.admission.mutate(request(user, "CREATE")).patch)


def request(obj: dict[str, Any], operation: str) -> AdmissionRequest:
    return AdmissionRequest(uid="req-1", api_version="admission.k8s.io/v1", group="apps", version="v1",
                            kind="Deployment", resource_group="apps", resource="deployments", sub_resource="",
                            operation=operation, namespace="team", name=obj["metadata"]["name"], object=obj,
                            old_object=None, dry_run=False)


@asynccontextmanager
async def stack(name: str, **settings: Any) -> AsyncIterator[Stack]:
    if name == volcano.NAME:
        volcano.install()
    config = Config(gang_backend=name, workload_api_version="v1beta1")
    try:
        async with FakeKubeAPI(gc_orphans_after=0.025, workload_api="v1beta1") as fake:
            if name == volcano.NAME:
                fake.register(volcano.GROUP, volcano.VERSION, "PodGroup", volcano.PLURAL)
            main = Manager(fake.api_client(), config, ControllerSettings(
                identity="a", lease_namespace="admit", **{**FAST_CONTROLLER, **settings}), own_client=True)
            await main.start()
            await eventually(lambda: main.working)
            async with fake.api_client() as api_client:
                yield Stack(fake, KubeRaw(api_client, timeout=2.0), config, main)
            await main.stop()
    finally:
        if name == volcano.NAME:
            volcano.uninstall()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_write_another_writer_keeps_undoing_is_repeated_with_back_off(backend):
    async with stack(backend, retry_backoff=(0.2, 0.8)) as s:
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=s.mutated())
        await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
        last = s.types[-1]
        s.fake.clear_requests()
        end = asyncio.get_running_loop().time() + 2.0
        while asyncio.get_running_loop().time() < end:  # another client deletes it again and again
            if s.objects()[-1] is not None:
                s.fake.delete_object(f"{last.group}/{last.version}", last.plural, "team", "web")
            await asyncio.sleep(0.005)
        # Without back-off: one create per deletion, every 10-30 ms. With it: the first two at once, then after
        # 0.2, 0.4, 0.8, 0.8 ... seconds.
        assert 3 <= s.creates() <= 7, s.creates()
        assert s.gangs.guards.repeats[("team", "web")][1] >= 3


@pytest.mark.parametrize("backend", BACKENDS)
async def test_no_object_is_created_for_a_workload_the_cache_holds_but_the_server_deleted(backend):
    async with stack(backend) as s:
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=s.mutated())
        await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
        await eventually(lambda: s.fake.hold_watches("deployments") > 0)
        s.fake.clear_requests()
        s.fake.delete_object("apps/v1", "deployments", "team", "web")  # the GC deletes its objects; the watch lags
        await eventually(lambda: s.objects() == [None] * len(s.types))
        await asyncio.sleep(0.6)
        assert s.creates() == 0  # the live read found the workload gone
        assert s.gangs.guards.stale_skips >= 1
        s.fake.release_watches("deployments")
        await asyncio.sleep(0.3)
        assert s.objects() == [None] * len(s.types) and s.creates() == 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_annotation_only_change_admission_wrote_ahead_of_the_stored_workload_is_never_undone(backend):
    async with stack(backend) as s:
        mutated = s.mutated()
        assert (await s.admission.validate(request(mutated, "CREATE"))).allowed
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=mutated)
        await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
        update = copy.deepcopy(stored)
        update["metadata"]["annotations"]["gang.admit.dev/min-member"] = "2"
        # The generation kube-apiserver gives a StatefulSet's or a Job's annotation change: the same. The
        # resourceVersion: that of the stored version the update replaces.
        s.fake.clear_requests()
        assert (await s.admission.validate(request(update, "UPDATE"))).allowed
        sizes = [backend_of(s.config.gang_backend).size_of(o) for o in s.objects()]
        await asyncio.sleep(FAST_CONTROLLER["orphan_grace_period"] / 2)
        assert [backend_of(s.config.gang_backend).size_of(o) for o in s.objects()] == sizes
        assert s.fake.requests_for(s.types[-1].plural, "patch")
        patches = sum(len(s.fake.requests_for(t.plural, "patch")) for t in s.types)
        await s.kube.request("PUT", DEPLOYMENTS.path("team", "web"), body=update)
        await asyncio.sleep(0.4)
        assert [backend_of(s.config.gang_backend).size_of(o) for o in s.objects()] == sizes
        assert sum(len(s.fake.requests_for(t.plural, "patch")) for t in s.types) == patches  # none of the controller


async def test_a_second_backend_whose_object_kind_is_also_pod_group_does_not_hide_the_workload_api_cache():
    """Volcano's PodGroup (``scheduling.volcano.sh``) and the Workload API's (``scheduling.k8s.io``) share a kind:
    the admission cache is read by API group and kind, so admitting a workload-api gang whose objects are cached,
    ours and in step still costs no API call with both backends enabled (the volcano controller starts first)."""
    volcano.install()
    config = Config(gang_backend="workload-api", workload_api_version="v1beta1",
                    extra_gang_backends=frozenset({volcano.NAME}))
    try:
        async with FakeKubeAPI(gc_orphans_after=0.025, workload_api="v1beta1") as fake:
            fake.register(volcano.GROUP, volcano.VERSION, "PodGroup", volcano.PLURAL)
            main = Manager(fake.api_client(), config, ControllerSettings(
                identity="a", lease_namespace="admit", **FAST_CONTROLLER), own_client=True)
            await main.start()
            assert list(main.gangs) == [volcano.NAME, "workload-api"]
            await eventually(lambda: main.working)
            async with fake.api_client() as api_client:
                admission = Admission(config, KubeAPI(api_client, config), main.cache)
                s = Stack(fake, KubeRaw(api_client, timeout=2.0), config, main)
                mutated = s.mutated()
                assert (await admission.validate(request(mutated, "CREATE"))).allowed
                stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=mutated)
                await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
                await eventually(lambda: all((s.gangs.get(t.kind, "team", "web") or {"metadata": {}})["metadata"]
                                             .get("ownerReferences") for t in s.types))
                fake.clear_requests()
                decision = await admission.validate(request(stored, "UPDATE"))
                assert decision.allowed and [o["kind"] for o in decision.pod_groups] == ["Workload", "PodGroup"]
                assert requests_caused(fake, "workloads", "podgroups") == []
            await main.stop()
    finally:
        volcano.uninstall()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_gang_goes_from_admission_to_adoption_to_garbage_collection(backend):
    async with stack(backend) as s:
        mutated = s.mutated()
        assert (await s.admission.validate(request(mutated, "CREATE"))).allowed
        assert all(o is not None and "ownerReferences" not in o["metadata"] for o in s.objects())  # the GC race
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=mutated)
        adopted_in = await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
        assert adopted_in < 1.0
        await asyncio.sleep(0.1)  # four times the emulated garbage collector's delay: adopted, so they stay
        assert s.fake.gc_deleted == []
        s.fake.delete_object("apps/v1", "deployments", "team", "web")
        await eventually(lambda: s.objects() == [None] * len(s.types))
        assert sorted(g["kind"] for g in s.fake.gc_deleted) == sorted(t.kind for t in s.types)
        await asyncio.sleep(FAST_CONTROLLER["orphan_grace_period"] + 0.2)
        assert s.objects() == [None] * len(s.types)  # not brought back


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_object_deleted_by_hand_is_recreated_adopted_while_its_workload_lives(backend):
    async with stack(backend) as s:
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=s.mutated())
        await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
        last = s.types[-1]
        first_uid = s.objects()[-1]["metadata"]["uid"]
        s.fake.delete_object(f"{last.group}/{last.version}", last.plural, "team", "web")
        await eventually(lambda: s.objects()[-1] is not None and s.objects()[-1]["metadata"]["uid"] != first_uid)
        assert s.owned_by(stored["metadata"]["uid"])  # created with its owner: the workload is stored, no race


@pytest.mark.parametrize("backend", BACKENDS)
async def test_objects_no_stored_workload_claims_are_deleted_after_the_grace_period_and_not_before(backend):
    async with stack(backend) as s:
        # Admitted, then refused by a later admission step: the workload is never stored.
        assert (await s.admission.validate(request(s.mutated(), "CREATE"))).allowed
        path = [(f"{t.group}/{t.version}", t.plural) for t in s.types]
        assert all(s.fake.get(api, plural, "team", "web") is not None for api, plural in path)
        await asyncio.sleep(FAST_CONTROLLER["orphan_grace_period"] * 0.8)
        assert all(s.fake.get(api, plural, "team", "web") is not None for api, plural in path)
        await eventually(lambda: all(s.fake.get(api, plural, "team", "web") is None for api, plural in path),
                         timeout=FAST_CONTROLLER["orphan_grace_period"] * 4)
