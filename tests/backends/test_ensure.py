"""The one admission-time engine (admit/backends/ensure.py), run for every backend: Coscheduling's PodGroup, the
Workload API's Workload and PodGroup (v1beta1, where minCount may change) and the test Volcano backend
(tests/backends/volcano.py), each gang made of a Deployment as a user applies it."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from admit.backends.ensure import ensure
from admit.backends.registry import backend_of
from admit.config import Config
from admit.controller.cacheview import ControllerView
from admit.kube.client import AlreadyExists, KubeError
from admit.webhook.admissionreview import Decision, dumps, parse_review
from admit.webhook.validate import validate
from tests.backends import volcano
from tests.helpers import admission_review

CONFIGS = {
    "coscheduling": Config(),
    "workload-api": Config(gang_backend="workload-api", workload_api_version="v1beta1"),
    volcano.NAME: Config(gang_backend=volcano.NAME),
}
EVERY_BACKEND = pytest.mark.parametrize("name", list(CONFIGS))
GENERATION = "gang.admit.dev/workload-generation"


@pytest.fixture(autouse=True)
def _volcano():
    volcano.install()
    yield
    volcano.uninstall()


def deployment(min_member: int = 3, generation: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team", "generation": generation,
                     "annotations": {"gang.admit.dev/min-member": str(min_member)}},
        "spec": {"replicas": min_member, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }


def plan_of(name: str, min_member: int = 3):
    verdict = validate(parse_review(dumps(admission_review(deployment(min_member)))), CONFIGS[name])
    assert verdict.ensure is not None and verdict.ensure.backend == name
    return verdict.ensure


class Store:
    """The generic object verbs of kube-apiserver over a dict, recording each call (``(verb, kind)``)."""

    def __init__(self, *stored: dict[str, Any]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in stored}
        self.calls: list[tuple[str, str]] = []
        self.dry_runs: list[bool] = []
        self.vanish = False

    async def create_object(self, group, version, plural, body, dry_run, timeout):
        self.calls.append(("create", body["kind"]))
        self.dry_runs.append(dry_run)
        key = (body["kind"], body["metadata"]["name"])
        if key in self.objects:
            if self.vanish:  # a 409, then gone before the read: the garbage collector deleted it
                del self.objects[key]
            raise AlreadyExists(409, "AlreadyExists", f"{key} already exists")
        if not dry_run:
            self.objects[key] = copy.deepcopy(body)
        return body

    async def get_object(self, group, version, plural, namespace, name, timeout):
        kind = {"podgroups": "PodGroup", "workloads": "Workload"}[plural]
        self.calls.append(("get", kind))
        return copy.deepcopy(self.objects.get((kind, name)))

    async def patch_object(self, group, version, plural, namespace, name, ops, dry_run, timeout):
        kind = {"podgroups": "PodGroup", "workloads": "Workload"}[plural]
        self.calls.append(("patch", kind))
        self.dry_runs.append(dry_run)
        patched = jsonpatch.apply_patch(self.objects[(kind, name)], ops)
        if not dry_run:
            self.objects[(kind, name)] = patched
        return patched

    async def delete_object(self, group, version, plural, namespace, name, uid, dry_run, timeout):
        raise AssertionError("admission deletes nothing")


def stored_for(name: str, min_member: int = 3) -> list[dict[str, Any]]:
    """The objects admit made for the gang of ``min_member`` (as an earlier admission stored them)."""
    return backend_of(name).desired_objects(plan_of(name, min_member), CONFIGS[name])


async def run(name: str, store: Any, plan: Any = None, cache: Any = None, dry_run: bool = False,
              generation: int | None = 4) -> Decision:
    decision = Decision()
    await ensure(store, plan or plan_of(name), CONFIGS[name], decision, False, dry_run, cache, generation)
    return decision


@EVERY_BACKEND
async def test_a_new_gang_gets_every_object_of_its_backend_created_without_owner_and_stamped_with_its_generation(name):
    store = Store()
    decision = await run(name, store)
    kinds = [t.kind for t in backend_of(name).object_types(CONFIGS[name])]
    assert decision.allowed and store.calls == [("create", kind) for kind in kinds]
    for obj in store.objects.values():
        assert "ownerReferences" not in obj["metadata"]
        assert obj["metadata"]["annotations"][GENERATION] == "4"
        assert obj["metadata"]["annotations"]["gang.admit.dev/owner"] == "apps/Deployment/web"
    assert [o["kind"] for o in decision.pod_groups] == kinds


@EVERY_BACKEND
async def test_objects_that_are_admits_and_in_step_are_read_once_after_the_conflict_and_never_patched(name):
    store = Store(*stored_for(name))
    decision = await run(name, store)
    assert decision.allowed and decision.warnings == []
    assert [verb for verb, _ in store.calls] == ["create", "get"] * len(store.objects)


@EVERY_BACKEND
async def test_objects_of_an_older_size_are_patched_to_the_new_size_and_stamped_with_the_new_generation(name):
    store = Store(*stored_for(name, min_member=2))
    decision = await run(name, store, plan_of(name, min_member=3), generation=5)
    backend = backend_of(name)
    assert decision.allowed
    assert ("patch", backend.object_types(CONFIGS[name])[-1].kind) in store.calls
    for obj in store.objects.values():
        if obj["kind"] == "PodGroup":
            assert backend.size_of(obj) == 3
            assert obj["metadata"]["annotations"][GENERATION] == "5"


@EVERY_BACKEND
async def test_an_object_of_the_gangs_name_that_another_workload_owns_refuses_the_admission_with_409(name):
    other = stored_for(name)
    for obj in other:
        obj["metadata"]["annotations"]["gang.admit.dev/owner"] = "apps/Deployment/someone-else"
    store = Store(*other)
    decision = await run(name, store)
    assert not decision.allowed and decision.code == 409
    assert "team/web" in decision.message
    assert not any(verb == "patch" for verb, _ in store.calls)


class Cache:
    """``GroupCache.gang_object`` over the given objects, keyed by API group and kind."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["apiVersion"].rpartition("/")[0], o["kind"]): o for o in objects}
        self.asked: list[tuple[str, str]] = []

    def gang_object(self, group, kind, namespace, name):
        self.asked.append((group, kind))
        return self.objects.get((group, kind))


@EVERY_BACKEND
async def test_cached_objects_that_are_admits_and_in_step_cost_no_api_call(name):
    stored = stored_for(name)
    store = Store(*stored)
    cache = Cache(*stored)
    decision = await run(name, store, cache=cache)
    assert decision.allowed and store.calls == []
    assert decision.pod_groups == stored
    assert cache.asked == [(t.group, t.kind) for t in backend_of(name).object_types(CONFIGS[name])]


@EVERY_BACKEND
async def test_a_dry_run_sends_every_write_with_dry_run_and_stores_nothing(name):
    store = Store()
    decision = await run(name, store, dry_run=True)
    assert decision.allowed and store.dry_runs and all(store.dry_runs)
    assert store.objects == {}


@EVERY_BACKEND
async def test_a_stored_object_being_deleted_fails_the_admission_with_the_reason(name):
    stored = stored_for(name)
    stored[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(KubeError) as raised:
        await run(name, Store(*stored))
    assert raised.value.status == 409 and "is being deleted" in raised.value.message


@EVERY_BACKEND
async def test_an_object_deleted_between_the_create_and_the_read_is_created_once_more(name):
    store = Store(*stored_for(name))
    store.vanish = True
    decision = await run(name, store)
    kind = store.calls[0][1]
    assert decision.allowed and store.calls[:3] == [("create", kind), ("get", kind), ("create", kind)]
    assert (kind, "web") in store.objects


class Gang:
    """A started gang controller as ``ControllerView`` sees one: its cached objects by kind, managed by admit."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.kinds = tuple(objects)
        self.managed = {kind: Cached(obj) for kind, obj in objects.items()}
        self.others = {kind: Cached(None) for kind in objects}

    def get(self, kind, namespace, name):
        return self.objects.get(kind)


class Cached:
    """A listed watch cache holding one object (or none) under every name."""

    synced = True

    def __init__(self, obj: dict[str, Any] | None) -> None:
        self.obj = obj

    def get(self, namespace, name):
        return self.obj


class Manager:
    """What ``ControllerView`` reads of ``manager.Manager``: who keeps each (API group, kind), and the gang controller
    of each backend."""

    def __init__(self, *gangs: tuple[str, Gang], by_backend: dict[str, Gang] | None = None) -> None:
        self.config = Config()
        self.workloads: dict[Any, Any] = {}
        self.by_type = {(group, kind): gang for group, gang in gangs for kind in gang.objects}
        self.gangs = by_backend or {}

    def group_pods(self, namespace, name, exclude):
        return None


def test_two_backends_whose_objects_share_a_kind_never_hide_each_others_cached_objects():
    volcano_group = Gang({"PodGroup": {"kind": "PodGroup", "volcano": True}})
    native = Gang({"Workload": {"kind": "Workload"}, "PodGroup": {"kind": "PodGroup"}})
    view = ControllerView(Manager((volcano.GROUP, volcano_group), ("scheduling.k8s.io", native)))
    assert view.gang_object("scheduling.k8s.io", "PodGroup", "team", "web") == {"kind": "PodGroup"}
    assert view.gang_object(volcano.GROUP, "PodGroup", "team", "web") == {"kind": "PodGroup", "volcano": True}
    assert view.gang_object("scheduling.x-k8s.io", "PodGroup", "team", "web") is None


def test_the_admission_view_finds_the_group_a_pod_label_names_as_the_last_object_kind_of_the_label_backend():
    # The view names no kind and no API group: the pod-group label belongs to config.POD_GROUP_BACKEND, and the last
    # of that backend's object kinds is the group its pods name (GangBackend.object_types).
    from admit.config import POD_GROUP_BACKEND

    labelled = Gang({"GangTemplate": {"kind": "GangTemplate"}, "Group": {"kind": "Group", "metadata": {"name": "web"}}})
    other = Gang({"PodGroup": {"kind": "PodGroup", "volcano": True}})
    view = ControllerView(Manager((volcano.GROUP, other), by_backend={POD_GROUP_BACKEND: labelled, volcano.NAME: other}))
    assert view.get("team", "web") == {"kind": "Group", "metadata": {"name": "web"}}
    assert view.pod_group("team", "web") == (True, {"kind": "Group", "metadata": {"name": "web"}})
    alone = ControllerView(Manager((volcano.GROUP, other), by_backend={volcano.NAME: other}))
    assert alone.get("team", "web") is None and alone.pod_group("team", "web") == (False, None)
