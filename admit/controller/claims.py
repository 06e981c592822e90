"""What the controller watches, and the small records its caches keep: each stored gang workload's :class:`Claim`
(the gang it asks for, of whichever backend) and each gang object's decision-relevant fields. Pure.

Memory: a stored Deployment arrives as about 5 KB of JSON, about 23 KiB of Python objects (76 of them tracked by
the cyclic garbage collector) if cached whole. The caches keep only what decisions need
(``WatchCache(transform=...)``, as client-go's ``SetTransform``): :func:`workload_record` (the identity fields and
the claim, computed once with the kind's resolver, its plan without pod templates or warnings) and
:func:`object_record` (a gang object's identity, labels, ownerReferences, admit's own annotations, ``spec`` and
``status.conditions``). Dicts that hold only strings and numbers are not tracked, so a workload costs about four
tracked objects (the record, the claim, its plan, its ``minResources``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any, Iterable

from ..families import kinds
from ..families.marks import stale_marks, stale_message
from ..backends import check_plan
from ..gang.children import is_child
from ..config import Config
from ..gang.plan import GangError, get_path, parse_gang_annotations
from ..gang.claim import Claim
from ..gang.ownerrefs import owner_reference
from ..jsonio import loads
from ..kube.client import Resource

__all__ = [
    "KNOWN_RESOURCES",
    "PODS",
    "WatchedKind",
    "watched_kinds",
    "Claim",
    "claim_of",
    "workload_record",
    "member_record",
    "workload_ref",
    "object_record",
    "owner_reference",
]

log = logging.getLogger("admit.controller")

# Shared by every cached plan: a cached plan has no pod templates and no warnings (tuples: nothing can append).
_NO_TARGETS: Any = ()
_NO_WARNINGS: Any = ()

JSON = dict[str, Any]


#: API coordinates ``(version, plural)`` of the gang workload kinds admit knows, by ``(API group, kind)`` as in
#: ``admit.families.kinds.RESOLVERS``: each kind's own record (``WorkloadKind.versions``, ``admit/families``).
KNOWN_RESOURCES: dict[tuple[str, str], tuple[tuple[str, str], ...]] = kinds.WATCHED_RESOURCES

PODS = Resource("", "v1", "pods", "Pod")


# ======================================================================================================================
# What to watch
# ======================================================================================================================


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """One workload resource the controller watches: its coordinates and label selector; ``resolver_key`` is its
    ``(API group, kind)`` key in ``admit.families.kinds.RESOLVERS``."""

    resource: Resource
    selector: str

    @property
    def resolver_key(self) -> tuple[str, str]:
        return (self.resource.group, self.resource.kind)


def watched_kinds(config: Config, resolvers: Iterable[tuple[str, str]] | None = None) -> tuple[
    list[WatchedKind], list[str]
]:
    """The workload resources to watch, from the resolver registry (pure).

    Returns ``(kinds, notes)``: ``notes`` names registry kinds without known API coordinates (not watched; their
    PodGroups are still created at admission and cleaned up only when no pod uses them).
    """
    keys = list(kinds.RESOLVERS) if resolvers is None else list(resolvers)
    selector = f"{config.managed_label}=true"
    out: list[WatchedKind] = []
    notes: list[str] = []
    for group, kind in keys:
        record = kinds.KINDS.get((group, kind))
        if (group, kind) == ("", "Pod") or group in config.ignored_api_groups or (
                record is not None and record.unwatched is not None):  # its record says why (a CronJob)
            continue
        coords = KNOWN_RESOURCES.get((group, kind))
        if coords is None:
            notes.append(f"{kind}.{group or 'core'} has a resolver but no known API coordinates; not watched")
            continue
        out.extend(WatchedKind(Resource(group, version, plural, kind), selector) for version, plural in coords)
    for key in keys:  # kinds watched as their Pods, with the kind's own label requirement (bare Pods: Spark drivers)
        watch = kinds.KINDS[key].pod_watch_selector if key in kinds.KINDS else None
        if watch is not None:
            out.append(WatchedKind(PODS, f"{selector},{watch}"))
    return out, notes


# ======================================================================================================================
# Records and claims
# ======================================================================================================================

_REF_FIELDS = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp")
#: Values shared by many objects (a namespace, an apiVersion, a label value): one string object for all of them
#: (``sys.intern``) instead of one per object as the JSON parser makes them.
_SHARED_FIELDS = frozenset({"namespace", "creationTimestamp", "apiVersion", "kind"})


def _shared(value: Any) -> Any:
    return sys.intern(value) if isinstance(value, str) and len(value) < 128 else value


def _shared_map(values: Any) -> Any:
    """A map (labels, minResources, a container's resources) with its keys and values :func:`_shared`, its maps too."""
    if not isinstance(values, dict):
        return values
    return {_shared(k): _shared_map(v) if isinstance(v, dict) else _shared(v) for k, v in values.items()}


def workload_ref(obj: JSON, api_version: str | None = None, kind: str | None = None) -> JSON:
    """The part of a stored workload that Events, ownerReferences and decisions need: ``{"apiVersion", "kind",
    "metadata": {name, namespace, uid, resourceVersion, generation, creationTimestamp, deletionTimestamp}}``
    (absent fields left out). Holds only strings and ints: the cyclic garbage collector does not track it."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": _shared(obj.get("apiVersion") or api_version),
        "kind": _shared(obj.get("kind") or kind),
        "metadata": {k: (_shared(meta[k]) if k in _SHARED_FIELDS else meta[k])
                     for k in _REF_FIELDS if meta.get(k) is not None},
    }


def claim_of(obj: JSON, resource: Resource, config: Config, ref: JSON | None = None, *,
             backend: str | None = None) -> Claim | None:
    """The claim of a stored workload, computed with the kind's resolver from ``admit.families.kinds.RESOLVERS`` exactly as
    admission does (operation ``UPDATE``: the object is stored). ``None`` when the object asks for no gang (no
    ``min-member`` annotation), when no resolver handles its kind, when an operator makes its PodGroup
    (``plan.create_pod_group`` false), or when it is a child of another gang workload (a Deployment's ReplicaSet,
    ``children.py``: it carries its parent's annotations but its parent claims the group). The claim keeps no
    reference into ``obj``; ``ref``: its :func:`workload_ref` when the caller already made it.

    ``backend``: only a plan of that backend makes a claim (``None``: any backend's; the claim's ``plan.backend``
    says whose gang controller keeps it). Invalid annotations give a claim with ``error`` and no plan, whatever
    ``backend``: it protects the objects its identity owns, for every backend."""
    resolver = kinds.RESOLVERS.get((resource.group, resource.kind))
    if resolver is None or is_child(obj, resource.group, resource.kind, kinds.PARENTS):
        return None
    obj = obj if obj.get("kind") else dict(obj, apiVersion=resource.api_version, kind=resource.kind)
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    identity = f"{resource.group}/{resource.kind}/{meta.get('name') or ''}"
    ref = ref if ref is not None else workload_ref(obj, resource.api_version, resource.kind)
    try:
        ann = parse_gang_annotations(get_path(obj, ("metadata", "annotations")), config)
        if ann is None:
            return None
        plan = resolver(obj, ann, config, namespace, "UPDATE")
    except GangError as e:
        return Claim(ref, identity, None, error=e.message)
    if not plan.create_pod_group or backend not in (None, plan.backend):
        return None
    problem = None
    try:
        check_plan(plan, config, ann)
    except GangError as e:
        problem = e.message
    slim = dataclasses.replace(plan, targets=_NO_TARGETS, warnings=_NO_WARNINGS, kind=_shared(plan.kind),
                               api_group=_shared(plan.api_group), namespace=_shared(plan.namespace),
                               total_field=_shared(plan.total_field), min_resources=_shared_map(plan.min_resources))
    return Claim(ref, plan.owner if not plan.shared else identity, slim, problem=problem,
                 explicit=ann.pod_group is not None, notice=plan.operator_notice or None)


def held_claim(obj: JSON, resource: Resource, config: Config, ref: JSON | None = None) -> Claim | None:
    """For a stored workload without a gang annotation that still carries admit's marks (``families.marks``: its managed
    label, a template labelled for a group), a claim with no plan that keeps the PodGroup its owner annotation names
    (``gangobjects.decide_objects`` reports it and writes nothing, as for an invalid annotation), else ``None``."""
    if is_child(obj, resource.group, resource.kind, kinds.PARENTS):
        return None
    marks = stale_marks(obj, resource.group, resource.kind, config)
    if not marks:
        return None
    meta = obj.get("metadata") or {}
    ref = ref if ref is not None else workload_ref(obj, resource.api_version, resource.kind)
    return Claim(ref, f"{resource.group}/{resource.kind}/{meta.get('name') or ''}", None, held=True,
                 error=stale_message(resource.kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                     marks, config))


def _pod_spec_for_resolver(spec: Any) -> Any:
    """The fields of a pod spec the resolvers read (``resources.pod_requests``: each container's and init container's
    name, resources and restartPolicy, the overhead; the schedulerName admission checks)."""
    if not isinstance(spec, dict):
        return spec
    out: JSON = {}
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            out[key] = [{_shared(k): (_shared_map(v) if k == "resources" else _shared(v))
                         for k, v in c.items() if k in ("name", "resources", "restartPolicy")}
                        if isinstance(c, dict) else c for c in containers]
    for key in ("overhead", "schedulerName", "runtimeClassName"):
        if key in spec:
            out[key] = _shared_map(spec[key]) if key == "overhead" else _shared(spec[key])
    return out


def resolvable_copy(obj: JSON, config: Config) -> JSON:
    """A reduced copy of a scalable workload (Deployment, ReplicaSet, StatefulSet) that its resolver turns into the
    same plan as the whole object: identity, ``ownerReferences`` (``children.is_child``), labels, admit's
    annotations, the spec's scalars (``replicas``, ``podManagementPolicy``...), and of the pod template its labels
    and the requests of its containers. The admission path checks a ``*/scale`` request against it without reading
    the workload (``cacheview.ControllerView.workload``), at about a tenth of the whole object's memory."""
    meta = obj.get("metadata") or {}
    prefix = config.key_prefix
    small: JSON = {k: (_shared(meta[k]) if k in _SHARED_FIELDS else meta[k])
                   for k in (*_REF_FIELDS, "generateName", "ownerReferences") if meta.get(k) is not None}
    if isinstance(meta.get("labels"), dict):
        small["labels"] = _shared_map(meta["labels"])
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        small["annotations"] = {_shared(k): v for k, v in annotations.items()
                                if isinstance(k, str) and k.startswith(prefix)}
    out: JSON = {"apiVersion": _shared(obj.get("apiVersion")), "kind": _shared(obj.get("kind")), "metadata": small}
    spec = obj.get("spec")
    if isinstance(spec, dict):
        reduced: JSON = {k: _shared(v) for k, v in spec.items() if not isinstance(v, (dict, list))}
        template = spec.get("template")
        if isinstance(template, dict):
            tmeta = found if isinstance(found := template.get("metadata"), dict) else {}
            reduced["template"] = {"metadata": {"labels": _shared_map(tmeta.get("labels") or {})},
                                   "spec": _pod_spec_for_resolver(template.get("spec"))}
        out["spec"] = reduced
    return out


#: Workload kinds whose record keeps a :func:`resolvable_copy` (the parents of ``kinds.SCALABLE``).
SCALABLE_KINDS = frozenset((group, kind) for group, _, kind in kinds.SCALABLE.values())


def workload_record(obj: JSON, resource: Resource, config: Config) -> JSON:
    """The record a workload cache keeps for ``obj`` (``WatchCache(transform=...)``): :func:`workload_ref` plus
    ``"claim"`` (:func:`claim_of`, or ``None``), and for a scalable kind ``"object"``: its :func:`resolvable_copy`
    as compact JSON ``bytes`` (:func:`resolvable_object` decodes it; read only by ``*/scale`` admissions, so it is
    kept as one bytes object of about 0.8 KB instead of some thirty dicts, lists and strings of about 3.7 KB: issue
    16, 20,000 workloads within the chart's 256 MiB); a Pod's record keeps its labels (a Spark driver's executors
    join the group its label names)."""
    ref = workload_ref(obj, resource.api_version, resource.kind)
    record = dict(ref)  # its own outer dict (it also holds the claim); metadata shared with the claim's reference
    if (resource.group, resource.kind) in SCALABLE_KINDS:
        record["object"] = _pack(resolvable_copy(obj, config))
    elif (resource.group, resource.kind) == ("", "Pod"):
        labels = (obj.get("metadata") or {}).get("labels")
        if isinstance(labels, dict):
            record["metadata"] = {**ref["metadata"], "labels": _shared_map(labels)}
    try:
        record["claim"] = claim_of(obj, resource, config, ref) or held_claim(obj, resource, config, ref)
    except Exception as e:  # noqa: BLE001 - a resolver bug on one object must not stop the whole cache
        log.exception("cannot compute the gang claim of %s %s/%s", resource.kind,
                      record["metadata"].get("namespace"), record["metadata"].get("name"))
        identity = f"{resource.group}/{resource.kind}/{record['metadata'].get('name') or ''}"
        record["claim"] = Claim(ref, identity, None, error=f"internal error in admit ({type(e).__name__})")
    return record


def member_record(obj: JSON, config: Config) -> JSON:
    """The record the cache of pods in a group whose size follows its members keeps (``GangPlan.follows_members``,
    ``<prefix>/managed: member``): the Pod's :func:`workload_record` (its claim names the group) with its
    ``spec.nodeName`` and ``status.phase``, what the backend's ``merge_shared`` reads of the members."""
    record = workload_record(obj, PODS, config)
    node, phase = get_path(obj, ("spec", "nodeName")), get_path(obj, ("status", "phase"))
    record["spec"] = {"nodeName": node} if node else {}
    record["status"] = {"phase": _shared(phase)} if phase else {}
    return record


def _pack(obj: JSON) -> bytes:
    """Compact JSON bytes of exactly their length: not ``orjson.dumps``, whose bytes keep the whole output buffer it
    grew (measured: 8 KB for a 0.7 KB answer, 4 KB per cached workload)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def resolvable_object(record: JSON) -> JSON:
    """The :func:`resolvable_copy` a workload record keeps (decoded from its compact JSON; a new dict each call,
    the caller may change it), or the record itself for a kind that keeps none."""
    packed = record.get("object")
    return loads(packed) if isinstance(packed, (bytes, str)) else record


def object_record(obj: JSON, config: Config) -> JSON:
    """The record a gang object cache keeps: what admission (the backend's ``ownership``, ``update_ops``) and the
    controller read (``status.conditions``: the scheduled condition of ``gangs.GangController.check_quorum``),
    without the rest of the status, managedFields and other controllers' annotations."""
    meta = obj.get("metadata") or {}
    prefix = config.key_prefix
    small: JSON = {k: meta[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if meta.get(k) is not None}
    if meta.get("namespace") is not None:
        small["namespace"] = _shared(meta["namespace"])
    if isinstance(meta.get("labels"), dict):
        small["labels"] = _shared_map(meta["labels"])
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        small["annotations"] = {_shared(k): (_shared(v) if len(v) < 16 else v) for k, v in annotations.items()
                                if isinstance(k, str) and k.startswith(prefix) and isinstance(v, str)}
    refs = meta.get("ownerReferences")
    if isinstance(refs, list):
        small["ownerReferences"] = [
            {k: (_shared(v) if k in ("apiVersion", "kind") else v) for k, v in r.items()} if isinstance(r, dict) else r
            for r in refs]
    record: JSON = {"apiVersion": _shared(obj.get("apiVersion")), "kind": _shared(obj.get("kind")), "metadata": small}
    spec = obj.get("spec")
    if isinstance(spec, dict):
        record["spec"] = {k: (_shared_map(v) if k == "minResources" else v) for k, v in spec.items()}
    elif spec is not None:
        record["spec"] = spec
    conditions = (obj.get("status") or {}).get("conditions") if isinstance(obj.get("status"), dict) else None
    if conditions is not None:
        record["status"] = {"conditions": conditions}
    return record
