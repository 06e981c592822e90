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

from .echo import clip
from .quantity import QuantityError, add_resources, format_resources, max_resources, parse_quantity, scale_resources

__all__ = ["container_requests", "pod_requests", "gang_min_resources", "ResourceError"]


class ResourceError(ValueError):
    """A resource value in a pod spec that is not a quantity; the message names the container and resource."""


def _parse_list(values: Any, where: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    if values is None:
        return out
    if not isinstance(values, dict):  # a ResourceList is a map of resource name to quantity
        raise ResourceError(f"{where}: must be a map of resource name to quantity, got {clip(values)}")
    for name, raw in values.items():
        try:
            out[name] = parse_quantity(raw)
        except QuantityError as e:
            shown = name if isinstance(name, str) and len(name) <= 253 else clip(name)
            raise ResourceError(f"{where}.{shown}: {e}") from None
    return out


def _containers(pod_spec: dict[str, Any], field: str) -> list[dict[str, Any]]:
    """``pod_spec[field]`` as a list of container objects (absent: empty).

    Raises:
        ResourceError: the field is not a list, or an item is not an object (PodSpec ``containers`` is a list of
            Container objects).
    """
    items = pod_spec.get(field)
    if items is None:
        return []
    if not isinstance(items, list):
        raise ResourceError(f"{field} must be a list of containers, got {clip(items)}")
    for i, c in enumerate(items):
        if not isinstance(c, dict):
            raise ResourceError(f"{field}[{i}] must be a container object, got {clip(c)}")
    return items


def _name(c: dict[str, Any]) -> str:
    name = c.get("name")
    return clip(name, 63) if not isinstance(name, str) else name[:63] if name else "?"


def container_requests(container: dict[str, Any], where: str = "container") -> dict[str, Fraction]:
    """Requests of one container (``{"cpu": Fraction(cores), "memory": Fraction(bytes)}``), limits as fallback.

    Raises:
        ResourceError: a request or limit is not a quantity.
    """
    res = container.get("resources")
    if res is None:
        return {}
    if not isinstance(res, dict):
        raise ResourceError(f"{where}: resources must be an object (requests, limits), got {clip(res)}")
    requests = _parse_list(res.get("requests"), f"{where}: resources.requests")
    for name, v in _parse_list(res.get("limits"), f"{where}: resources.limits").items():
        requests.setdefault(name, v)
    return requests


def pod_requests(pod_spec: dict[str, Any]) -> dict[str, Fraction]:
    """Effective requests of a pod from its ``spec`` (``containers``, ``initContainers``, ``overhead``).

    Returns ``{resource name: Fraction}`` in the resource's unit (cores, bytes, count).

    Raises:
        ResourceError: a quantity in the spec does not parse.
    """
    total: dict[str, Fraction] = {}
    for c in _containers(pod_spec, "containers"):
        total = add_resources(total, container_requests(c, f"container {_name(c)}"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in _containers(pod_spec, "initContainers"):
        r = container_requests(c, f"init container {_name(c)}")
        if c.get("restartPolicy") == "Always":
            total = add_resources(total, r)
            sidecars = add_resources(sidecars, r)
            init_peak = max_resources(init_peak, sidecars)
        else:
            init_peak = max_resources(init_peak, add_resources(r, sidecars))
    total = max_resources(total, init_peak)
    overhead = _parse_list(pod_spec.get("overhead"), "spec.overhead")
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
