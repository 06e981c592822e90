"""Argo Workflows step pods end to end on the fake API: a Workflow whose fan-out step's template carries the gang
annotations, its step pods made as Argo's workflow controller makes them (``tests/emulations/argo.py``) through
admission, then a member failing and Argo retrying it while the others have succeeded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from admit.config import Config
from tests.emulations import argo
from tests.helpers import EXAMPLES, eventually
from tests.operator_stack import PG, events_about, gang_problems, operator_cluster, pod_groups_of

CONFIG = Config()
NS = "default"


def workflow() -> dict[str, Any]:
    """``examples/argo-workflow-gang-step.yaml`` with its generated name fixed."""
    obj = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    obj["metadata"] = {"name": "train-x7k2p", "namespace": NS}
    return obj


async def test_the_step_pods_of_an_argo_fan_out_are_one_gang_named_by_their_template_annotations(aiohttp_server):
    # Before: each step pod got "annotate the controller (Deployment, Job, ...)", which no one can for a Workflow.
    async with operator_cluster(aiohttp_server, CONFIG, argo.install) as (fake, op, _):
        await op.submit(workflow())
        pods = await op.run_step(NS, "train-x7k2p", "train")
        assert len(pods) == 3 and op.errors == []
        assert gang_problems(fake, NS, pods, CONFIG) == []
        assert pod_groups_of(fake, NS) == ["train-x7k2p-train"]
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"] == {
            "minMember": 3, "minResources": {"cpu": "3", "memory": "6Gi"}, "scheduleTimeoutSeconds": 120}
        assert not any("annotate the controller" in w for _, _, w in fake.admission.warnings)


async def test_a_retried_step_pod_joins_a_gang_sized_to_the_members_still_to_run(aiohttp_server):
    # Before: the shared group kept minMember 3 after two members succeeded, and the retried third waited forever
    # (kube-scheduler no longer counts finished pods; argo-workflows#734, volcano#2720).
    async with operator_cluster(aiohttp_server, CONFIG, argo.install) as (fake, op, _):
        await op.submit(workflow())
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        op.finish(first, "Succeeded")
        op.finish(second, "Succeeded")
        op.finish(third, "Failed")
        retried = await op.retry(third)
        assert retried is not None and op.errors == []
        assert retried["metadata"]["annotations"][argo.NODE_NAME].endswith("(1)")
        assert retried["metadata"]["labels"][CONFIG.pod_group_label] == "train-x7k2p-train"
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"] == {
            "minMember": 1, "minResources": {"cpu": "1", "memory": "2Gi"}, "scheduleTimeoutSeconds": 120}
        # a second failure of the retried member leaves the size at the one member still to run
        op.finish(retried, "Failed")
        again = await op.retry(retried)
        assert again is not None and fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minMember"] == 1


def placed(fake: Any, pod: dict[str, Any], node: str) -> None:
    """``pod`` bound to ``node`` and Running, as kube-scheduler and kubelet leave it (no scheduler runs here)."""
    stored = fake.get("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    stored["spec"]["nodeName"] = node
    stored["status"] = {"phase": "Running"}
    fake.put(stored)


async def test_a_retry_still_waiting_when_the_other_members_succeed_gets_its_group_lowered_by_the_controller(
        aiohttp_server):
    # Before: the third member's pod was deleted (its node was lost) while the others ran, so its retry joined a group
    # still at minMember 3 (no member had finished). The two others then succeeded, kube-scheduler stopped counting
    # them, and nothing sized the group again until a new admission that never came: the retry waited forever.
    async with operator_cluster(aiohttp_server, CONFIG, argo.install, controller=True) as (fake, op, _):
        wf = workflow()
        wf["spec"]["templates"][1]["retryStrategy"] = {"limit": "2", "retryPolicy": "Always"}
        await op.submit(wf)
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        assert first["metadata"]["labels"][CONFIG.managed_label] == "member"
        for i, pod in enumerate((first, second, third)):
            placed(fake, pod, f"node-{i}")
        fake.delete_object("v1", "pods", NS, third["metadata"]["name"])
        retried = await op.retry(third, error=True)
        assert retried is not None and op.errors == []
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minMember"] == 3  # three live members: it can form
        op.finish(first, "Succeeded")
        op.finish(second, "Succeeded")
        await eventually(lambda: fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minMember"] == 1)
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minResources"] == {"cpu": "1", "memory": "2Gi"}
        await eventually(lambda: any("minMember 3 -> 1" in e["note"]
                                     for e in events_about(fake, NS, "Pod", retried["metadata"]["name"])))


async def test_argo_does_not_retry_a_deleted_step_pod_under_its_default_retry_policy(aiohttp_server):
    # processNodeRetries: OnFailure (the default without an expression) retries a Failed node, not an Error one.
    async with operator_cluster(aiohttp_server, CONFIG, argo.install) as (fake, op, _):
        await op.submit(workflow())
        first, _, _ = await op.run_step(NS, "train-x7k2p", "train")
        fake.delete_object("v1", "pods", NS, first["metadata"]["name"])
        assert await op.retry(first, error=True) is None
        assert await op.retry(first) is not None


async def test_a_retry_after_argos_pod_gc_deleted_the_members_that_succeeded_still_runs_alone(aiohttp_server):
    # Before: podGC OnPodCompletion deleted the three finished pods; during the retry's backoff no member was left,
    # so admit's controller deleted the group as unclaimed, and the retry made it again at minMember 3: the listed
    # pods no longer said that two members had succeeded, and the retry waited for them for ever.
    async with operator_cluster(aiohttp_server, CONFIG, argo.install, controller=True) as (fake, op, _):
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
        retried = await op.retry(third)
        assert retried is not None and op.errors == []
        group = fake.get(*PG, NS, "train-x7k2p-train")
        assert group["spec"] == {"minMember": 1, "minResources": {"cpu": "1", "memory": "2Gi"},
                                 "scheduleTimeoutSeconds": 120}
        # the group lives as long as its Workflow, and records who succeeded
        assert group["metadata"]["ownerReferences"] == [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                                          "name": "train-x7k2p", "uid": stored["metadata"]["uid"]}]
        assert group["metadata"]["annotations"]["gang.admit.dev/members-succeeded"] == ",".join(
            sorted(p["metadata"]["name"] for p in (first, second)))
        # the retry fails too and is collected: the next one still runs alone
        op.finish(retried, "Failed")
        assert op.collect(retried)
        again = await op.retry(retried)
        assert again is not None and fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minMember"] == 1


async def test_a_member_collected_by_argos_pod_gc_stays_recorded_when_the_controllers_first_writes_of_it_conflict(
        aiohttp_server):
    # Before: the controller forgot a member whose pod was deleted once it had tried to record it, also when the
    # patch met a 409 twice and was only queued again: the record then missed it, and the retry waited for it.
    async with operator_cluster(aiohttp_server, CONFIG, argo.install, controller=True) as (fake, op, _):
        wf = workflow()
        wf["spec"]["podGC"] = {"strategy": "OnPodCompletion"}
        wf["spec"]["templates"][1]["retryStrategy"] = {"limit": "2", "backoff": {"duration": "1m"}}
        await op.submit(wf)
        first, second, third = await op.run_step(NS, "train-x7k2p", "train")
        op.finish(first, "Succeeded")
        fake.fail("PATCH", "podgroups", 409, times=2, name="train-x7k2p-train")  # the record's patch, and again
        assert op.collect(first)
        record = "gang.admit.dev/members-succeeded"
        await eventually(lambda: fake.get(*PG, NS, "train-x7k2p-train")["metadata"]["annotations"][record]
                         == first["metadata"]["name"])
        for pod, phase in ((second, "Succeeded"), (third, "Failed")):
            op.finish(pod, phase)
            assert op.collect(pod)
        await asyncio.sleep(1.5)  # the backoff
        retried = await op.retry(third)
        assert retried is not None and op.errors == []
        assert fake.get(*PG, NS, "train-x7k2p-train")["spec"]["minMember"] == 1
