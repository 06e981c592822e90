"""Helpers for the real control-plane tier: polling, pod listing, manifests shaped as users write them."""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

from tests.support.plane import ControlPlane, PlaneError

PAUSE = "registry.k8s.io/pause:3.10"
PERMIT_WAIT = 3  # Coscheduling permitWaitingTimeSeconds of the shared plane (seconds)


#: Default of :func:`wait_for` (seconds). A gang binds within a few seconds on this plane; the margin is for a loaded
#: CI machine. The plane runs Coscheduling with ``podGroupBackoffSeconds`` 0: with a backoff, a gang whose first pod
#: was tried before its siblings existed was once left unbound past 75 s (docs/operations.md, "Why are my pods Pending?").
WAIT_TIMEOUT = 60.0


def wait_for(check: Callable[[], Any], timeout: float = WAIT_TIMEOUT, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``check()`` until it returns something truthy (returned); AssertionError after ``timeout`` seconds
    (default :data:`WAIT_TIMEOUT`), with the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout}s; last value: {last!r}")
        time.sleep(interval)


def update(cp: ControlPlane, path: str, change: Callable[[dict[str, Any]], Any],
           timeout: float = WAIT_TIMEOUT) -> dict[str, Any]:
    """A controller's Update of the object at ``path`` (``/apis/batch/v1/namespaces/x/jobs/y``, or its ``/status``):
    read it, ``change`` it (in place, or the object it returns), PUT it whole; returns the object as stored.

    A PUT carries the ``resourceVersion`` read, so kube-apiserver answers 409 Conflict when another writer moved it
    in between (``GuaranteedUpdate`` in ``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``):
    on this plane the Job controller writes a running Job's status as its pods are bound and made Ready. A
    controller then reads again and retries (its work queue requeues the key; client-go ``retry.RetryOnConflict``),
    and so does this, until ``timeout`` (AssertionError naming the path after it).
    """
    deadline = time.monotonic() + timeout
    while True:
        obj = cp.rest("GET", path)
        changed = change(obj)
        try:
            return cp.rest("PUT", path, body=changed if isinstance(changed, dict) else obj)
        except PlaneError as e:
            if e.status != 409:
                raise
            if time.monotonic() > deadline:
                raise AssertionError(f"PUT {path}: still 409 Conflict after {timeout}s: {e}") from e
        time.sleep(0.05)


def clear_start_time(cp: ControlPlane, path: str) -> dict[str, Any]:
    """Clear a suspended Job's ``status.startTime`` (a status Update, :func:`update`) as the operators that resume
    or restore a Job do before changing its pod template: kube-apiserver lets a Job's template labels, annotations
    and scheduling directives change only while it is suspended and has never started
    (``pkg/registry/batch/job/strategy.go`` ``validationOptionsForJob``: ``AllowMutableSchedulingDirectives =
    suspended && notStarted``, ``notStarted := oldJob.Status.StartTime == nil``), and the Job controller sets
    ``startTime`` when it first runs the Job and never clears it on a suspend (``pkg/controller/job/job_controller.go``
    ``syncJob``). Done by Kueue v0.19.2 ``Job.Stop`` (``PatchStatus``), JobSet v0.12.0 ``resumeJob`` and the
    mpi-operator v0.8.2 ``syncHandler`` (``UpdateStatus``). Returns the Job as stored (unchanged without a
    ``startTime``)."""
    job = cp.rest("GET", path)
    if not (job.get("status") or {}).get("startTime"):
        return job
    return update(cp, f"{path}/status", lambda j: (j.get("status") or {}).pop("startTime", None))


def pods(cp: ControlPlane, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    query = {"labelSelector": selector} if selector else None
    return cp.rest("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)["items"]


def bound(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in items if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def container(cpu: str = "100m", memory: str = "64Mi", name: str = "pause") -> dict[str, Any]:
    return {"name": name, "image": PAUSE, "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def gang_annotations(min_member: int | str, timeout: int = 5) -> dict[str, str]:
    return {"gang.admit.dev/min-member": str(min_member), "gang.admit.dev/schedule-timeout-seconds": str(timeout)}


def gang_deployment(name: str, replicas: int = 3, min_member: int | str = 3, cpu: str = "100m",
                    timeout: int = 5) -> dict[str, Any]:
    """An annotated Deployment as a user writes it (no pod-group label, no schedulerName)."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": gang_annotations(min_member, timeout)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [container(cpu)], "terminationGracePeriodSeconds": 0}},
        },
    }


def with_template(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["template"]["metadata"]["labels"].update(labels)
    return out
