"""Later writes to the built-in kinds on a real control plane: kube-controller-manager's HorizontalPodAutoscaler
controller scaling a gang Deployment (kubernetes ``pkg/controller/podautoscaler/horizontal.go``
``reconcileAutoscaler``: a target above ``maxReplicas`` is scaled to it in the first cycle, metrics or not), and the
user's write refused where an HPA applied first would later be refused (tests/emulations/builtin.py emulates both)."""

from __future__ import annotations

import pytest

from tests.real.support import container, gang_deployment, wait_for
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
    assert f"set spec.minReplicas of HorizontalPodAutoscaler {ns}/db to at least 3" in str(refused.value)


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
