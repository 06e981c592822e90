"""On a real control plane: a namespace deleted with gang workloads in it ends, and a Job created with
``generateName`` (as Argo Workflows and Kubeflow Pipelines create them) gangs its pods in the PodGroup they point at.
"""

from __future__ import annotations

import time

import pytest

from tests.real.support import bound, container, gang_annotations, gang_deployment, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"


def pod_groups(cp, ns):
    return {pg["metadata"]["name"]: pg for pg in cp.rest("GET", PG.format(ns=ns))["items"]}


@pytest.mark.parametrize("match_conditions", [True, False], ids=["chart-defaults", "admit-sees-every-update"])
@pytest.mark.needs("controllers")
def test_a_namespace_deleted_with_gang_workloads_in_it_goes_away(plane, ns, match_conditions):
    """With the chart's matchConditions an object being deleted never reaches admit; without them admit gets the
    finalizer's removal itself, after the namespace controller deleted the PodGroup, and must allow it untouched."""
    cp = plane.cp
    if not match_conditions:
        cp.register_webhooks(plane.admit.url, {"webhook": {"matchConditions": {"enabled": False}}})
    try:
        _delete_namespace_with_gangs(plane, ns)
    finally:
        if not match_conditions:
            cp.register_webhooks(plane.admit.url)


def _delete_namespace_with_gangs(plane, ns):
    cp = plane.cp
    deployments = f"/apis/apps/v1/namespaces/{ns}/deployments"
    cp.rest("POST", deployments, body=gang_deployment("web", replicas=3, min_member=3))
    held = gang_deployment("held", replicas=2, min_member=2)
    held["metadata"]["finalizers"] = ["example.com/drain"]  # an operator's finalizer, removed during deletion
    cp.rest("POST", deployments, body=held)
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3 and len(bound(pods(cp, ns, "app=held"))) == 2,
             what="both gangs bound")
    wait_for(lambda: all(pg["metadata"].get("ownerReferences") for pg in pod_groups(cp, ns).values())
             and len(pod_groups(cp, ns)) == 2, what="both PodGroups adopted")

    started = time.monotonic()
    cp.delete_namespace(ns)
    # The namespace controller deletes the content; "held" waits for its finalizer, which its operator removes
    # (an UPDATE: it must not be refused, and nothing may be re-created for it).
    wait_for(lambda: (cp.rest("GET", f"{deployments}/held", ok=(404,)) or {}).get("metadata", {}).get(
        "deletionTimestamp"), what="held marked for deletion")
    wait_for(lambda: "held" not in pod_groups(cp, ns), what="held's PodGroup deleted by the namespace controller")
    time.sleep(1)  # admit's PodGroup cache has seen it go
    cp.rest("PATCH", f"{deployments}/held", body={"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json")
    wait_for(lambda: cp.rest("GET", f"/api/v1/namespaces/{ns}", ok=(404,)) is None, timeout=90,
             what=f"namespace {ns} gone")
    took = time.monotonic() - started
    log = plane.admit.output()
    assert f"cannot create PodGroup {ns}/" not in log
    assert "PodGroupSyncFailed" not in log
    print(f"\nnamespace with two gang Deployments gone {took:.1f}s after its deletion")


def test_a_generate_name_job_gangs_its_pods_in_the_pod_group_they_point_at(plane, ns):
    cp = plane.cp
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"generateName": "train-", "annotations": gang_annotations("auto"),
                        "labels": {"workflows.argoproj.io/workflow": "nightly"}},
           "spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"app": "train"}},
                                 "spec": {"restartPolicy": "Never", "containers": [container()],
                                          "terminationGracePeriodSeconds": 0}}}}
    stored = cp.rest("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job)
    name = stored["metadata"]["name"]
    group = stored["spec"]["template"]["metadata"]["labels"][LABEL]
    assert name.startswith("train-") and group.startswith("train-") and group != name
    assert pod_groups(cp, ns)[group]["spec"]["minMember"] == 3  # created at admission, before any pod
    running = wait_for(lambda: (lambda b: b if len(b) == 3 else None)(bound(pods(cp, ns, "app=train"))),
                       what="3 bound Job pods")
    assert {p["metadata"]["labels"][LABEL] for p in running} == {group}
    assert {p["spec"]["schedulerName"] for p in running} == {"scheduler-plugins-scheduler"}
    owner = wait_for(lambda: (pod_groups(cp, ns)[group]["metadata"].get("ownerReferences") or [None])[0],
                     what="adoption")
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", name, stored["metadata"]["uid"])
    assert set(pod_groups(cp, ns)) == {group}  # no PodGroup named after the generated name
