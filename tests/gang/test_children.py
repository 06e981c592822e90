"""Children of gang workloads (admit/gang/children.py): a Deployment's ReplicaSets join its group and are never a gang.

First the pure decisions on ReplicaSets shaped as the Deployment controller creates them, then the fake tier over
HTTP: the fake kube-apiserver calls admit's webhooks for every write and runs the Deployment controller's
ReplicaSet part (``FakeControlPlane(admission=..., deployment_controller=True)``), so a gang Deployment goes through the
same chain of admissions as on a real cluster.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
from kubernetes_asyncio import client as k8s

from admit.families.kinds import PARENTS
from admit.gang.children import parent_of
from admit.config import Config
from admit.controller.claims import claim_of
from admit.webhook.mutate import mutate
from admit.webhook.admissionreview import dumps, parse_review
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.validate import ScaleCheck, scale_verdict, validate
from admit.kube.watchcache import Resource
from tests.helpers import admission_review, eventually, example
from tests.emulations.kcm import pod_template_hash
from tests.webhook_stack import fake_cluster

CONFIG = Config()
PG = ("scheduling.x-k8s.io/v1alpha1", "podgroups")


def gang_deployment(name: str = "pause", replicas: int = 3, min_member: str = "3") -> dict[str, Any]:
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["name"] = name
    dep["metadata"]["namespace"] = "team"
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = min_member
    dep["spec"]["replicas"] = replicas
    return dep


def child_replicaset(dep: dict[str, Any], replicas: int | None = None) -> dict[str, Any]:
    """A ReplicaSet as the Deployment controller POSTs it for ``dep`` (already mutated by admit)."""
    h = pod_template_hash(dep["spec"]["template"])
    template = copy.deepcopy(dep["spec"]["template"])
    template["metadata"]["labels"]["pod-template-hash"] = h
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{dep['metadata']['name']}-{h}",
            "namespace": dep["metadata"]["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {**dep["metadata"]["annotations"], "deployment.kubernetes.io/revision": "1",
                            "deployment.kubernetes.io/desired-replicas": str(dep["spec"]["replicas"]),
                            "deployment.kubernetes.io/max-replicas": str(dep["spec"]["replicas"] + 1)},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"],
                                 "uid": "0b6e7f4c-3c1e-4a59-9d55-8f3f0c7c1d2e", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {"replicas": dep["spec"]["replicas"] if replicas is None else replicas,
                 "selector": {"matchLabels": {**dep["spec"]["selector"]["matchLabels"], "pod-template-hash": h}},
                 "template": template},
    }


def mutated(dep: dict[str, Any]) -> dict[str, Any]:
    """``dep`` after admit's mutation, as the Deployment controller reads it from the store."""
    return jsonpatch.apply_patch(dep, mutate(parse_review(dumps(admission_review(dep))), CONFIG).patch)


def review(obj, operation="CREATE", **kw):
    return parse_review(dumps(admission_review(obj, operation, **kw)))


# ======================================================================================================================
# Pure decisions
# ======================================================================================================================


def test_a_replicaset_owned_by_a_gang_deployment_gets_no_patch_no_pod_group_and_no_min_member_check():
    rs = child_replicaset(mutated(gang_deployment()), replicas=1)  # a rollout's first step: 1 of minMember 3
    assert mutate(review(rs), CONFIG).patch == []
    v = validate(review(rs), CONFIG)
    assert v.decision.allowed and v.ensure is None and v.decision.warnings == []
    scaled_down = copy.deepcopy(rs)
    scaled_down["spec"]["replicas"] = 0
    assert validate(review(scaled_down, "UPDATE", old=rs), CONFIG).decision.allowed


def test_a_standalone_replicaset_with_the_annotation_is_still_a_gang_of_its_own():
    rs = child_replicaset(gang_deployment(), replicas=2)
    del rs["metadata"]["ownerReferences"]
    v = validate(review(rs), CONFIG)
    assert not v.decision.allowed and "ReplicaSet team/" in v.decision.message and "minMember 3" in v.decision.message
    rs["spec"]["replicas"] = 3
    assert validate(review(rs), CONFIG).ensure.owner == f"apps/ReplicaSet/{rs['metadata']['name']}"
    assert any(op["path"] == "/metadata/labels/gang.admit.dev~1managed" for op in mutate(review(rs), CONFIG).patch)


@pytest.mark.parametrize("ref", [
    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "pause", "uid": "u"},  # not the controller
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "pause", "uid": "u", "controller": True},
    {"apiVersion": "example.com/v1", "kind": "Deployment", "name": "pause", "uid": "u", "controller": True},
    {"apiVersion": 7, "kind": "Deployment", "name": "pause", "uid": "u", "controller": True},
    "not a reference",
])
def test_only_a_controller_reference_to_a_registered_parent_kind_makes_a_child(ref):
    rs = child_replicaset(gang_deployment())
    rs["metadata"]["ownerReferences"] = [ref]
    assert parent_of(rs, "apps", "ReplicaSet", PARENTS) is None
    assert not validate(review(rs, "CREATE"), CONFIG).ensure is None  # a gang of its own again


def test_the_parent_reference_names_the_deployment_and_other_kinds_have_no_parents_registered():
    rs = child_replicaset(gang_deployment())
    parent = parent_of(rs, "apps", "ReplicaSet", PARENTS)
    assert parent is not None and parent.identity == "apps/Deployment/pause" and parent.version == "v1"
    assert parent_of(rs, "apps", "StatefulSet", PARENTS) is None  # StatefulSets have no registered parent
    assert PARENTS.plain[("apps", "ReplicaSet")] == {("apps", "Deployment")}


def test_a_family_registers_its_own_parents_in_the_one_registry(monkeypatch):
    monkeypatch.setitem(PARENTS.plain, ("batch", "Job"), set())
    job = example("training-job.yaml")
    job["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                           "name": "trainer", "uid": "u", "controller": True}]
    assert validate(review(job), CONFIG).ensure is not None
    PARENTS.register(("batch", "Job"), ("jobset.x-k8s.io", "JobSet"))
    assert parent_of(job, "batch", "Job", PARENTS).identity == "jobset.x-k8s.io/JobSet/trainer"
    assert validate(review(job), CONFIG).ensure is None and mutate(review(job), CONFIG).patch == []


def test_scaling_a_child_replicaset_below_min_member_is_not_refused_but_a_standalone_one_is():
    rs = child_replicaset(mutated(gang_deployment()))
    check = ScaleCheck("apps", "v1", "ReplicaSet", "replicasets", "team", rs["metadata"]["name"], 1)
    assert scale_verdict(rs, check, CONFIG).decision.allowed
    del rs["metadata"]["ownerReferences"]
    assert not scale_verdict(rs, check, CONFIG).decision.allowed


def test_the_controller_does_not_count_a_child_replicaset_as_a_gang_workload():
    rs = child_replicaset(mutated(gang_deployment()))
    rs["metadata"]["labels"]["gang.admit.dev/managed"] = "true"  # e.g. labelled by an admit without this rule
    resource = Resource("apps", "v1", "replicasets", "ReplicaSet")
    assert claim_of(rs, resource, CONFIG) is None
    del rs["metadata"]["ownerReferences"]
    assert claim_of(rs, resource, CONFIG).identity == f"apps/ReplicaSet/{rs['metadata']['name']}"


# ======================================================================================================================
# The fake tier over HTTP: webhooks called by the fake kube-apiserver, the Deployment controller emulated
# ======================================================================================================================


@pytest.fixture
async def cluster(aiohttp_server):
    """A fake kube-apiserver whose writes go through admit's webhooks (an aiohttp server on loopback, admit's own
    app with the fake as its Kubernetes API), with the Deployment controller's ReplicaSets emulated."""
    async with fake_cluster(aiohttp_server, CONFIG, deployment_controller=True) as (fake, user):
        yield fake, k8s.AppsV1Api(user)


def replicasets(fake: FakeKubeAPI) -> list[dict[str, Any]]:
    return sorted(fake.objects("replicasets", "team"), key=lambda rs: rs["metadata"]["creationTimestamp"])


async def test_a_gang_deployment_gets_a_replicaset_carrying_its_annotations_and_one_pod_group(cluster):
    fake, apps = cluster
    dep = await apps.create_namespaced_deployment("team", gang_deployment())
    await eventually(lambda: replicasets(fake))
    await fake.deployments.idle()
    assert fake.deployments.errors == []
    (rs,) = replicasets(fake)
    # The Deployment controller's copy: the annotation, admit's template label and schedulerName, the hash.
    assert rs["metadata"]["annotations"]["gang.admit.dev/min-member"] == "3"
    assert rs["metadata"]["ownerReferences"][0]["uid"] == dep.metadata.uid
    labels = rs["spec"]["template"]["metadata"]["labels"]
    assert labels["scheduling.x-k8s.io/pod-group"] == "pause" and "pod-template-hash" in labels
    assert rs["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert "gang.admit.dev/managed" not in rs["metadata"]["labels"]  # no patch: the child is not a gang
    assert [pg["metadata"]["name"] for pg in fake.objects("podgroups", "team")] == ["pause"]
    assert fake.get(*PG, "team", "pause")["metadata"]["annotations"]["gang.admit.dev/owner"] == \
        "apps/Deployment/pause"
    rs_reviews = [(path, r) for path, r, _ in fake.admission.reviews if r["kind"]["kind"] == "ReplicaSet"]
    assert [path for path, _ in rs_reviews] == ["/mutate", "/validate"]
    assert rs_reviews[0][1]["userInfo"]["username"].endswith(":deployment-controller")


async def test_a_rolling_update_of_a_gang_deployment_scales_its_replicasets_below_min_member_unrefused(cluster):
    fake, apps = cluster
    await apps.create_namespaced_deployment("team", gang_deployment(replicas=4, min_member="4"))
    await eventually(lambda: replicasets(fake))
    await fake.deployments.idle()
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}}}
    await apps.patch_namespaced_deployment("pause", "team", patch)
    await eventually(lambda: len(replicasets(fake)) == 2)
    await fake.deployments.idle()
    assert fake.deployments.errors == []
    old, new = replicasets(fake)
    assert (old["spec"]["replicas"], new["spec"]["replicas"]) == (0, 4)
    # The Deployment controller's steps with maxSurge 1 and maxUnavailable 1 (25% of 4, rounded up and down): the new
    # ReplicaSet starts at 1 (5 pods at most), the old goes to 2 (3 at least), and so on; all admitted, although
    # every step but the last is below minMember 4.
    def steps(rs):
        return [(r["operation"], r["object"]["spec"]["replicas"]) for path, r, resp in fake.admission.reviews
                if path == "/validate" and r["kind"]["kind"] == "ReplicaSet" and
                r["object"]["metadata"]["name"] == rs["metadata"]["name"]]

    assert steps(new) == [("CREATE", 1), ("UPDATE", 3), ("UPDATE", 4)]
    assert steps(old) == [("CREATE", 4), ("UPDATE", 2), ("UPDATE", 0)]
    assert all(resp["allowed"] for _, r, resp in fake.admission.reviews)
    assert [pg["metadata"]["name"] for pg in fake.objects("podgroups", "team")] == ["pause"]


async def test_kubectl_scale_on_a_child_replicaset_is_admitted_and_on_the_deployment_refused(cluster):
    fake, apps = cluster
    await apps.create_namespaced_deployment("team", gang_deployment())
    await eventually(lambda: replicasets(fake))
    await fake.deployments.idle()
    (rs,) = replicasets(fake)
    body = {"spec": {"replicas": 1}}
    scale = await apps.patch_namespaced_replica_set_scale(rs["metadata"]["name"], "team", body)
    assert scale.spec.replicas == 1
    with pytest.raises(k8s.ApiException) as refused:
        await apps.patch_namespaced_deployment_scale("pause", "team", body)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and message.startswith('admission webhook "scale.validate.admit.dev" denied')


async def test_a_standalone_replicaset_below_its_min_member_is_refused_over_http(cluster):
    fake, apps = cluster
    rs = child_replicaset(gang_deployment(), replicas=2)
    del rs["metadata"]["ownerReferences"]
    with pytest.raises(k8s.ApiException) as refused:
        await apps.create_namespaced_replica_set("team", rs)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'admission webhook "workloads.validate.admit.dev" denied' in message
    assert fake.objects("replicasets", "team") == [] and fake.objects("podgroups", "team") == []
