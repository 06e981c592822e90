"""Resource requests of a pod and of a gang: the numbers behind PodGroup ``spec.minResources`` (docs/behaviour.md).

A pod's effective request follows the scheduler's rule, ``PodRequests`` in kubernetes
``staging/src/k8s.io/component-helpers/resource/helpers.go``, after the defaulting a created pod gets (pod templates
are not defaulted; ``SetDefaults_Pod`` in ``pkg/apis/core/v1/defaults.go``):

- each container's request per resource, its limit when no request is set (``SetDefaults_Pod``);
- ``AggregateContainerRequests``: the sum over regular containers and sidecars (``restartPolicy: Always`` init
  containers), at least each regular init container's request plus the sidecars declared before it;
- pod-level resources (``spec.resources``, 1.34+, PodLevelResources): for ``cpu``, ``memory`` and ``hugepages-*``
  (``IsSupportedPodLevelResource``) a pod-level request replaces the aggregate; a pod-level limit without a request
  defaults it to the containers' aggregate for cpu/memory when they request it, else to the limit
  (``defaultPodRequests``);
- plus ``spec.overhead`` (RuntimeClass pod overhead), after the pod-level values.

Coscheduling compares ``minResources`` with the cluster's free capacity before it lets any member through
(scheduler-plugins ``pkg/coscheduling/core/core.go`` ``CheckClusterResource``), so it may hold only what node
``allocatable`` holds: devices served through DRA (a DeviceClass's ``extendedResourceName``, the implicit
``deviceclass.resource.kubernetes.io/<class>``, KEP-5004; ``spec.resourceClaims``) are left out
(:func:`countable_min_resources`), the DeviceClasses read from the controller's cache, never through an API call.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ..echo import clip
from .plan import get_map, get_path
from .quantity import QuantityError, add_resources, format_resources, max_resources, parse_quantity, scale_resources

__all__ = [
    "container_requests", "pod_requests", "pod_level_supported", "gang_min_resources", "ResourceError",
    "DEVICE_CLASS_RESOURCE_PREFIX", "device_class_record", "dra_extended_resources", "countable_min_resources",
    "runtime_class_record", "runtime_overheads", "with_runtime_overhead",
    "left_out_warning", "resource_claims_warning",
]


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
    """``pod_spec[field]`` as a list of container objects (absent: empty); ``ResourceError`` for another shape."""
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
    """Effective requests ``{resource name: Fraction}`` (cores, bytes, count) of a pod from its ``spec``
    (``containers``, ``initContainers``, ``resources``, ``overhead``), as kube-scheduler computes them for the pod
    created from it (module docstring).

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
    total = _apply_pod_level(max_resources(total, init_peak), pod_spec.get("resources"))
    return add_resources(total, _parse_list(pod_spec.get("overhead"), "spec.overhead"))


def pod_level_supported(name: str) -> bool:
    """True for the resources pod-level ``spec.resources`` may set: ``cpu``, ``memory``, ``hugepages-<size>``
    (``IsSupportedPodLevelResource`` in ``k8s.io/component-helpers/resource``)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _apply_pod_level(containers: dict[str, Fraction], resources: Any) -> dict[str, Fraction]:
    """The containers' aggregate with pod-level requests (after ``defaultPodRequests``) in place of it."""
    if not isinstance(resources, dict):
        return containers
    requests = {k: v for k, v in _parse_list(resources.get("requests"), "pod-level resources").items()
                if pod_level_supported(k)}
    for name, limit in _parse_list(resources.get("limits"), "pod-level resources").items():
        if name in requests or not pod_level_supported(name):
            continue
        if name in ("cpu", "memory") and name in containers:  # overcommittable: the containers' aggregate
            requests[name] = containers[name]
        else:
            requests[name] = limit
    return {**containers, **requests} if requests else containers


def gang_min_resources(pods: list[tuple[dict[str, Any], int]]) -> dict[str, str]:
    """``minResources`` for a gang: sum of ``count x pod_requests(spec)`` over ``[(pod_spec, count), ...]``, as a
    formatted ResourceList (``{"cpu": "3", "memory": "6Gi"}``); empty when no pod requests anything.

    Raises:
        ResourceError: a quantity in a spec does not parse.
    """
    total: dict[str, Fraction] = {}
    for spec, count in pods:
        if count > 0:
            total = add_resources(total, scale_resources(pod_requests(spec), count))
    return format_resources(total)


DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
"""The implicit extended resource of every DeviceClass, ``deviceclass.resource.kubernetes.io/<class name>``
(KEP-5004 "DRA: Handle extended resource requests via DRA Driver", Kubernetes 1.34 alpha ``DRAExtendedResource``,
1.36 beta): always served through DRA, never a node's allocatable."""


def device_class_record(obj: dict[str, Any]) -> dict[str, Any]:
    """What admit keeps of a ``resource.k8s.io`` DeviceClass (the controller cache's transform):
    ``{"metadata": {"name", "resourceVersion"}, "extendedResourceName": str | None}``."""
    meta = get_map(obj, ("metadata",))
    name = get_path(obj, ("spec", "extendedResourceName"))
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "extendedResourceName": name if isinstance(name, str) and name else None}


def dra_extended_resources(device_classes: Any) -> dict[str, str]:
    """``{extended resource name: DeviceClass name}`` of the DeviceClasses that set ``spec.extendedResourceName``
    (records of :func:`device_class_record`)."""
    return {r["extendedResourceName"]: str(r["metadata"]["name"]) for r in device_classes if r["extendedResourceName"]}


def countable_min_resources(min_resources: dict[str, str] | None, served: Any) -> tuple[
    dict[str, str] | None, dict[str, str]
]:
    """``(kept, left_out)``: ``min_resources`` without the resources served through DRA (module docstring), which
    would make Coscheduling's pre-check refuse the gang on every cycle.

    ``served``: ``{extended resource name: DeviceClass name}`` (:func:`dra_extended_resources`); a resource in it or
    named with :data:`DEVICE_CLASS_RESOURCE_PREFIX` is left out, also where some nodes report it through a device
    plugin (the pre-check is then only weaker, never wrong). ``left_out``: ``{name: DeviceClass}``; ``kept`` is
    ``None`` when nothing is left.
    """
    if not min_resources:
        return min_resources, {}
    left_out: dict[str, str] = {}
    for name in min_resources:
        if name.startswith(DEVICE_CLASS_RESOURCE_PREFIX):
            left_out[name] = name[len(DEVICE_CLASS_RESOURCE_PREFIX):]
        elif name in served:
            left_out[name] = served[name]
    kept = {k: v for k, v in min_resources.items() if k not in left_out}
    return kept or None, left_out


def left_out_warning(left_out: dict[str, str]) -> str:
    """The warning for resources :func:`countable_min_resources` left out of ``minResources``."""
    names = ", ".join(f"{name} (DeviceClass {cls})" for name, cls in sorted(left_out.items()))
    return (f"nothing to change: minResources leaves out {names[:100]}, served through DRA, not node allocatable "
            "(Coscheduling could not count it); the scheduler still checks each pod's devices")


def resource_claims_warning(pod_specs: Any) -> str | None:
    """A warning when a pod spec of the gang requests devices through ``spec.resourceClaims`` (DRA
    ResourceClaims / ResourceClaimTemplates): those devices are not in ``minResources`` (no quantity there that a
    node's allocatable could hold); ``None`` when none does."""
    for spec in pod_specs:
        if isinstance(spec, dict) and spec.get("resourceClaims"):
            return ("nothing to change: devices requested through spec.resourceClaims (DRA) are not in minResources "
                    "(Coscheduling counts node allocatable only); the scheduler still allocates each pod's claims")
    return None


def runtime_class_record(obj: Any) -> dict[str, Any]:
    """What a RuntimeClass cache keeps (``node.k8s.io/v1``): its name and ``overhead.podFixed`` (``None`` when it
    has none)."""
    meta = get_map(obj, ("metadata",))
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "podFixed": dict(get_map(obj, ("overhead", "podFixed"))) or None}


def runtime_overheads(runtime_classes: Any) -> dict[str, dict[str, str]]:
    """``{RuntimeClass name: overhead.podFixed}`` of the RuntimeClasses that define an overhead (records of
    :func:`runtime_class_record`)."""
    return {str(r["metadata"]["name"]): r["podFixed"] for r in runtime_classes if r["podFixed"]}


def with_runtime_overhead(min_resources: dict[str, str] | None, runtime_class: str | None, count: int,
                          overheads: dict[str, dict[str, str]]) -> tuple[dict[str, str] | None, str | None]:
    """``(minResources, added)``: ``min_resources`` plus ``count`` times the ``overhead.podFixed`` of RuntimeClass
    ``runtime_class``, and a description of what was added (``None``: nothing).

    kube-apiserver's RuntimeClass admission plugin writes the class's ``overhead.podFixed`` into ``spec.overhead``
    of every pod created with ``runtimeClassName`` (``plugin/pkg/admission/runtimeclass``, ``setOverhead``), which
    the scheduler counts (``PodRequests``) and a template lacks. ``overheads``: :func:`runtime_overheads` (the
    controller's RuntimeClass cache: no API call).

    Raises:
        ResourceError: a quantity of the RuntimeClass does not parse.
    """
    fixed = overheads.get(runtime_class or "")
    if not fixed or count <= 0:
        return min_resources, None
    extra = scale_resources(_parse_list(fixed, f"RuntimeClass {runtime_class} overhead.podFixed"), count)
    total = add_resources(_parse_list(min_resources or {}, "minResources"), extra)
    return format_resources(total), f"{count} x overhead.podFixed of RuntimeClass {runtime_class}"

