"""Later writes to the built-in kinds on a real control plane: kube-controller-manager's HorizontalPodAutoscaler
controller scaling a gang Deployment (kubernetes ``pkg/controller/podautoscaler/horizontal.go``
``reconcileAutoscaler``: a target above ``maxReplicas`` is scaled to it in the first cycle, metrics or not), and the
user's write refused where an HPA applied first would later be refused (tests/emulations/builtin.py emulates both)."""

from __future__ import annotations

import pytest

from tests.real.support import clear_start_time, container, gang_deployment, wait_for
from tests.support.plane import PlaneError

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"


def hpa(ns: str, kind: str, name: str, low: int, high: int) -> dict:
    """``kubectl autoscale <kind> <name> --min=<low> --max=<high> --cpu-percent=80`` (autoscaling/v2)."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                     "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 80}}}]}}


@pytest.mark.needs("apiserver")
def test_a_statefulset_applied_after_its_hpa_below_its_min_member_is_refused_naming_the_hpa(plane, ns):
    cp = plane.cp
    cp.rest("POST", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
            body=hpa(ns, "StatefulSet", "db", 1, 4))
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "namespace": ns, "annotations": {"gang.admit.dev/min-member": "3"}},
           "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [container()]}}}}
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", body=sts)
    assert refused.value.status == 403
    assert f"Set spec.minReplicas of HorizontalPodAutoscaler {ns}/db to at least 3" in str(refused.value)


@pytest.mark.needs("controllers")
def test_the_hpa_scaling_a_gang_deployment_down_to_its_max_replicas_is_allowed_and_its_pods_follow(plane, ns):
    cp = plane.cp
    cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment("web", replicas=5,
                                                                                       min_member=2))
    cp.rest("POST", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
            body=hpa(ns, "Deployment", "web", 2, 3))
    wait_for(lambda: cp.rest("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/web")["spec"]["replicas"] == 3,
             timeout=90, what="the HPA's first cycle scales the Deployment to maxReplicas")
    events = cp.rest("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert not [e for e in events if e.get("reason") == "FailedRescale"]
    assert cp.rest("GET", f"{PG.format(ns=ns)}/web")["spec"]["minMember"] == 2
    pods = wait_for(lambda: (lambda items: items if len(items) == 3 else None)(
        [p for p in cp.rest("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
         if not p["metadata"].get("deletionTimestamp")]), what="3 pods")
    assert {p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") for p in pods} == {"web"}


def queued_job(ns: str, min_member: str) -> dict:
    """An Indexed Job of 4 pods queued by Kueue with partial admission (Kueue's webhook creates it suspended)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                         "annotations": {"gang.admit.dev/min-member": min_member,
                                         "kueue.x-k8s.io/job-min-parallelism": "2"}},
            "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed", "suspend": True,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [container()]}}}}


@pytest.mark.needs("apiserver")
def test_kueues_partial_start_and_stop_of_a_job_go_through_and_a_min_member_they_break_is_refused_at_create(plane, ns):
    cp = plane.cp
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", jobs, body=queued_job(ns, "4"))
    assert refused.value.status == 403 and "Set kueue.x-k8s.io/job-min-parallelism to at least 4" in str(refused.value)
    created = cp.rest("POST", jobs, body=queued_job(ns, "auto"))
    # Kueue v0.19.2 Job.RunWithPodSetsInfo, sent as its merge patch: 2 pods admitted, the flavor's node labels and
    # tolerations and the podset label merged into the template (mutable while suspended, never started).
    template = created["spec"]["template"]
    start = {"spec": {"suspend": False, "parallelism": 2, "template": {
        "metadata": {"labels": {**template["metadata"]["labels"], "kueue.x-k8s.io/podset": "main"}},
        "spec": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}}
    started = cp.rest("PATCH", f"{jobs}/train", body=start, content_type="application/merge-patch+json")
    assert started["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
    assert cp.rest("GET", f"{PG.format(ns=ns)}/train")["spec"]["minMember"] == 2
    # Job.Stop: suspended with the stopping annotation, the startTime the Job controller set when it ran the Job
    # cleared (PatchStatus: else kube-apiserver keeps the template immutable), then the template and parallelism
    # restored.
    cp.rest("PATCH", f"{jobs}/train", content_type="application/merge-patch+json", body={
        "metadata": {"annotations": {"kueue.x-k8s.io/stopping": "true"}}, "spec": {"suspend": True}})
    clear_start_time(cp, f"{jobs}/train")
    restored = cp.rest("PATCH", f"{jobs}/train", content_type="application/merge-patch+json", body={
        "metadata": {"annotations": {"kueue.x-k8s.io/stopping": None}}, "spec": {"parallelism": 4, "template": {
            "metadata": {"labels": {"kueue.x-k8s.io/podset": None}},
            "spec": {"nodeSelector": None, "tolerations": None}}}})
    assert restored["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
    assert restored["spec"]["template"]["spec"]["schedulerName"] == created["spec"]["template"]["spec"]["schedulerName"]
    assert cp.rest("GET", f"{PG.format(ns=ns)}/train")["spec"]["minMember"] == 4
