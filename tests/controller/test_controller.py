"""The controller (admit/controller/manager.py, gangs.py) keeping Coscheduling's PodGroups: what it watches and
claims, the decisions only a PodGroup meets (minResources, a hand-written group, a shared one), then the loop against
the fake Kubernetes API over HTTP with watch streams and its garbage-collector emulation (``gc_orphans_after=0.025``:
an object whose ownerReferences all name uids that are not stored is deleted after 25 ms, as measured on a real
cluster). What every backend's controller does (a gang's life from admission to garbage collection, orphans, re-creation, the write
guards) is tested once for all in test_every_backend.py.

Timings are scaled down: orphan grace 0.5 s (default 60 s), Lease 0.6 s / renew deadline 0.4 s / retry 0.1 s
(defaults 15 / 10 / 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import time
from typing import Any

import pytest

from admit.webhook.admission import Admission
from admit.cli import build_parser
from admit.config import Config
from admit.controller.events import EventRecorder
from admit.controller.claims import KNOWN_RESOURCES, Claim, claim_of, owner_reference, watched_kinds
from admit.controller.manager import ControllerSettings, Manager
from admit.families import kinds
from admit.families.kinds import RESOLVERS
from admit.kube.client import KubeAPI
from admit.backends.coscheduling.podgroup import desired_pod_group
from admit.webhook.admissionreview import AdmissionRequest
from admit.testing.fake_kube import FakeKubeAPI
from admit.kube.watchcache import KubeRaw, Resource
from tests.helpers import FAST_CONTROLLER, GC_ORPHANS_AFTER, decide_pod_group as decide, eventually, requests_caused

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)

CONFIG = Config()
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
PODS = Resource("", "v1", "pods", "Pod")
PG_API = "scheduling.x-k8s.io/v1alpha1"
GRACE = FAST_CONTROLLER["orphan_grace_period"]
FAST = FAST_CONTROLLER


def deployment(name: str = "web", replicas: int = 3, *, annotations: dict[str, str] | None = None,
               cpu: str = "1", managed: bool = True, group: str | None = None) -> dict[str, Any]:
    """A gang Deployment as stored after the mutating webhook (managed label, group label, schedulerName)."""
    labels = {"app": name, "scheduling.x-k8s.io/pod-group": group or name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team",
                     "labels": {"gang.admit.dev/managed": "true"} if managed else {},
                     "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"schedulerName": "scheduler-plugins-scheduler",
                                       "containers": [{"name": "c", "image": "busybox",
                                                       "resources": {"requests": {"cpu": cpu}}}]}}},
    }


def stored(obj: dict[str, Any], uid: str = "uid-1", created: str = "2024-05-01T10:00:00Z") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid=uid, creationTimestamp=created, resourceVersion="7")
    return obj


def managed_pg(name: str = "web", owner: str = "apps/Deployment/web", min_member: int = 3, **meta: Any) -> dict:
    pg = {"apiVersion": PG_API, "kind": "PodGroup",
          "metadata": {"name": name, "namespace": "team", "resourceVersion": "5", "uid": f"pg-{name}",
                       "labels": {"app.kubernetes.io/managed-by": "admit"},
                       "annotations": {"gang.admit.dev/owner": owner}, **meta},
          "spec": {"minMember": min_member, "minResources": {"cpu": str(min_member)}}}
    return pg


def request(obj: dict[str, Any], kind: str, group: str, resource: str, operation: str = "CREATE") -> AdmissionRequest:
    """An AdmissionRequest as kube-apiserver sends it (a workload CREATE has no uid yet)."""
    version = "v1"
    return AdmissionRequest(uid="req-1", api_version="admission.k8s.io/v1", group=group, version=version, kind=kind,
                            resource_group=group, resource=resource, sub_resource="", operation=operation,
                            namespace="team", name=obj["metadata"].get("name", ""), object=obj, old_object=None,
                            dry_run=False)


def pg_of(fake: FakeKubeAPI, name: str = "web") -> dict[str, Any] | None:
    return fake.get(PG_API, "podgroups", "team", name)


def events(fake: FakeKubeAPI) -> list[tuple[str, str, str, str]]:
    """``(type, reason, regarding kind, note)`` of the events.k8s.io/v1 Events written so far."""
    return [(e["type"], e["reason"], e["regarding"]["kind"], e["note"])
            for e in fake.objects("events", api_version="events.k8s.io/v1")]


# ======================================================================================================================
# Pure: what to watch, what a stored workload claims, what to do
# ======================================================================================================================


def test_the_watched_kinds_come_from_the_resolver_registry_with_the_managed_label_selector():
    table, notes = watched_kinds(CONFIG)
    labels = {wk.resource.label: wk.selector for wk in table}
    for key in RESOLVERS:
        if key == ("", "Pod") or key not in KNOWN_RESOURCES:  # a CronJob: its record says why it is unwatched
            assert key == ("", "Pod") or kinds.KINDS[key].unwatched, key
            continue
        for version, plural in KNOWN_RESOURCES[key]:
            group = key[0]
            assert labels[f"{plural}.{group}/{version}"] == "gang.admit.dev/managed=true"
    assert "mpijobs.kubeflow.org/v1" in labels and "mpijobs.kubeflow.org/v2beta1" in labels
    assert "cronjobs.batch/v1" not in labels
    assert labels["pods/v1"] == "gang.admit.dev/managed=true,spark-role=driver"
    assert notes == []
    _, notes = watched_kinds(CONFIG, [("apps", "Deployment"), ("example.com", "Widget")])
    assert notes == ["Widget.example.com has a resolver but no known API coordinates; not watched"]


def test_a_stored_workload_claims_exactly_the_pod_group_admission_creates_for_it():
    workload = stored(deployment(replicas=4, annotations={"gang.admit.dev/schedule-timeout-seconds": "120"}))
    claim = claim_of(workload, DEPLOYMENTS, CONFIG)
    assert claim is not None and claim.key == ("team", "web") and claim.identity == "apps/Deployment/web"
    from admit.webhook.validate import validate

    verdict = validate(request(deployment(replicas=4, annotations={"gang.admit.dev/schedule-timeout-seconds": "120"}),
                               "Deployment", "apps", "deployments"), CONFIG)
    assert verdict.ensure is not None
    assert desired_pod_group(claim.plan, CONFIG) == desired_pod_group(verdict.ensure, CONFIG)
    assert claim.plan.pod_group_spec() == {"minMember": 4, "minResources": {"cpu": "4"}, "scheduleTimeoutSeconds": 120}


def test_a_workload_without_the_annotation_claims_nothing_and_a_bad_annotation_is_an_error_claim():
    plain = stored(deployment())
    del plain["metadata"]["annotations"]
    assert claim_of(plain, DEPLOYMENTS, CONFIG) is None
    bad = stored(deployment(annotations={"gang.admit.dev/min-member": "lots"}))
    claim = claim_of(bad, DEPLOYMENTS, CONFIG)
    assert claim is not None and claim.plan is None and claim.identity == "apps/Deployment/web"
    assert 'Set annotation gang.admit.dev/min-member to a positive integer' in claim.error
    assert '"lots" is invalid' in claim.error


def test_a_stored_workload_below_its_min_member_still_claims_its_group_and_carries_the_problem():
    claim = claim_of(stored(deployment(replicas=2, annotations={"gang.admit.dev/min-member": "3"})), DEPLOYMENTS,
                     CONFIG)
    assert claim.plan is not None and claim.plan.min_member == 3
    assert "runs 2 pods (spec.replicas=2) but its gang needs minMember 3" in claim.problem


def decide_now(pg: dict | None, claims: list[Claim], unclaimed_since: float | None = None, now: float = 100.0):
    return decide(("team", "web"), pg, claims, CONFIG, now=now, unclaimed_since=unclaimed_since, grace=GRACE)


def test_adoption_and_a_spec_change_are_one_patch_guarded_by_the_resource_version():
    workload = stored(deployment(replicas=5))
    action = decide_now(managed_pg(), [claim_of(workload, DEPLOYMENTS, CONFIG)])
    assert action.kind == "patch" and action.adopt
    assert action.changes == ["minMember 3 -> 5", "minResources {'cpu': '3'} -> {'cpu': '5'}"]
    assert action.ops == [
        {"op": "add", "path": "/metadata/ownerReferences", "value": [owner_reference(workload)]},
        {"op": "replace", "path": "/spec/minMember", "value": 5},
        {"op": "replace", "path": "/spec/minResources", "value": {"cpu": "5"}},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"},
    ]


def test_a_workload_recreated_under_the_same_name_takes_over_the_owner_reference():
    old, new = stored(deployment(), uid="old"), stored(deployment(), uid="new")
    pg = managed_pg(ownerReferences=[owner_reference(old), {"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
                                                            "uid": "cm"}])
    action = decide_now(pg, [claim_of(new, DEPLOYMENTS, CONFIG)])
    assert action.kind == "patch" and action.adopt
    assert action.ops[0] == {"op": "replace", "path": "/metadata/ownerReferences",
                             "value": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm"},
                                       owner_reference(new)]}


def test_a_hand_written_group_named_by_the_workload_is_used_as_it_is():
    hand = {"apiVersion": PG_API, "kind": "PodGroup", "metadata": {"name": "web", "namespace": "team"},
            "spec": {"minMember": 2}}
    named = claim_of(stored(deployment(annotations={"gang.admit.dev/pod-group": "web"})), DEPLOYMENTS, CONFIG)
    assert decide_now(hand, [named]).kind == "none"
    unnamed = claim_of(stored(deployment()), DEPLOYMENTS, CONFIG)
    assert decide_now(hand, [unnamed]).kind == "conflict"
    assert decide_now(hand, []).kind == "none"  # never deleted: admit does not manage it


def test_two_workloads_naming_one_group_keep_the_owner_and_report_the_other():
    mine = claim_of(stored(deployment()), DEPLOYMENTS, CONFIG)
    job = stored(deployment())
    job.update(apiVersion="batch/v1", kind="Job")
    job["spec"] = {"parallelism": 3, "template": job["spec"]["template"]}
    theirs = claim_of(job, Resource("batch", "v1", "jobs", "Job"), CONFIG)
    pg = managed_pg(ownerReferences=[owner_reference(mine.workload)])
    action = decide_now(pg, [theirs, mine])
    assert action.kind == "none" and action.claim is mine
    assert [(c.identity, m) for c, m in action.others] == [
        ("batch/Job/web", "Job team/web names PodGroup team/web, which Deployment team/web already uses; set "
                          "annotation gang.admit.dev/pod-group on Job team/web to another name")]


def test_a_workload_being_deleted_gets_no_new_group():
    workload = stored(deployment())
    workload["metadata"]["deletionTimestamp"] = "2024-05-01T10:05:00Z"
    assert decide_now(None, [claim_of(workload, DEPLOYMENTS, CONFIG)]).kind == "none"


def test_a_spark_driver_pod_owns_its_group_and_is_adopted_as_a_pod():
    driver = stored({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "pi-driver", "namespace": "team",
                                  "labels": {"spark-role": "driver", "spark-app-selector": "spark-0123",
                                             "gang.admit.dev/managed": "true"},
                                  "annotations": {"gang.admit.dev/min-member": "1"}},
                     "spec": {"containers": [{"name": "spark", "resources": {"requests": {"cpu": "1"}}}]}})
    claim = claim_of(driver, PODS, CONFIG)
    assert claim.key == ("team", "spark-0123") and claim.identity == "/Pod/pi-driver"
    pg = managed_pg("spark-0123", owner="/Pod/pi-driver", min_member=1)
    pg["spec"] = {"minMember": 1, "minResources": {"cpu": "1"}}
    action = decide(("team", "spark-0123"), pg, [claim], CONFIG, now=0, unclaimed_since=None, grace=GRACE)
    assert action.kind == "patch" and action.adopt and action.ops[0]["value"][0]["kind"] == "Pod"


def test_start_controller_settings_come_from_the_serve_flags():
    args = build_parser().parse_args(["serve", "--namespace", "gang-system", "--orphan-grace-period", "30",
                                      "--resync-period", "120", "--lease-name", "admit-lease"])
    settings = ControllerSettings.from_args(args)
    assert (settings.orphan_grace_period, settings.resync_period, settings.lease_name, settings.lease_namespace) == (
        30.0, 120.0, "admit-lease", "gang-system")
    args = build_parser().parse_args(["serve", "--lease-namespace", "elsewhere"])
    assert ControllerSettings.from_args(args).lease_namespace == "elsewhere"
    assert ControllerSettings.from_args(argparse.Namespace()).orphan_grace_period == 60.0


# ======================================================================================================================
# The loop, over HTTP
# ======================================================================================================================


@pytest.fixture
async def kube(fake):
    """A REST client for the test itself (what kubectl and other controllers would do)."""
    async with fake.api_client() as api_client:
        yield KubeRaw(api_client, timeout=2.0)


@pytest.fixture
async def controllers(fake):
    """Factory: ``await controllers("a")`` starts a controller (own ApiClient) and waits until it works if asked."""
    made: list[Manager] = []

    async def make(identity: str = "a", wait: bool = True, **kw: Any) -> Manager:
        settings = ControllerSettings(identity=identity, lease_namespace="admit", **{**FAST, **kw})
        controller = Manager(fake.api_client(), CONFIG, settings, own_client=True)
        made.append(controller)
        await controller.start()
        if wait:
            await eventually(lambda: controller.working)
        return controller

    yield make
    for controller in made:
        await controller.stop()


async def create_workload(kube: KubeRaw, obj: dict[str, Any], resource: Resource = DEPLOYMENTS) -> dict[str, Any]:
    return await kube.request("POST", resource.path("team"), body=obj)


async def test_without_adoption_an_owner_reference_to_an_unstored_workload_loses_the_group(fake, kube):
    """Why admission creates PodGroups without an owner: the (emulated) garbage collector removes a PodGroup whose
    owner is not stored within 25 ms."""
    body = managed_pg()
    body["metadata"] = {k: v for k, v in body["metadata"].items() if k not in ("resourceVersion", "uid")}
    body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                            "uid": "not-stored-yet", "controller": True}]
    await kube.request("POST", f"/apis/{PG_API}/namespaces/team/podgroups", body=body)
    lost_in = await eventually(lambda: pg_of(fake) is None, timeout=1)
    assert lost_in < 0.1


async def test_the_spec_follows_a_workload_update_that_admission_did_not_see(fake, kube, controllers):
    controller = await controllers()
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    # Written while the webhook was unavailable (failurePolicy Ignore): only the controller can catch up.
    changed = deployment(cpu="2", annotations={"gang.admit.dev/min-member": "2",
                                               "gang.admit.dev/schedule-timeout-seconds": "300"})
    current = fake.get("apps/v1", "deployments", "team", "web")
    changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await kube.request("PUT", DEPLOYMENTS.path("team", "web"), body=changed)
    took = await eventually(lambda: pg_of(fake)["spec"].get("scheduleTimeoutSeconds") == 300)
    assert pg_of(fake)["spec"] == {"minMember": 2, "minResources": {"cpu": "4"}, "scheduleTimeoutSeconds": 300}
    assert took < 0.5
    # The fake API stores the patch before the controller reads its answer and records the event: wait for it.
    updated = ("Normal", "PodGroupUpdated", "Deployment",
               "PodGroup web spec updated: minMember 3 -> 2; minResources {'cpu': '3'} -> {'cpu': '4'}; "
               "scheduleTimeoutSeconds None -> 300")
    await eventually(lambda: updated in events(fake))
    await controller.recorder.flush()
    patches = fake.requests_for("podgroups", "patch")
    assert patches[-1].content_type == "application/json-patch+json"
    assert {"op": "replace", "path": "/metadata/resourceVersion",
            "value": patches[-1].body[-1]["value"]} == patches[-1].body[-1]  # guarded by resourceVersion


async def test_the_spec_follows_kubectl_scale(fake, kube, controllers):
    await controllers()
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    # kubectl scale deployment/web --replicas=5: a PATCH of the scale subresource; minMember "auto" follows it.
    await kube.request("PATCH", DEPLOYMENTS.path("team", "web") + "/scale", body={"spec": {"replicas": 5}},
                       content_type="application/merge-patch+json")
    took = await eventually(lambda: pg_of(fake)["spec"]["minMember"] == 5)
    assert pg_of(fake)["spec"] == {"minMember": 5, "minResources": {"cpu": "5"}}
    assert took < 0.5


async def test_only_the_lease_holder_writes_and_the_other_replica_takes_over(fake, kube, controllers):
    a = await controllers("a")
    b = await controllers("b", wait=False)
    await eventually(lambda: b.gangs["coscheduling"].managed["PodGroup"].synced and b.workloads[DEPLOYMENTS].synced)
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    # KubeRaw counts a write once its answer is read, which can be after the fake API stored the object.
    await eventually(lambda: a.api.writes["POST podgroups"] == 1)  # the leader created it (no admission here)
    await asyncio.sleep(0.2)
    assert a.is_leader() and not b.is_leader() and not b.working
    assert b.cache.get("team", "web") is not None  # the follower's cache serves its webhooks all the same
    assert a.api.writes["POST podgroups"] == 1
    assert not [w for w in b.api.writes if not w.endswith("leases")]  # the follower wrote nothing but Lease tries
    await a.stop()
    await eventually(lambda: b.working)
    await create_workload(kube, deployment("api"))
    await eventually(lambda: (pg_of(fake, "api") or {}).get("metadata", {}).get("ownerReferences"))
    # KubeRaw counts a write once its answer is read, which can be after the fake API stored the object.
    await eventually(lambda: b.api.writes["POST podgroups"] == 1)
    assert a.api.writes["POST podgroups"] == 1


async def test_a_replica_that_loses_the_lease_stops_writing(fake, kube, controllers):
    a = await controllers("a")
    fake.fail("update", "leases", 500, times=None)  # it cannot renew any more
    await eventually(lambda: not a.working, timeout=2)
    before = {k: v for k, v in a.api.writes.items() if not k.endswith("leases")}
    fake.put(managed_pg("gone", owner="apps/Deployment/gone"))  # work it would otherwise do: an orphan, a missing group
    await create_workload(kube, deployment("api"))
    await asyncio.sleep(GRACE + 0.2)
    assert {k: v for k, v in a.api.writes.items() if not k.endswith("leases")} == before
    assert pg_of(fake, "gone") is not None and pg_of(fake, "api") is None


async def test_the_controller_survives_dropped_watches_and_410_gone(fake, kube, controllers):
    controller = await controllers()
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    fake.delay("watch", "*", 0.15, times=40)  # every reconnect arrives late...
    await fake.drop_watches(abrupt=True)
    await create_workload(kube, deployment("api"))
    fake.put(managed_pg("api", owner="apps/Deployment/api"))
    fake.compact()  # ...and finds its resourceVersion compacted: 410, relist
    await eventually(lambda: (pg_of(fake, "api") or {}).get("metadata", {}).get("ownerReferences"))
    # (adoption may come first, through a 409 and a GET, while the PodGroup watch still waits to reconnect)
    await eventually(lambda: controller.gangs["coscheduling"].managed["PodGroup"].lists >= 2 and controller.workloads[DEPLOYMENTS].lists >= 2)
    await eventually(lambda: (controller.cache.get("team", "api") or {}).get("metadata", {}).get("ownerReferences"))
    await fake.drop_watches()  # a clean end of stream resumes without a relist
    lists = controller.workloads[DEPLOYMENTS].lists
    await create_workload(kube, deployment("third"))
    await eventually(lambda: (pg_of(fake, "third") or {}).get("metadata", {}).get("ownerReferences"))
    assert controller.workloads[DEPLOYMENTS].lists == lists


async def test_a_kind_the_api_forbids_is_logged_once_and_the_other_kinds_still_work(fake, kube, controllers, caplog):
    fake.forbid("statefulsets")
    with caplog.at_level(logging.WARNING, "admit"):
        await controllers()
        await create_workload(kube, deployment())
        await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
        await asyncio.sleep(0.4)  # more than one slow retry (0.3 s)
    forbidden = [r.getMessage() for r in caplog.records if "statefulsets" in r.getMessage()]
    assert len(forbidden) == 1 and "statefulsets.apps/v1 forbidden (RBAC does not grant list)" in forbidden[0]


async def test_an_orphan_whose_owner_kind_cannot_be_listed_is_not_deleted(fake, controllers):
    fake.forbid("statefulsets")
    await controllers()
    fake.put(managed_pg("db", owner="apps/StatefulSet/db"))
    await asyncio.sleep(GRACE + 0.3)
    assert pg_of(fake, "db") is not None
    fake.allow("statefulsets")
    await eventually(lambda: pg_of(fake, "db") is None, timeout=GRACE * 2 + 1.5)


async def test_a_name_collision_is_logged_once_reported_on_the_workload_and_the_rest_goes_on(
        fake, kube, controllers, caplog):
    controller = await controllers(resync_period=0.2)  # resyncs retry it: still one line
    fake.put(managed_pg(owner="batch/Job/web"))
    fake.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "web", "namespace": "team"},
              "spec": {"template": {"spec": {"containers": []}}}})
    with caplog.at_level(logging.WARNING, "admit.controller"):
        await create_workload(kube, deployment())
        await create_workload(kube, deployment("api"))
        await eventually(lambda: (pg_of(fake, "api") or {}).get("metadata", {}).get("ownerReferences"))
        await asyncio.sleep(0.6)
    lines = [r.getMessage() for r in caplog.records if "team/web" in r.getMessage()]
    assert lines == ["Deployment team/web: Set annotation gang.admit.dev/pod-group to another name: PodGroup team/web "
                     "already belongs to batch/Job/web, not to Deployment team/web"]
    assert pg_of(fake)["metadata"]["annotations"]["gang.admit.dev/owner"] == "batch/Job/web"
    assert "ownerReferences" not in pg_of(fake)["metadata"]
    await controller.recorder.flush()
    assert [e for e in events(fake) if e[1] == "PodGroupConflict"] == [(
        "Warning", "PodGroupConflict", "Deployment", "Set annotation gang.admit.dev/pod-group to another name: "
        "PodGroup team/web already belongs to batch/Job/web, not to Deployment team/web")]


async def test_a_managed_labelled_group_admit_did_not_create_is_left_alone(fake, controllers, caplog):
    pg = managed_pg("copied")
    del pg["metadata"]["annotations"]
    with caplog.at_level(logging.WARNING, "admit.controller"):
        await controllers(resync_period=0.2)
        fake.put(pg)
        await asyncio.sleep(GRACE + 0.4)
    assert pg_of(fake, "copied") is not None
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["PodGroup team/copied carries app.kubernetes.io/managed-by=admit but no valid "
                     "gang.admit.dev/owner annotation: admit did not create it and leaves it alone"]


async def test_an_annotation_made_invalid_by_an_update_keeps_the_group_and_is_reported_once_leading_with_the_fix(
        fake, kube, controllers, caplog):
    controller = await controllers(resync_period=0.2)
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    broken = fake.get("apps/v1", "deployments", "team", "web")
    broken["metadata"]["annotations"]["gang.admit.dev/min-member"] = "many"  # let through with the webhook down
    with caplog.at_level(logging.WARNING, "admit.controller"):
        fake.put(broken)
        await asyncio.sleep(GRACE + 0.4)
    assert pg_of(fake)["spec"]["minMember"] == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ['Deployment team/web: Set annotation gang.admit.dev/min-member to a positive integer (at most '
                     '2147483647, PodGroup minMember is an int32) or "auto": "many" is invalid; PodGroup team/web is '
                     'left as it is until this is fixed']
    await controller.recorder.flush()
    [(_, reason, regarding, note)] = [e for e in events(fake) if e[0] == "Warning"]
    assert (reason, regarding) == ("InvalidGangAnnotation", "Deployment") and note == lines[0].removeprefix(
        "Deployment team/web: ")  # kubectl describe deployment web names it: the note leads with the fix


async def test_a_write_the_api_refuses_is_reported_as_a_warning_event_and_retried(fake, kube, controllers, caplog):
    controller = await controllers()
    fake.fail("patch", "podgroups", 403, times=3, message="podgroups is forbidden: cannot patch")
    fake.put(managed_pg())
    with caplog.at_level(logging.WARNING, "admit.controller"):
        await create_workload(kube, deployment())
        await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    assert sum("cannot update PodGroup team/web for Deployment team/web" in r.getMessage()
               for r in caplog.records) == 1
    await controller.recorder.flush()
    failures = [e for e in events(fake) if e[1] == "PodGroupSyncFailed"]
    assert len(failures) == 1 and failures[0][0] == "Warning"


async def test_a_write_throttled_twice_by_the_api_server_heals_without_a_warning_or_an_event(
        fake, kube, controllers, caplog):
    # 429 with a Retry-After (1 s) longer than the call's timeout (0.5 s): the client cannot retry it within the call,
    # the key loop waits the Retry-After instead, and says nothing above INFO while it is transient
    controller = await controllers(api_timeout=0.5)
    fake.fail("patch", "podgroups", 429, times=2, retry_after=1)
    fake.put(managed_pg())
    with caplog.at_level(logging.INFO, "admit.controller"):
        await create_workload(kube, deployment())
        await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"), timeout=10)
    assert [r.status for r in fake.requests_for("podgroups", "PATCH")] == [429, 429, 200]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("throttled by the API server" in r.getMessage() for r in caplog.records) == 2
    await controller.recorder.flush()
    assert [e for e in events(fake) if e[0] == "Warning"] == []


async def test_a_write_still_throttled_at_its_third_try_is_reported_once_with_a_warning_event(
        fake, kube, controllers, caplog):
    controller = await controllers(api_timeout=0.5)
    fake.fail("patch", "podgroups", 429, times=None, retry_after=1)
    fake.put(managed_pg())
    with caplog.at_level(logging.WARNING, "admit.controller"):
        await create_workload(kube, deployment())
        await eventually(lambda: len(fake.requests_for("podgroups", "PATCH")) >= 3, timeout=10)
        await asyncio.sleep(0.2)
    warnings = [r.getMessage() for r in caplog.records if "cannot update PodGroup team/web" in r.getMessage()]
    assert len(warnings) == 1 and "429 TooManyRequests" in warnings[0]
    await controller.recorder.flush()
    assert [e[1] for e in events(fake) if e[0] == "Warning"] == ["PodGroupSyncFailed"]


async def test_a_group_deleted_with_its_terminating_namespace_is_not_recreated_warned_or_retried(
        fake, kube, controllers, caplog):
    """Seen on the real control plane: deleting a namespace removes the PodGroup before the Deployment; the
    re-create is refused by the NamespaceLifecycle admission plugin. That is the namespace going away, not a fault."""
    controller = await controllers()
    terminating = ('podgroups.scheduling.x-k8s.io "web" is forbidden: unable to create new content in namespace '
                   'team because it is being terminated')
    fake.fail("create", "podgroups", 403, times=None, message=terminating)
    with caplog.at_level(logging.INFO):
        await create_workload(kube, deployment())
        await eventually(lambda: any("namespace is being deleted" in r.getMessage() for r in caplog.records))
        await asyncio.sleep(0.3)  # several retry backoffs (0.05 s doubling) would have passed
        await controller.recorder.flush()
    creates = [r for r in fake.requests_for("podgroups", "POST")]
    assert len(creates) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    assert events(fake) == []


async def test_an_event_refused_in_a_terminating_namespace_does_not_hide_a_later_permission_warning(
        fake, kube, caplog):
    recorder = EventRecorder(kube, "admit-0")
    workload = stored(deployment())
    fake.fail("create", "events", 403, times=1, message='events.events.k8s.io "web.1" is forbidden: unable to create '
                                                        "new content in namespace team because it is being terminated")
    fake.fail("create", "events", 403, times=1, message='events.events.k8s.io is forbidden: User "admit" cannot '
                                                        'create resource "events"')
    with caplog.at_level(logging.DEBUG, "admit.events"):
        recorder.record(workload, "Normal", "PodGroupAdopted", "Adopt", "adopted")
        await recorder.flush()
        recorder.record(workload, "Normal", "PodGroupAdopted", "Adopt", "adopted again")
        await recorder.flush()
    await recorder.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and 'cannot create resource "events"' in warnings[0]


async def test_adoption_falls_back_without_block_owner_deletion_where_the_api_refuses_it(fake, kube, controllers):
    # OwnerReferencesPermissionEnforcement (OpenShift) without update on deployments/finalizers.
    fake.fail("patch", "podgroups", 422, times=1, message="podgroups.scheduling.x-k8s.io \"web\" is forbidden: cannot "
              "set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on")
    await controllers()
    fake.put(managed_pg())
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    [ref] = pg_of(fake)["metadata"]["ownerReferences"]
    assert ref["controller"] is True and "blockOwnerDeletion" not in ref


async def test_a_pod_of_a_known_group_costs_no_api_call(fake, kube, controllers):
    controller = await controllers()
    await create_workload(kube, deployment())
    await eventually(lambda: controller.cache.get("team", "web") is not None)
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "web-5d8f-", "labels": {"app": "web", "scheduling.x-k8s.io/pod-group": "web"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f",
                                             "uid": "rs", "controller": True}]},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    fake.clear_requests()
    for _ in range(50):
        assert admission.mutate(request(pod, "Pod", "", "pods")).allowed
        decision = await admission.validate(request(pod, "Pod", "", "pods"))
        assert decision.allowed and decision.warnings == []
    assert requests_caused(fake, "podgroups") == []


async def test_a_pod_whose_group_is_missing_gets_a_warning_and_the_group_is_recreated(fake, kube, controllers):
    controller = await controllers(retry_backoff=(5.0, 5.0))  # only the pod's request can explain a quick re-create
    await create_workload(kube, deployment())
    await eventually(lambda: (pg_of(fake) or {}).get("metadata", {}).get("ownerReferences"))
    fake.fail("create", "podgroups", 500, times=1)  # the controller's own re-create fails once, then backs off 5 s
    await kube.request("DELETE", f"/apis/{PG_API}/namespaces/team/podgroups/web")
    # Wait for that failed re-create (the second create: the first made the group above), or the pod's request
    # could come first under load and meet the injected failure itself.
    await eventually(lambda: len(fake.requests_for("podgroups", "create")) >= 2)
    await eventually(lambda: controller.cache.get("team", "web") is None)
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-1", "labels": {"scheduling.x-k8s.io/pod-group": "web"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f",
                                             "uid": "rs", "controller": True}]},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    started = time.monotonic()
    decision = await admission.validate(request(pod, "Pod", "", "pods"))
    assert time.monotonic() - started < 0.05  # never delayed
    assert decision.allowed
    assert decision.warnings == ["PodGroup team/web not found yet; admit is re-creating it"]
    took = await eventually(lambda: pg_of(fake) is not None)
    assert took < 1.0
    # A pod of a hand-written group that admit does not manage gets no warning.
    fake.put({"apiVersion": PG_API, "kind": "PodGroup", "metadata": {"name": "pg1", "namespace": "team"},
              "spec": {"minMember": 2}})
    await create_workload(kube, deployment("seed", annotations={"gang.admit.dev/pod-group": "pg1"}, group="pg1"))
    await eventually(lambda: controller.gangs["coscheduling"].others["PodGroup"].get("team", "pg1") and
                     controller.claimed("coscheduling", ("team", "pg1")))
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pg1"
    assert (await admission.validate(request(pod, "Pod", "", "pods"))).warnings == []


async def test_readiness_waits_for_the_first_list_of_pod_groups_only(fake, controllers):
    fake.delay("list", "podgroups", 0.3, times=2)
    controller = await controllers(wait=False)
    assert controller.readiness() == (False, "PodGroup cache not listed yet")
    await eventually(lambda: controller.readiness()[0])
    fake.forbid("podgroups")
    other = await controllers("b", wait=False)
    await eventually(lambda: other.readiness()[0])  # a failed list does not hold the webhook back


def test_ignored_api_groups_are_not_watched():

    ignored = {"kubeflow.org", "sparkoperator.k8s.io", "jobset.x-k8s.io", "leaderworkerset.x-k8s.io", "ray.io",
               "trainer.kubeflow.org"}
    table, _ = watched_kinds(Config(ignored_api_groups=frozenset(ignored)))
    groups = {w.resource.group for w in table}
    assert groups == {"apps", "batch", ""}
    table, _ = watched_kinds(Config(ignored_api_groups=frozenset({"kubeflow.org", "sparkoperator.k8s.io"})))
    assert {w.resource.label for w in table} >= {"jobsets.jobset.x-k8s.io/v1alpha2", "rayclusters.ray.io/v1",
                                                 "leaderworkersets.leaderworkerset.x-k8s.io/v1",
                                                 "trainjobs.trainer.kubeflow.org/v1alpha1"}
