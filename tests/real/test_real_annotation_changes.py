"""An annotation-only change of a running gang on a real control plane: the validating webhook patches the PodGroup
before kube-apiserver stores the update, and the controller never writes the old spec back (for a
StatefulSet or a Job, whose annotation change keeps ``metadata.generation``, it did, 103-119 times in a 15-minute
soak; the PodGroup took the old minMember for 14-200 ms, two extra writes each).

Each change is counted on the PodGroup itself: a PodGroup is a custom resource, so kube-apiserver bumps its
``metadata.generation`` on every spec write (``customresource/strategy.go``); a change the controller undid and
redid costs two generations more than the webhook's one patch.
"""

from __future__ import annotations

import time

import pytest

from tests.real.support import bound, container, gang_annotations, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}"


def statefulset(name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "annotations": gang_annotations(3)},
            "spec": {"replicas": 3, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [container()], "terminationGracePeriodSeconds": 0}}}}


def job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": gang_annotations(3)},
            "spec": {"parallelism": 3, "completions": 3, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"restartPolicy": "Never", "containers": [container()],
                                           "terminationGracePeriodSeconds": 0}}}}


@pytest.mark.parametrize("make,plural,group", [(statefulset, "statefulsets", "apps/v1"), (job, "jobs", "batch/v1")],
                         ids=["StatefulSet", "Job"])
def test_annotating_a_running_gang_is_never_undone_by_the_controller(plane, ns, make, plural, group):
    cp = plane.cp
    stored = cp.rest("POST", f"/apis/{group}/namespaces/{ns}/{plural}", body=make("gang"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=gang"))) == 3, what="3 bound pods")
    path = PG.format(ns=ns, name="gang")
    wait_for(lambda: (cp.rest("GET", path)["metadata"].get("ownerReferences") or [{}])[0].get("uid")
             == stored["metadata"]["uid"], what="adoption")
    before = cp.rest("GET", path)["metadata"]["generation"]
    for i, timeout in enumerate((7, 8, 9, 10, 11)):  # kubectl annotate --overwrite, five times
        cp.rest("PATCH", f"/apis/{group}/namespaces/{ns}/{plural}/gang", content_type="application/merge-patch+json",
                body={"metadata": {"annotations": {"gang.admit.dev/schedule-timeout-seconds": str(timeout),
                                                   "gang.admit.dev/min-member": str(3 - i % 2)}}})
        time.sleep(0.3)
    time.sleep(2)
    pg = cp.rest("GET", path)
    assert pg["spec"]["scheduleTimeoutSeconds"] == 11 and pg["spec"]["minMember"] == 3
    assert pg["metadata"]["generation"] - before == 5, "the controller wrote the PodGroup besides the webhook"
    assert f"updated PodGroup {ns}/gang" not in plane.admit.output()
