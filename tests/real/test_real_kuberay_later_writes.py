"""KubeRay's and the Ray autoscaler's later writes through a real kube-apiserver, which calls admit's webhooks as the
chart registers them (tier ``apiserver``: KubeRay and the autoscaler do not run; their writes are shaped by the
emulation's code, ``tests/emulations/kuberay.py``, written from ray-project/ray and ray-project/kuberay v1.7.0). The
RayCluster CRD (``tests/real/crds/ray.io_rayclusters.yaml``) keeps KubeRay's worker-group defaults. Checked: what
kube-apiserver answers each writer (the autoscaler's JSON patch, KubeRay's pending cluster and its DeleteWorkers
update) and the PodGroup admit keeps.
"""

from __future__ import annotations

import copy

import pytest

from tests.emulations.kuberay import replicas_patch, workers_to_delete_patch
from tests.support.plane import PlaneError
from tests.real.support import container, wait_for

pytestmark = pytest.mark.needs("apiserver")

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}"
RC = "/apis/ray.io/v1/namespaces/{ns}/rayclusters"


def raycluster(ns: str, name: str, min_member: str, *, autoscaling: bool, replicas: int | None = 3,
               min_replicas: int = 1, max_replicas: int = 6) -> dict:
    """KubeRay's ray-cluster.autoscaler sample shape: a head and one worker group (``replicas`` None: left out, as
    ``constructRayClusterForRayService`` writes an incremental upgrade's pending cluster)."""
    group = {"groupName": "gpu", "minReplicas": min_replicas, "maxReplicas": max_replicas, "rayStartParams": {},
             "template": {"spec": {"containers": [container("200m", "128Mi", name="ray-worker")]}}}
    if replicas is not None:
        group["replicas"] = replicas
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "annotations": {"gang.admit.dev/min-member": min_member}},
            "spec": {"enableInTreeAutoscaling": autoscaling,
                     "headGroupSpec": {"rayStartParams": {},
                                       "template": {"spec": {"containers": [container(name="ray-head")]}}},
                     "workerGroupSpecs": [group]}}


def pod_group(cp, ns: str, name: str) -> dict | None:
    return cp.rest("GET", PG.format(ns=ns, name=name), ok=(404,))


def test_the_ray_autoscalers_json_patches_of_a_ganged_raycluster_are_allowed_by_kube_apiserver(plane, ns):
    cp = plane.cp
    cp.rest("POST", RC.format(ns=ns), body=raycluster(ns, "rc", "auto", autoscaling=True))
    pg = wait_for(lambda: pod_group(cp, ns, "rc"), what="PodGroup rc")
    assert pg["spec"]["minMember"] == 2  # 1 head + minReplicas 1: what the autoscaler keeps
    path = f"{RC.format(ns=ns)}/rc"
    # a scale-down: replicas and the stopped worker in scaleStrategy, which the manifest did not have (kube-apiserver's
    # JSON patch replaces a missing key of an object, evanphx/json-patch v4)
    stored = cp.rest("PATCH", path, body=[replicas_patch(0, 1), workers_to_delete_patch(0, ["rc-gpu-worker-x7k2p"])],
                     content_type="application/json-patch+json")
    assert stored["spec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert stored["spec"]["workerGroupSpecs"][0]["scaleStrategy"] == {"workersToDelete": ["rc-gpu-worker-x7k2p"]}
    # the clean-up once KubeRay deleted it, then a scale-up to maxReplicas
    cp.rest("PATCH", path, body=[workers_to_delete_patch(0, [])], content_type="application/json-patch+json")
    stored = cp.rest("PATCH", path, body=[replicas_patch(0, 6)], content_type="application/json-patch+json")
    assert stored["spec"]["workerGroupSpecs"][0]["replicas"] == 6
    assert pod_group(cp, ns, "rc")["spec"]["minMember"] == 2


def test_an_autoscaling_raycluster_above_the_autoscalers_floor_is_refused_at_its_create_with_the_fix(plane, ns):
    with pytest.raises(PlaneError) as refused:
        plane.cp.rest("POST", RC.format(ns=ns), body=raycluster(ns, "rc", "4", autoscaling=True))
    assert refused.value.status == 403
    assert "Raise minReplicas of spec.workerGroupSpecs[*] so that head and workers reach 4" in str(refused.value)


def test_a_cluster_created_with_worker_replicas_nil_is_stored_with_the_crd_default_and_admitted(plane, ns):
    # a RayService's incremental upgrade: constructRayClusterForRayService leaves every worker replicas nil
    stored = plane.cp.rest("POST", RC.format(ns=ns),
                           body=raycluster(ns, "pending", "2", autoscaling=True, replicas=None))
    assert stored["spec"]["workerGroupSpecs"][0]["replicas"] == 0  # the CRD's default; KubeRay runs minReplicas
    pg = wait_for(lambda: pod_group(plane.cp, ns, "pending"), what="PodGroup pending")
    assert pg["spec"]["minMember"] == 2


def test_kuberays_delete_workers_update_of_a_finished_rayjobs_cluster_is_allowed_and_the_gang_shrinks(plane, ns):
    cp = plane.cp
    cp.rest("POST", RC.format(ns=ns), body=raycluster(ns, "job", "4", autoscaling=False, replicas=3,
                                                      min_replicas=3, max_replicas=3))
    wait_for(lambda: pod_group(cp, ns, "job"), what="PodGroup job")
    # rayjob_controller.go suspendWorkerGroups: r.Update of the cluster with suspend: true on every worker group
    cluster = cp.rest("GET", f"{RC.format(ns=ns)}/job")
    suspended = copy.deepcopy(cluster)
    for group in suspended["spec"]["workerGroupSpecs"]:
        group["suspend"] = True
    stored = cp.rest("PUT", f"{RC.format(ns=ns)}/job", body=suspended)
    assert stored["spec"]["workerGroupSpecs"][0]["suspend"] is True
    wait_for(lambda: pod_group(cp, ns, "job")["spec"]["minMember"] == 1, what="PodGroup job at the head alone")
