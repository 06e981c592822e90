"""A group whose size follows its members (``GangPlan.follows_members``: an Argo step's) on every backend: the
Workload API lowers ``minCount`` on its Workload and PodGroup where the served version lets it change (v1beta1,
Kubernetes 1.37), at the retry's admission and from admit's controller; where it cannot (v1alpha2, Kubernetes 1.36:
kubernetes ``pkg/apis/scheduling/validation/validation.go`` ``validatePodGroupSpecUpdate`` keeps
``spec.schedulingPolicy`` immutable, as the fake does) or the backend has no ``merge_shared`` hook (the test Volcano
backend, ``tests/backends/volcano.py``), every member is refused at its own admission with the fix first, instead
of a first attempt that runs and a retry that waits for ever. The step pods are made as Argo's workflow controller
makes them (``tests/emulations/argo.py``, argo-workflows v4.1.2 ``createWorkflowPod``).

Argo's pod GC (``spec.podGC``; ``pod/cleanup.go`` ``determinePodCleanupAction``) on v1beta1: both native objects
record the members that succeeded (``backends.common.succeeded_record``) and carry an ownerReference to the
Workflow, as the Coscheduling PodGroup does (``tests/operators/test_argo_workflows.py``). No real-tier test goes
with it: the real tier runs Kubernetes 1.36, which serves only ``scheduling.k8s.io/v1alpha2``, where such a group is
refused at its first member (the v1alpha2 test here); ``tests/real/test_real_argo.py`` covers the Coscheduling
version on a real control plane."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from admit.config import Config
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.validate import validate
from tests.backends import volcano
from tests.emulations import argo
from tests.helpers import EXAMPLES, admission_review, eventually
from tests.operator_stack import events_about, operator_cluster

NS = "default"
V1BETA1 = Config(gang_backend="workload-api", workload_api_version="v1beta1")
V1ALPHA2 = Config(gang_backend="workload-api", workload_api_version="v1alpha2")
FIX = "Set annotation gang.admit.dev/backend: coscheduling in the step template's metadata.annotations"


def workflow(retry_policy: str | None = None) -> dict[str, Any]:
    """``examples/argo-workflow-gang-step.yaml`` with its generated name fixed (and the worker's retry policy)."""
    obj = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    obj["metadata"] = {"name": "train-x7k2p", "namespace": NS}
    if retry_policy is not None:
        obj["spec"]["templates"][1]["retryStrategy"] = {"limit": "2", "retryPolicy": retry_policy}
    return obj


def min_counts(fake: Any, version: str, name: str) -> list[Any]:
    """``gang.minCount`` of the native Workload's template and of its PodGroup (``None`` for one that is missing)."""
    wl = fake.get(f"scheduling.k8s.io/{version}", "workloads", NS, name)
    pg = fake.get(f"scheduling.k8s.io/{version}", "podgroups", NS, name)
    return [wl and wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"],
            pg and pg["spec"]["schedulingPolicy"]["gang"]["minCount"]]


async def test_a_retried_step_on_the_v1beta1_workload_api_joins_a_gang_sized_to_the_members_still_to_run(
        aiohttp_server):
    # Before: the Workload API had no merge_shared hook, so after two members succeeded the retried third joined a
    # PodGroup still at minCount 3, and kube-scheduler's GangScheduling PreEnqueue held it for ever.
    async with operator_cluster(aiohttp_server, V1BETA1, argo.install, workload_api="v1beta1") as (fake, op, _):
        await op.submit(workflow())
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        assert op.errors == [] and min_counts(fake, "v1beta1", "train-x7k2p-train") == [3, 3]
        assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in (first, second, third)} == {"train-x7k2p-train"}
        op.finish(first, "Succeeded")
        op.finish(second, "Succeeded")
        op.finish(third, "Failed")
        retried = await op.retry(third)
        assert retried is not None and op.errors == []
        assert retried["spec"]["schedulingGroup"]["podGroupName"] == "train-x7k2p-train"
        assert min_counts(fake, "v1beta1", "train-x7k2p-train") == [1, 1]


async def test_a_retry_waiting_when_the_others_succeed_gets_its_native_group_lowered_by_admits_controller(
        aiohttp_server):
    # Before: only Coscheduling had the hook the controller sizes a group with, so the native group stayed at 3.
    async with operator_cluster(aiohttp_server, V1BETA1, argo.install, controller=True,
                                workload_api="v1beta1") as (fake, op, _):
        await op.submit(workflow("Always"))
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        assert first["metadata"]["labels"]["gang.admit.dev/managed"] == "member"
        for i, pod in enumerate((first, second, third)):
            stored = fake.get("v1", "pods", NS, pod["metadata"]["name"])
            stored["spec"]["nodeName"], stored["status"] = f"node-{i}", {"phase": "Running"}
            fake.put(stored)
        fake.delete_object("v1", "pods", NS, third["metadata"]["name"])
        retried = await op.retry(third, error=True)
        assert retried is not None and op.errors == []
        assert min_counts(fake, "v1beta1", "train-x7k2p-train") == [3, 3]  # three live members: it can form
        op.finish(first, "Succeeded")
        op.finish(second, "Succeeded")
        await eventually(lambda: min_counts(fake, "v1beta1", "train-x7k2p-train") == [1, 1])
        await eventually(lambda: any("minCount 3 -> 1" in e["note"]
                                     for e in events_about(fake, NS, "Pod", retried["metadata"]["name"])))


async def test_a_step_pod_on_the_v1alpha2_workload_api_is_refused_with_the_fix_before_any_attempt_runs(
        aiohttp_server):
    # Before: the first attempt ran, and a retry after two members succeeded waited for ever on minCount 3, which
    # the 1.36 API server refuses to change (422 "field is immutable").
    async with operator_cluster(aiohttp_server, V1ALPHA2, argo.install, workload_api="v1alpha2") as (fake, op, _):
        await op.submit(workflow())
        assert await op.run_step(NS, "train-x7k2p", "train") == []
        assert len(op.errors) == 3
        message = op.errors[0][2]
        assert f'"pods.validate.admit.dev" denied the request: {FIX} (enable it with --extra-gang-backend ' \
               "coscheduling" in message
        assert "scheduling.k8s.io/v1alpha2 Workload's minCount cannot change once created" in message
        assert min_counts(fake, "v1alpha2", "train-x7k2p-train") == [None, None]


@pytest.fixture
def volcano_backend():
    volcano.install()
    yield Config(gang_backend=volcano.NAME, extra_gang_backends=frozenset({"coscheduling"}))
    volcano.uninstall()


def test_a_step_pod_on_a_backend_without_the_merge_hook_is_refused_naming_a_backend_that_can_follow(
        volcano_backend):
    # Before: allowed, with a group nothing would ever lower.
    wf = workflow()
    wf["metadata"]["uid"] = "5f0c9d2e-wf"
    pod = argo.step_pod(wf, wf["spec"]["templates"][1], "train-x7k2p[0].train(0:0)(0)", {"rank": "0"})
    decision = validate(parse_review(dumps(admission_review(pod))), volcano_backend).decision
    assert (decision.allowed, decision.code) == (False, 403)
    assert decision.message.startswith(FIX + ": Pod default/train-x7k2p-worker-")
    assert decision.message.endswith("the volcano-test backend cannot lower a group's minMember")


def native_objects(fake: Any, version: str, name: str) -> list[Any]:
    """The native Workload and PodGroup of group ``name`` (``None`` for one that is missing)."""
    return [fake.get(f"scheduling.k8s.io/{version}", plural, NS, name) for plural in ("workloads", "podgroups")]


async def test_a_retry_after_argos_pod_gc_deleted_the_succeeded_members_runs_alone_on_the_v1beta1_workload_api(
        aiohttp_server):
    # Before: podGC OnPodCompletion deleted the three finished pods; during the retry's backoff no member was left, so
    # admit's controller deleted the Workload and PodGroup as unclaimed, and the retry made them again at minCount 3:
    # no listed pod said that two members had succeeded, and kube-scheduler's GangScheduling PreEnqueue held the retry
    # for ever.
    async with operator_cluster(aiohttp_server, V1BETA1, argo.install, controller=True,
                                workload_api="v1beta1") as (fake, op, _):
        wf = workflow()
        wf["spec"]["podGC"] = {"strategy": "OnPodCompletion"}
        wf["spec"]["templates"][1]["retryStrategy"] = {"limit": "2", "backoff": {"duration": "1m"}}
        stored = await op.submit(wf)
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        assert first["metadata"]["annotations"][argo.POD_GC] == "OnPodCompletion/5s"
        for pod, phase in ((first, "Succeeded"), (second, "Succeeded"), (third, "Failed")):
            op.finish(pod, phase)
            assert op.collect(pod)
        await asyncio.sleep(1.5)  # the backoff, past the controller's orphan grace period (0.5s here)
        # no member is left: both objects live as long as the Workflow, and admit's controller recorded on each who
        # succeeded (from the DELETED events of their pods)
        succeeded = ",".join(sorted(p["metadata"]["name"] for p in (first, second)))
        for obj in native_objects(fake, "v1beta1", "train-x7k2p-train"):
            assert obj is not None and obj["metadata"]["ownerReferences"] == [{
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "train-x7k2p",
                "uid": stored["metadata"]["uid"]}]
            assert obj["metadata"]["annotations"]["gang.admit.dev/members-succeeded"] == succeeded
        retried = await op.retry(third)
        assert retried is not None and op.errors == []
        assert retried["spec"]["schedulingGroup"]["podGroupName"] == "train-x7k2p-train"
        assert min_counts(fake, "v1beta1", "train-x7k2p-train") == [1, 1]
        for obj in native_objects(fake, "v1beta1", "train-x7k2p-train"):
            assert obj["metadata"]["annotations"]["gang.admit.dev/members-succeeded"] == succeeded
        # the retry fails too and is collected: the next one still runs alone
        op.finish(retried, "Failed")
        assert op.collect(retried)
        again = await op.retry(retried)
        assert again is not None and op.errors == []
        assert min_counts(fake, "v1beta1", "train-x7k2p-train") == [1, 1]


RECORD = "gang.admit.dev/members-succeeded"
WORKFLOW_UID = "6c0a7d1e-0000-4000-8000-00000000000a"


def step_plan(config: Config, index: int = 2, attempt: int = 1) -> Any:
    """The plan of the step pod Argo makes for item ``index``'s attempt ``attempt`` (``createWorkflowPod``), as
    admit's webhooks compute it under ``config``."""
    import jsonpatch

    from admit.webhook.mutate import mutate

    wf = workflow()
    wf["metadata"]["uid"] = WORKFLOW_UID
    pod = argo.step_pod(wf, wf["spec"]["templates"][1], f"train-x7k2p[0].train({index}:{index})({attempt})",
                        {"rank": str(index)})

    def review(obj: dict[str, Any]) -> Any:
        return parse_review(dumps(admission_review(obj, "CREATE", strip_namespace=True, namespace=NS)))

    made = jsonpatch.apply_patch(pod, mutate(review(pod), config).patch)
    plan = validate(review(made), config).ensure
    assert plan is not None and plan.follows_members
    return plan


def stored(desired: dict[str, Any], record: str | None = None, min_count: int | None = None) -> dict[str, Any]:
    """``desired`` as kube-apiserver stores it (uid, resourceVersion, ``disruptionMode``, the PodGroup's protection
    finalizer), with ``record`` as its members-succeeded annotation and ``min_count`` as its ``minCount``."""
    import copy

    from admit.backends.workload_api import with_min_count

    obj = copy.deepcopy(desired if min_count is None else with_min_count(desired, min_count))
    obj["metadata"].update(uid=f"{obj['kind'].lower()}-uid", resourceVersion="812")
    if obj["kind"] == "PodGroup":
        obj["metadata"]["finalizers"] = ["scheduling.k8s.io/podgroup-protection"]
        obj["spec"]["disruptionMode"] = "Pod"
    if record is not None:
        obj["metadata"]["annotations"][RECORD] = record
    return obj


def gone(*names: str) -> list[dict[str, Any]]:
    """Members the controller saw deleted after they succeeded (the last state of their DELETED event)."""
    return [{"metadata": {"name": n, "namespace": NS}, "spec": {"nodeName": "node-1"}, "status": {"phase": "Succeeded"}}
            for n in names]


def test_a_native_step_groups_objects_carry_an_empty_record_and_an_owner_reference_to_the_workflow():
    # Before: neither object had the record nor an ownerReference, so admit's controller deleted both as unclaimed
    # while a retry waited out its backoff with no member left.
    from admit.backends.workload_api import BACKEND

    plan = step_plan(V1BETA1)
    workload, pod_group = BACKEND.desired_objects(plan, V1BETA1)
    for obj in (workload, pod_group):
        assert obj["metadata"]["annotations"][RECORD] == ""
        assert obj["metadata"]["ownerReferences"] == [
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "train-x7k2p", "uid": WORKFLOW_UID}]
    # a group that does not follow its members gets neither
    import dataclasses

    plain = dataclasses.replace(plan, follows_members=False, kept_by=[])
    for obj in BACKEND.desired_objects(plain, V1BETA1):
        assert RECORD not in obj["metadata"]["annotations"] and "ownerReferences" not in obj["metadata"]


def test_members_the_native_objects_record_as_succeeded_still_count_once_argos_pod_gc_deleted_their_pods():
    # Before: the Workload API's merge counted only the pods listed, so a retry whose step's other members were
    # collected by Argo's pod GC sized both objects back to minCount 3.
    from admit.backends.workload_api import BACKEND, min_count_of

    plan = step_plan(V1BETA1)
    names = ["train-x7k2p-worker-1", "train-x7k2p-worker-2"]
    for desired in BACKEND.desired_objects(plan, V1BETA1):
        have = stored(desired, ",".join(names))
        want, warnings = BACKEND.merge_shared(have, desired, plan, [])  # only the record says two succeeded
        assert (min_count_of(want), warnings) == (1, [])
        assert want["metadata"]["annotations"][RECORD] == ",".join(names)
        # a recorded member still listed counts once; a member seen to succeed joins the record, which only grows
        listed = gone(names[0], "train-x7k2p-worker-3")
        want, _ = BACKEND.merge_shared(stored(desired, names[1]), desired, plan, listed)
        assert want["metadata"]["annotations"][RECORD] == ",".join(sorted([*names, "train-x7k2p-worker-3"]))
        assert min_count_of(want) == 3  # three of three succeeded: a later step naming the group starts again
        # members not read (admit review): the object is as desired, its record untouched
        assert BACKEND.merge_shared(have, desired, plan, None) == (desired, [])


def test_the_native_objects_take_a_larger_record_with_their_min_count_and_never_a_smaller_one():
    # Before: update_ops wrote only minCount, so the record the merge computed never reached the objects.
    from admit.backends.workload_api import BACKEND

    plan = step_plan(V1BETA1)
    path = "/metadata/annotations/gang.admit.dev~1members-succeeded"
    for desired in BACKEND.desired_objects(plan, V1BETA1):
        have = stored(desired, "a")
        want, _ = BACKEND.merge_shared(have, desired, plan, gone("b"))  # minCount 3 -> 1 and the record a -> a,b
        ops = BACKEND.update_ops(have, want, "v1beta1")
        assert ops is not None and ops[-1] == {"op": "replace", "path": path, "value": "a,b"}
        assert [op["op"] for op in ops[:-1]] == ["test", "replace"] and ops[1]["value"] == 1
        # the desired object records fewer (pods listed no longer show who succeeded): nothing to write
        assert BACKEND.update_ops(stored(desired, "a,b", 1), stored(desired, "a", 1), "v1beta1") == []
        # the record is metadata: written even where minCount is immutable (v1alpha2) if the spec is in step
        assert BACKEND.update_ops(stored(desired), stored(desired, "a"), "v1alpha2") == [
            {"op": "replace", "path": path, "value": "a"}]
        assert BACKEND.update_ops(have, want, "v1alpha2") is None  # minCount cannot follow there
