"""What only the workload-api backend's gang controller does (admit/controller/gangs.py over the backend's Workload
and PodGroup): a size change its v1alpha2 objects cannot follow (immutable ``minCount``, reported) and v1beta1
patches, which workloads it claims, and the count of gangs that broke after they were scheduled; against the fake
Kubernetes API with its garbage-collector emulation (``gc_orphans_after=0.025``, as measured on a real cluster).
What every backend's controller does is tested once for all in test_every_backend.py. Timings scaled down as in
tests/controller/test_controller.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from admit.backends.gangobjects import decide_objects, owner_reference
from admit.config import Config
from admit.controller.claims import claim_of
from admit.controller.manager import ControllerSettings, Manager
from admit.testing.fake_kube import FakeKubeAPI
from admit.kube.watchcache import KubeRaw, Resource
from tests.helpers import FAST_CONTROLLER, eventually

def decide_native(*args: Any, **kw: Any) -> Any:
    """The one decision (``backends.gangobjects.decide_objects``) with the workload-api backend."""
    from admit.backends.workload_api import BACKEND

    return decide_objects(BACKEND, *args, **kw)

ALPHA = Config(gang_backend="workload-api", workload_api_version="v1alpha2")
BETA = Config(gang_backend="workload-api", workload_api_version="v1beta1")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
GRACE = FAST_CONTROLLER["orphan_grace_period"]
FAST = FAST_CONTROLLER
VERSIONS = pytest.mark.parametrize("config", [ALPHA, BETA], ids=["v1alpha2", "v1beta1"])


def deployment(name: str = "web", replicas: int = 3, *, uid: str | None = "uid-1") -> dict[str, Any]:
    """A workload-api gang Deployment as stored after the mutating webhook."""
    obj = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team", "labels": {"gang.admit.dev/managed": "true"},
                     "annotations": {"gang.admit.dev/min-member": "auto"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"schedulingGroup": {"podGroupName": name},
                                       "containers": [{"name": "c", "image": "busybox"}]}}},
    }
    if uid:
        obj["metadata"].update(uid=uid, creationTimestamp="2024-05-01T10:00:00Z", resourceVersion="7")
    return obj


def gang(config: Config, kind: str, name: str = "web", min_count: int = 3, owner: str = "apps/Deployment/web",
         **meta: Any) -> dict[str, Any]:
    from admit.backends import workload_api
    from admit.gang.plan import GangPlan

    plan = GangPlan(kind="Deployment", api_group="apps", name=owner.rsplit("/", 1)[-1], namespace="team",
                    group_name=name, min_member=min_count, total_pods=min_count, total_field="spec.replicas",
                    backend="workload-api")
    obj = dict(zip(("Workload", "PodGroup"), workload_api.desired_objects(plan, config)))[kind]
    obj["metadata"].update(uid=f"{kind}-{name}", resourceVersion="5", **meta)
    obj["metadata"]["annotations"]["gang.admit.dev/owner"] = owner
    return obj


def claims(config: Config, *objs: dict[str, Any]) -> list[Any]:
    return [c for c in (claim_of(o, DEPLOYMENTS, config, backend="workload-api") for o in objs) if c is not None]


# ======================================================================================================================
# Pure
# ======================================================================================================================


@VERSIONS
def test_a_changed_min_member_is_patched_in_v1beta1_and_reported_as_immutable_in_v1alpha2(config):
    dep = deployment(replicas=5)
    owned = {"ownerReferences": [owner_reference(dep)]}
    objs = {"Workload": gang(config, "Workload", **owned), "PodGroup": gang(config, "PodGroup", **owned)}
    actions = decide_native(("team", "web"), objs, claims(config, dep), config, now=0, unclaimed_since=None,
                            grace=GRACE)
    if config is ALPHA:
        (action,) = actions
        assert action.kind == "immutable" and action.object_kind == "PodGroup" and not action.ops
        assert "keeps minCount 3, not 5" in action.message
    else:
        assert [(a.kind, a.changes) for a in actions] == [("patch", ["minCount 3 -> 5"])] * 2


def test_each_controller_claims_only_the_gangs_of_its_backend():
    both = Config(extra_gang_backends=frozenset({"workload-api"}), workload_api_version="v1alpha2")
    native = deployment()
    native["metadata"]["annotations"]["gang.admit.dev/backend"] = "workload-api"
    cos = deployment(name="old")
    assert claim_of(native, DEPLOYMENTS, both, backend="workload-api").key == ("team", "web")
    assert claim_of(native, DEPLOYMENTS, both, backend="coscheduling") is None
    assert claim_of(cos, DEPLOYMENTS, both, backend="workload-api") is None
    assert claim_of(cos, DEPLOYMENTS, both, backend="coscheduling").key == ("team", "old")
    assert [claim_of(o, DEPLOYMENTS, both).plan.backend for o in (native, cos)] == ["workload-api", "coscheduling"]


# ======================================================================================================================
# The loop, over HTTP
# ======================================================================================================================


@pytest.fixture(params=[ALPHA, BETA], ids=["v1alpha2", "v1beta1"])
async def env(request):
    config = request.param
    async with FakeKubeAPI(gc_orphans_after=0.025, workload_api=config.workload_api_version) as fake:
        async with fake.api_client() as api_client:
            settings = ControllerSettings(identity="a", lease_namespace="admit", **FAST)
            main = Manager(fake.api_client(), config, settings, own_client=True)
            native = main.gangs["workload-api"]
            await main.start()
            await eventually(lambda: main.working)
            yield fake, KubeRaw(api_client, timeout=2.0), config, main, native
            await main.stop()


def objects_of(fake: FakeKubeAPI, config: Config, name: str = "web") -> list[dict[str, Any] | None]:
    api = f"scheduling.k8s.io/{config.workload_api_version}"
    return [fake.get(api, "workloads", "team", name), fake.get(api, "podgroups", "team", name)]


def min_counts(fake: FakeKubeAPI, config: Config) -> list[Any]:
    from admit.backends.workload_api import min_count_of

    return [min_count_of(o) if o else None for o in objects_of(fake, config)]


async def test_the_gang_follows_a_scale_that_admission_did_not_see_where_the_api_allows_it(env):
    fake, kube, config, main, native = env
    await kube.request("POST", DEPLOYMENTS.path("team"), body=deployment(uid=None))
    await eventually(lambda: min_counts(fake, config) == [3, 3])
    before = [o["metadata"]["uid"] for o in objects_of(fake, config)]
    await kube.request("PATCH", DEPLOYMENTS.path("team", "web"), body={"spec": {"replicas": 5}},
                       content_type="application/merge-patch+json")
    if config is ALPHA:  # immutable: the objects stay, and the workload gets a Warning event
        await eventually(lambda: any(a[0] == "immutable" for a in native.actions))
        await main.recorder.flush()
        notes = [e["note"] for e in fake.objects("events", api_version="events.k8s.io/v1")
                 if e["reason"] == "GangSizeImmutable"]
        assert notes and "keeps minCount 3, not 5" in notes[0]
        assert min_counts(fake, config) == [3, 3]
    else:
        await eventually(lambda: min_counts(fake, config) == [5, 5])
    assert [o["metadata"]["uid"] for o in objects_of(fake, config)] == before
    owner = fake.get("apps/v1", "deployments", "team", "web")
    assert all(o["metadata"]["ownerReferences"] == [owner_reference(owner)] for o in objects_of(fake, config))


async def test_a_follower_writes_nothing(env):
    fake, kube, config, main, native = env
    follower_main = Manager(fake.api_client(), config, ControllerSettings(identity="b", lease_namespace="admit",
                                                                          **FAST), own_client=True)
    follower = follower_main.gangs["workload-api"]
    await follower_main.start()
    try:
        await kube.request("POST", DEPLOYMENTS.path("team"), body=deployment(uid=None))
        await eventually(lambda: all(objects_of(fake, config)))
        await asyncio.sleep(0.2)
        assert not follower.leading and list(follower.actions) == []
        assert any(a[0] == "create" for a in native.actions)
    finally:
        await follower_main.stop()


def gang_pod(i: int, node: str | None, group: str = "web") -> dict[str, Any]:
    """A pod the ReplicaSet controller made from the gang's template; ``node`` once bound."""
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": group}, "schedulerName": "default-scheduler",
                            "containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-7d9f8-{i}", "namespace": "team", "labels": {"app": group}},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


async def test_a_scheduled_gang_that_lost_a_pod_is_counted_below_min_count_with_an_event_on_its_workload(env):
    # kubernetes#136334: the scheduled condition never goes back, so a gang below its quorum looks healthy.
    from prometheus_client import REGISTRY

    fake, kube, config, main, native = env
    workload = await kube.request("POST", DEPLOYMENTS.path("team"), body=deployment(uid=None))
    await eventually(lambda: all(o is not None for o in objects_of(fake, config)))
    api = f"scheduling.k8s.io/{config.workload_api_version}"
    pg = fake.get(api, "podgroups", "team", "web")
    condition = "PodGroupScheduled" if config.workload_api_version == "v1alpha2" else "PodGroupInitiallyScheduled"
    pg["status"] = {"conditions": [{"type": condition, "status": "True", "reason": "Scheduled", "message": "",
                                    "lastTransitionTime": "2024-05-01T10:01:00Z"}]}
    fake.put(pg)
    for i in range(3):
        fake.put(gang_pod(i, f"node-{i}"))
    await eventually(lambda: (native.get("PodGroup", "team", "web") or {}).get("status"))
    assert await native.check_quorum() == set()  # 3 of 3 on nodes: healthy
    fake.delete_object("v1", "pods", "team", "web-7d9f8-2")  # the node went away with it
    fake.put(gang_pod(3, None))  # its replacement cannot be placed
    assert await native.check_quorum() == {("team", "web")}
    assert REGISTRY.get_sample_value("admit_native_gangs_below_min_count") == 1
    def below_events() -> list[dict[str, Any]]:
        return [e for e in fake.objects("events", "team") if e.get("reason") == "GangBelowMinCount"]

    await eventually(below_events)
    event = below_events()[0]
    assert "now has 2 pod(s) on nodes, minCount 3, 1 pending" in event["note"]
    assert event["regarding"]["uid"] == workload["metadata"]["uid"]
    fake.put(gang_pod(2, "node-9"))  # capacity came back: the replacement bound (as another pod here)
    fake.delete_object("v1", "pods", "team", "web-7d9f8-3")
    assert await native.check_quorum() == set()
    assert REGISTRY.get_sample_value("admit_native_gangs_below_min_count") == 0


async def test_a_gang_object_create_the_api_refuses_is_retried_with_backoff_and_warned_about_once(env, caplog):
    fake, kube, config, main, native = env
    fake.fail("create", "workloads", 500, times=3, message="etcdserver: request timed out")
    with caplog.at_level(logging.WARNING, logger="admit.controller"):
        await kube.request("POST", DEPLOYMENTS.path("team"), body=deployment(uid=None))
        await eventually(lambda: all(objects_of(fake, config)))
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 1, retries  # the same failure three times: one warning (the key loop's report)
    assert retries[0].startswith("cannot create Workload team/web for Deployment team/web: ")
    assert "etcdserver: request timed out" in retries[0]
    assert retries[0].endswith("; retrying with backoff (0.05s doubling to 0.5s)")
    await eventually(lambda: native.loop.failures == {})  # the reconcile that created them forgot the failures


async def test_the_count_of_broken_gangs_goes_to_the_gauge_the_backends_api_half_gives_not_one_the_controller_names(
        monkeypatch):
    # The gang controller names no metric: the workload-api backend's API half gives its gauge
    # (admit_native_gangs_below_min_count); a backend without one is counted and set nowhere.
    import dataclasses

    from admit.backends import runtime

    seen: list[int] = []
    monkeypatch.setitem(runtime.APIS, "workload-api",
                        dataclasses.replace(runtime.APIS["workload-api"], below_min_gauge=seen.append))
    async with FakeKubeAPI(workload_api="v1beta1") as fake:
        settings = ControllerSettings(identity="a", lease_namespace="admit", **FAST)
        main = Manager(fake.api_client(), BETA, settings, own_client=True)
        gangs = main.gangs["workload-api"]
        assert await gangs.check_quorum() == set() and seen == [0]
        gangs.stop_leading()
        assert seen == [0, 0]
        monkeypatch.setitem(runtime.APIS, "workload-api",
                            dataclasses.replace(runtime.APIS["workload-api"], below_min_gauge=None))
        other = Manager(fake.api_client(), BETA, settings, own_client=True)
        assert await other.gangs["workload-api"].check_quorum() == set() and seen == [0, 0]
        await main.stop()
        await other.stop()
