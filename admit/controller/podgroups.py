"""The PodGroup controller inside ``admit serve``: adopt, keep in step, clean up; and the PodGroup cache.

Why it exists (docs/behaviour.md, "The garbage-collector race"): admission happens before the workload is stored, so the
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

Pieces (one module each):

- **what to watch and what each object claims** (``claims.py``): :func:`watched_kinds` derives the watched kinds
  from ``admit.families.kinds.RESOLVERS`` (every non-Pod kind whose API coordinates are in :data:`KNOWN_RESOURCES`; MPIJob in
  both ``kubeflow.org/v1`` and ``v2beta1``), each with the label selector ``gang.admit.dev/managed=true`` the
  mutating webhook writes, plus Spark driver Pods (``spark-role=driver`` and the managed label). A kind whose CRD is
  not installed answers 404 and is retried slowly; 403 likewise (``watchcache.py``); the others keep working. The
  caches keep small records (``claims.workload_record``, ``claims.pod_group_record``), never whole objects.
- **PodGroup caches**: managed PodGroups (``app.kubernetes.io/managed-by=admit``) - the cache the admission path
  reads - and, apart, the others (``managed-by!=admit``) so that a hand-written PodGroup a workload names is known
  without an API call, never re-created over, never warned about.
- **the pure decision** (``writes.decide``: ``backends/gangobjects.py`` ``decide_objects``, the gang-object
  controller's decision too, for the PodGroup): (PodGroup, claims, clock) -> one ``backends.action.Action``:
  create, patch (adopt and/or spec), delete, wait, or report a conflict / an invalid annotation. Tested without
  HTTP.
- **the key loop** (``keyloop.py``, ``KeyLoop``, shared with the gang-object controller of ``workload_api.py``): the
  work queue (``workqueue.py``), the reconcile of one key with its error handling and retry, each problem reported
  once per change (per key and topic).
- **the guarded writes of one key** (``writes.py``, ``KeyWrites``): decide, read live, create / patch / delete,
  back off from a write something keeps undoing (the guards, ``guards.py`` ``WriteGuards``, are the gang-object
  controller's too).
- **the controller** (:class:`Controller`, here): caches run on every replica (the webhooks need the PodGroup cache
  everywhere, and a new leader starts warm, as controller-runtime does); only the Lease holder (``leader.py``) runs
  the ``settings.workers`` workers of its key loop, and each write first checks that the lease is still held (a
  write refused for that is looked at again after a retry period while this replica still leads). The work queue,
  keyed by ``(namespace, PodGroup name)``, never runs one key twice at once; failures retry with per-key exponential
  backoff (0.5 s doubling to 60 s, jittered); ``resync_period`` (default 300 s) re-delivers every cached object. The
  gang-object controller runs beside it through the few attributes ``workload_api.GangHost`` names.

Writes use optimistic concurrency: patches carry the ``resourceVersion`` the decision was made on (409 Conflict ->
decide again on fresher data), deletes carry ``preconditions`` on ``uid`` and ``resourceVersion``. Writes that
set an owner, change a spec or delete are never decided from the cache alone: before creating
with an owner, adopting or patching a spec, the workload is read live and the write is made only if its uid matches
and it is not being deleted (decided again on the live object when the cache is behind); before deleting an
unclaimed PodGroup, its owner workload is read live and the pods that carry its label are listed (live phases only,
paged). The same write repeated while something keeps undoing it slows down with back-off.

Bad input is logged in one line per distinct problem (again only when it changes) and never stops the rest: a
PodGroup named by a workload that belongs to someone else, a PodGroup carrying admit's managed-by label without a
valid owner annotation (not admit's: left alone), a workload whose annotations became invalid (its PodGroup is left
as it is), a resource kind the API answers 403 for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections import deque
from typing import Any

from kubernetes_asyncio import client

from .claims import (
    KNOWN_RESOURCES,
    SPARK_DRIVER_SELECTOR,
    Claim,
    WatchedKind,
    claim_of,
    owner_reference,
    pod_group_owner,
    pod_group_record,
    watched_kinds,
    workload_record,
)
from ..config import COSCHEDULING, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config
from ..observability import metrics
from .events import EventRecorder
from ..kube.client import resolve_proxy_once
from .keyloop import KeyLoop
from .leader import LeaderElector
from .settings import ControllerSettings
from ..eventloop import Pacer
from .multiindex import MultiIndex
from ..gang.resources import device_class_record, dra_extended_resources, runtime_class_record, runtime_overheads
from ..kube.watchcache import KubeRaw, Resource, WatchCache, object_key
from .guards import WriteGuards
from .writes import KeyWrites, decide

DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)
"""RuntimeClasses (``node.k8s.io/v1``): ``overhead.podFixed``, which kube-apiserver adds to every pod of the class."""
"""DeviceClasses (``resource.k8s.io/v1``, GA in Kubernetes 1.34): ``spec.extendedResourceName`` (KEP-5004)."""

__all__ = [
    "KNOWN_RESOURCES",
    "SPARK_DRIVER_SELECTOR",
    "WatchedKind",
    "watched_kinds",
    "Claim",
    "claim_of",
    "decide",
    "owner_reference",
    "pod_group_owner",
    "ControllerSettings",
    "Controller",
    "PodGroupView",
    "start_controller",
]

log = logging.getLogger("admit.controller")

JSON = dict[str, Any]
GroupKey = tuple[str, str]  # (namespace, PodGroup name)

# ======================================================================================================================
# The loop
# ======================================================================================================================


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

    def extended_resources(self) -> dict[str, str]:
        """``{extended resource name: DeviceClass name}`` DRA serves (``Controller.dra_extended_resources``)."""
        return self._controller.dra_extended_resources

    def runtime_overheads(self) -> dict[str, dict[str, str]]:
        """``{RuntimeClass name: overhead.podFixed}`` (``Controller.runtime_overheads``)."""
        return self._controller.runtime_overheads


class Controller(KeyWrites):
    """Caches, leader election and the reconcile workers (see the module docstring).

    Use :func:`start_controller` in ``admit serve``; tests build one with :class:`ControllerSettings` directly.

    Attributes:
        cache: the :class:`PodGroupView` the admission path uses.
        loop: the ``keyloop.KeyLoop`` of the PodGroup keys (its work queue, failure counts and reports).
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
        common: dict[str, Any] = dict(resync_period=s.resync_period, backoff=s.watch_backoff, slow_retry=s.slow_retry,
                                      idle_timeout=s.watch_idle_timeout, on_listed=self._listed,
                                      page_size=s.page_size)
        slim_pod_group = lambda obj: pod_group_record(obj, config)  # noqa: E731
        self.pod_groups = WatchCache(self.api, pg_resource, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
                                     handlers=[self._on_pod_group], transform=slim_pod_group, **common)
        self.other_pod_groups = WatchCache(self.api, pg_resource,
                                           label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}",
                                           handlers=[self._on_pod_group], transform=slim_pod_group, **common)
        table, notes = watched_kinds(config)
        for note in notes:
            log.warning("%s", note)
        self.kinds = table
        self.workloads: dict[Resource, WatchCache] = {}
        for wk in table:
            self.workloads[wk.resource] = WatchCache(
                self.api, wk.resource, label_selector=wk.selector,
                handlers=[functools.partial(self._on_workload, wk.resource)],
                transform=functools.partial(workload_record, resource=wk.resource, config=config), **common,
            )
        #: DeviceClasses (``resource.k8s.io/v1``, cluster-scoped), for the extended resources DRA serves
        #: (KEP-5004): admission and reconcile leave them out of minResources (``resources.countable_min_resources``).
        #: A cluster without DRA answers 404 and is retried slowly; without RBAC for them, 403, the same.
        self.device_classes = WatchCache(self.api, DEVICE_CLASSES, handlers=[self._on_device_class],
                                         transform=device_class_record, resync_period=None, backoff=s.watch_backoff,
                                         slow_retry=s.slow_retry, idle_timeout=s.watch_idle_timeout,
                                         page_size=s.page_size)
        #: ``{extended resource name: DeviceClass name}`` from :attr:`device_classes` (replaced, never mutated).
        self.dra_extended_resources: dict[str, str] = {}
        #: RuntimeClasses, for the pod overhead kube-apiserver adds to each pod of a class: admission and reconcile
        #: add it to minResources (``resources.with_runtime_overhead``). 404/403 are retried slowly, as above.
        self.runtime_classes = WatchCache(self.api, RUNTIME_CLASSES, handlers=[self._on_runtime_class],
                                          transform=runtime_class_record, resync_period=None, backoff=s.watch_backoff,
                                          slow_retry=s.slow_retry, idle_timeout=s.watch_idle_timeout,
                                          page_size=s.page_size)
        #: ``{RuntimeClass name: overhead.podFixed}`` from :attr:`runtime_classes` (replaced, never mutated).
        self.runtime_overheads: dict[str, dict[str, str]] = {}
        self.elector = LeaderElector(
            self.api, s.lease_namespace, s.lease_name, s.identity, lease_duration=s.lease_duration,
            renew_deadline=s.renew_deadline, retry_period=s.retry_period,
            on_started_leading=self._started_leading, on_stopped_leading=self._stopped_leading,
        )
        self.recorder = EventRecorder(self.api, s.identity, allowed=self.elector.is_leader)
        self.cache = PodGroupView(self)
        self.loop = KeyLoop(self._reconcile, s, leading=lambda: self._leading, subject=_subject, log=log)
        self._lead_task: asyncio.Task | None = None
        self._leading = False
        #: True while this replica leads and its workers run (after the caches synced).
        self.working = False
        # Indexes (maintained on every replica, from the caches' events).
        self._claims: dict[tuple[str, str, str, str], Claim] = {}
        self._by_group: MultiIndex[GroupKey, tuple[str, str, str, str]] = MultiIndex()
        self._by_identity: MultiIndex[tuple[str, str], tuple[str, str, str, str]] = MultiIndex()
        self._pg_owner: dict[GroupKey, str] = {}
        self._pg_by_owner: MultiIndex[tuple[str, str], GroupKey] = MultiIndex()
        # Leader-only bookkeeping.
        self._unclaimed_since: dict[GroupKey, float] = {}
        self._kept_for_pods: dict[GroupKey, int] = {}
        self._ahead_since: dict[GroupKey, float] = {}
        #: The live read before adopt or patch, the back-off from undone writes, the blockOwnerDeletion fallback.
        self.guards = WriteGuards(config, s, self.api, self.loop, self.workloads, COSCHEDULING, _subject, "PodGroups")
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
        await self.device_classes.start()
        await self.runtime_classes.start()
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
        await self.device_classes.stop()
        await self.runtime_classes.stop()
        if self._own_client:
            await self._api_client.close()
            self._own_client = False

    def readiness(self) -> tuple[bool, str]:
        """``/readyz`` check: ready once the PodGroup cache answered its first list (admission works without the
        cache, only slower, so a failed list does not hold the replica back), and not while a cache's watch loop is
        restarting after an unexpected failure (``WatchCache.crashed``: a dead cache is reported, not hidden)."""
        crashed = [c.resource.label for c in self.caches() if c.crashed]
        if crashed:
            return False, f"watch cache failed and is restarting: {', '.join(crashed)}"
        if self.pod_groups.synced or self.pod_groups.attempted:
            return True, ""
        return False, "PodGroup cache not listed yet"

    def caches(self) -> list[WatchCache]:
        """Every cache this controller runs: managed PodGroups, other PodGroups, one per workload kind, then the
        DeviceClasses."""
        return [self.pod_groups, self.other_pod_groups, *self.workloads.values(), self.device_classes,
                self.runtime_classes]

    def _on_runtime_class(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        """A RuntimeClass changed: recompute :attr:`runtime_overheads`."""
        self.runtime_overheads = runtime_overheads(self.runtime_classes.items())

    def _on_device_class(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        """A DeviceClass changed: recompute :attr:`dra_extended_resources` (a handful of objects, rarely changed)."""
        self.dra_extended_resources = dra_extended_resources(self.device_classes.items())

    def _listed(self) -> None:
        """After every list page and every list (a first sync, a relist): move what the caches now hold out of the
        cyclic garbage collector's reach (``gc.freeze``), and give the memory the page's JSON took back to the
        system (glibc ``malloc_trim``; the page is garbage by then).

        Why: a full collection scans every tracked object, and frees none of the cached ones (they are alive). With
        the caches filled after ``admit serve`` froze its start-up heap, full passes scanned them again and again
        (measured: 1.5 million tracked objects at 20,000 workloads, 3.5 s of the start-up CPU, admission p99 2.6 s
        during a relist). Frozen objects are still freed by reference counting when a relist or a DELETED event
        drops them; only garbage in reference cycles that happens to exist at this moment stays (a few objects per
        list). ``ControllerSettings.freeze_heap=False`` turns it off.
        """
        if self.settings.freeze_heap:
            gc.freeze()
            _trim_malloc()

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    # ------------------------------------------------------------------ indexes (every replica)

    def _on_workload(self, resource: Resource, event: str, obj: JSON, old: JSON | None) -> None:
        """Index the claim the cache record carries (``claims.workload_record``: computed once when the object
        arrived). A resync of an unchanged record only queues its keys: nothing is recomputed or re-indexed."""
        ns, name = object_key(obj)
        wkey = (resource.api_version, resource.kind, ns, name)
        claim: Claim | None = obj.get("claim") if event != "DELETED" else None
        before = self._claims.get(wkey)
        if claim is before and claim is not None:
            touched = self._touched(claim)
        else:
            touched = set()
            if before is not None:
                del self._claims[wkey]
                touched |= self._unindex(wkey, before)
            if claim is not None:
                self._claims[wkey] = claim
                touched |= self._index(wkey, claim)
        if self._leading:
            for key in touched:
                self.loop.queue.add(key)

    def _touched(self, claim: Claim) -> set[GroupKey]:
        touched = set(self._pg_by_owner.get((claim.namespace, claim.identity)))
        if claim.key is not None:
            touched.add(claim.key)
        return touched

    def _index(self, wkey: tuple[str, str, str, str], claim: Claim) -> set[GroupKey]:
        touched: set[GroupKey] = set()
        if claim.key is not None:
            self._by_group.add(claim.key, wkey)
            touched.add(claim.key)
        ident = (claim.namespace, claim.identity)
        self._by_identity.add(ident, wkey)
        touched |= self._pg_by_owner.get(ident)
        return touched

    def _unindex(self, wkey: tuple[str, str, str, str], claim: Claim) -> set[GroupKey]:
        touched: set[GroupKey] = set()
        if claim.key is not None:
            self._by_group.discard(claim.key, wkey)
            touched.add(claim.key)
        ident = (claim.namespace, claim.identity)
        self._by_identity.discard(ident, wkey)
        touched |= self._pg_by_owner.get(ident)
        return touched

    def _on_pod_group(self, event: str, obj: JSON, old: JSON | None) -> None:
        key = object_key(obj)
        if event == "SYNC":
            if self._leading:
                self.loop.queue.add(key)
            return
        prior = self._pg_owner.pop(key, None)
        if prior is not None:
            self._pg_by_owner.discard((key[0], prior), key)
        current = self._pod_group(key)  # both caches share this index: a PodGroup may move from one to the other
        owner = pod_group_owner(current, self.config) if current is not None else None
        if owner is not None:
            self._pg_owner[key] = owner
            self._pg_by_owner.add((key[0], owner), key)
        if self._leading:
            self.loop.queue.add(key)

    def missing_group(self, namespace: str, name: str) -> str | None:
        """See :meth:`PodGroupView.missing`. A dict lookup or three; never an API call, never blocks."""
        key = (namespace, name)
        if not (self.pod_groups.synced and self.other_pod_groups.synced):
            return None
        if self._pod_group(key) is not None or key not in self._by_group:
            return None
        if self._leading:
            self.loop.queue.add(key)
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
        self.loop.reset()
        self._unclaimed_since.clear()
        self._ahead_since.clear()
        self.guards.reset()

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
        # Every managed PodGroup and every group a claim names, in list order (the queue drops repeats). Not sorted:
        # building and sorting 40,000 keys in one go held admissions for 50 to 90 ms at 20,000 gang workloads.
        pacer = Pacer()
        for key in (*self.pod_groups.keys(), *self._by_group):
            self.loop.queue.add(key)
            await pacer.tick()
        log.info("leading: %d PodGroup keys queued (%d managed PodGroups, %d gang workloads)", len(self.loop.queue),
                 len(self.pod_groups), len(self._claims))
        workers = [asyncio.create_task(self.loop.worker(), name=f"podgroup worker {i}") for i in range(s.workers)]
        self.working = True
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            for w in workers:
                with contextlib.suppress(asyncio.CancelledError):
                    await w


def _subject(key: GroupKey) -> str:
    """How messages name a key: ``"PodGroup team-a/web"``."""
    return f"PodGroup {key[0]}/{key[1]}"


_MALLOC_TRIM: Any = None


def _trim_malloc() -> None:
    """``malloc_trim(0)`` where glibc has it (a no-op elsewhere): free pages inside the C heap go back to the system,
    so the memory a relist's pages took does not stay in RSS (measured: see docs/performance.md)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            import ctypes

            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


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
