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
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import jsonpatch
import pytest

from admit.backends.gangobjects import decide_objects
from admit.backends.registry import backend_of
from admit.config import Config
from admit.controller.claims import claim_of, owner_reference
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
GRACE = FAST_CONTROLLER["orphan_grace_period"]
#: The decision's configurations: each backend, the Workload API in both versions it speaks.
DECIDING = {"coscheduling": Config(), "workload-api-v1alpha2": Config(gang_backend="workload-api",
                                                                      workload_api_version="v1alpha2"),
            "workload-api-v1beta1": Config(gang_backend="workload-api", workload_api_version="v1beta1"),
            volcano.NAME: Config(gang_backend=volcano.NAME)}


# ======================================================================================================================
# Pure: the one decision (backends/gangobjects.py decide_objects) over each backend's objects
# ======================================================================================================================


@pytest.fixture(params=list(DECIDING))
def deciding(request):
    """``(config, backend)`` of one backend (the Volcano test backend registered while the test runs)."""
    config = DECIDING[request.param]
    if config.gang_backend == volcano.NAME:
        volcano.install()
    yield config, backend_of(config.gang_backend)
    if config.gang_backend == volcano.NAME:
        volcano.uninstall()


def stored_deployment(replicas: int = 3, uid: str = "uid-1") -> dict[str, Any]:
    """A gang Deployment as kube-apiserver stores it (the webhook's managed label; minMember follows replicas)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team", "uid": uid, "resourceVersion": "7", "generation": 1,
                         "creationTimestamp": "2024-05-01T10:00:00Z", "labels": {"gang.admit.dev/managed": "true"},
                         "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox",
                                                           "resources": {"requests": {"cpu": "1"}}}]}}}}


def made(config: Config, owner: str = "apps/Deployment/web", **meta: Any) -> dict[str, dict[str, Any]]:
    """The gang's objects as admission made them for a Deployment of 3 (the backend's ``desired_objects``), stored:
    ``{kind: object}``, each with a uid and resourceVersion ``"5"``, owned by ``owner`` (annotation)."""
    plan = claim_of(stored_deployment(), DEPLOYMENTS, config).plan
    objects = {}
    for obj in backend_of(config.gang_backend).desired_objects(plan, config):
        obj["metadata"].update(uid=f"{obj['kind']}-web", resourceVersion="5", **meta)
        obj["metadata"]["annotations"]["gang.admit.dev/owner"] = owner
        objects[obj["kind"]] = obj
    return objects


def decide(config: Config, objects: dict[str, Any], claims: list[Any], now: float = 100.0,
           unclaimed_since: float | None = None) -> list[Any]:
    return decide_objects(backend_of(config.gang_backend), ("team", "web"), objects, claims, config, now=now,
                          unclaimed_since=unclaimed_since, grace=GRACE)


def test_a_stored_gang_without_its_objects_gets_them_created_in_order_owned_by_it(deciding):
    config, backend = deciding
    workload = stored_deployment()
    claim = claim_of(workload, DEPLOYMENTS, config)
    kinds = [t.kind for t in backend.object_types(config)]
    actions = decide(config, dict.fromkeys(kinds), [claim])
    assert [(a.kind, a.object_kind) for a in actions] == [("create", k) for k in kinds]
    for action, desired in zip(actions, backend.desired_objects(claim.plan, config)):
        assert action.body["metadata"]["ownerReferences"] == [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-1", "controller": True,
            "blockOwnerDeletion": True}]
        assert action.body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "admit"}
        assert action.body["metadata"]["annotations"]["gang.admit.dev/workload-generation"] == "1"
        assert action.body["spec"] == desired["spec"] and backend.size_of(action.body) == 3


def test_objects_made_at_admission_are_adopted_in_one_patch_each_guarded_by_the_resource_version(deciding):
    config, backend = deciding
    objects = made(config)
    actions = decide(config, objects, [claim_of(stored_deployment(), DEPLOYMENTS, config)])
    assert [(a.kind, a.object_kind, a.adopt, a.changes) for a in actions] == [
        ("patch", kind, True, []) for kind in objects]
    for action in actions:
        assert action.ops[-1] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}
        assert jsonpatch.apply_patch(objects[action.object_kind], action.ops)["metadata"]["ownerReferences"] == [
            owner_reference(stored_deployment())]


def test_an_adopted_gang_in_step_needs_nothing(deciding):
    config, _ = deciding
    workload = stored_deployment()
    assert decide(config, made(config, ownerReferences=[owner_reference(workload)]),
                  [claim_of(workload, DEPLOYMENTS, config)]) == []


def test_an_unclaimed_gang_waits_out_the_grace_period_then_its_objects_are_deleted_last_made_first(deciding):
    config, _ = deciding
    objects = made(config)
    (first,) = decide(config, objects, [], now=100.0)
    assert first.kind == "wait" and first.unclaimed and first.delay == pytest.approx(GRACE)
    assert [a.kind for a in decide(config, objects, [], now=100.0 + GRACE - 0.01, unclaimed_since=100.0)] == ["wait"]
    gone = decide(config, objects, [], now=100.0 + GRACE, unclaimed_since=100.0)
    assert [(a.kind, a.object_kind, a.uid) for a in gone] == [("delete", k, f"{k}-web") for k in reversed(objects)]
    assert all("(owner apps/Deployment/web) is claimed by no stored workload for 0.5s" in a.message for a in gone)


def test_a_gang_object_owned_by_another_workload_is_a_conflict_and_nothing_is_written(deciding):
    config, backend = deciding
    (action,) = decide(config, made(config, owner="batch/Job/web"),
                       [claim_of(stored_deployment(), DEPLOYMENTS, config)])
    assert action.kind == "conflict" and not action.ops and action.message.startswith("Deployment team/web: ")
    if backend.name != volcano.NAME:  # the built-ins name the owner; the test backend says less
        assert "already belongs to batch/Job/web" in action.message


def test_a_managed_looking_object_without_an_owner_annotation_is_left_alone(deciding):
    config, _ = deciding
    objects = made(config)
    first = next(iter(objects.values()))
    del first["metadata"]["annotations"]["gang.admit.dev/owner"]
    assert [a.kind for a in decide(config, objects, [], unclaimed_since=0.0)] == ["foreign"]
    actions = decide(config, objects, [claim_of(stored_deployment(), DEPLOYMENTS, config)])
    assert actions[0].kind == "foreign" and "no valid gang.admit.dev/owner annotation" in actions[0].message
    assert not any(a.kind in ("create", "delete") for a in actions)


def test_a_workload_whose_annotation_became_invalid_keeps_its_objects_unchanged(deciding):
    config, _ = deciding
    workload = stored_deployment()
    workload["metadata"]["annotations"]["gang.admit.dev/min-member"] = "-1"
    bad = claim_of(workload, DEPLOYMENTS, config)
    (action,) = decide(config, made(config), [bad], now=1000.0, unclaimed_since=0.0)
    assert action.kind == "invalid" and bad.plan is None and action.claim is bad and not action.unclaimed
    kinds = list(made(config))
    kept = f"{kinds[0]} team/web is left as it is" if len(kinds) == 1 else \
        f"the {' and '.join(kinds)} team/web are left as they are"
    assert action.message.startswith("Deployment team/web: ") and f"{kept} until this is fixed" in action.message


# ======================================================================================================================
# The loop, over HTTP
# ======================================================================================================================


class Stack:
    """The fake API, admit's controllers as ``admit serve`` runs them for ``config``, and the admission path."""

    def __init__(self, fake: FakeKubeAPI, kube: KubeRaw, config: Config, main: Manager) -> None:
        self.fake, self.kube, self.config, self.main = fake, kube, config, main
        self.gangs = main.gangs[config.gang_backend]
        self.types = backend_of(config.gang_backend).object_types(config)
        self.admission = Admission(config, KubeAPI(kube.api_client), main.cache)

    def objects(self) -> list[dict[str, Any] | None]:
        """The gang's objects ``team/web``, in creation order (``None`` for a missing one)."""
        return [self.fake.get(f"{t.group}/{t.version}", t.plural, "team", "web") for t in self.types]

    def owned_by(self, uid: str) -> bool:
        return all(o is not None and [r.get("uid") for r in o["metadata"].get("ownerReferences") or []] == [uid]
                   for o in self.objects())

    def settled(self, uid: str) -> bool:
        """The objects are owned by ``uid``, on the server and in the gang controller's caches, and no key is queued
        or in a reconcile (one decided before the caches caught up would POST, answered 409, after what the test does
        next): what the controller does from now on comes from what the test does next."""
        return self.owned_by(uid) and all(
            [r.get("uid") for r in (self.gangs.get(t.kind, "team", "web") or {"metadata": {}})["metadata"].get(
                "ownerReferences") or []] == [uid] for t in self.types) and self.gangs.loop.queue.idle

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


def events(fake: FakeKubeAPI) -> list[tuple[str, str, str, str]]:
    """``(type, reason, regarding kind, note)`` of the events.k8s.io/v1 Events written so far."""
    return [(e["type"], e["reason"], e["regarding"]["kind"], e["note"])
            for e in fake.objects("events", api_version="events.k8s.io/v1")]


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
        await eventually(lambda: s.settled(stored["metadata"]["uid"]))
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
        await eventually(lambda: s.settled(stored["metadata"]["uid"]))
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
        assert sorted(g["kind"] for g in s.fake.gc_deleted) == sorted(t.kind for t in s.types)


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
        await asyncio.sleep(GRACE / 2)
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
                admission = Admission(config, KubeAPI(api_client), main.cache)
                s = Stack(fake, KubeRaw(api_client, timeout=2.0), config, main)
                mutated = s.mutated()
                assert (await admission.validate(request(mutated, "CREATE"))).allowed
                stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=mutated)
                # Settled, not only owned: a key still queued or in a reconcile PATCHes after the test clears the
                # request log (seen as a PATCH answered 409 under load).
                await eventually(lambda: s.settled(stored["metadata"]["uid"]))
                fake.clear_requests()
                decision = await admission.validate(request(stored, "UPDATE"))
                assert decision.allowed and [o["kind"] for o in decision.pod_groups] == ["Workload", "PodGroup"]
                assert requests_caused(fake, "workloads", "podgroups") == []
            await main.stop()
    finally:
        volcano.uninstall()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_admitting_a_gang_whose_objects_are_cached_ours_and_in_step_costs_no_api_call(backend):
    async with stack(backend) as s:
        mutated = s.mutated()
        assert (await s.admission.validate(request(mutated, "CREATE"))).allowed
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=mutated)
        await eventually(lambda: s.settled(stored["metadata"]["uid"]))
        s.fake.clear_requests()
        decision = await s.admission.validate(request(stored, "UPDATE"))
        assert decision.allowed and [o["kind"] for o in decision.pod_groups] == [t.kind for t in s.types]
        assert requests_caused(s.fake, *(t.plural for t in s.types)) == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_gang_goes_from_admission_to_adoption_to_garbage_collection(backend, caplog):
    async with stack(backend) as s:
        mutated = s.mutated()
        assert mutated["metadata"]["labels"] == {"gang.admit.dev/managed": "true"}
        assert (await s.admission.validate(request(mutated, "CREATE"))).allowed
        assert all(o is not None and "ownerReferences" not in o["metadata"] for o in s.objects())  # the GC race
        adopted = [f"adopted {t.kind} team/web: owner Deployment team/web" for t in s.types]
        with caplog.at_level(logging.INFO, "admit.controller"):
            stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=mutated)
            adopted_in = await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
            # The controller logs once the PATCH's answer is back, which can be after the fake API stored it.
            await eventually(lambda: all(any(line in r.getMessage() for r in caplog.records) for line in adopted))
        assert adopted_in < 1.0
        assert [backend_of(backend).size_of(o) for o in s.objects()] == [3] * len(s.types)
        await asyncio.sleep(0.1)  # four times the emulated garbage collector's delay: adopted, so they stay
        assert s.fake.gc_deleted == []
        s.fake.delete_object("apps/v1", "deployments", "team", "web")
        collected_in = await eventually(lambda: s.objects() == [None] * len(s.types))
        assert sorted(g["kind"] for g in s.fake.gc_deleted) == sorted(t.kind for t in s.types)
        assert collected_in < 0.2
        await asyncio.sleep(GRACE + 0.2)
        assert s.objects() == [None] * len(s.types)  # not brought back
        await s.main.recorder.flush()
        for t in s.types:
            assert ("Normal", f"{t.kind}Adopted", "Deployment", f"{t.kind} web is now owned by this Deployment: the "
                    "garbage collector deletes it with the Deployment") in events(s.fake)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_object_deleted_by_hand_is_recreated_adopted_while_its_workload_lives(backend):
    async with stack(backend) as s:
        stored = await s.kube.request("POST", DEPLOYMENTS.path("team"), body=s.mutated())
        await eventually(lambda: s.owned_by(stored["metadata"]["uid"]))
        last = s.types[-1]
        first_uid = s.objects()[-1]["metadata"]["uid"]
        s.fake.delete_object(f"{last.group}/{last.version}", last.plural, "team", "web")
        took = await eventually(lambda: s.objects()[-1] is not None and s.objects()[-1]["metadata"]["uid"] != first_uid)
        assert took < 0.5
        assert s.owned_by(stored["metadata"]["uid"])  # created with its owner: the workload is stored, no race
        await asyncio.sleep(0.1)
        assert s.objects()[-1] is not None
        await s.main.recorder.flush()
        assert any(e[1] == f"{last.kind}Created" and e[3].startswith(f"created {last.kind} web (") and
                   e[3].endswith("owned by this Deployment, deleted with it") for e in events(s.fake))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_objects_no_stored_workload_claims_are_deleted_after_the_grace_period_and_not_before(backend):
    async with stack(backend) as s:
        # Admitted, then refused by a later admission step: the workload is never stored.
        assert (await s.admission.validate(request(s.mutated(), "CREATE"))).allowed
        seen_at = time.monotonic()
        assert all(o is not None for o in s.objects())
        await asyncio.sleep(GRACE * 0.8)
        assert all(o is not None for o in s.objects())
        await eventually(lambda: s.objects() == [None] * len(s.types), timeout=GRACE * 4)
        deleted_after = time.monotonic() - seen_at
        assert GRACE <= deleted_after < GRACE + 0.5, deleted_after
        for t in s.types:
            (delete,) = s.fake.requests_for(t.plural, "delete")
            assert set(delete.body["preconditions"]) == {"uid", "resourceVersion"}
        # The fake API removes an object before the controller reads the answer and records the Event: wait for it.
        await eventually(lambda: all(any(e[1] == f"{t.kind}Deleted" for e in events(s.fake)) for t in s.types))
        await s.main.recorder.flush()
        for t in s.types:
            [(type_, _, regarding, note)] = [e for e in events(s.fake) if e[1] == f"{t.kind}Deleted"]
            assert (type_, regarding) == ("Normal", t.kind)
            assert "(owner apps/Deployment/web) is claimed by no stored workload for 0.5s" in note


def member(name: str, phase: str) -> dict[str, Any]:
    """A pod that waits on gang ``team/web`` by each backend's key (``GangBackend.pod_in_group``: Coscheduling's
    label, the Workload API's ``spec.schedulingGroup``, Volcano's annotation)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "labels": {"scheduling.x-k8s.io/pod-group": "web"},
                         "annotations": {volcano.GROUP_NAME_ANNOTATION: "web"}},
            "spec": {"schedulingGroup": {"podGroupName": "web"}, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": phase}}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_orphan_that_live_pods_still_wait_on_is_kept_until_they_are_gone(backend, caplog):
    """Listed with the backend's ``pod_selector`` (Coscheduling's label) or, without one, every live pod of the
    namespace filtered by ``pod_in_group``; a finished pod does not keep it."""
    async with stack(backend) as s:
        for name, phase in (("p1", "Running"), ("p2", "Succeeded")):
            s.fake.put(member(name, phase))
        keeping = "has no stored workload but live pods still wait on it; keeping it"
        with caplog.at_level(logging.INFO, "admit.controller"):
            # Admitted, then refused by a later admission step: the workload is never stored.
            assert (await s.admission.validate(request(s.mutated(), "CREATE"))).allowed
            # Logged after the grace period and the live reads (owner, pods): wait for it, then a little.
            await eventually(lambda: any(keeping in r.getMessage() for r in caplog.records), timeout=GRACE + 2)
            await asyncio.sleep(0.3)
        assert all(o is not None for o in s.objects())
        assert sum(keeping in r.getMessage() for r in caplog.records) == 1
        lists = [r.query for r in s.fake.requests_for("pods", "list") if "fieldSelector" in r.query]  # not a watch's
        assert lists and all(q["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed" for q in lists)
        selector = getattr(backend_of(backend), "pod_selector", None)  # the backend's hook narrows the list
        assert [q.get("labelSelector") for q in lists] == [selector("web", s.config) if selector else None] * len(lists)
        s.fake.delete_object("v1", "pods", "team", "p1")
        await eventually(lambda: s.objects() == [None] * len(s.types), timeout=GRACE * 2 + 1)
