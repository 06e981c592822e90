"""What happens to a gang after admission, on a real control plane (docs/behaviour.md, "What happens to a gang after
admission"): the real Job controller's status drives the PodGroup's minMember, so the replacement of a pod that
failed after its siblings succeeded is scheduled instead of waiting at Coscheduling's PreFilter forever.

The fake kubelet (tests/support/plane.py) only makes bound pods Running; a test finishes a pod itself, as a kubelet
reports a container's exit (``pods/status``: phase and a terminated container state)."""

from __future__ import annotations

import time

from tests.real.support import bound, container, gang_annotations, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
MERGE = "application/merge-patch+json"


def finish(cp, ns: str, pod: dict, phase: str) -> None:
    """Report ``pod``'s container as exited (0 for Succeeded, 1 for Failed) and its phase, as the kubelet does."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    code = 0 if phase == "Succeeded" else 1
    statuses = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "restartCount": 0,
                 "started": False, "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0
                                                            else "Error", "startedAt": now, "finishedAt": now}}}
                for c in pod["spec"]["containers"]]
    cp.rest("PATCH", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status", content_type=MERGE,
            body={"status": {"phase": phase, "containerStatuses": statuses}})


def index(pod: dict) -> str:
    return pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]


def min_member(cp, ns: str, name: str):
    pg = cp.rest("GET", f"{PG.format(ns=ns)}/{name}", ok=(404,))
    return (pg or {}).get("spec", {}).get("minMember")


def test_a_single_wave_job_that_loses_one_pod_late_has_its_replacement_scheduled(plane, ns):
    cp = plane.cp
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "allreduce", "annotations": gang_annotations("auto")},
           "spec": {"parallelism": 3, "completions": 3, "completionMode": "Indexed",  # backoffLimit: the default 6
                    "template": {"metadata": {"labels": {"app": "allreduce"}},
                                 "spec": {"restartPolicy": "Never", "containers": [container()],
                                          "terminationGracePeriodSeconds": 0}}}}
    cp.rest("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job)
    first = wait_for(lambda: (lambda p: p if len(p) == 3 else None)(bound(pods(cp, ns, "app=allreduce"))),
                     what="3 bound Job pods")
    assert min_member(cp, ns, "allreduce") == 3
    by_index = {index(p): p for p in first}
    finish(cp, ns, by_index["0"], "Succeeded")
    finish(cp, ns, by_index["1"], "Succeeded")
    finish(cp, ns, by_index["2"], "Failed")
    # The Job controller counts 2 succeeded and 1 failed and replaces index 2 with a pod of its own; admit's
    # controller lowers minMember to the 1 pod that can still run, so Coscheduling lets it through.
    wait_for(lambda: min_member(cp, ns, "allreduce") == 1, what="minMember lowered to 1")
    old = {p["metadata"]["name"] for p in first}
    replacement = wait_for(lambda: [p for p in bound(pods(cp, ns, "app=allreduce"))
                                    if p["metadata"]["name"] not in old], what="the replacement pod bound")
    assert index(replacement[0]) == "2"
    status = cp.rest("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/allreduce")["status"]
    assert status.get("succeeded") == 2 and status.get("failed") == 1
