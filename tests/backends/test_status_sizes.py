"""``admit status`` on a gang whose workload asks for fewer pods than its minMember (``kubectl scale`` below it, a
Job's ``parallelism``, a Kubeflow job's replicas) or for none (a Deployment kept at ``replicas: 0``): the rows say
``BelowMinMember`` / ``ScaledToZero``, with the count its kind's resolver gives (``admit/cli/status.py``
``workload_sizes``), instead of "the gang waits for N more". Objects are shaped as kube-apiserver stores them after
admit mutated them (pod-group label and ``schedulerName`` on the templates, the managed label)."""

from __future__ import annotations

import argparse
import copy
import io
import uuid

from admit.backends.coscheduling.diagnose import diagnose
from admit.backends.diagnose import size_cause
from admit.backends.workload_api.diagnose import diagnose_native
from admit.cli.status import WORKLOAD_RESOURCES, collect, run_status, workload_sizes
from admit.config import Config
from admit.kube.watchcache import KubeRaw
from admit.testing.fake_kube import FakeKubeAPI
from tests.backends.test_native_status import GROUP as NATIVE_GROUP
from tests.backends.test_native_status import NATIVE, native_deployment, native_pod, native_pod_group
from tests.backends.test_status import LABEL, NOW, deployment, failed_scheduling, one, pod, pod_group, ts
from tests.helpers import example

RESOURCES = {r.kind: r for r in WORKLOAD_RESOURCES}
SCHEDULER = "scheduler-plugins-scheduler"


def mutated(obj: dict, templates: list[tuple[str, ...]] = (("spec", "template"),)) -> dict:
    """``obj`` as admit's webhook left it in the store: each template labelled for the group (the object's name)
    and sent to the Coscheduling scheduler, the object marked managed."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta.setdefault("namespace", "team")
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("labels", {})["gang.admit.dev/managed"] = "true"
    for path in templates:
        template = out
        for key in path:
            template = template[key]
        template.setdefault("metadata", {}).setdefault("labels", {})[LABEL] = meta["name"]
        template["spec"]["schedulerName"] = SCHEDULER
    return out


def sizes_of(*objs: dict, config: Config = Config()) -> dict:
    """:func:`workload_sizes` of stored workloads, each listed under its kind's resource."""
    return workload_sizes([(RESOURCES[o["kind"]], [o]) for o in objs], config)


def short_of(name: str, have: int, need: int) -> str:
    """Coscheduling's PreFilter words for a gang short of pods (scheduler-plugins ``core.go`` PreFilter)."""
    return (f"0/2 nodes are available: pre-filter pod {name} cannot find enough sibling pods, current pods number: "
            f"{have}, minMember of group: {need}.")


def scaled_web() -> tuple[dict, list[dict], list[dict]]:
    """Deployment ``team/web`` (minMember 6) after ``kubectl scale deployment web --replicas=2``: its two pods
    Pending with Coscheduling's sibling count, and the FailedScheduling events of that count."""
    web = mutated(deployment("web", {"gang.admit.dev/min-member": "6"}, replicas=2))
    pods = [pod(f"web-7d9f8b6c5d-{i}", "web", condition=short_of(f"web-7d9f8b6c5d-{i}", 2, 6)) for i in range(2)]
    return web, pods, [failed_scheduling(p, short_of(p["metadata"]["name"], 2, 6)) for p in pods]


def test_a_deployment_scaled_below_min_member_is_said_never_to_form_instead_of_waiting_for_more_pods():
    web, pods, events = scaled_web()
    before = one(diagnose(pod_groups=[pod_group("web", 6)], pods=pods, events=events, workloads=[web], now=NOW), "web")
    assert before.reason == "NotEnoughPods"  # the scheduler's words alone: what admit status said before
    row = one(diagnose(pod_groups=[pod_group("web", 6)], pods=pods, events=events, workloads=[web],
                       sizes=sizes_of(web), now=NOW), "web")
    assert (row.reason, row.min_member, row.pods, row.pending) == ("BelowMinMember", 6, 2, 2)
    assert row.message == ("Deployment team/web asks for 2 pod(s) (spec.replicas=2), minMember 6 "
                           "(gang.admit.dev/min-member=6): the gang can never form. Set spec.replicas to at least 6, "
                           "or lower gang.admit.dev/min-member")


def test_the_paused_gang_deployment_example_is_scaled_to_zero_not_waiting_for_three_more_pods():
    paused = mutated(example("paused-gang-deployment.yaml"))
    assert paused["spec"]["replicas"] == 0
    pg = pod_group("batch-workers", 3, namespace="default")
    before = one(diagnose(pod_groups=[pg], pods=[], workloads=[paused], now=NOW), "batch-workers")
    assert before.reason == "NotEnoughPods" and "waits for 3 more" in before.message
    row = one(diagnose(pod_groups=[pg], pods=[], workloads=[paused], sizes=sizes_of(paused), now=NOW),
              "batch-workers")
    assert (row.reason, row.pods, row.pending, row.waiting_seconds) == ("ScaledToZero", 0, 0, None)
    assert row.message == ("Deployment default/batch-workers asks for no pods (spec.replicas=0): scaled to zero, "
                           "nothing to schedule (not a failure); its gang forms once it runs at least 3 pods "
                           "(gang.admit.dev/min-member=3)")


def test_a_statefulset_a_job_and_a_kubeflow_job_below_min_member_name_the_field_to_raise():
    db = mutated(deployment("db", {"gang.admit.dev/min-member": "3"}, replicas=1))
    db["kind"] = "StatefulSet"
    db["spec"].update(serviceName="db", podManagementPolicy="Parallel")
    train = mutated({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "train", "annotations": {"gang.admit.dev/min-member": "4"}},
                     "spec": {"parallelism": 2, "completions": 4, "template": {"spec": {
                         "restartPolicy": "Never", "containers": [{"name": "train", "image": "busybox:1.36"}]}}}})
    worker = {"spec": {"containers": [{"name": "pytorch", "image": "docker.io/kubeflowkatib/pytorch-mnist:v1"}]}}
    mnist = mutated({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                     "metadata": {"name": "mnist", "annotations": {"gang.admit.dev/min-member": "4"}},
                     "spec": {"pytorchReplicaSpecs": {
                         "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": copy.deepcopy(worker)},
                         "Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": copy.deepcopy(worker)}}}},
                    [("spec", "pytorchReplicaSpecs", "Master", "template"),
                     ("spec", "pytorchReplicaSpecs", "Worker", "template")])
    sizes = sizes_of(db, train, mnist)
    owners = (("db", 3, "apps/StatefulSet/"), ("train", 4, "batch/Job/"), ("mnist", 4, "kubeflow.org/PyTorchJob/"))
    rows = diagnose(pod_groups=[pod_group(n, m, owner=o) for n, m, o in owners], pods=[],
                    workloads=[db, train, mnist], sizes=sizes, now=NOW)
    said = {r.group: (r.workload, r.reason, r.message) for r in rows}
    assert said["db"] == ("StatefulSet/db", "BelowMinMember", (
        "StatefulSet team/db asks for 1 pod(s) (spec.replicas=1), minMember 3 (gang.admit.dev/min-member=3): the "
        "gang can never form. Set spec.replicas to at least 3, or lower gang.admit.dev/min-member"))
    assert said["train"] == ("Job/train", "BelowMinMember", (
        "Job team/train asks for 2 pod(s) (spec.parallelism=2), minMember 4 (gang.admit.dev/min-member=4): the gang "
        "can never form. Set spec.parallelism to at least 4, or lower gang.admit.dev/min-member"))
    # the Kubeflow resolver refuses it itself (gang.plan.below_min_member): its own words for the count and the fix
    assert said["mnist"] == ("PyTorchJob/mnist", "BelowMinMember", (
        "PyTorchJob team/mnist asks for 2 pod(s) (spec.pytorchReplicaSpecs[*].replicas=2), minMember 4 (annotation "
        "gang.admit.dev/min-member=4): the gang can never form. Raise the replicas, or lower "
        "gang.admit.dev/min-member"))


def test_workloads_at_or_above_min_member_and_their_children_get_no_size_cause():
    web = mutated(deployment("web", {"gang.admit.dev/min-member": "3"}, replicas=3))
    rs = copy.deepcopy(web)
    rs["kind"] = "ReplicaSet"
    rs["metadata"].update(name="web-7d9f8b6c5d", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": web["metadata"]["uid"],
         "controller": True}])
    rs["spec"]["replicas"] = 1  # a ReplicaSet in a rollout: its parent's gang counts
    plain = deployment("plain", {}, replicas=1)
    sizes = sizes_of(web, rs, plain)
    assert set(sizes) == {("team", "Deployment", "web")} and size_cause(sizes[("team", "Deployment", "web")]) is None
    pods = [pod(f"web-7d9f8b6c5d-{i}", "web", node="n1") for i in range(3)]
    row = one(diagnose(pod_groups=[pod_group("web", 3)], pods=pods, workloads=[web, rs], sizes=sizes, now=NOW), "web")
    assert row.reason == "Scheduled"


def test_a_native_gang_whose_deployment_is_below_min_member_says_so_instead_of_waiting_at_pre_enqueue():
    trainer = native_deployment()
    trainer["spec"]["replicas"] = 2
    pods = [native_pod(i) for i in range(2)]
    before = one_native(diagnose_native(pod_groups=[native_pod_group()], pods=pods, workloads=[trainer],
                                        served="v1beta1", config=NATIVE, now=NOW))
    assert before.reason == "NotEnoughPods" and "PreEnqueue" in before.message
    row = one_native(diagnose_native(pod_groups=[native_pod_group()], pods=pods, workloads=[trainer],
                                     served="v1beta1", config=NATIVE, sizes=sizes_of(trainer, config=NATIVE), now=NOW))
    assert (row.reason, row.min_member, row.pods) == ("BelowMinMember", 4, 2)
    assert row.message.startswith("Deployment team/trainer asks for 2 pod(s) (spec.replicas=2), minMember 4")
    trainer["spec"]["replicas"] = 0
    row = one_native(diagnose_native(pod_groups=[native_pod_group()], pods=[], workloads=[trainer],
                                     served="v1beta1", config=NATIVE, sizes=sizes_of(trainer, config=NATIVE), now=NOW))
    assert row.reason == "ScaledToZero"


def one_native(rows):
    found = [r for r in rows if r.group == NATIVE_GROUP]
    assert len(found) == 1, rows
    return found[0]


def controller_warning(obj: dict, message: str) -> dict:
    """The Warning ``GangBelowMinMember`` Event admit's controller records on the workload
    (``controller/gangs.py``), as kube-apiserver stores it."""
    meta = obj["metadata"]
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"],
                         "creationTimestamp": ts(30)},
            "involvedObject": {"apiVersion": "apps/v1", "kind": obj["kind"], "namespace": meta["namespace"],
                               "name": meta["name"], "uid": meta["uid"]},
            "reason": "GangBelowMinMember", "message": message, "type": "Warning", "count": 1,
            "source": {"component": "admit"}, "firstTimestamp": ts(30), "lastTimestamp": ts(30)}


async def test_admit_status_against_the_fake_api_says_below_min_member_and_scaled_to_zero():
    web, pods, events = scaled_web()
    paused = mutated(example("paused-gang-deployment.yaml"))
    paused["metadata"]["namespace"] = "team"
    async with FakeKubeAPI() as fake:
        fake.unregister("kubeflow.org/v1", "tfjobs")  # a cluster without the TFJob CRD
        for obj in [web, paused, pod_group("web", 6), pod_group("batch-workers", 3), *pods, *events,
                    controller_warning(web, "Set spec.replicas to at least 6, or lower gang.admit.dev/min-member: "
                                            "Deployment team/web runs 2 pods (spec.replicas=2) but its gang needs "
                                            "minMember 6 (gang.admit.dev/min-member=6), so the Coscheduling plugin "
                                            "would keep every pod Pending forever")]:
            fake.put(obj)
        args = argparse.Namespace(api_server=fake.url, kubeconfig=None, namespace="team", all_namespaces=False,
                                  output="text", watch=False, interval=2.0, request_timeout=5.0)
        out, err = io.StringIO(), io.StringIO()
        assert await run_status(args, Config(), out, err) == 0, err.getvalue()
        async with fake.api_client() as api_client:
            rows, notes = await collect(KubeRaw(api_client, timeout=5), Config(), "team")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("GROUP"), out.getvalue()
    assert lines[1].split()[:7] == ["batch-workers", "Deployment/batch-workers", "3", "0", "0", "0", "-"]
    assert "ScaledToZero: Deployment team/batch-workers asks for no pods (spec.replicas=0)" in lines[1]
    assert lines[2].split()[:6] == ["web", "Deployment/web", "6", "2", "0", "2"]
    assert "BelowMinMember: Deployment team/web asks for 2 pod(s) (spec.replicas=2), minMember 6" in lines[2]
    assert "NotEnoughPods" not in out.getvalue()
    assert [r.reason for r in rows] == ["ScaledToZero", "BelowMinMember"]
    # a workload kind whose CRD is not installed has nothing to diagnose: no note (a refused list still has one)
    assert not [n for n in notes if "tfjobs" in n] and "tfjobs" not in err.getvalue(), notes
