"""Group keys of other systems (admit/gang/foreign.py), over HTTP: the pre-v0.25.7 scheduler-plugins label
and Kueue plain-pod groups, with and without the controller running."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admit.webhook.admission import Admission
from admit.cli import build_parser, config_from_args
from admit.config import Config
from admit.controller.manager import ControllerSettings, Manager
from admit.kube.client import KubeAPI
from admit.webhook.app import create_app
from tests.helpers import FAST_CONTROLLER, admission_review, apply_answer, decode_patch, eventually

NEW = "scheduling.x-k8s.io/pod-group"
OLD = "pod-group.scheduling.sigs.k8s.io"
PG_API = "scheduling.x-k8s.io/v1alpha1"
SCHED = "scheduler-plugins-scheduler"


def legacy_pod(**labels: str) -> dict[str, Any]:
    """A Pod written for scheduler-plugins before v0.25.7 (its docs' example, label ``pod-group.scheduling.sigs...``)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ring-0", "namespace": "team", "labels": {"app": "ring", **labels}},
        "spec": {"containers": [{"name": "ring", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
    }


def legacy_deployment(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "ring", "namespace": "team", "annotations": dict(annotations or {})},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "ring", OLD: "ring-legacy"}},
                 "template": {"metadata": {"labels": {"app": "ring", OLD: "ring-legacy"}},
                              "spec": {"containers": [{"name": "ring", "image": "busybox:1.36",
                                                       "resources": {"requests": {"cpu": "100m"}}}]}}},
    }


def kueue_pod(role: str = "leader", count: str | None = "3", min_member: str | None = "auto",
              group: str = "sample-group", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A member of a Kueue plain-pod group as its creator sends it: ``generateName`` only, Kueue's group label and
    total-count annotation, Kueue's queue label, and the scheduling gate Kueue's webhook adds."""
    ann = dict(annotations or {})
    if count is not None:
        ann["kueue.x-k8s.io/pod-group-total-count"] = count
    if min_member is not None:
        ann["gang.admit.dev/min-member"] = min_member
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"sample-{role}-", "namespace": "team",
                     "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/pod-group-name": group,
                                "kueue.x-k8s.io/managed": "true"},
                     "annotations": ann},
        "spec": {"restartPolicy": "Never", "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                 "containers": [{"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                                 "args": ["entrypoint-tester"], "resources": {"requests": {"cpu": "500m"}}}]},
    }


@pytest.fixture
async def webhook(aiohttp_client, fake):
    """Factory: ``await webhook(config, controller=True|False)`` -> the webhook over HTTP against ``fake``."""
    closers = []

    async def make(config: Config | None = None, controller: bool = False):
        cfg = config or Config()
        api_client = fake.api_client()
        closers.append(api_client.close)
        cache = None
        if controller:
            ctl = Manager(fake.api_client(), cfg, ControllerSettings(identity="a", lease_namespace="admit",
                                                                     **FAST_CONTROLLER), own_client=True)
            closers.append(ctl.stop)
            await ctl.start()
            await eventually(lambda: ctl.working)
            cache = ctl.cache
        return await aiohttp_client(create_app(Admission(cfg, KubeAPI(api_client), cache)))

    yield make
    for close in reversed(closers):
        await close()


async def admit(client, obj, operation="CREATE", **kw):
    """``/mutate`` then ``/validate`` as kube-apiserver runs them: (object after mutation, mutate answer, validate
    answer)."""
    review = admission_review(obj, operation, **kw)
    resp = await client.post("/mutate", json=review)
    assert resp.status == 200
    mutated = await resp.json()
    out = apply_answer(obj, mutated)
    resp = await client.post("/validate", json=admission_review(out, operation, **kw))
    assert resp.status == 200
    return out, mutated, (await resp.json())["response"]


# ---------------------------------------------------------------------------------------------- the pre-v0.25.7 label


async def test_a_pod_with_only_the_legacy_label_gets_the_current_one_and_the_scheduler_with_a_warning(webhook):
    client = await webhook()
    out, mutated, validated = await admit(client, legacy_pod(**{OLD: "ring-legacy"}))
    labels = out["metadata"]["labels"]
    assert labels[NEW] == "ring-legacy" and labels[OLD] == "ring-legacy"  # the old one stays: selectors may use it
    assert out["spec"]["schedulerName"] == SCHED
    [warning] = mutated["response"]["warnings"]
    assert warning == (f"create PodGroup ring-legacy as scheduling.x-k8s.io/v1alpha1 (not scheduling.sigs.k8s.io): "
                       f"admit added label {NEW} beside {OLD}")
    assert validated["allowed"] is True


async def test_a_pod_whose_two_labels_disagree_gets_a_warning_naming_both(webhook):
    client = await webhook()
    pod = legacy_pod(**{OLD: "ring-legacy", NEW: "ring"})
    out, mutated, _ = await admit(client, pod)
    assert out["metadata"]["labels"][NEW] == "ring"
    assert any(w.startswith(f"remove {OLD} or make it equal {NEW}: the pods join PodGroup ring,")
               for w in mutated["response"]["warnings"])


async def test_a_gang_deployment_with_the_legacy_template_label_takes_that_group_name(webhook, fake):
    client = await webhook()
    out, mutated, validated = await admit(client, legacy_deployment({"gang.admit.dev/min-member": "3"}))
    assert out["spec"]["template"]["metadata"]["labels"][NEW] == "ring-legacy"
    assert validated["allowed"] is True
    assert fake.get(PG_API, "podgroups", "team", "ring-legacy")["spec"]["minMember"] == 3
    assert any(OLD in w for w in mutated["response"]["warnings"])
    again = await client.post("/mutate", json=admission_review(out))  # reinvocation: nothing more to do
    assert decode_patch(await again.json()) == []


async def test_a_deployment_without_admit_annotations_gets_its_legacy_template_label_translated(webhook, fake):
    client = await webhook()
    out, mutated, validated = await admit(client, legacy_deployment())
    assert out["spec"]["template"]["metadata"]["labels"][NEW] == "ring-legacy"
    assert "schedulerName" not in out["spec"]["template"]["spec"]  # no gang annotations: only the label
    assert validated["allowed"] is True and fake.objects("podgroups") == []


async def test_a_replicaset_made_by_a_deployment_keeps_its_template_so_the_deployment_still_finds_it(webhook):
    client = await webhook()
    rs = legacy_deployment()
    rs["kind"] = "ReplicaSet"
    rs["metadata"].update(name="ring-5f7c9d8b6", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ring", "uid": "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6",
         "controller": True, "blockOwnerDeletion": True}])
    rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "5f7c9d8b6"
    resp = await client.post("/mutate", json=admission_review(rs))
    assert decode_patch(await resp.json()) == []


async def test_a_job_template_is_not_translated_on_update_since_it_is_immutable(webhook):
    client = await webhook()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ring", "namespace": "team"},
           "spec": {"template": {"metadata": {"labels": {OLD: "ring-legacy"}},
                                 "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
    resp = await client.post("/mutate", json=admission_review(job, "UPDATE", old=copy.deepcopy(job)))
    assert decode_patch(await resp.json()) == []


async def test_with_the_legacy_api_the_current_label_is_translated_the_other_way(webhook):
    args = build_parser().parse_args(["serve", "--pod-group-api", "scheduling.sigs.k8s.io"])
    client = await webhook(config_from_args(args))
    out, mutated, _ = await admit(client, legacy_pod(**{NEW: "ring"}))
    assert out["metadata"]["labels"][OLD] == "ring"
    assert any(w.startswith("create PodGroup ring as scheduling.sigs.k8s.io/v1alpha1 (not scheduling.x-k8s.io)")
               for w in mutated["response"]["warnings"])


# ---------------------------------------------------------------------------------------------- Kueue plain-pod groups


@pytest.mark.parametrize("controller", [False, True])
async def test_a_kueue_plain_pod_group_is_named_and_sized_from_kueues_keys(webhook, fake, controller):
    client = await webhook(controller=controller)
    for role in ("leader", "worker", "worker"):
        out, mutated, validated = await admit(client, kueue_pod(role))
        assert validated["allowed"] is True and "warnings" not in validated
        assert out["metadata"]["labels"][NEW] == "sample-group" and out["spec"]["schedulerName"] == SCHED
        assert out["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
        assert all("schedulingGates" not in op["path"] for op in decode_patch(mutated))
    pg = fake.get(PG_API, "podgroups", "team", "sample-group")
    assert pg["spec"] == {"minMember": 3, "minResources": {"cpu": "1500m"}}


async def test_a_kueue_group_named_by_admits_annotation_still_takes_its_size_from_kueue(webhook, fake):
    client = await webhook()
    pod = kueue_pod(annotations={"gang.admit.dev/pod-group": "sample-pg"})
    _, _, validated = await admit(client, pod)
    assert validated["allowed"] is True
    assert fake.get(PG_API, "podgroups", "team", "sample-pg")["spec"]["minMember"] == 3


async def test_auto_on_a_bare_pod_without_any_group_size_warns_that_the_gang_has_one_member(webhook, fake):
    client = await webhook()
    pod = kueue_pod(count=None)
    _, mutated, validated = await admit(client, pod)
    assert validated["allowed"] is True
    assert any(w.startswith("set gang.admit.dev/min-member to the pods that must start together") and "no gang" in w
               for w in mutated["response"]["warnings"])
    assert fake.get(PG_API, "podgroups", "team", "sample-group")["spec"]["minMember"] == 1


@pytest.mark.parametrize("controller", [False, True])
async def test_no_member_of_a_pod_group_lowers_what_another_member_set(webhook, fake, controller):
    client = await webhook(controller=controller)

    def member(min_member):
        pod = kueue_pod("worker", count=None, min_member=min_member)
        return pod

    def min_member():
        return fake.get(PG_API, "podgroups", "team", "sample-group")["spec"]["minMember"]

    _, _, first = await admit(client, member("2"))
    assert first["allowed"] is True and min_member() == 2
    _, _, second = await admit(client, member("auto"))  # no size of its own: keeps 2, and no conflict
    assert second["allowed"] is True and min_member() == 2
    assert [w for w in second["warnings"] if "auto on a bare pod" not in w] == []
    _, _, third = await admit(client, member("3"))  # the largest wins, with a warning
    assert min_member() == 3
    assert any("minMember raised from 2 to 3" in w for w in third["warnings"])
    _, _, fourth = await admit(client, member("2"))
    assert fourth["allowed"] is True and min_member() == 3
    assert any(w.startswith("give every member of PodGroup team/sample-group the same size: it keeps minMember 3, set "
                            "by another member; this Pod says 2") for w in fourth["warnings"])


async def test_an_explicit_min_member_above_kueues_total_count_is_refused(webhook):
    client = await webhook()
    _, _, validated = await admit(client, kueue_pod(count="2", min_member="3"))
    assert validated["allowed"] is False
    message = validated["status"]["message"]
    assert "runs 2 pods (annotation kueue.x-k8s.io/pod-group-total-count=2)" in message and "minMember 3" in message


async def test_a_malformed_kueue_total_count_is_a_warning_and_ignored(webhook, fake):
    client = await webhook()
    _, mutated, validated = await admit(client, kueue_pod(count="three", min_member="2"))
    assert validated["allowed"] is True
    assert any("pod-group-total-count='three' is not a positive integer" in w for w in mutated["response"]["warnings"])
    assert fake.get(PG_API, "podgroups", "team", "sample-group")["spec"]["minMember"] == 2


async def test_a_kueue_group_name_that_cannot_be_a_pod_group_name_is_refused_with_the_fix(webhook):
    client = await webhook()
    _, _, validated = await admit(client, kueue_pod(group="Sample_Group"))
    assert validated["allowed"] is False and validated["status"]["code"] == 400
    assert "gang.admit.dev/pod-group" in validated["status"]["message"]


async def test_kueue_pods_without_admits_annotation_are_left_to_kueue(webhook, fake):
    client = await webhook()
    out, mutated, validated = await admit(client, kueue_pod(min_member=None))
    assert decode_patch(mutated) == [] and validated["allowed"] is True
    assert fake.objects("podgroups") == []
