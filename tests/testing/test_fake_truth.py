"""The fake API's emulations of kube-apiserver and kube-controller-manager, each checked against what the real component
does (docs/fake-api.md lists them with their upstream source): defaulting before admission, the Deployment
controller's rollout steps, the Job controller's Pods, the NamespaceLifecycle plugin and the namespace controller.

The cluster here is the fake with admit's own webhook app behind its admission chain (as tests/gang/test_children.py),
so what these tests check is what admit is sent and what a user of a real cluster would see."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from admit.config import Config
from admit.testing.fake_defaults import JOB_UID_LABEL, apply_defaults
from admit.testing.fake_kube import FakeKubeAPI
from tests.emulations.kcm import JOB_INDEX, JOB_TRACKING_FINALIZER
from tests.helpers import eventually, example
from tests.webhook_stack import fake_cluster

CONFIG = Config()
PG = ("scheduling.x-k8s.io", "v1alpha1")


@pytest.fixture
async def cluster(aiohttp_server):
    """The fake kube-apiserver calling admit's webhooks, with the Deployment and Job controllers emulated; yields
    ``(fake, ApiClient)`` (a user's client)."""
    async with fake_cluster(aiohttp_server, CONFIG, deployment_controller=True, job_controller=True) as stack:
        yield stack


def reviewed(fake: FakeKubeAPI, kind: str, path: str = "/mutate") -> list[dict[str, Any]]:
    """The objects the webhooks were sent for ``kind`` at ``path``, oldest first."""
    return [r["object"] for p, r, _ in fake.admission.reviews if p == path and r["kind"]["kind"] == kind]


def error_body(exc: pytest.ExceptionInfo) -> dict[str, Any]:
    return json.loads(exc.value.body)


# ------------------------------------------------------------------------------ defaulting before admission


async def test_a_statefulset_written_without_pod_management_policy_reaches_admit_as_ordered_ready_and_is_refused(
        cluster):
    fake, user = cluster
    sts = example("etcd-statefulset.yaml")
    del sts["spec"]["podManagementPolicy"]
    with pytest.raises(k8s.ApiException) as refused:
        await k8s.AppsV1Api(user).create_namespaced_stateful_set("storage", sts)
    # what a real cluster answers (tests/real: a StatefulSet gang with OrderedReady is refused)
    assert refused.value.status == 403 and "OrderedReady (the default when" in error_body(refused)["message"]
    (seen,) = reviewed(fake, "StatefulSet")
    assert seen["spec"]["podManagementPolicy"] == "OrderedReady"
    assert seen["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert seen["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert fake.objects("statefulsets", "storage") == []


async def test_a_deployment_reaches_the_webhooks_with_kube_apiservers_strategy_and_pod_template_defaults(cluster):
    fake, user = cluster
    dep = example("pause-gang-deployment.yaml")
    stored = await k8s.AppsV1Api(user).create_namespaced_deployment(dep["metadata"]["namespace"], dep)
    (seen,) = reviewed(fake, "Deployment")
    assert seen["spec"]["strategy"] == {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert (seen["spec"]["revisionHistoryLimit"], seen["spec"]["progressDeadlineSeconds"]) == (10, 600)
    pod_spec = seen["spec"]["template"]["spec"]
    assert pod_spec["schedulerName"] == "default-scheduler"  # admit is sent the default, not an absent field
    assert (pod_spec["restartPolicy"], pod_spec["dnsPolicy"], pod_spec["terminationGracePeriodSeconds"]) == (
        "Always", "ClusterFirst", 30)
    container = pod_spec["containers"][0]
    assert (container["terminationMessagePath"], container["terminationMessagePolicy"]) == (
        "/dev/termination-log", "File")
    # and admit's mutation still lands on top of the defaults
    assert stored.spec.template.spec.scheduler_name == CONFIG.scheduler_name


async def test_a_job_written_without_parallelism_or_completions_is_sent_to_admit_with_one_of_each(cluster):
    fake, user = cluster
    job = example("training-job.yaml")
    for key in ("parallelism", "completions", "completionMode", "backoffLimit"):
        del job["spec"][key]
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "1"
    await k8s.BatchV1Api(user).create_namespaced_job("ml", job)
    (mutated,) = reviewed(fake, "Job")
    assert {k: mutated["spec"][k] for k in ("parallelism", "completions", "backoffLimit", "completionMode",
                                            "suspend", "podReplacementPolicy")} == {
        "parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": False,
        "podReplacementPolicy": "TerminatingOrFailed"}
    assert mutated["metadata"]["labels"] == {"app": "allreduce"}  # SetDefaults_Job: the template's labels
    # The Job strategy's selector comes after the mutating webhooks and before the validating ones.
    assert JOB_UID_LABEL not in mutated["spec"]["template"]["metadata"]["labels"]
    (validated,) = reviewed(fake, "Job", "/validate")
    uid = validated["metadata"]["uid"]
    assert validated["spec"]["selector"] == {"matchLabels": {JOB_UID_LABEL: uid}}
    assert validated["spec"]["template"]["metadata"]["labels"][JOB_UID_LABEL] == uid


@pytest.mark.parametrize("image, policy", [
    ("busybox", "Always"), ("busybox:latest", "Always"), ("busybox:1.36", "IfNotPresent"),
    ("registry.example:5000/team/app", "Always"), ("registry.example:5000/team/app:2.1", "IfNotPresent"),
    ("busybox@sha256:" + "a" * 64, "IfNotPresent"),
])
def test_a_containers_image_pull_policy_defaults_as_set_defaults_container_gives_it(image, policy):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": image, "ports": [{"containerPort": 80}]}]}}
    apply_defaults("", "pods", pod)
    container = pod["spec"]["containers"][0]
    assert container["imagePullPolicy"] == policy and container["ports"][0]["protocol"] == "TCP"
    assert pod["spec"]["schedulerName"] == "default-scheduler" and pod["spec"]["enableServiceLinks"] is True


def test_defaulting_keeps_every_value_the_user_wrote():
    sts = example("etcd-statefulset.yaml")
    sts["spec"]["updateStrategy"] = {"type": "OnDelete"}
    sts["spec"]["template"]["spec"]["schedulerName"] = "my-scheduler"
    before = copy.deepcopy(sts)
    apply_defaults("apps", "statefulsets", sts)
    assert sts["spec"]["podManagementPolicy"] == "Parallel" and sts["spec"]["replicas"] == 5
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}  # no partition for OnDelete
    assert sts["spec"]["template"]["spec"]["schedulerName"] == "my-scheduler"
    assert sts["spec"]["volumeClaimTemplates"] == before["spec"]["volumeClaimTemplates"]


# ------------------------------------------------------------------------------ the Deployment controller's rollout


def replica_steps(fake: FakeKubeAPI) -> list[tuple[str, str, int]]:
    """``(operation, ReplicaSet revision, replicas)`` of every ReplicaSet write the validating webhook saw."""
    return [(r["operation"], r["object"]["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
             r["object"]["spec"]["replicas"])
            for p, r, _ in fake.admission.reviews if p == "/validate" and r["kind"]["kind"] == "ReplicaSet"]


async def create_then_roll(fake: FakeKubeAPI, user: Any, dep: dict[str, Any]) -> None:
    """Create ``dep``, then change its pod template (a rollout, as ``kubectl set image`` does); returns once the
    Deployment controller is idle with two ReplicaSets and no refused write."""
    apps, ns, name = k8s.AppsV1Api(user), dep["metadata"]["namespace"], dep["metadata"]["name"]
    await apps.create_namespaced_deployment(ns, dep)
    await eventually(lambda: fake.objects("replicasets", ns))
    await fake.deployments.idle()
    await apps.patch_namespaced_deployment(name, ns, {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})
    await eventually(lambda: len(fake.objects("replicasets", ns)) == 2)
    await fake.deployments.idle()
    assert fake.deployments.errors == []


async def test_a_recreate_rollout_scales_the_old_replicaset_to_zero_before_it_creates_the_new_one(cluster):
    fake, user = cluster
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["strategy"] = {"type": "Recreate"}
    await create_then_roll(fake, user, dep)
    replicas = dep["spec"]["replicas"]
    # recreate.go: scaleDownOldReplicaSetsForRecreate, then the new ReplicaSet at full size
    assert replica_steps(fake) == [("CREATE", "1", replicas), ("UPDATE", "1", 0), ("CREATE", "2", replicas)]


async def test_a_rolling_update_with_max_surge_zero_replaces_one_pod_at_a_time(cluster):
    fake, user = cluster
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "1"
    dep["spec"]["replicas"] = 3
    dep["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    await create_then_roll(fake, user, dep)
    # never more than 3 pods, never fewer than 2: new 0, old 2, new 1, old 1, new 2, old 0, new 3
    assert replica_steps(fake)[1:] == [("CREATE", "2", 0), ("UPDATE", "1", 2), ("UPDATE", "2", 1),
                                       ("UPDATE", "1", 1), ("UPDATE", "2", 2), ("UPDATE", "1", 0),
                                       ("UPDATE", "2", 3)]


# ------------------------------------------------------------------------------ the Job controller's Pods


async def test_an_indexed_gang_job_gets_one_admitted_pod_per_index_from_the_job_controller(cluster):
    fake, user = cluster
    job = example("training-job.yaml")
    stored = await k8s.BatchV1Api(user).create_namespaced_job("ml", job)
    await eventually(lambda: len(fake.objects("pods", "ml")) == 4)
    await fake.jobs.idle()
    assert fake.jobs.errors == []
    pods = sorted(fake.objects("pods", "ml"), key=lambda p: p["metadata"]["annotations"][JOB_INDEX])
    assert [p["metadata"]["annotations"][JOB_INDEX] for p in pods] == ["0", "1", "2", "3"]
    for i, pod in enumerate(pods):
        meta = pod["metadata"]
        assert meta["name"].startswith(f"allreduce-{i}-") and pod["spec"]["hostname"] == f"allreduce-{i}"
        assert meta["labels"][JOB_UID_LABEL] == stored.metadata.uid and meta["labels"][JOB_INDEX] == str(i)
        assert meta["finalizers"] == [JOB_TRACKING_FINALIZER]
        assert [(r["kind"], r["uid"], r["controller"]) for r in meta["ownerReferences"]] == [
            ("Job", stored.metadata.uid, True)]
        # admitted as a real cluster admits them: in the Job's gang, on the gang scheduler
        assert meta["labels"]["scheduling.x-k8s.io/pod-group"] == "allreduce"
        assert pod["spec"]["schedulerName"] == CONFIG.scheduler_name
    pod_reviews = [r for p, r, _ in fake.admission.reviews if r["kind"]["kind"] == "Pod"]
    assert len(pod_reviews) == 8 and all(r["userInfo"]["username"].endswith(":job-controller") for r in pod_reviews)


async def test_a_job_gets_parallelism_pods_but_never_more_than_its_completions_and_none_while_suspended(cluster):
    fake, user = cluster
    batch = k8s.BatchV1Api(user)
    job = example("training-job.yaml")
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "2"
    job["spec"].update({"parallelism": 3, "completions": 2, "completionMode": "NonIndexed"})
    await batch.create_namespaced_job("ml", job)
    await eventually(lambda: fake.objects("pods", "ml"))
    await fake.jobs.idle()
    pods = fake.objects("pods", "ml")
    assert len(pods) == 2 and all(p["metadata"]["name"].startswith("allreduce-") for p in pods)
    assert all(JOB_INDEX not in (p["metadata"].get("annotations") or {}) for p in pods)
    paused = example("training-job.yaml")
    paused["metadata"]["name"] = "paused"
    paused["spec"]["suspend"] = True
    await batch.create_namespaced_job("ml", paused)
    await fake.jobs.idle()
    assert not [p for p in fake.objects("pods", "ml") if p["metadata"]["name"].startswith("paused-")]


async def test_suspending_a_running_job_deletes_its_active_pods_and_resuming_it_makes_them_again(cluster):
    fake, user = cluster
    batch = k8s.BatchV1Api(user)
    await batch.create_namespaced_job("ml", example("training-job.yaml"))  # Indexed, parallelism 4
    await eventually(lambda: len(fake.objects("pods", "ml")) == 4)
    await fake.jobs.idle()
    await batch.patch_namespaced_job("allreduce", "ml", {"spec": {"suspend": True}})
    await eventually(lambda: not fake.objects("pods", "ml"))
    await batch.patch_namespaced_job("allreduce", "ml", {"spec": {"suspend": False}})
    await eventually(lambda: len(fake.objects("pods", "ml")) == 4)
    await fake.jobs.idle()
    assert sorted(p["metadata"]["annotations"][JOB_INDEX] for p in fake.objects("pods", "ml")) == ["0", "1", "2", "3"]
    assert fake.jobs.errors == []


async def test_a_job_that_ran_keeps_its_start_time_when_suspended_and_its_template_changes_only_once_it_is_cleared(
        cluster):
    # kubernetes pkg/controller/job/job_controller.go syncJob sets status.startTime when it first runs a Job that is
    # not suspended and never clears it; pkg/registry/batch/job/strategy.go validationOptionsForJob lets a template's
    # scheduling directives change only while the Job is suspended and never started (startTime nil). Kueue's
    # Job.Stop, JobSet's resumeJob and the mpi-operator clear it through /status first (tests/emulations/kit.py).
    fake, user = cluster
    batch = k8s.BatchV1Api(user)
    queued = example("training-job.yaml")
    queued["metadata"]["name"] = "queued"
    queued["spec"]["suspend"] = True
    await batch.create_namespaced_job("ml", queued)
    await batch.create_namespaced_job("ml", example("training-job.yaml"))
    await eventually(lambda: len(fake.objects("pods", "ml")) == 4)
    await fake.jobs.idle()
    assert "startTime" not in (fake.get("batch/v1", "jobs", "ml", "queued").get("status") or {})
    await batch.patch_namespaced_job("queued", "ml", {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}})
    assert fake.get("batch/v1", "jobs", "ml", "allreduce")["status"]["startTime"]
    await batch.patch_namespaced_job("allreduce", "ml", {"spec": {"suspend": True}})
    await eventually(lambda: not fake.objects("pods", "ml"))
    await fake.jobs.idle()
    assert fake.get("batch/v1", "jobs", "ml", "allreduce")["status"]["startTime"]
    placed = {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}
    with pytest.raises(k8s.ApiException) as refused:
        await batch.patch_namespaced_job("allreduce", "ml", placed)
    assert refused.value.status == 422 and "field is immutable" in error_body(refused)["message"]
    await batch.patch_namespaced_job_status("allreduce", "ml", {"status": {"startTime": None}})
    stored = await batch.patch_namespaced_job("allreduce", "ml", placed)
    assert stored.spec.template.spec.node_selector == {"pool": "a"}


def _finish(fake: FakeKubeAPI, pod: dict[str, Any], phase: str) -> None:
    """What the kubelet reports when a pod's containers exit: ``status.phase`` Succeeded or Failed."""
    pod = copy.deepcopy(pod)
    pod["status"] = {**(pod.get("status") or {}), "phase": phase}
    fake.put(pod)


async def test_a_failed_job_pod_is_replaced_until_the_failures_pass_backoff_limit_and_the_job_is_then_failed(cluster):
    fake, user = cluster
    job = example("training-job.yaml")  # Indexed, completions = parallelism = 4
    job["spec"]["backoffLimit"] = 1
    await k8s.BatchV1Api(user).create_namespaced_job("ml", job)
    await eventually(lambda: len(fake.objects("pods", "ml")) == 4)
    await fake.jobs.idle()
    index_1 = next(p for p in fake.objects("pods", "ml") if p["metadata"]["annotations"][JOB_INDEX] == "1")
    _finish(fake, index_1, "Failed")  # failed 1 <= backoffLimit 1: index 1 gets a new pod of its own
    await eventually(lambda: len(fake.objects("pods", "ml")) == 5)
    await fake.jobs.idle()
    replacement = next(p for p in fake.objects("pods", "ml") if p["metadata"]["annotations"][JOB_INDEX] == "1"
                       and p["metadata"]["name"] != index_1["metadata"]["name"])
    status = fake.get("batch/v1", "jobs", "ml", "allreduce")["status"]
    assert (status["active"], status["failed"]) == (4, 1) and "conditions" not in status
    _finish(fake, replacement, "Failed")  # failed 2 > backoffLimit 1: the Job has failed, no pod replaces it
    await eventually(lambda: (fake.get("batch/v1", "jobs", "ml", "allreduce")["status"]).get("failed") == 2)
    await fake.jobs.idle()
    status = fake.get("batch/v1", "jobs", "ml", "allreduce")["status"]
    assert [(c["type"], c["reason"], c["status"]) for c in status["conditions"]] == [
        ("FailureTarget", "BackoffLimitExceeded", "True"), ("Failed", "BackoffLimitExceeded", "True")]
    assert len(fake.objects("pods", "ml")) == 5


# ------------------------------------------------------------------------------ namespaces being deleted


async def test_a_deleted_namespace_refuses_new_content_with_403_and_goes_away_once_its_content_is_gone(cluster):
    fake, user = cluster
    core, apps = k8s.CoreV1Api(user), k8s.AppsV1Api(user)
    namespace = await core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    assert namespace.spec.finalizers == ["kubernetes"] and namespace.status.phase == "Active"
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["namespace"] = "team"
    await apps.create_namespaced_deployment("team", dep)
    held = copy.deepcopy(dep)
    held["metadata"]["name"] = "held"
    held["metadata"]["finalizers"] = ["example.com/drain"]  # an operator's finalizer, removed during deletion
    await apps.create_namespaced_deployment("team", held)
    await fake.deployments.idle()
    assert fake.objects("podgroups", "team") and fake.objects("replicasets", "team")

    await core.delete_namespace("team")
    marked = fake.get("v1", "namespaces", None, "team")
    assert marked["status"]["phase"] == "Terminating" and marked["metadata"]["deletionTimestamp"]
    late = copy.deepcopy(dep)
    late["metadata"]["name"] = "late"
    with pytest.raises(k8s.ApiException) as refused:
        await apps.create_namespaced_deployment("team", late)
    body = error_body(refused)
    assert refused.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('deployments.apps "late" is forbidden: unable to create new content in namespace team '
                               "because it is being terminated")
    assert body["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    assert not [r for p, r, _ in fake.admission.reviews if r.get("name") == "late"]  # refused before the webhooks

    # the namespace controller deletes the content; "held" waits for its finalizer
    await eventually(lambda: [d["metadata"]["name"] for d in fake.objects("deployments", "team")] == ["held"]
                     and not fake.objects("podgroups", "team") and not fake.objects("replicasets", "team"))
    assert fake.get("apps/v1", "deployments", "team", "held")["metadata"]["deletionTimestamp"]
    assert fake.get("v1", "namespaces", None, "team") is not None
    await apps.patch_namespaced_deployment("held", "team", {"metadata": {"finalizers": None}})
    await eventually(lambda: fake.get("v1", "namespaces", None, "team") is None)
    assert fake.namespace_content("team") == []
