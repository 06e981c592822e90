"""Helpers for the real control-plane tier: polling, pod listing, manifests shaped as users write them."""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

from tests.support.plane import ControlPlane

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
