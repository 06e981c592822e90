"""A group whose size follows its members (``GangPlan.follows_members``: an Argo step's) on every backend: the
Workload API lowers ``minCount`` on its Workload and PodGroup where the served version lets it change (v1beta1,
Kubernetes 1.37), at the retry's admission and from admit's controller; where it cannot (v1alpha2, Kubernetes 1.36:
kubernetes ``pkg/apis/scheduling/validation/validation.go`` ``validatePodGroupSpecUpdate`` keeps
``spec.schedulingPolicy`` immutable, as the fake does) or the backend has no ``merge_shared`` hook (the test Volcano
backend, ``tests/backends/volcano.py``), every member is refused at its own admission with the fix first, instead
of a first attempt that runs and a retry that waits for ever. The step pods are made as Argo's workflow controller
makes them (``tests/emulations/argo.py``, argo-workflows v4.1.2 ``createWorkflowPod``)."""

from __future__ import annotations

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
FIX = "set annotation gang.admit.dev/backend: coscheduling in the step template's metadata.annotations"


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
