"""Resource requests of a pod and of a gang: the numbers behind PodGroup ``spec.minResources``.

A pod's effective request follows the scheduler's rule (``k8s.io/component-helpers/resource`` ``PodRequests``, the
same rule as the Kubernetes docs "Resource Management for Pods and Containers" and "Sidecar containers"):

- each container's request per resource, falling back to its limit when no request is set (kube-apiserver
  defaults requests to limits in that case, and CRD pod templates are not defaulted);
- the sum over regular containers and restartable init containers (sidecars, ``restartPolicy: Always``);
- the maximum of that sum and each regular init container's request (plus the sidecars started before it);
- plus ``spec.overhead`` (RuntimeClass pod overhead).

The Coscheduling plugin compares PodGroup ``minResources`` with the cluster's free capacity before it lets any
member through (scheduler-plugins ``pkg/coscheduling/core/core.go``, ``CheckClusterResource``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .quantity import QuantityError, add_resources, format_resources, max_resources, parse_quantity, scale_resources

__all__ = ["container_requests", "pod_requests", "gang_min_resources", "ResourceError"]


class ResourceError(ValueError):
    """A resource value in a pod spec that is not a quantity; the message names the container and resource."""


def _parse_list(values: Any, where: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    if not isinstance(values, dict):
        return out
    for name, raw in values.items():
        try:
            out[name] = parse_quantity(raw)
        except QuantityError as e:
            raise ResourceError(f"{where}: resource {name}: {e}") from None
    return out


def container_requests(container: dict[str, Any], where: str = "container") -> dict[str, Fraction]:
    """Requests of one container (``{"cpu": Fraction(cores), "memory": Fraction(bytes)}``), limits as fallback.

    Raises:
        ResourceError: a request or limit is not a quantity.
    """
    res = container.get("resources") or {}
    if not isinstance(res, dict):
        return {}
    requests = _parse_list(res.get("requests"), where)
    for name, v in _parse_list(res.get("limits"), where).items():
        requests.setdefault(name, v)
    return requests


def pod_requests(pod_spec: dict[str, Any]) -> dict[str, Fraction]:
    """Effective requests of a pod from its ``spec`` (``containers``, ``initContainers``, ``overhead``).

    Returns ``{resource name: Fraction}`` in the resource's unit (cores, bytes, count).

    Raises:
        ResourceError: a quantity in the spec does not parse.
    """
    total: dict[str, Fraction] = {}
    for c in pod_spec.get("containers") or ():
        if isinstance(c, dict):
            total = add_resources(total, container_requests(c, f"container {c.get('name', '?')}"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in pod_spec.get("initContainers") or ():
        if not isinstance(c, dict):
            continue
        r = container_requests(c, f"init container {c.get('name', '?')}")
        if c.get("restartPolicy") == "Always":
            total = add_resources(total, r)
            sidecars = add_resources(sidecars, r)
            init_peak = max_resources(init_peak, sidecars)
        else:
            init_peak = max_resources(init_peak, add_resources(r, sidecars))
    total = max_resources(total, init_peak)
    overhead = _parse_list(pod_spec.get("overhead"), "overhead")
    return add_resources(total, overhead)


def gang_min_resources(pods: list[tuple[dict[str, Any], int]]) -> dict[str, str]:
    """``minResources`` for a gang: sum of ``count x pod_requests(spec)`` over ``[(pod_spec, count), ...]``.

    Returns a formatted ResourceList (``{"cpu": "3", "memory": "6Gi"}``); empty when no pod requests anything.

    Raises:
        ResourceError: a quantity in a spec does not parse.
    """
    total: dict[str, Fraction] = {}
    for spec, count in pods:
        if count > 0:
            total = add_resources(total, scale_resources(pod_requests(spec), count))
    return format_resources(total)
