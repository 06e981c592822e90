"""The PodGroup controller inside ``admit serve``: adopt, keep in step, clean up; and the PodGroup cache.

Why it exists (DESIGN.md, "Garbage-collector race"): admission happens before the workload is stored, so the
PodGroup admit creates then has no ownerReference (one naming an object that is not stored yet makes the garbage
collector delete the PodGroup within ~25 ms). This controller finishes the job once the workload is stored:

- **adopt**: give the PodGroup an ownerReference to the stored workload (its ``uid``, ``controller: true``,
  ``blockOwnerDeletion: true``), so the garbage collector deletes the group with the workload (Kubernetes docs
  "Garbage Collection" / "Owners and Dependents"; dependents are deleted in the background once every owner is
  gone);
- **keep in step**: when minMember, replicas-derived values, template requests or the timeout change (an UPDATE,
  ``kubectl scale``, an HPA), patch the PodGroup spec; re-create a managed PodGroup deleted while its workload lives
  (created directly with the ownerReference: the workload is stored, so there is no race);
- **clean up**: delete a managed PodGroup that no stored workload claims for ``orphan_grace_period`` seconds
  (default 60; e.g. the create of a workload another admission step rejected left it behind), unless live pods
  still carry its label;
- record Events (``events.py``) on the workload for each of these and for failures;
- leave a namespace that is being deleted alone: a re-create refused with 403 "being terminated"
  (``kube.namespace_terminating``) is logged once at INFO, with no Event and no retry (the namespace and the
  workload are going; retrying would only fill the log until they are gone).

Pieces:

- **what to watch** (:func:`watched_kinds`): derived from ``admit.kinds.RESOLVERS`` (every non-Pod kind whose API
  coordinates are in :data:`KNOWN_RESOURCES`; MPIJob in both ``kubeflow.org/v1`` and ``v2beta1``), each with the label
  selector ``gang.admit.dev/managed=true`` the mutating webhook writes; plus Spark driver Pods
  (``spark-role=driver`` and the managed label). A kind whose CRD is not installed answers 404 and is retried slowly;
  403 likewise (``watchcache.py``); the others keep working.
- **PodGroup caches**: managed PodGroups (``app.kubernetes.io/managed-by=admit``) - the cache the admission path
  reads - and, apart, the others (``managed-by!=admit``) so that a hand-written PodGroup a workload names is known
  without an API call, never re-created over, never warned about.
- **the pure part** (:func:`claim_of`, :func:`decide`): stored workload -> the PodGroup it claims (by reusing the
  kind's resolver: the same plan admission computes); (PodGroup, claims, clock) -> one :class:`Action`: create,
  patch (adopt and/or spec), delete, wait, or report a conflict / an invalid annotation. Tested without HTTP.
- **the loop** (:class:`Controller`): caches run on every replica (the webhooks need the PodGroup cache everywhere,
  and a new leader starts warm, as controller-runtime does); only the Lease holder (``leader.py``) runs the workers
  that write, and each write first checks that the lease is still held. A work queue keyed by
  ``(namespace, PodGroup name)`` never runs one key twice at once; failures retry with per-key exponential backoff
  (0.5 s doubling to 60 s); ``resync_period`` (default 300 s) re-delivers every cached object.

Writes use optimistic concurrency: patches carry the ``resourceVersion`` the decision was made on (409 Conflict ->
decide again on fresher data), deletes carry ``preconditions`` on ``uid`` and ``resourceVersion``.

Bad input is logged in one line per distinct problem (again only when it changes) and never stops the rest: a
PodGroup named by a workload that belongs to someone else, a PodGroup carrying admit's managed-by label without a
valid owner annotation (not admit's: left alone), a workload whose annotations became invalid (its PodGroup is left
as it is), a resource kind the API answers 403 for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from kubernetes_asyncio import client

from . import kinds, metrics
from .children import is_child
from .config import COSCHEDULING, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config
from .events import EventRecorder
from .kube import KubeError, namespace_terminating, resolve_proxy_once
from .leader import LeaderElector, default_identity
from .plan import GangError, GangPlan, get_path, parse_gang_annotations
from .podgroup import desired_pod_group, owner_annotation, ownership, spec_differs, spec_json_patch
from .validate import check_plan
from .watchcache import KubeRaw, Resource, WatchCache, object_key

__all__ = [
    "KNOWN_RESOURCES",
    "SPARK_DRIVER_SELECTOR",
    "WatchedKind",
    "watched_kinds",
    "Claim",
    "claim_of",
    "Action",
    "decide",
    "owner_reference",
    "pod_group_owner",
    "spec_changes",
    "describe_spec",
    "ControllerSettings",
    "Controller",
    "PodGroupView",
    "start_controller",
]

log = logging.getLogger("admit.controller")

JSON = dict[str, Any]
GroupKey = tuple[str, str]  # (namespace, PodGroup name)

#: API coordinates ``(version, plural)`` of the gang workload kinds admit knows, by ``(API group, kind)`` as in
#: ``admit.kinds.RESOLVERS``. MPIJob is served as ``kubeflow.org/v1`` by the training-operator and as ``v2beta1`` by
#: mpi-operator (a cluster has one of them; the other answers 404).
KNOWN_RESOURCES: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("apps", "Deployment"): (("v1", "deployments"),),
    ("apps", "StatefulSet"): (("v1", "statefulsets"),),
    ("apps", "ReplicaSet"): (("v1", "replicasets"),),
    ("batch", "Job"): (("v1", "jobs"),),
    ("kubeflow.org", "TFJob"): (("v1", "tfjobs"),),
    ("kubeflow.org", "PyTorchJob"): (("v1", "pytorchjobs"),),
    ("kubeflow.org", "MPIJob"): (("v1", "mpijobs"), ("v2beta1", "mpijobs")),
    ("kubeflow.org", "XGBoostJob"): (("v1", "xgboostjobs"),),
    ("kubeflow.org", "PaddleJob"): (("v1", "paddlejobs"),),
    ("kubeflow.org", "JAXJob"): (("v1", "jaxjobs"),),
    ("sparkoperator.k8s.io", "SparkApplication"): (("v1beta2", "sparkapplications"),),
    **kinds.WATCHED_RESOURCES,  # JobSet, RayCluster, RayJob, RayService (admit/families)
}

#: Extra label requirement for the Pods the controller watches: Spark driver pods (spark-submit / spark-operator
#: label ``spark-role``), which own their executors' group.
SPARK_DRIVER_SELECTOR = "spark-role=driver"

PODS = Resource("", "v1", "pods", "Pod")
_OWNER_RE = re.compile(r"^([a-z0-9.-]*)/([A-Za-z0-9]+)(?:/([a-z0-9]([-a-z0-9.]*[a-z0-9])?))?$")


# ======================================================================================================================
# What to watch
# ======================================================================================================================


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """One workload resource the controller watches: its coordinates and label selector; ``resolver_key`` is its
    ``(API group, kind)`` key in ``admit.kinds.RESOLVERS``."""

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
        if (group, kind) == ("", "Pod") or group in config.ignored_api_groups:
            continue
        coords = KNOWN_RESOURCES.get((group, kind))
        if coords is None:
            notes.append(f"{kind}.{group or 'core'} has a resolver but no known API coordinates; not watched")
            continue
        for version, plural in coords:
            out.append(WatchedKind(Resource(group, version, plural, kind), selector))
    if ("", "Pod") in keys:
        out.append(WatchedKind(PODS, f"{selector},{SPARK_DRIVER_SELECTOR}"))
    return out, notes


# ======================================================================================================================
# The pure part
# ======================================================================================================================


@dataclass(slots=True)
class Claim:
    """What one stored gang workload asks for.

    Attributes:
        workload: the stored object (plain JSON, with ``apiVersion``/``kind``).
        identity: ``"<group>/<Kind>/<name>"`` as in the PodGroup owner annotation (``podgroup.owner_annotation``).
        plan: the gang plan (``None`` when the annotations are invalid: see ``error``).
        error: why no plan could be made (a ``GangError`` message), else ``None``.
        problem: a plan was made but the workload breaks a rule admission enforces (replicas below minMember), or
            ``None``; reported, the PodGroup is still kept in step.
        explicit: the group was named with ``gang.admit.dev/pod-group``.
    """

    workload: JSON
    identity: str
    plan: GangPlan | None
    error: str | None = None
    problem: str | None = None
    explicit: bool = False

    @property
    def meta(self) -> JSON:
        return self.workload.get("metadata") or {}

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace") or "")

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid") or "")

    @property
    def kind(self) -> str:
        return str(self.workload.get("kind") or "")

    @property
    def ref(self) -> str:
        """``"Deployment team-a/web"`` for messages."""
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def key(self) -> GroupKey | None:
        """The PodGroup this claim names, or ``None`` without a plan."""
        return (self.plan.namespace, self.plan.group_name) if self.plan is not None else None


def claim_of(obj: JSON, resource: Resource, config: Config) -> Claim | None:
    """The claim of a stored workload, computed with the kind's resolver from ``admit.kinds.RESOLVERS`` exactly as
    admission does (operation ``UPDATE``: the object is stored). ``None`` when the object asks for no gang (no
    ``min-member`` annotation), when no resolver handles its kind, when an operator makes its PodGroup
    (``plan.create_pod_group`` false), or when it is a child of another gang workload (a Deployment's ReplicaSet,
    ``children.py``: it carries its parent's annotations but its parent claims the group)."""
    resolver = kinds.RESOLVERS.get((resource.group, resource.kind))
    if resolver is None or is_child(obj, resource.group, resource.kind):
        return None
    obj = obj if obj.get("kind") else dict(obj, apiVersion=resource.api_version, kind=resource.kind)
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    identity = f"{resource.group}/{resource.kind}/{meta.get('name') or ''}"
    try:
        ann = parse_gang_annotations(get_path(obj, ("metadata", "annotations")), config)
        if ann is None:
            return None
        plan = resolver(obj, ann, config, namespace, "UPDATE")
    except GangError as e:
        return Claim(obj, identity, None, error=e.message)
    if not plan.create_pod_group or plan.backend != COSCHEDULING:  # workload-api gangs: admit/backends
        return None
    problem = None
    try:
        check_plan(plan, config, ann)
    except GangError as e:
        problem = e.message
    return Claim(obj, plan.owner if not plan.shared else identity, plan, problem=problem,
                 explicit=ann.pod_group is not None)


def owner_reference(workload: JSON) -> JSON:
    """The controller ownerReference to a stored workload (``blockOwnerDeletion: true``: foreground deletion of the
    workload waits for the PodGroup)."""
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": workload.get("apiVersion"),
        "kind": workload.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _is_managed(pg: JSON) -> bool:
    return ((pg.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def pod_group_owner(pg: JSON, config: Config) -> str | None:
    """The owner annotation of a PodGroup when it is well formed (``"<group>/<Kind>/<name>"`` or, for groups bare
    Pods share, ``"<group>/<Kind>"``), else ``None``."""
    value = ((pg.get("metadata") or {}).get("annotations") or {}).get(owner_annotation(config))
    if isinstance(value, str) and _OWNER_RE.match(value):
        return value
    return None


def _adopted_by(pg: JSON, uid: str) -> bool:
    refs = (pg.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") and r.get("uid") == uid for r in refs)


def _adopt_ops(pg: JSON, workload: JSON) -> list[JSON]:
    meta = pg.get("metadata") or {}
    ours = owner_reference(workload)
    refs = [r for r in (meta.get("ownerReferences") or [])
            if isinstance(r, dict) and not r.get("controller") and r.get("uid") != ours["uid"]]
    op = "replace" if "ownerReferences" in meta else "add"
    return [{"op": op, "path": "/metadata/ownerReferences", "value": [*refs, ours]}]


def spec_changes(pg: JSON, desired_spec: JSON) -> list[str]:
    """Human list of the managed spec fields that differ: ``["minMember 3 -> 5"]``."""
    spec = pg.get("spec") if isinstance(pg.get("spec"), dict) else {}
    out = []
    for key in ("minMember", "minResources", "scheduleTimeoutSeconds"):
        have, want = spec.get(key), desired_spec.get(key)
        if key == "minResources":
            if spec_differs({"spec": {"minMember": 0, "minResources": have}},
                            {"minMember": 0, "minResources": want}):
                out.append(f"minResources {have or {}} -> {want or {}}")
        elif have != want:
            out.append(f"{key} {have} -> {want}")
    return out


def describe_spec(spec: JSON) -> list[str]:
    """Human list of a PodGroup spec's fields: ``["minMember 3", "minResources {'cpu': '3'}"]``."""
    return [f"{k} {spec[k]}" for k in ("minMember", "minResources", "scheduleTimeoutSeconds") if k in spec]


@dataclass(slots=True)
class Action:
    """What :func:`decide` says to do with one PodGroup key.

    Attributes:
        kind: ``"none"``, ``"create"`` (``body``; ``changes`` describes its spec), ``"patch"`` (``ops``; ``adopt``
            and/or ``changes``),
            ``"delete"``, ``"wait"`` (unclaimed, within the grace period: look again in ``delay`` seconds),
            ``"conflict"`` or ``"invalid"`` (report ``message``; write nothing), ``"foreign"`` (a PodGroup that looks
            managed but has no valid owner annotation: report, never touch).
        claim: the claim acted for (``None`` for orphans).
        unclaimed: no stored workload claims the PodGroup (grace-period bookkeeping).
        others: other claims on the same name, each with the message that says why it is ignored.
    """

    kind: str
    claim: Claim | None = None
    body: JSON | None = None
    ops: list[JSON] = field(default_factory=list)
    adopt: bool = False
    changes: list[str] = field(default_factory=list)
    delay: float = 0.0
    message: str = ""
    unclaimed: bool = False
    others: list[tuple[Claim, str]] = field(default_factory=list)


def decide(key: GroupKey, pg: JSON | None, claims: list[Claim], config: Config, *, now: float,
           unclaimed_since: float | None, grace: float) -> Action:
    """The one thing to do for PodGroup ``key`` (pure).

    Args:
        key: ``(namespace, name)`` of the PodGroup.
        pg: the PodGroup as last seen (managed or not), or ``None`` when there is none.
        claims: stored workloads whose plan names ``key``, plus those whose identity is the PodGroup's owner
            annotation (so a workload whose annotations became invalid still protects its group).
        now / unclaimed_since: seconds on one monotonic clock; ``unclaimed_since`` is when this PodGroup was first
            seen unclaimed (``None``: not before).
        grace: orphan grace period, seconds.
    """
    ns, name = key
    pg_ref = f"PodGroup {ns}/{name}"
    managed = pg is not None and _is_managed(pg)
    owner = pod_group_owner(pg, config) if pg is not None else None
    valid = [c for c in claims if c.plan is not None and c.key == key]
    invalid = [c for c in claims if c.plan is None and c.identity == owner]
    if valid:
        valid.sort(key=lambda c: (c.identity != owner, str(c.meta.get("creationTimestamp") or ""), c.identity))
        chosen = valid[0]
        plan = chosen.plan
        assert plan is not None
        others = [(c, f"{c.ref} names {pg_ref}, which {chosen.ref} already uses; set annotation "
                      f"{config.pod_group_key} on {c.ref} to another name") for c in valid[1:]]
        if chosen.deleting:
            return Action("none", chosen, message=f"{chosen.ref} is being deleted", others=others)
        desired = desired_pod_group(plan, config)
        if pg is None:
            if not plan.shared:
                desired["metadata"]["ownerReferences"] = [owner_reference(chosen.workload)]
            return Action("create", chosen, body=desired, changes=describe_spec(desired["spec"]), others=others)
        if (pg.get("metadata") or {}).get("deletionTimestamp"):
            return Action("none", chosen, message=f"{pg_ref} is being deleted", others=others)
        if managed and owner is None:
            return Action("foreign", chosen, message=_foreign_message(pg_ref, config), others=others)
        own = ownership(pg, plan, config, chosen.explicit)
        if own.action == "conflict":
            return Action("conflict", chosen, message=f"{chosen.ref}: {own.message}", others=others)
        if own.action != "manage":
            return Action("none", chosen, message=own.action, others=others)  # "use" / "operator": leave it as it is
        ops: list[JSON] = []
        adopt = False
        if not plan.shared and not _adopted_by(pg, chosen.uid):
            ops.extend(_adopt_ops(pg, chosen.workload))
            adopt = True
        changes: list[str] = []
        if spec_differs(pg, desired["spec"]):
            changes = spec_changes(pg, desired["spec"])
            ops.extend(spec_json_patch(pg, desired["spec"]))
        if not ops:
            return Action("none", chosen, others=others)
        rv = (pg.get("metadata") or {}).get("resourceVersion")
        if rv:
            ops.append({"op": "replace", "path": "/metadata/resourceVersion", "value": rv})
        return Action("patch", chosen, ops=ops, adopt=adopt, changes=changes, others=others)
    if pg is None or not managed:
        return Action("none")
    if owner is None:
        return Action("foreign", message=_foreign_message(pg_ref, config))
    if invalid:
        c = invalid[0]
        return Action("invalid", c, message=f"{c.ref}: {c.error}; {pg_ref} is left as it is until this is fixed")
    if (pg.get("metadata") or {}).get("deletionTimestamp"):
        return Action("none", unclaimed=True)
    since = now if unclaimed_since is None else unclaimed_since
    left = grace - (now - since)
    if left > 0:
        return Action("wait", delay=left, unclaimed=True)
    return Action("delete", unclaimed=True,
                  message=f"{pg_ref} (owner {owner}) is claimed by no stored workload for {grace:g}s")


def _foreign_message(pg_ref: str, config: Config) -> str:
    return (f"{pg_ref} carries {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} but no valid {owner_annotation(config)} "
            "annotation: admit did not create it and leaves it alone")


# ======================================================================================================================
# The loop
# ======================================================================================================================


@dataclass
class ControllerSettings:
    """Tunables (seconds). Defaults: the ``admit serve`` flags and client-go's leader-election values."""

    orphan_grace_period: float = 60.0
    resync_period: float = 300.0
    lease_namespace: str = "default"
    lease_name: str = "admit-controller"
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    workers: int = 4
    slow_retry: float = 60.0
    watch_backoff: tuple[float, float] = (0.8, 30.0)
    retry_backoff: tuple[float, float] = (0.5, 60.0)
    api_timeout: float = 10.0
    sync_timeout: float = 30.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "ControllerSettings":
        """From ``admit serve`` flags (``--orphan-grace-period``, ``--resync-period``, ``--lease-name``,
        ``--lease-namespace`` (default ``--namespace``))."""
        return cls(
            orphan_grace_period=float(getattr(args, "orphan_grace_period", 60.0)),
            resync_period=float(getattr(args, "resync_period", 300.0)),
            lease_name=getattr(args, "lease_name", None) or "admit-controller",
            lease_namespace=getattr(args, "lease_namespace", None) or getattr(args, "namespace", None) or "default",
        )


class _WorkQueue:
    """client-go style work queue: a key is queued once, never processed by two workers at once, and re-queued
    if it was added while being processed; ``add_after`` delays an add (keeps the earliest pending delay)."""

    def __init__(self) -> None:
        self._queue: deque[GroupKey] = deque()
        self._queued: set[GroupKey] = set()
        self._processing: set[GroupKey] = set()
        self._dirty: set[GroupKey] = set()
        self._timers: dict[GroupKey, asyncio.TimerHandle] = {}
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: GroupKey) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._ready.set()

    def add_after(self, key: GroupKey, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: GroupKey) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> GroupKey:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: GroupKey) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def clear(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._queue.clear()
        self._queued.clear()
        self._dirty.clear()
        self._processing.clear()


class _NotLeader(Exception):
    """The Lease is no longer held: write nothing."""


class PodGroupView:
    """The admission path's view of the controller: the managed PodGroup cache, and a way to report a missing one.

    ``get`` is :meth:`WatchCache.get` itself (a dict lookup). ``missing`` is for a Pod CREATE whose group is not in
    the cache: when a stored workload claims that name and no PodGroup of that name exists (managed or not), it asks
    the controller to re-create it (non-blocking) and returns the warning for the admission answer; else ``None``.
    """

    def __init__(self, controller: "Controller") -> None:
        self._controller = controller
        self.get = controller.pod_groups.get

    def missing(self, namespace: str, name: str) -> str | None:
        return self._controller.missing_group(namespace, name)


class Controller:
    """Caches, leader election and the reconcile workers (see the module docstring).

    Use :func:`start_controller` in ``admit serve``; tests build one with :class:`ControllerSettings` directly.

    Attributes:
        cache: the :class:`PodGroupView` the admission path uses.
        pod_groups: managed PodGroups; ``other_pod_groups``: the rest; ``workloads``: one cache per watched kind.
        api: the REST client (``api.writes`` counts writes: a follower makes none).
        elector / recorder: leader election and Events.
    """

    def __init__(self, api_client: client.ApiClient, config: Config, settings: ControllerSettings | None = None,
                 *, own_client: bool = False) -> None:
        self.config = config
        self.settings = s = settings or ControllerSettings()
        self._api_client = api_client
        self._own_client = own_client
        self.api = KubeRaw(api_client, timeout=s.api_timeout)
        pg_resource = Resource(config.pod_group_group, config.pod_group_version, config.pod_group_plural, "PodGroup")
        self.pod_group_resource = pg_resource
        common: dict[str, Any] = dict(resync_period=s.resync_period, backoff=s.watch_backoff, slow_retry=s.slow_retry)
        self.pod_groups = WatchCache(self.api, pg_resource, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
                                     handlers=[self._on_pod_group], **common)
        self.other_pod_groups = WatchCache(self.api, pg_resource,
                                           label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}",
                                           handlers=[self._on_pod_group], **common)
        table, notes = watched_kinds(config)
        for note in notes:
            log.warning("%s", note)
        self.kinds = table
        self.workloads: dict[Resource, WatchCache] = {}
        for wk in table:
            self.workloads[wk.resource] = WatchCache(
                self.api, wk.resource, label_selector=wk.selector,
                handlers=[lambda t, o, old, r=wk.resource: self._on_workload(r, t, o, old)], **common,
            )
        self.elector = LeaderElector(
            self.api, s.lease_namespace, s.lease_name, s.identity, lease_duration=s.lease_duration,
            renew_deadline=s.renew_deadline, retry_period=s.retry_period,
            on_started_leading=self._started_leading, on_stopped_leading=self._stopped_leading,
        )
        self.recorder = EventRecorder(self.api, s.identity, allowed=self.elector.is_leader)
        self.cache = PodGroupView(self)
        self._queue = _WorkQueue()
        self._lead_task: asyncio.Task | None = None
        self._leading = False
        #: True while this replica leads and its workers run (after the caches synced).
        self.working = False
        # Indexes (maintained on every replica, from the caches' events).
        self._claims: dict[tuple[str, str, str, str], Claim] = {}
        self._by_group: dict[GroupKey, set[tuple[str, str, str, str]]] = {}
        self._by_identity: dict[tuple[str, str], set[tuple[str, str, str, str]]] = {}
        self._pg_owner: dict[GroupKey, str] = {}
        self._pg_by_owner: dict[tuple[str, str], set[GroupKey]] = {}
        # Leader-only bookkeeping.
        self._unclaimed_since: dict[GroupKey, float] = {}
        self._failures: dict[GroupKey, int] = {}
        self._reported: dict[GroupKey, dict[str, str]] = {}
        self._no_block_owner_deletion: set[str] = set()
        self._kept_for_pods: dict[GroupKey, int] = {}
        #: Reconciles run, and the last few actions ``(kind, key)`` (tests, debugging).
        self.reconciles = 0
        self.actions: deque[tuple[str, GroupKey]] = deque(maxlen=200)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "Controller":
        """Start the caches and the leader election (returns at once)."""
        await self.pod_groups.start()
        await self.other_pod_groups.start()
        for cache in self.workloads.values():
            await cache.start()
        self.recorder.start()
        await self.elector.start()
        log.info("PodGroup controller started as %s: watching %s; orphan grace %gs, resync %gs, Lease %s/%s",
                 self.settings.identity, ", ".join(wk.resource.label for wk in self.kinds),
                 self.settings.orphan_grace_period, self.settings.resync_period, self.settings.lease_namespace,
                 self.settings.lease_name)
        return self

    async def stop(self) -> None:
        """Stop writing, give the Lease back, stop watching. Idempotent."""
        await self._stop_workers()
        await self.elector.stop(release=True)
        await self.recorder.stop()
        await self.pod_groups.stop()
        await self.other_pod_groups.stop()
        for cache in self.workloads.values():
            await cache.stop()
        if self._own_client:
            await self._api_client.close()
            self._own_client = False

    def readiness(self) -> tuple[bool, str]:
        """``/readyz`` check: ready once the PodGroup cache answered its first list (admission works without the
        cache, only slower, so a failed list does not hold the replica back)."""
        if self.pod_groups.synced or self.pod_groups.attempted:
            return True, ""
        return False, "PodGroup cache not listed yet"

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    # ------------------------------------------------------------------ indexes (every replica)

    def _on_workload(self, resource: Resource, event: str, obj: JSON, old: JSON | None) -> None:
        ns, name = object_key(obj)
        wkey = (resource.api_version, resource.kind, ns, name)
        touched: set[GroupKey] = set()
        before = self._claims.pop(wkey, None)
        if before is not None:
            touched |= self._unindex(wkey, before)
        if event != "DELETED":
            claim = claim_of(obj, resource, self.config)
            if claim is not None:
                self._claims[wkey] = claim
                touched |= self._index(wkey, claim)
        if self._leading:
            for key in touched:
                self._queue.add(key)

    def _index(self, wkey: tuple[str, str, str, str], claim: Claim) -> set[GroupKey]:
        touched: set[GroupKey] = set()
        if claim.key is not None:
            self._by_group.setdefault(claim.key, set()).add(wkey)
            touched.add(claim.key)
        ident = (claim.namespace, claim.identity)
        self._by_identity.setdefault(ident, set()).add(wkey)
        touched |= self._pg_by_owner.get(ident, set())
        return touched

    def _unindex(self, wkey: tuple[str, str, str, str], claim: Claim) -> set[GroupKey]:
        touched: set[GroupKey] = set()
        if claim.key is not None:
            members = self._by_group.get(claim.key)
            if members is not None:
                members.discard(wkey)
                if not members:
                    del self._by_group[claim.key]
            touched.add(claim.key)
        ident = (claim.namespace, claim.identity)
        members = self._by_identity.get(ident)
        if members is not None:
            members.discard(wkey)
            if not members:
                del self._by_identity[ident]
        touched |= self._pg_by_owner.get(ident, set())
        return touched

    def _on_pod_group(self, event: str, obj: JSON, old: JSON | None) -> None:
        key = object_key(obj)
        prior = self._pg_owner.pop(key, None)
        if prior is not None:
            members = self._pg_by_owner.get((key[0], prior))
            if members is not None:
                members.discard(key)
                if not members:
                    del self._pg_by_owner[(key[0], prior)]
        current = self._pod_group(key)  # both caches share this index: a PodGroup may move from one to the other
        owner = pod_group_owner(current, self.config) if current is not None else None
        if owner is not None:
            self._pg_owner[key] = owner
            self._pg_by_owner.setdefault((key[0], owner), set()).add(key)
        if self._leading:
            self._queue.add(key)

    def _claims_for(self, key: GroupKey, pg: JSON | None) -> list[Claim]:
        wkeys = set(self._by_group.get(key, ()))
        owner = pod_group_owner(pg, self.config) if pg is not None else None
        if owner is not None:
            wkeys |= self._by_identity.get((key[0], owner), set())
        return [self._claims[w] for w in sorted(wkeys) if w in self._claims]

    def _pod_group(self, key: GroupKey) -> JSON | None:
        return self.pod_groups.get(*key) or self.other_pod_groups.get(*key)

    def missing_group(self, namespace: str, name: str) -> str | None:
        """See :meth:`PodGroupView.missing`. A dict lookup or three; never an API call, never blocks."""
        key = (namespace, name)
        if not (self.pod_groups.synced and self.other_pod_groups.synced):
            return None
        if self._pod_group(key) is not None or not self._by_group.get(key):
            return None
        if self._leading:
            self._queue.add(key)
        return f"PodGroup {namespace}/{name} not found yet; admit is re-creating it"

    # ------------------------------------------------------------------ leadership

    async def _started_leading(self) -> None:
        self._leading = True
        self._lead_task = asyncio.create_task(self._lead(), name="podgroup controller workers")

    async def _stopped_leading(self) -> None:
        await self._stop_workers()

    async def _stop_workers(self) -> None:
        self._leading = False
        self.working = False
        task, self._lead_task = self._lead_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._queue.clear()
        self._unclaimed_since.clear()
        self._failures.clear()

    async def _lead(self) -> None:
        s = self.settings
        # Like client-go's WaitForCacheSync: decide nothing before the PodGroup caches hold the whole collection;
        # give the workload caches sync_timeout seconds to answer once (a kind that never answers blocks nothing
        # but the deletion of orphans it might own).
        waited = False
        while not (await self.pod_groups.wait_synced(s.sync_timeout) and
                   await self.other_pod_groups.wait_synced(s.sync_timeout)):
            if not waited:
                waited = True
                log.warning("PodGroups cannot be listed yet (%s); the controller writes nothing until they can",
                            self.pod_groups.state)
        deadline = time.monotonic() + s.sync_timeout
        for cache in self.workloads.values():
            await cache.wait_attempted(max(0.0, deadline - time.monotonic()))
        keys = {object_key(pg) for pg in self.pod_groups.items()} | set(self._by_group)
        for key in sorted(keys):
            self._queue.add(key)
        log.info("leading: %d PodGroup keys queued (%d managed PodGroups, %d gang workloads)", len(keys),
                 len(self.pod_groups), len(self._claims))
        workers = [asyncio.create_task(self._worker(), name=f"podgroup worker {i}") for i in range(s.workers)]
        self.working = True
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            for w in workers:
                with contextlib.suppress(asyncio.CancelledError):
                    await w

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                await self._reconcile(key)
                if self._failures.pop(key, None) is not None:
                    self._resolved(key, "retry")
            except _NotLeader:
                pass
            except KubeError as e:
                self._retry(key, e.message if e.message.startswith("cannot ") else
                            f"PodGroup {key[0]}/{key[1]}: {e.message}")
            except Exception as e:  # noqa: BLE001 - one bad object must not stop the controller
                log.exception("reconcile of PodGroup %s/%s failed", *key)
                self._retry(key, f"PodGroup {key[0]}/{key[1]}: internal error ({type(e).__name__})")
            finally:
                self._queue.done(key)

    def _retry(self, key: GroupKey, why: str) -> None:
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        base, maximum = self.settings.retry_backoff
        delay = min(maximum, base * 2 ** (n - 1)) * (0.75 + random.random() / 4)
        self._report(key, "retry", f"{why}; retrying with backoff ({base:g}s doubling to {maximum:g}s)")
        if self._leading:
            self._queue.add_after(key, delay)

    # ------------------------------------------------------------------ reporting

    def _report(self, key: GroupKey, topic: str, message: str, level: int = logging.WARNING) -> bool:
        """Log ``message`` unless it is what was last logged for (key, topic); True when logged."""
        topics = self._reported.setdefault(key, {})
        if topics.get(topic) == message:
            return False
        topics[topic] = message
        log.log(level, "%s", message)
        return True

    def _resolved(self, key: GroupKey, topic: str) -> None:
        topics = self._reported.get(key)
        if topics is not None:
            topics.pop(topic, None)
            if not topics:
                del self._reported[key]

    def _event(self, regarding: JSON, type_: str, reason: str, action: str, note: str,
               related: JSON | None = None) -> None:
        if regarding.get("metadata", {}).get("uid"):
            self.recorder.record(regarding, type_, reason, action, note, related)

    # ------------------------------------------------------------------ one key

    def _check_leader(self) -> None:
        if not self.elector.is_leader():
            raise _NotLeader()

    async def _reconcile(self, key: GroupKey, fetched: JSON | None = None, depth: int = 0) -> None:
        self.reconciles += 1
        pg = fetched if fetched is not None else self._pod_group(key)
        claims = self._claims_for(key, pg)
        now = time.monotonic()
        action = decide(key, pg, claims, self.config, now=now, unclaimed_since=self._unclaimed_since.get(key),
                        grace=self.settings.orphan_grace_period)
        if action.unclaimed:
            self._unclaimed_since.setdefault(key, now)
        else:
            self._unclaimed_since.pop(key, None)
        self.actions.append((action.kind, key))
        if pg is None and not claims:
            self._reported.pop(key, None)
            self._kept_for_pods.pop(key, None)
        current: set[str] = set()
        for other, message in action.others:
            current.add(f"other:{other.identity}")
            if self._report(key, f"other:{other.identity}", message):
                self._event(other.workload, "Warning", "PodGroupNameTaken", "Reconcile", message)
        for c in claims:
            if c.problem:
                current.add(f"problem:{c.identity}")
                if self._report(key, f"problem:{c.identity}", f"{c.ref}: {c.problem}"):
                    self._event(c.workload, "Warning", "GangBelowMinMember", "Reconcile", c.problem)
        for topic in [t for t in self._reported.get(key, {}) if t.startswith(("other:", "problem:"))]:
            if topic not in current:
                self._resolved(key, topic)  # fixed: report it again if it comes back
        if action.kind not in ("conflict", "invalid", "foreign"):
            for topic in ("conflict", "invalid", "foreign"):
                self._resolved(key, topic)
        handler = {
            "create": self._create, "patch": self._patch, "delete": self._delete,
        }.get(action.kind)
        if handler is not None:
            await handler(key, action, depth)
        elif action.kind == "wait":
            self._queue.add_after(key, action.delay)
        elif action.kind in ("conflict", "invalid", "foreign"):
            if self._report(key, action.kind, action.message) and action.claim is not None:
                reason = {"conflict": "PodGroupConflict", "invalid": "InvalidGangAnnotation",
                          "foreign": "PodGroupNotManaged"}[action.kind]
                self._event(action.claim.workload, "Warning", reason, "Reconcile", action.message)

    async def _refetch(self, key: GroupKey, depth: int) -> None:
        """Our cache is behind the server (409 on create or patch): decide again on the stored object."""
        fetched = await self._get(key)
        if fetched is None or depth > 0:
            self._queue.add_after(key, 0.05)
            return
        await self._reconcile(key, fetched, depth + 1)

    async def _create(self, key: GroupKey, action: Action, depth: int) -> None:
        claim = action.claim
        assert claim is not None and action.body is not None
        self._strip_block_owner_deletion(action.body["metadata"].get("ownerReferences") or [], claim)
        self._check_leader()
        try:
            created = await self.api.request("POST", self.pod_group_resource.path(key[0]), body=action.body)
        except KubeError as e:
            if e.status == 409:
                return await self._refetch(key, depth)
            if namespace_terminating(e):  # the namespace and the workload in it are going: nothing to re-create
                self._report(key, "terminating", f"PodGroup {key[0]}/{key[1]} not re-created for {claim.ref}: its "
                                                 "namespace is being deleted", logging.INFO)
                return None
            if self._blocked_owner_deletion(e, claim):
                return await self._create(key, action, depth)
            raise self._fail(claim, key, e, f"cannot create PodGroup {key[0]}/{key[1]} for {claim.ref}: {e.message}")
        self._resolved(key, "fail")
        self._resolved(key, "terminating")
        log.info("created PodGroup %s/%s for %s (%s), owned by uid %s", key[0], key[1], claim.ref,
                 ", ".join(action.changes), claim.uid)
        metrics.pod_group("recreated")
        self._event(claim.workload, "Normal", "PodGroupCreated", "Create",
                    f"created PodGroup {key[1]} ({', '.join(action.changes)}); owned by this {claim.kind}, deleted "
                    f"with it", related=created)

    async def _patch(self, key: GroupKey, action: Action, depth: int) -> None:
        claim = action.claim
        assert claim is not None
        for op in action.ops:
            if op.get("path") == "/metadata/ownerReferences":
                self._strip_block_owner_deletion(op.get("value") or [], claim)
        self._check_leader()
        try:
            patched = await self.api.request("PATCH", self.pod_group_resource.path(*key), body=action.ops,
                                             content_type="application/json-patch+json")
        except KubeError as e:
            if e.status == 409:  # changed since we decided (resourceVersion precondition)
                return await self._refetch(key, depth)
            if e.status == 404:  # deleted meanwhile: its DELETED event brings it back here
                self._queue.add_after(key, 0.05)
                return
            if self._blocked_owner_deletion(e, claim):
                return await self._patch(key, action, depth)
            raise self._fail(claim, key, e, f"cannot update PodGroup {key[0]}/{key[1]} for {claim.ref}: {e.message}")
        self._resolved(key, "fail")
        if action.adopt:
            log.info("adopted PodGroup %s/%s: owner %s uid %s", key[0], key[1], claim.ref, claim.uid)
            metrics.pod_group("adopted")
            self._event(claim.workload, "Normal", "PodGroupAdopted", "Adopt",
                        f"PodGroup {key[1]} is now owned by this {claim.kind}: the garbage collector deletes it "
                        f"with the {claim.kind}", related=patched)
        if action.changes:
            log.info("updated PodGroup %s/%s for %s: %s", key[0], key[1], claim.ref, "; ".join(action.changes))
            metrics.pod_group("patched")
            self._event(claim.workload, "Normal", "PodGroupUpdated", "Update",
                        f"PodGroup {key[1]} spec updated: {'; '.join(action.changes)}", related=patched)

    async def _delete(self, key: GroupKey, action: Action, depth: int) -> None:
        pg = self._pod_group(key)
        if pg is None:
            return
        owner = pod_group_owner(pg, self.config) or ""
        group, _, rest = owner.partition("/")
        owner_kind = rest.partition("/")[0]
        unknown = [r.label for r, cache in self.workloads.items()
                   if (r.group, r.kind) == (group, owner_kind) and not (cache.synced or cache.absent)]
        if unknown:
            self._report(key, "delete", f"PodGroup {key[0]}/{key[1]} looks unclaimed, but {', '.join(unknown)} "
                                        f"cannot be listed; not deleting it", logging.INFO)
            self._queue.add_after(key, self.settings.orphan_grace_period)
            return
        users = await self._pods_using(key)
        if users:
            if self._kept_for_pods.get(key) != users:
                self._kept_for_pods[key] = users
                log.info("PodGroup %s/%s has no stored workload but %d live pod(s) still carry its label; keeping it",
                         key[0], key[1], users)
            self._queue.add_after(key, self.settings.orphan_grace_period)
            return
        self._kept_for_pods.pop(key, None)
        meta = pg.get("metadata") or {}
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
        self._check_leader()
        try:
            await self.api.request("DELETE", self.pod_group_resource.path(*key), body=body)
        except KubeError as e:
            if e.status == 404:
                return
            if e.status == 409:
                self._queue.add_after(key, 0.05)
                return
            raise
        self._unclaimed_since.pop(key, None)
        log.info("deleted PodGroup %s/%s: %s", key[0], key[1], action.message)
        metrics.pod_group("orphan_deleted")
        self._event(pg, "Normal", "PodGroupDeleted", "Delete",
                    f"deleted: {action.message}; pods no longer use it")

    # ------------------------------------------------------------------ helpers

    async def _get(self, key: GroupKey) -> JSON | None:
        try:
            return await self.api.request("GET", self.pod_group_resource.path(*key))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def _pods_using(self, key: GroupKey) -> int:
        """Live pods (not terminating, not finished) carrying the group label; one list call, at most 100 read."""
        query = [("labelSelector", f"{self.config.pod_group_label}={key[1]}"), ("limit", "100")]
        doc = await self.api.request("GET", PODS.path(key[0]), query=query)
        live = 0
        for pod in doc.get("items") or []:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            live += 1
        return live

    def _strip_block_owner_deletion(self, refs: list[JSON], claim: Claim) -> None:
        if claim.kind in self._no_block_owner_deletion:
            for ref in refs:
                ref.pop("blockOwnerDeletion", None)

    def _blocked_owner_deletion(self, e: KubeError, claim: Claim) -> bool:
        """OwnerReferencesPermissionEnforcement (e.g. OpenShift) refuses ``blockOwnerDeletion`` without ``update`` on
        ``<workloads>/finalizers``: adopt without it (the garbage collector still deletes the PodGroup) and say so."""
        if e.status in (403, 422) and "blockOwnerDeletion" in e.message and claim.kind not in \
                self._no_block_owner_deletion:
            self._no_block_owner_deletion.add(claim.kind)
            log.warning("%s: %s; adopting %s PodGroups without blockOwnerDeletion (grant 'update' on the %s "
                        "finalizers subresource to keep it)", claim.ref, e.message, claim.kind, claim.kind)
            return True
        return False

    def _fail(self, claim: Claim, key: GroupKey, error: KubeError, message: str) -> KubeError:
        """A Warning Event on the workload, once per distinct failure; returns the error to raise (the retry logs
        its message)."""
        topics = self._reported.setdefault(key, {})
        if topics.get("fail") != message:
            topics["fail"] = message
            self._event(claim.workload, "Warning", "PodGroupSyncFailed", "Reconcile", message)
        return KubeError(error.status, error.reason, message)


async def start_controller(api_client: client.ApiClient, config: Config, args: argparse.Namespace,
                           settings: ControllerSettings | None = None) -> Controller:
    """Start the controller for ``admit serve`` and return it (``.cache``, ``.readiness()``, ``await .stop()``).

    The controller gets its own ``ApiClient`` (same configuration and credentials, separate connection pool), so
    its long-lived watches never take connections the admission path needs.
    """
    own = client.ApiClient(api_client.configuration)
    resolve_proxy_once(own)
    metrics.instrument_api_client(own)
    controller = Controller(own, config, settings or ControllerSettings.from_args(args), own_client=True)
    return await controller.start()
