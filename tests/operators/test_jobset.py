"""JobSet end to end on the fake (tests/emulations/jobset.py): the user's JobSet goes in, JobSet's defaulting
webhook and admit's run, the JobSet emulation makes its Jobs, the Job controller makes the pods through JobSet's pod
webhooks and admit's."""

from __future__ import annotations

import contextlib
import json
from typing import Any, AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import ApiException

from admit.config import Config
from tests.emulations import jobset as jobset_operator
from tests.emulations import kueue
from tests.operator_stack import gang_problems
from tests.operators.conftest import operator_cluster

PG_LABEL = "scheduling.x-k8s.io/pod-group"
PG_KEY = ("scheduling.x-k8s.io/v1alpha1", "podgroups")
MULTISLICE = {jobset_operator.EXCLUSIVE: "cloud.google.com/gke-nodepool"}


def jobset(min_member: str = "auto", *, replicas: int = 2, parallelism: int = 4, annotations: dict | None = None,
           **spec: Any) -> dict[str, Any]:
    """The issue's TPU multislice shape: ``replicas`` slices of ``parallelism`` pods."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "multislice", "namespace": "default", "labels": {"team": "tpu"},
                     "annotations": {"gang.admit.dev/min-member": min_member, **(annotations or {})}},
        "spec": {**spec, "replicatedJobs": [{
            "name": "slice", "replicas": replicas,
            "template": {"spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": {
                "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}}]},
    }


def group_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(PG_LABEL)


async def bind(cluster, pod: dict[str, Any], node: str) -> None:
    pod = cluster.fake.get("v1", "pods", "default", pod["metadata"]["name"])
    pod["spec"]["nodeName"] = node
    cluster.fake.put(pod)
    await cluster.fake.settle()


async def test_a_multislice_jobset_with_exclusive_placement_gangs_the_leaders_so_the_gang_can_form(aiohttp_server):
    # JobSet's pod webhook refuses followers until their leader is bound; admit's
    # PodGroup of 8 kept the 2 leaders waiting for followers that could never be created.
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        await cluster.create(jobset(annotations=MULTISLICE))
        leaders = cluster.pods()
        assert sorted((p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
                       p["metadata"]["labels"][jobset_operator.JOB_INDEX]) for p in leaders) == [("0", "0"), ("0", "1")]
        (pg,) = cluster.pod_groups().values()
        assert pg["spec"]["minMember"] == 2 <= len(leaders)  # formable with the pods that can exist
        assert pg["spec"]["minResources"] == {"cpu": "8"}  # placed only where all 8 pods fit
        assert all(group_of(p) == "multislice" for p in leaders)
        # the followers are refused until their leader is scheduled (JobSet's own rule), then join the same gang
        assert any('denied the request: follower pod node selector not set' in e for _, _, e in cluster.fake.jobs.errors)
        for i, leader in enumerate(leaders):
            await bind(cluster, leader, f"pool-{i}")
        pods = cluster.pods()
        assert len(pods) == 8 and {group_of(p) for p in pods} == {"multislice"}
        assert len(cluster.pod_groups()) == 1


async def test_a_multislice_jobset_whose_min_member_needs_the_followers_is_refused_with_the_fix(aiohttp_server):
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        with pytest.raises(ApiException) as refused:
            await cluster.create(jobset("8", annotations=MULTISLICE))
        message = json.loads(refused.value.body)["message"]
        assert "refuses every follower pod until its Job's leader pod is scheduled" in message
        assert "at most 2" in message and "alpha.jobset.sigs.k8s.io/node-selector" in message


async def test_exclusive_placement_by_node_selector_holds_no_follower_back_and_keeps_the_whole_gang(aiohttp_server):
    by_node_selector = {**MULTISLICE, "alpha.jobset.sigs.k8s.io/node-selector": "true"}
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        await cluster.create(jobset(annotations=by_node_selector))
        assert len(cluster.pods()) == 8
        (pg,) = cluster.pod_groups().values()
        assert pg["spec"]["minMember"] == 8


async def test_a_jobset_that_restarts_with_recreate_is_warned_that_old_pods_count_toward_the_new_attempt(
        aiohttp_server):
    # JobSet re-creates each Job once that Job's old pods are gone, while the other Jobs' old pods still terminate
    # under the same pod-group label: the fix is BlockingRecreate (failurePolicy is immutable: at creation).
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        await cluster.create(jobset(failurePolicy={"maxRestarts": 3}))
        warnings = [w for kind, _, w in cluster.fake.admission.warnings if kind == "JobSet"]
        assert any("restartStrategy: BlockingRecreate" in w and "still terminating" in w for w in warnings)
        assert len(cluster.pods()) == 8
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        await cluster.create(jobset(failurePolicy={"maxRestarts": 3, "restartStrategy": "BlockingRecreate"}))
        assert not any("BlockingRecreate" in w for _, _, w in cluster.fake.admission.warnings)


async def test_annotating_a_running_jobset_leaves_its_immutable_templates_alone_and_says_to_recreate_it(
        aiohttp_server):
    # admit wrote the pod-group label and schedulerName into spec.replicatedJobs of the running JobSet, and JobSet's
    # update webhook refused the user's `kubectl annotate` ("spec.replicatedJobs: ... field is immutable").
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        plain = jobset(replicas=1, parallelism=2)
        del plain["metadata"]["annotations"]["gang.admit.dev/min-member"]
        await cluster.create(plain)
        assert len(cluster.pods()) == 2
        stored = cluster.fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", "default", "multislice")
        stored["metadata"]["annotations"] = {"gang.admit.dev/min-member": "auto"}
        replaced = await cluster.replace(stored)  # allowed: neither admit nor JobSet's webhook refuses it
        assert replaced["spec"]["replicatedJobs"] == stored["spec"]["replicatedJobs"]
        assert cluster.pod_groups() == {} and {group_of(p) for p in cluster.pods()} == {None}
        warnings = " ".join(w for _, _, w in cluster.fake.admission.warnings)
        assert "JobSet's update webhook keeps spec.replicatedJobs immutable" in warnings
        assert "delete and recreate the JobSet to gang-schedule it: its replicatedJob" in warnings


async def test_a_re_apply_of_a_ganged_jobset_that_drops_admits_marks_gets_them_back_and_jobset_takes_it(
        aiohttp_server):
    # GitOps re-applies the manifest without admit's label and schedulerName: admit puts them back as stored, so
    # JobSet's immutability check sees no change.
    async with operator_cluster(aiohttp_server, jobset_operator.install) as cluster:
        await cluster.create(jobset(replicas=1, parallelism=2))
        stored = cluster.fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", "default", "multislice")
        manifest = jobset(replicas=1, parallelism=2)
        manifest["spec"] = {**stored["spec"], "replicatedJobs": manifest["spec"]["replicatedJobs"]}
        manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = "Indexed"
        manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
        manifest["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        replaced = await cluster.replace(manifest)
        assert replaced["spec"]["replicatedJobs"] == stored["spec"]["replicatedJobs"]
        assert set(cluster.pod_groups()) == {"multislice"}


# ---------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/jobset.py LATER): what the JobSet controller, Kueue, the user and GitOps send after
# the CREATE, each allowed, the pods after it in the one gang that can form
# ---------------------------------------------------------------------------------------------------------------------

LATER_NS = "ml"


@contextlib.asynccontextmanager
async def later_cluster(aiohttp_server: Any, obj: dict[str, Any]) -> AsyncIterator[tuple[Any, Any]]:
    """The JobSet emulation with the Job controller and the garbage collector, ``obj`` created by a user."""
    from tests.operator_stack import operator_cluster as stack

    async with stack(aiohttp_server, Config(), jobset_operator.LATER.install, gc_orphans_after=0.01) as (fake, op, user):
        await k8s.CustomObjectsApi(user).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", LATER_NS, "jobsets", obj)
        await jobset_operator._settle(op)
        yield fake, op


def later_jobset(min_member: str = "auto", **spec: Any) -> dict[str, Any]:
    obj = jobset(min_member, replicas=2, parallelism=2, **spec)
    obj["metadata"]["namespace"] = LATER_NS
    return obj


def gang_of(fake: Any, op: Any, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The JobSet's live pods, after checking they form one gang that can form."""
    gangs = jobset_operator.gangs_of(op, obj)
    for _, pods in gangs:
        assert gang_problems(fake, LATER_NS, pods, Config()) == []
    assert jobset_operator.refused_writes(op) == []
    return [p for _, pods in gangs for p in pods]


async def test_a_ganged_jobset_suspended_by_its_user_loses_its_pods_and_gets_them_back_in_the_same_gang(aiohttp_server):
    obj = later_jobset()
    async with later_cluster(aiohttp_server, obj) as (fake, op):
        assert len(gang_of(fake, op, obj)) == 4
        await jobset_operator._user_sets_suspend(op, obj, True)
        assert gang_of(fake, op, obj) == []  # the Job controller deleted them
        assert all(j["spec"]["suspend"] for j in fake.objects("jobs", LATER_NS))
        await jobset_operator._user_sets_suspend(op, obj, False)
        pods = gang_of(fake, op, obj)
        assert len(pods) == 4 and {group_of(p) for p in pods} == {"multislice"}
        assert fake.get(*PG_KEY, LATER_NS, "multislice")["spec"]["minMember"] == 4


async def test_kueue_admitting_a_queued_jobset_gives_its_pods_the_flavor_and_the_gang(aiohttp_server):
    obj = later_jobset(suspend=True)
    obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    async with later_cluster(aiohttp_server, obj) as (fake, op):
        assert gang_of(fake, op, obj) == []
        await jobset_operator.kueue_evicts_and_readmits(op, obj)  # admitted: started
        pods = gang_of(fake, op, obj)
        assert len(pods) == 4 and {group_of(p) for p in pods} == {"multislice"}
        assert all(p["spec"]["nodeSelector"] == kueue.FLAVOR["nodeLabels"] for p in pods)
        assert all(p["metadata"]["labels"][kueue.POD_SET_LABEL] == "slice" for p in pods)
        await jobset_operator.kueue_evicts_and_readmits(op, obj)  # preempted, then admitted again
        assert len(gang_of(fake, op, obj)) == 4


async def test_a_failed_job_restarts_the_jobset_and_the_new_attempt_joins_the_same_gang(aiohttp_server):
    for strategy in ("Recreate", "BlockingRecreate"):
        obj = later_jobset(failurePolicy={"maxRestarts": 1, "restartStrategy": strategy})
        async with later_cluster(aiohttp_server, obj) as (fake, op):
            await jobset_operator.restart_after_a_job_fails(op, obj)
            pods = gang_of(fake, op, obj)
            assert len(pods) == 4, strategy
            assert {p["metadata"]["labels"][jobset_operator.RESTART_ATTEMPT] for p in pods} == {"1"}
            assert {group_of(p) for p in pods} == {"multislice"}
            await jobset_operator.restart_after_a_job_fails(op, obj)  # past maxRestarts: the JobSet fails
            assert gang_of(fake, op, obj) == []
            assert fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", LATER_NS, "multislice")["status"][
                "terminalState"] == "Failed"


async def test_a_gitops_re_apply_of_the_jobset_manifest_changes_nothing_and_is_allowed(aiohttp_server):
    obj = later_jobset()
    async with later_cluster(aiohttp_server, obj) as (fake, op):
        before = fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", LATER_NS, "multislice")
        await jobset_operator.gitops_reapply(op, obj)
        after = fake.get("jobset.x-k8s.io/v1alpha2", "jobsets", LATER_NS, "multislice")
        assert after["spec"] == before["spec"] and after["metadata"]["resourceVersion"] == \
            before["metadata"]["resourceVersion"]
        assert len(gang_of(fake, op, obj)) == 4
