"""What happens to a gang after admission (docs/behaviour.md, "What happens to a gang after admission").

Each case as a platform team meets it: the objects as the controllers and tools send them, through admit's HTTP
server and its controller, on the fake API with the chart's routing (``tests.webhook_stack.cluster_with_controller``)
and, where the case needs them, the fake's Job controller (status as ``pkg/controller/job`` writes it).
"""

from __future__ import annotations

import asyncio
import json
import copy
from typing import Any

import pytest

from admit.kube.client import KubeError
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import eventually, example, requests_caused
from tests.webhook_stack import PG_API, cluster_with_controller

pytestmark = pytest.mark.fake_api(job_controller=True, deployment_controller=True)

JOBS = "/apis/batch/v1/namespaces/ml/jobs"


def events(fake: FakeKubeAPI) -> list[tuple[str, str, str, str]]:
    """``(type, reason, regarding kind, note)`` of the events.k8s.io/v1 Events written so far."""
    return [(e["type"], e["reason"], e["regarding"]["kind"], e["note"])
            for e in fake.objects("events", api_version="events.k8s.io/v1")]


def job_pods(fake: FakeKubeAPI, job: str, namespace: str = "ml") -> list[dict[str, Any]]:
    return [p for p in fake.objects("pods", namespace)
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job]


def finish(fake: FakeKubeAPI, pod: dict[str, Any], phase: str) -> None:
    """What the kubelet reports when a pod's containers exit (``status.phase`` Succeeded or Failed)."""
    pod = copy.deepcopy(pod)
    pod["status"] = {**(pod.get("status") or {}), "phase": phase}
    fake.put(pod)


def index(pod: dict[str, Any]) -> str:
    return pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]


def min_member(fake: FakeKubeAPI, name: str, namespace: str = "ml") -> int | None:
    pg = fake.get(PG_API, "podgroups", namespace, name)
    return None if pg is None else pg["spec"]["minMember"]


# ======================================================================================================================
# 1. A single-wave Job that loses one pod late
# ======================================================================================================================


def single_wave_job(name: str = "allreduce") -> dict[str, Any]:
    """``examples/training-job.yaml`` (Indexed, completions = parallelism = 4, min-member auto) with the default
    ``backoffLimit`` (6: kube-apiserver defaults it)."""
    job = example("training-job.yaml")
    job["metadata"]["name"] = name
    del job["spec"]["backoffLimit"]
    return job


async def test_a_single_wave_job_that_loses_one_pod_late_gets_its_pod_group_lowered_to_the_pods_that_remain(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", JOBS, body=single_wave_job())
        await eventually(lambda: len(job_pods(fake, "allreduce")) == 4)
        assert min_member(fake, "allreduce") == 4
        first = {index(p): p for p in job_pods(fake, "allreduce")}
        for i in ("0", "1", "2"):
            finish(fake, first[i], "Succeeded")
        finish(fake, first["3"], "Failed")
        # The Job controller counts 3 succeeded and 1 failed (below backoffLimit 6) and replaces index 3 with a pod
        # of its own: the only live pod of the group, which Coscheduling would hold at minMember 4 forever.
        await eventually(lambda: len(job_pods(fake, "allreduce")) == 5)
        job = fake.get("batch/v1", "jobs", "ml", "allreduce")
        assert job["status"]["succeeded"] == 3 and job["status"]["failed"] == 1
        assert job["status"]["completedIndexes"] == "0-2"
        await eventually(lambda: min_member(fake, "allreduce") == 1)
        pg = fake.get(PG_API, "podgroups", "ml", "allreduce")
        assert pg["spec"]["minResources"] == {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"}
        await eventually(lambda: any(e[1] == "PodGroupUpdated" and "minMember 4 -> 1" in e[3]
                                     for e in events(fake)))
        # The replacement completes the Job; nothing raises minMember again.
        replacement = next(p for p in job_pods(fake, "allreduce") if p["metadata"]["name"] != first["3"]["metadata"][
            "name"] and index(p) == "3")
        finish(fake, replacement, "Succeeded")
        await eventually(lambda: any(c["type"] == "Complete" for c in (fake.get("batch/v1", "jobs", "ml", "allreduce")
                                                                      .get("status") or {}).get("conditions") or []))
        assert min_member(fake, "allreduce") == 1


async def test_a_pod_that_fails_while_its_siblings_run_keeps_the_whole_gang(aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", JOBS, body=single_wave_job("early"))
        await eventually(lambda: len(job_pods(fake, "early")) == 4)
        first = {index(p): p for p in job_pods(fake, "early")}
        finish(fake, first["2"], "Failed")  # the other three still run: the replacement joins them
        await eventually(lambda: len(job_pods(fake, "early")) == 5)
        await eventually(lambda: (fake.get("batch/v1", "jobs", "ml", "early").get("status") or {}).get("failed") == 1)
        await stack.controller.gangs["coscheduling"].managed["PodGroup"].wait_synced(1.0)
        assert min_member(fake, "early") == 4


async def test_a_job_wide_backoff_limit_gets_a_word_at_admission(aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", JOBS, body=single_wave_job("worded"))
        validations = [r for p, req, r in fake.admission.reviews
                       if p == "/validate" and req["kind"]["kind"] == "Job"]
        assert len(validations) == 1
        note = validations[0]["status"]["message"]
        assert note.startswith("Job ml/worded: spec.backoffLimit=6 replaces a failed pod with a new pod of its own")
        assert "admit's controller lowers the PodGroup's minMember" in note
        assert "status.succeeded" in note
        # A note, not a warning: every Job has a backoffLimit (6 by default), and admit review --strict fails on
        # warnings.
        assert not [w for w in validations[0].get("warnings", []) if "backoffLimit" in w]


# ======================================================================================================================
# 2. A GitOps re-apply of a running Job that names schedulerName: default-scheduler
# ======================================================================================================================

#: What ``kubectl apply`` (and Argo CD's client-side sync) sends for a manifest exported from a cluster or rendered
#: from a chart default: a strategic merge patch. Server-side apply (Flux, Argo CD ``ServerSideApply=true``) makes
#: the applier own the field and writes it back the same way; kube-apiserver hands the webhook the same object.
REAPPLY = {"spec": {"template": {"spec": {"schedulerName": "default-scheduler"}}}}
SMP = "application/strategic-merge-patch+json"


async def test_a_gitops_reapply_of_a_running_job_naming_the_default_scheduler_is_stored_with_admits_scheduler(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", JOBS, body=single_wave_job("synced"))
        await eventually(lambda: len(job_pods(fake, "synced")) == 4)
        fake.admission.warnings.clear()
        patched = await stack.kube.request("PATCH", f"{JOBS}/synced", body=REAPPLY, content_type=SMP)
        template = patched["spec"]["template"]
        assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "synced"
        # Not told that its pods will not be gang-scheduled: they are.
        assert not [w for w in fake.admission.warnings if "immutable" in w or "will not be gang" in w]
        # Every later sync is the same no-op.
        again = await stack.kube.request("PATCH", f"{JOBS}/synced", body=REAPPLY, content_type=SMP)
        assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


async def test_a_job_template_change_admit_cannot_undo_is_still_refused_by_kube_apiserver_as_immutable(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", JOBS, body=single_wave_job("frozen"))
        change = {"spec": {"template": {"spec": {"containers": [{"name": "worker", "image": "ghcr.io/example/x:2"}]}}}}
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("PATCH", f"{JOBS}/frozen", body=change, content_type=SMP)
        assert refused.value.status == 422
        assert "spec.template: Invalid value" in refused.value.message and "field is immutable" in refused.value.message


def test_the_fake_refuses_a_job_template_change_except_scheduling_directives_of_a_suspended_job_never_started():
    from admit.testing.fake_kube.objects import job_template_errors

    old = {"spec": {"suspend": True, "template": {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": []}}}}
    relabelled = copy.deepcopy(old)
    relabelled["spec"]["template"]["metadata"]["labels"]["b"] = "2"
    assert job_template_errors(relabelled, old) == []
    started = dict(old, status={"startTime": "2026-12-01T00:00:00Z"})
    assert job_template_errors(relabelled, started) == [
        "spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"]
    rescheduled = copy.deepcopy(old)
    rescheduled["spec"]["template"]["spec"]["schedulerName"] = "other"
    assert job_template_errors(rescheduled, old)


# ======================================================================================================================
# 3. A gang annotation removed while admit could not see the namespace
# ======================================================================================================================

DEPLOYMENTS = "/apis/apps/v1/namespaces/team/deployments"
MERGE = "application/merge-patch+json"


def namespace_label(fake: FakeKubeAPI, value: str, namespace: str = "team") -> None:
    """Namespace ``team`` labelled ``gang.admit.dev/webhook=<value>``: ``disabled`` takes it out of the chart's
    namespaceSelector (optOut mode), so kube-apiserver no longer sends its objects to admit."""
    fake.put({"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace,
                                                         "gang.admit.dev/webhook": value}}})


def paused_gang(name: str = "trainer") -> dict[str, Any]:
    """``examples/pause-gang-deployment.yaml``, paused (replicas 0) in namespace ``team`` with minMember 3."""
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"].update(name=name, namespace="team")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "3"
    dep["spec"]["replicas"] = 0
    return dep


async def test_a_pod_group_is_kept_while_a_stored_template_still_names_it_after_the_annotation_went_unseen(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", DEPLOYMENTS, body=paused_gang())
        await eventually(lambda: (fake.get(PG_API, "podgroups", "team", "trainer") or {}).get("metadata", {}).get(
            "ownerReferences"))
        # A namespace tool flips the label the webhook's namespaceSelector matches: admit sees nothing for a while.
        namespace_label(fake, "disabled")
        gone = {"metadata": {"annotations": {"gang.admit.dev/min-member": None}}}
        stored = await stack.kube.request("PATCH", f"{DEPLOYMENTS}/trainer", body=gone, content_type=MERGE)
        assert stored["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "trainer"
        await eventually(lambda: any(e[1] == "GangAnnotationRemoved" for e in events(fake)))
        [note] = [e[3] for e in events(fake) if e[1] == "GangAnnotationRemoved"]
        assert note.startswith("put gang.admit.dev/min-member back on this Deployment, or update it once (admit then "
                               "removes its marks): its pods wait for PodGroup trainer")
        await asyncio.sleep(4 * stack.controller.settings.orphan_grace_period)
        assert fake.get(PG_API, "podgroups", "team", "trainer") is not None  # not deleted as an orphan
        # admit sees the namespace again. A scale up is allowed, with the label named.
        namespace_label(fake, "enabled")
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/trainer/scale", body={"spec": {"replicas": 3}},
                                 content_type=MERGE)
        assert any(kind == "Scale" and "its pods wait for PodGroup trainer, named by the label admit left" in w
                   for kind, _, w in fake.admission.warnings)
        # The next UPDATE takes admit's marks off, saying so; the PodGroup then goes as an orphan.
        fake.admission.warnings.clear()
        relabel = {"metadata": {"labels": {"team": "ml"}}}
        updated = await stack.kube.request("PATCH", f"{DEPLOYMENTS}/trainer", body=relabel, content_type=MERGE)
        assert "scheduling.x-k8s.io/pod-group" not in updated["spec"]["template"]["metadata"]["labels"]
        assert "gang.admit.dev/managed" not in updated["metadata"]["labels"]
        [warning] = [w for _, _, w in fake.admission.warnings if "admit removed the" in w]
        assert warning == ("put gang.admit.dev/min-member back to gang it again: admit removed the "
                           "scheduling.x-k8s.io/pod-group label left on its pod template, so its new pods join no "
                           "PodGroup")
        await eventually(lambda: fake.get(PG_API, "podgroups", "team", "trainer") is None)


def test_a_job_whose_annotation_went_unseen_keeps_its_immutable_template_and_is_told_to_recreate_it():
    from admit.config import Config
    from admit.webhook.admissionreview import parse_review
    from admit.webhook.mutate import mutate
    from tests.helpers import admission_review

    job = example("training-job.yaml")
    job["metadata"]["labels"] = {"gang.admit.dev/managed": "true"}
    job["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "allreduce"
    job["spec"]["template"]["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
    del job["metadata"]["annotations"]["gang.admit.dev/min-member"]
    changed = copy.deepcopy(job)
    changed["metadata"]["labels"]["team"] = "ml"
    decision = mutate(parse_review(json.dumps(admission_review(changed, "UPDATE", old=job)).encode()), Config())
    assert decision.patch == []
    [warning] = decision.warnings
    assert "its pods wait for PodGroup allreduce" in warning
    assert warning.startswith("put gang.admit.dev/min-member back on this Job, or recreate it without the "
                              "scheduling.x-k8s.io/pod-group label")
    assert warning.endswith("named by the label admit left on its pod template")


# ======================================================================================================================
# 4. An HPA whose minReplicas is below the gang's minMember
# ======================================================================================================================

HPAS = "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers"


def hpa(target: str, min_replicas: int | None, max_replicas: int = 10) -> dict[str, Any]:
    """A HorizontalPodAutoscaler as ``kubectl autoscale deployment <target> --min=N --max=M --cpu-percent=80``
    writes it (autoscaling/v2)."""
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "maxReplicas": max_replicas,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                      "target": {"type": "Utilization", "averageUtilization": 80}}}],
    }
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": target, "namespace": "team"}, "spec": spec}


async def test_an_hpa_whose_min_replicas_is_below_the_gang_min_member_is_refused_naming_both_numbers(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        dep = paused_gang("web")
        dep["spec"]["replicas"] = 3
        await stack.kube.request("POST", DEPLOYMENTS, body=dep)
        await eventually(lambda: stack.controller.workloads and any(
            c.get("team", "web") for c in stack.controller.workloads.values()))
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("POST", HPAS, body=hpa("web", 2))
        assert refused.value.status == 403
        assert refused.value.message.endswith(
            'admission webhook "scale.validate.admit.dev" denied the request: Set spec.minReplicas to at least 3, or '
            "lower gang.admit.dev/min-member on Deployment team/web: HorizontalPodAutoscaler team/web has "
            "spec.minReplicas=2, below the gang minMember 3 of Deployment team/web (gang.admit.dev/min-member=3): the "
            "Coscheduling plugin would keep the pods of a smaller Deployment Pending forever, so admit refuses every "
            "scale below 3, on every HPA cycle, with the error only in this HPA's status")
        with pytest.raises(KubeError) as defaulted:  # minReplicas left out: kube-apiserver defaults it to 1
            await stack.kube.request("POST", HPAS, body=hpa("web", None))
        assert "spec.minReplicas=1, below the gang minMember 3" in defaulted.value.message
        with pytest.raises(KubeError) as capped:
            await stack.kube.request("POST", HPAS, body=hpa("web", 3, max_replicas=2))
        assert "spec.maxReplicas=2, below the gang minMember 3" in capped.value.message
        created = await stack.kube.request("POST", HPAS, body=hpa("web", 3))
        assert created["spec"]["minReplicas"] == 3
        # Changing it later is checked the same way.
        with pytest.raises(KubeError):
            await stack.kube.request("PATCH", f"{HPAS}/web", body={"spec": {"minReplicas": 1}}, content_type=MERGE)
        assert fake.get("autoscaling/v2", "horizontalpodautoscalers", "team", "web")["spec"]["minReplicas"] == 3


async def test_an_hpa_of_a_workload_that_is_no_gang_or_an_auto_gang_is_allowed_with_no_api_read(aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        auto = paused_gang("auto")
        auto["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
        auto["spec"]["replicas"] = 3
        await stack.kube.request("POST", DEPLOYMENTS, body=auto)
        await eventually(lambda: (fake.get(PG_API, "podgroups", "team", "auto") or {}).get("metadata", {}).get(
            "ownerReferences"))  # adopted: the controller's own live read of the Deployment is behind us
        await eventually(lambda: any(c.get("team", "auto") for c in stack.controller.workloads.values()))
        fake.clear_requests()
        await stack.kube.request("POST", HPAS, body=hpa("auto", 1))  # auto follows the scale: any HPA fits
        await stack.kube.request("POST", HPAS, body=hpa("plain", 1))  # no gang at all
        assert fake.requests_for("deployments", "GET") == []


STATEFULSETS = "/apis/apps/v1/namespaces/team/statefulsets"


def parallel_statefulset(name: str, min_member: str, replicas: int = 3) -> dict[str, Any]:
    """A gang StatefulSet as a Helm chart writes one (``podManagementPolicy: Parallel``), in namespace ``team``."""
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "team", "annotations": {"gang.admit.dev/min-member": min_member}},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                         {"name": "server", "image": "ghcr.io/acme/server:1.0",
                          "resources": {"requests": {"cpu": "1"}}}]}}}}


async def test_a_statefulset_applied_after_its_hpa_whose_min_replicas_is_below_its_min_member_is_refused_with_the_fix(
        aiohttp_client, fake):
    # Helm's install order and Argo CD's sync order put a HorizontalPodAutoscaler before a StatefulSet: the HPA's
    # CREATE finds no target to check; the StatefulSet's CREATE is the user's write left to refuse it at.
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        scaler = hpa("db", 1, max_replicas=6)
        scaler["spec"]["scaleTargetRef"].update(kind="StatefulSet", name="db")
        await stack.kube.request("POST", HPAS, body=scaler)
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("POST", STATEFULSETS, body=parallel_statefulset("db", "3"))
        assert refused.value.status == 403
        assert refused.value.message.endswith(
            "Set spec.minReplicas of HorizontalPodAutoscaler team/db to at least 3, or gang.admit.dev/min-member to "
            "at most 1 (or auto): that HPA scales this StatefulSet down to 1 replica, below its gang minMember 3, and "
            "admit would refuse each such scale, on every HPA cycle, with the error only in the HPA's status")
        assert fake.get(PG_API, "podgroups", "team", "db") is None
        await stack.kube.request("POST", STATEFULSETS, body=parallel_statefulset("db", "auto"))  # auto follows it
        await stack.kube.request("POST", STATEFULSETS, body=parallel_statefulset("other", "3"))  # not its target


async def test_raising_a_deployments_min_member_above_its_hpa_bounds_is_refused_and_a_failed_hpa_list_only_warns(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        dep = paused_gang("web")
        dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "2"
        dep["spec"]["replicas"] = 3
        await stack.kube.request("POST", DEPLOYMENTS, body=dep)
        await stack.kube.request("POST", HPAS, body=hpa("web", 2, max_replicas=3))
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("PATCH", f"{DEPLOYMENTS}/web", content_type=MERGE,
                                     body={"metadata": {"annotations": {"gang.admit.dev/min-member": "3"}}})
        assert "Set spec.minReplicas of HorizontalPodAutoscaler team/web to at least 3" in refused.value.message
        await stack.kube.request("PATCH", f"{HPAS}/web", body={"spec": {"minReplicas": 3}}, content_type=MERGE)
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/web", content_type=MERGE,
                                 body={"metadata": {"annotations": {"gang.admit.dev/min-member": "3"}}})
        fake.fail("list", "horizontalpodautoscalers", status=403)  # a chart from before the rule: no RBAC for it
        patched = await stack.kube.request("PATCH", f"{DEPLOYMENTS}/web", content_type=MERGE,
                                           body={"metadata": {"annotations": {"gang.admit.dev/min-member": "4"}},
                                                 "spec": {"replicas": 4}})
        assert any(w.startswith("give no HorizontalPodAutoscaler of Deployment team/web a minReplicas below 4: admit "
                                "could not list them") for _, _, w in fake.admission.warnings)
        assert patched["metadata"]["annotations"]["gang.admit.dev/min-member"] == "4"


# ======================================================================================================================
# 5. Kueue's partial admission; MultiKueue's manager and worker copies
# ======================================================================================================================


def kueue_job(name: str, **annotations: str) -> dict[str, Any]:
    """A Job for Kueue (queue-name label; Kueue's webhook suspends it), with a fixed minMember of 4."""
    job = single_wave_job(name)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "4"
    job["metadata"]["annotations"].update(annotations)
    job["spec"]["suspend"] = True
    return job


async def test_kueue_partial_admission_a_fixed_min_member_cannot_survive_is_refused_at_the_jobs_create_with_the_fix(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("POST", JOBS, body=kueue_job("partial", **{
                "kueue.x-k8s.io/job-min-parallelism": "2"}))
        assert refused.value.status == 403
        assert "Set kueue.x-k8s.io/job-min-parallelism to at least 4, or gang.admit.dev/min-member to auto: Kueue's " \
               "partial admission may set spec.parallelism=3, which minMember 4 cannot survive" in refused.value.message
        await stack.kube.request("POST", JOBS, body=kueue_job("partial", **{  # the fix: no count below the gang
            "kueue.x-k8s.io/job-min-parallelism": "4"}))
        # Lowered later (a stored Job): a warning, and Kueue's start with 2 pods is refused naming the annotation.
        await stack.kube.request("PATCH", f"{JOBS}/partial", content_type=MERGE, body={"metadata": {"annotations": {
            "kueue.x-k8s.io/job-min-parallelism": "2"}}})
        assert any(w.startswith("set kueue.x-k8s.io/job-min-parallelism to at least 4") for _, _, w in
                   fake.admission.warnings)
        with pytest.raises(KubeError) as kueue:
            await stack.kube.request("PATCH", f"{JOBS}/partial", content_type=MERGE,
                                     body={"spec": {"parallelism": 2, "suspend": False}})
        assert "runs 2 pods (spec.parallelism=2) but its gang needs minMember 4" in kueue.value.message
        assert kueue.value.message.endswith(
            "This Job has kueue.x-k8s.io/job-min-parallelism=2: if Kueue's partial admission set spec.parallelism, "
            "set kueue.x-k8s.io/job-min-parallelism to at least 4, or gang.admit.dev/min-member to auto")


async def test_multikueue_the_managers_copy_is_left_unchanged_and_the_workers_copy_is_ganged_with_a_note(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        manager = kueue_job("dispatched")
        manager["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        stored = await stack.kube.request("POST", JOBS, body=manager)
        template = stored["spec"]["template"]
        assert "scheduling.x-k8s.io/pod-group" not in template["metadata"]["labels"]
        assert template["spec"]["schedulerName"] == "default-scheduler"
        assert fake.get(PG_API, "podgroups", "ml", "dispatched") is None
        [word] = {w for _, _, w in fake.admission.warnings if "MultiKueue" in w}
        assert word.startswith("run admit on the MultiKueue worker clusters to gang this Job")
        # The worker's copy, as job_multikueue_adapter.go SyncJob makes it: no managedBy, the origin label.
        worker = kueue_job("mirrored")
        worker["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = "manager-eu"
        worker["spec"]["suspend"] = False
        await stack.kube.request("POST", JOBS, body=worker)
        assert min_member(fake, "mirrored") == 4
        [note] = [r["status"]["message"] for p, req, r in fake.admission.reviews
                  if p == "/validate" and req.get("name") == "mirrored"]
        assert "is MultiKueue's copy from manager manager-eu" in note and "it is ganged here" in note


# ======================================================================================================================
# 6. Joining a hand-written PodGroup that can never be satisfied
# ======================================================================================================================

PG1 = {"apiVersion": PG_API, "kind": "PodGroup", "metadata": {"name": "pg1", "namespace": "team"},
       "spec": {"minMember": 3}}
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team/podgroups"


def pg1_deployment(name: str = "pause", replicas: int = 2) -> dict[str, Any]:
    """scheduler-plugins' Coscheduling example (``doc/coscheduling.md``: PodGroup ``pg1`` minMember 3, a Deployment
    of 2 pause pods labelled for it), with admit's annotations as admit's own refusal advises
    (``gang.admit.dev/pod-group: pg1`` "to join that PodGroup as it is")."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team",
                         "annotations": {"gang.admit.dev/min-member": "auto", "gang.admit.dev/pod-group": "pg1"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, "scheduling.x-k8s.io/pod-group": "pg1"}},
                                  "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                                           "resources": {"requests": {"cpu": "100m"}}}]}}}}


async def test_joining_a_hand_written_pod_group_the_workload_can_never_fill_is_refused_naming_both_numbers(
        aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", PODGROUPS, body=PG1)
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("POST", DEPLOYMENTS, body=pg1_deployment())
        assert refused.value.status == 403
        message = refused.value.message
        assert "denied the request: Run at least 3 pods (spec.replicas), or lower the PodGroup's spec.minMember to 2" \
            in message
        assert ("PodGroup team/pg1 was not created by admit and needs minMember 3, but Deployment team/pause runs 2 "
                "pods (spec.replicas=2), so the Coscheduling plugin would keep every pod Pending forever") in message
        assert fake.get("apps/v1", "deployments", "team", "pause") is None
        assert fake.get(PG_API, "podgroups", "team", "pg1")["spec"] == {"minMember": 3}  # never touched
        # Enough pods: joined as it is.
        joined = await stack.kube.request("POST", DEPLOYMENTS, body=pg1_deployment("pause3", 3))
        assert joined["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pg1"


async def test_workloads_that_share_a_hand_written_pod_group_are_counted_together(aiohttp_client, fake):
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await stack.kube.request("POST", PODGROUPS, body=dict(PG1, spec={"minMember": 4}))
        for name in ("leader", "workers"):  # paused: allowed, and each names pg1
            await stack.kube.request("POST", DEPLOYMENTS, body=pg1_deployment(name, 0))
        await eventually(lambda: len([c for c in stack.controller._claims.values()  # noqa: SLF001
                                      if c.key == ("team", "pg1")]) == 2)
        fake.admission.warnings.clear()
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/leader/scale", body={"spec": {"replicas": 2}},
                                 content_type=MERGE)
        assert any(w.startswith("run 4 pods together in the workloads that name PodGroup team/pg1") and
                   "this one runs 2, the others 0" in w for _, _, w in fake.admission.warnings)
        await eventually(lambda: any(c.plan is not None and c.plan.total_pods == 2
                                     for c in stack.controller._claims.values()))  # noqa: SLF001
        fake.admission.warnings.clear()
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/workers/scale", body={"spec": {"replicas": 2}},
                                 content_type=MERGE)  # 2 + 2 reach 4: no word
        assert not any("needs minMember 4" in w for _, _, w in fake.admission.warnings)


def test_admit_review_of_the_pod_group_and_the_deployment_together_refuses_the_deployment(tmp_path):
    import yaml

    from admit.cli.review import load_documents, review_documents
    from admit.config import Config

    path = tmp_path / "coscheduling-example.yaml"
    path.write_text(yaml.safe_dump_all([PG1, pg1_deployment()]))
    results = asyncio.run(review_documents(load_documents([str(path)]), Config()))
    deployment = next(r for r in results if r["kind"] == "Deployment")
    assert deployment["allowed"] is False
    assert "PodGroup team/pg1 was not created by admit and needs minMember 3" in deployment["message"]


# ======================================================================================================================
# 8. minResources includes a RuntimeClass's pod overhead
# ======================================================================================================================

KATA = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-qemu"},
        "handler": "kata-qemu", "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}}}


async def test_min_resources_counts_the_pod_overhead_of_the_runtime_class_kube_apiserver_adds_to_each_pod(
        aiohttp_client, fake):
    fake.put(KATA)
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        await eventually(lambda: "kata-qemu" in stack.controller.runtime_overheads)
        dep = paused_gang("sandboxed")
        dep["spec"]["replicas"] = 3
        dep["spec"]["template"]["spec"]["runtimeClassName"] = "kata-qemu"
        fake.clear_requests()
        await stack.kube.request("POST", DEPLOYMENTS, body=dep)
        # 3 pods of 100m / 64Mi (examples/pause-gang-deployment.yaml) plus 250m / 160Mi of overhead each.
        expected = {"cpu": "1050m", "memory": "672Mi"}
        assert fake.get(PG_API, "podgroups", "team", "sandboxed")["spec"]["minResources"] == expected
        assert requests_caused(fake, "runtimeclasses") == []  # from the controller's cache: no get on the path (its informer may relist)
        # The controller keeps it (it adds the same overhead), also across a scale.
        await eventually(lambda: (fake.get(PG_API, "podgroups", "team", "sandboxed") or {}).get("metadata", {}).get(
            "ownerReferences"))
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/sandboxed", content_type=MERGE,
                                 body={"metadata": {"annotations": {"gang.admit.dev/min-member": "auto"}}})
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/sandboxed/scale", body={"spec": {"replicas": 4}},
                                 content_type=MERGE)
        await eventually(lambda: fake.get(PG_API, "podgroups", "team", "sandboxed")["spec"] == {
            "minMember": 4, "minResources": {"cpu": "1400m", "memory": "896Mi"}, "scheduleTimeoutSeconds": 10})
        await asyncio.sleep(0.5)
        assert fake.get(PG_API, "podgroups", "team", "sandboxed")["spec"]["minResources"] == {
            "cpu": "1400m", "memory": "896Mi"}


# ======================================================================================================================
# 7. A PodGroup controlled by the workload but not made by admit
# ======================================================================================================================


async def test_a_pod_group_the_workloads_own_operator_made_is_never_written_and_a_mismatch_is_named(
        aiohttp_client, fake):
    """Decision: admit never writes a PodGroup it did not create whose controller ownerReference is the workload:
    its maker reconciles that spec (the training-operator and the spark-operator set minMember from their own
    fields), so admit keeping it in step with the replicas would undo and redo the operator's write on every sync.
    admit says instead, at each admission, when its minMember and the pods disagree."""
    async with cluster_with_controller(aiohttp_client, fake) as stack:
        dep = paused_gang("web")
        del dep["metadata"]["annotations"]["gang.admit.dev/min-member"]
        dep["spec"].update(replicas=3, strategy={"type": "Recreate"})
        stored = await stack.kube.request("POST", DEPLOYMENTS, body=dep)
        fake.put({"apiVersion": PG_API, "kind": "PodGroup",
                  "metadata": {"name": "web", "namespace": "team", "ownerReferences": [
                      {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                       "uid": stored["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
                  "spec": {"minMember": 3}})
        gang = {"metadata": {"annotations": {"gang.admit.dev/min-member": "auto"}}}
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/web", body=gang, content_type=MERGE)
        fake.admission.warnings.clear()
        await stack.kube.request("PATCH", f"{DEPLOYMENTS}/web/scale", body={"spec": {"replicas": 2}},
                                 content_type=MERGE)
        [warning] = {w for _, _, w in fake.admission.warnings if "operator sets it" in w}
        assert warning == (
            "change its minMember 3 where the Deployment's operator sets it, or delete PodGroup team/web so that admit "
            "makes its own: this Deployment runs 2 pods, so every pod stays Pending until they match")
        await asyncio.sleep(4 * stack.controller.settings.orphan_grace_period)
        assert fake.get(PG_API, "podgroups", "team", "web")["spec"] == {"minMember": 3}
        assert not [e for e in events(fake) if e[1] in ("PodGroupUpdated", "PodGroupAdopted")]


def test_the_controller_reports_a_stored_workload_that_can_never_fill_its_hand_written_pod_group():
    from tests.helpers import decide_pod_group as decide
    from admit.config import Config
    from admit.controller.claims import claim_of
    from admit.kube.watchcache import Resource

    deployments = Resource("apps", "v1", "deployments", "Deployment")
    stored = pg1_deployment()
    stored["metadata"].update(uid="uid-1", resourceVersion="7", generation=2, labels={"gang.admit.dev/managed": "true"})
    claim = claim_of(stored, deployments, Config())
    action = decide(("team", "pg1"), copy.deepcopy(PG1), [claim], Config(), now=0.0, unclaimed_since=None, grace=1.0)
    assert action.kind == "conflict" and "needs minMember 3, but Deployment team/pause runs 2 pods" in action.message
