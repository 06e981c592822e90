"""The controller inside ``admit serve``: what every gang controller shares, and one gang controller per enabled
gang backend (``gangs.GangController``, the same class for every backend). Names no backend. It keeps:

- **the gang workloads**: the kinds :func:`claims.watched_kinds` derives from the kind registry, selected by the
  ``gang.admit.dev/managed=true`` label the mutating webhook writes (a kind whose CRD is not installed, or that
  RBAC forbids, is retried slowly: ``watchcache.py``), as small records with the claim computed once
  (``claims.workload_record``);
- **the claims index**: which stored workloads claim which gang (by backend, namespace and group name), and by
  identity (a workload whose annotations became invalid still protects the gang its identity owns);
- **the class caches**: DeviceClasses (the extended resources DRA serves, left out of minResources) and
  RuntimeClasses (the pod overhead added to it), applied to every claim as admission applies them
  (:meth:`Manager.countable`);
- **the Lease** (``leader.py``) and the Event recorder (``events.py``): the caches run on every replica (the
  webhooks read them, and a new leader starts warm, as controller-runtime's do); only the Lease holder runs the
  gang controllers' workers;
- **the members of groups whose size follows them** (``GangPlan.follows_members``: pods labelled
  ``<prefix>/managed: member``), by group: when one finishes or goes, its group's key is queued for its gang
  controller (``GangController.follow``);
- **the admission path's view** (:attr:`Manager.cache`, ``cacheview.ControllerView``).

Bad input is logged in one line per distinct problem and never stops the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import logging
from typing import Any

from kubernetes_asyncio import client

from ..backends.interface import BackendAPI
from ..backends.registry import BACKENDS
from ..backends.runtime import APIS
from ..config import Config
from ..eventloop import cancel
from ..gang.plan import MEMBER, get_path
from ..gang.resources import (ResourceError, countable_min_resources, device_class_record, dra_extended_resources,
                              runtime_class_record, runtime_overheads, with_runtime_overhead)
from ..kube.client import resolve_proxy_once
from ..kube.watchcache import KubeRaw, Resource, WatchCache, object_key
from ..observability import metrics
from .cacheview import ControllerView
from .claims import JSON, PODS, Claim, member_record, workload_record, watched_kinds
from .events import EventRecorder
from .gangs import GangController
from .leader import LeaderElector
from .multiindex import MultiIndex
from .settings import ControllerSettings

__all__ = ["Manager", "ControllerSettings", "start_manager"]

log = logging.getLogger("admit.controller")

Key = tuple[str, str]
WKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name) of a gang workload

DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
"""DeviceClasses (``resource.k8s.io/v1``, GA in Kubernetes 1.34): ``spec.extendedResourceName`` (KEP-5004)."""
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)
"""RuntimeClasses (``node.k8s.io/v1``): ``overhead.podFixed``, which kube-apiserver adds to every pod of the class."""


class Manager:
    """Caches, claims, leader election and the gang controllers (see the module docstring).

    Use :func:`start_manager` in ``admit serve``; tests build one with :class:`ControllerSettings` directly.

    Attributes:
        gangs: ``{backend name: gangs.GangController}``, one per enabled backend the API server serves.
        cache: the ``cacheview.ControllerView`` the admission path reads.
        workloads: one cache per watched kind; api: the REST client (``api.writes`` counts writes).
        elector / recorder: leader election and Events.
        dra_extended_resources / runtime_overheads: from the class caches (replaced, never mutated).
    """

    def __init__(self, api_client: client.ApiClient, config: Config, settings: ControllerSettings | None = None,
                 *, own_client: bool = False) -> None:
        self.config = config
        self.settings = s = settings or ControllerSettings()
        self._api_client, self._own_client = api_client, own_client
        self.api = KubeRaw(api_client, timeout=s.api_timeout)
        self.kinds, notes = watched_kinds(config)
        for note in notes:
            log.warning("%s", note)
        self.workloads: dict[Resource, WatchCache] = {
            wk.resource: WatchCache(self.api, wk.resource, label_selector=wk.selector,
                                    handlers=[functools.partial(self._on_workload, wk.resource)],
                                    transform=functools.partial(workload_record, resource=wk.resource, config=config),
                                    **self.cache_options())
            for wk in self.kinds}
        # A cluster without DRA, or without RBAC for these, answers 404 / 403: retried slowly.
        classes = dict(self.cache_options(), resync_period=None, on_listed=None)
        self.device_classes = WatchCache(self.api, DEVICE_CLASSES, handlers=[self._on_class],
                                         transform=device_class_record, **classes)
        self.runtime_classes = WatchCache(self.api, RUNTIME_CLASSES, handlers=[self._on_class],
                                          transform=runtime_class_record, **classes)
        self.members = WatchCache(self.api, PODS, label_selector=f"{config.managed_label}={MEMBER}",
                                  handlers=[self._on_member], transform=functools.partial(member_record, config=config),
                                  **self.cache_options())
        self._by_members: MultiIndex[tuple[str, str, str], Key] = MultiIndex()  # (backend, namespace, group)
        self._gone: dict[tuple[str, str, str], dict[Key, JSON]] = {}  # members deleted after they succeeded
        self.dra_extended_resources: dict[str, str] = {}
        self.runtime_overheads: dict[str, dict[str, str]] = {}
        self.elector = LeaderElector(
            self.api, s.lease_namespace, s.lease_name, s.identity, lease_duration=s.lease_duration,
            renew_deadline=s.renew_deadline, retry_period=s.retry_period,
            on_started_leading=self._started_leading, on_stopped_leading=self._stop_workers,
        )
        self.recorder = EventRecorder(self.api, s.identity, allowed=self.elector.is_leader)
        # The claims index (every replica, from the workload caches' events).
        self._claims: dict[WKey, Claim] = {}
        self._by_group: MultiIndex[tuple[str, str, str], WKey] = MultiIndex()  # (backend, namespace, group)
        self._by_identity: MultiIndex[tuple[str, str], WKey] = MultiIndex()  # (namespace, identity)
        self.gangs: dict[str, GangController] = {}
        #: ``{(API group, kind): gang controller}``: who keeps the objects of that type.
        self.by_type: dict[tuple[str, str], GangController] = {}
        for name in sorted(config.allowed_backends):
            self._add_gang(name, config)
        self._lead_tasks: dict[str, asyncio.Task[None]] = {}
        self.leading = False
        self.cache = ControllerView(self)

    def cache_options(self) -> dict[str, Any]:
        """The ``WatchCache`` options of every object cache (the settings' resync, backoff, page size)."""
        s = self.settings
        return dict(resync_period=s.resync_period, backoff=s.watch_backoff, slow_retry=s.slow_retry,
                    idle_timeout=s.watch_idle_timeout, on_listed=self._listed, page_size=s.page_size)

    def _add_gang(self, name: str, config: Config) -> GangController | None:
        backend = BACKENDS.get(name)
        if backend is None or not backend.served(config):
            return None
        gang = self.gangs[name] = GangController(self, backend, APIS.get(name) or BackendAPI(), config)
        for kind, resource in gang.resources.items():
            self.by_type[(resource.group, kind)] = gang
        return gang

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "Manager":
        """Start the caches and the leader election (returns at once)."""
        for gang in self.gangs.values():
            await gang.start()
        for cache in (*self.workloads.values(), self.members, self.device_classes, self.runtime_classes):
            await cache.start()
        self.recorder.start()
        await self.elector.start()
        log.info("controller started as %s for %s: watching %s; orphan grace %gs, resync %gs, Lease %s/%s",
                 self.settings.identity, ", ".join(self.gangs) or "no backend",
                 ", ".join(wk.resource.label for wk in self.kinds), self.settings.orphan_grace_period,
                 self.settings.resync_period, self.settings.lease_namespace, self.settings.lease_name)
        return self

    async def stop(self) -> None:
        """Stop writing, give the Lease back, stop watching. Idempotent."""
        await self._stop_workers()
        await self.elector.stop(release=True)
        await self.recorder.stop()
        for gang in self.gangs.values():
            await gang.stop()
        for cache in (*self.workloads.values(), self.members, self.device_classes, self.runtime_classes):
            await cache.stop()
        if self._own_client:
            await self._api_client.close()
            self._own_client = False

    async def restart(self, name: str, config: Config) -> None:
        """Run backend ``name``'s gang controller on ``config`` (its served version changed: the workload-api
        backend's ``Rediscovery`` calls this), or none when the API server no longer serves its objects."""
        old = self.gangs.pop(name, None)
        if old is not None:
            await cancel([self._lead_tasks.pop(name, None)])
            await old.stop()
            self.by_type = {t: g for t, g in self.by_type.items() if g is not old}
        gang = self._add_gang(name, config)
        if gang is not None:
            await gang.start()
            if self.leading:
                self._lead(name, gang)

    def readiness(self) -> tuple[bool, str]:
        """``/readyz`` check: ready once every gang controller's cache of managed objects answered its first list
        (admission works without them, only slower, so a failed list does not hold the replica back), and not while
        a cache's watch loop is restarting after an unexpected failure (``WatchCache.crashed``)."""
        crashed = [c.resource.label for c in self.caches() if c.crashed]
        if crashed:
            return False, f"watch cache failed and is restarting: {', '.join(crashed)}"
        for gang in self.gangs.values():
            for kind, cache in gang.managed.items():
                if not (cache.synced or cache.attempted):
                    return False, f"{kind} cache not listed yet"
        return True, ""

    def caches(self) -> list[WatchCache]:
        """Every cache of the manager and of its gang controllers."""
        return [*(c for g in self.gangs.values() for c in g.caches()), *self.workloads.values(), self.members,
                self.device_classes, self.runtime_classes]

    def _on_class(self, _type: str, _obj: JSON, _old: JSON | None) -> None:
        """A DeviceClass or RuntimeClass changed: recompute what they give (a handful of objects, rarely changed)."""
        self.dra_extended_resources = dra_extended_resources(self.device_classes.items())
        self.runtime_overheads = runtime_overheads(self.runtime_classes.items())

    def _listed(self) -> None:
        """After every list page and every list (a first sync, a relist): move what the caches now hold out of the
        cyclic garbage collector's reach (``gc.freeze``: a full collection scans every tracked object and frees none of
        the cached ones; unfrozen at 20,000 workloads: 1.5 million tracked objects, 3.5 s of the start-up CPU, admission
        p99 2.6 s during a relist), and give the memory the page's JSON took back to the system (:func:`_malloc_trim`).
        Reference counting still frees frozen objects a relist or a DELETED event drops.
        ``ControllerSettings.freeze_heap=False`` turns it off."""
        if self.settings.freeze_heap:
            gc.freeze()
            trim = _malloc_trim()
            if trim is not None:
                trim(0)

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    @property
    def working(self) -> bool:
        """True while this replica leads and every gang controller's workers run (after its caches synced)."""
        return self.leading and all(g.working for g in self.gangs.values())

    # ------------------------------------------------------------------ claims (every replica)

    def _on_workload(self, resource: Resource, event: str, obj: JSON, old: JSON | None) -> None:
        """Index the claim the cache record carries (``claims.workload_record``: computed once when the object
        arrived). A resync of an unchanged record only queues its keys: nothing is recomputed or re-indexed."""
        ns, name = object_key(obj)
        wkey = (resource.api_version, resource.kind, ns, name)
        claim: Claim | None = obj.get("claim") if event != "DELETED" else None
        before = self._claims.get(wkey)
        if claim is not before:
            if before is not None:
                del self._claims[wkey]
                self._index(wkey, before, self._by_group.discard, self._by_identity.discard)
            if claim is not None:
                self._claims[wkey] = claim
                self._index(wkey, claim, self._by_group.add, self._by_identity.add)
        if self.leading:
            for c in {id(c): c for c in (before, claim) if c is not None}.values():
                self._queue(c)

    def _on_member(self, event: str, obj: JSON, old: JSON | None) -> None:
        """Index a member of a group that follows its members by its claim's group; when it finished or went, queue
        the group's key for its backend's gang controller (:meth:`GangController.follow` sizes it again)."""
        name = object_key(obj)
        for record in (old, obj):
            was = getattr(record.get("claim"), "plan", None) if record is not None else None
            if was is not None:
                group = (was.backend, was.namespace, was.group_name)
                keep = record is obj and event != "DELETED"
                (self._by_members.add if keep else self._by_members.discard)(group, name)
        phases = [get_path(r, ("status", "phase")) if r is not None else None for r in (old, obj)]
        plan: Any = getattr(obj.get("claim"), "plan", None)
        gang = self.gangs.get(plan.backend) if plan is not None else None
        if gang is not None and gang.leading and (event == "DELETED" or (
                phases[1] in ("Succeeded", "Failed") and phases[0] not in ("Succeeded", "Failed"))):
            gang.loop.queue.add((plan.namespace, plan.group_name))
            if event == "DELETED" and phases[1] == "Succeeded":  # Argo's podGC: kept until the group records it
                self._gone.setdefault((plan.backend, plan.namespace, plan.group_name), {})[name] = obj

    def members_of(self, backend: str, key: Key) -> list[JSON]:
        """The cached members of ``backend``'s group ``key`` whose size follows them (:meth:`_on_member`)."""
        return [r for n in sorted(self._by_members.get((backend, *key))) if (r := self.members.get(*n)) is not None]

    def gone_members(self, backend: str, key: Key, forget: list[JSON] | None = None) -> list[JSON]:
        """The members of ``backend``'s group ``key`` deleted after they succeeded (the last state their DELETED
        event gave, seen while leading) that its objects may not record yet; ``forget``: those now recorded."""
        gone = self._gone.get((backend, *key), {})
        for record in forget or []:
            gone.pop(object_key(record), None)
        if not gone:
            self._gone.pop((backend, *key), None)
        return list(gone.values())

    @staticmethod
    def _index(wkey: WKey, claim: Claim, by_group: Any, by_identity: Any) -> None:
        if claim.plan is not None:
            by_group((claim.plan.backend, claim.plan.namespace, claim.plan.group_name), wkey)
        by_identity((claim.namespace, claim.identity), wkey)

    def _queue(self, claim: Claim) -> None:
        """Queue the keys ``claim`` touches: the group it names, and those whose objects its identity owns."""
        for name, gang in self.gangs.items():
            if claim.plan is not None and claim.plan.backend != name:
                continue
            if claim.key is not None:
                gang.loop.queue.add(claim.key)
            for key in gang.owned(claim.namespace, claim.identity):
                gang.loop.queue.add(key)

    def claims_for(self, backend: str, key: Key, owners: set[str]) -> list[Claim]:
        """The claims on gang ``key`` of ``backend``: the stored workloads whose plan names it, and those whose
        identity is one of ``owners`` (its objects' owner annotations) with no plan or a plan of that backend."""
        wkeys = set(self._by_group.get((backend, *key)))
        for owner in owners:
            wkeys |= self._by_identity.get((key[0], owner))
        return [c for w in sorted(wkeys) if (c := self._claims.get(w)) is not None
                and (c.plan is None or c.plan.backend == backend)]

    def claimed(self, backend: str, key: Key) -> bool:
        """A stored workload's plan of ``backend`` names group ``key``."""
        return (backend, *key) in self._by_group

    def group_keys(self, backend: str) -> list[Key]:
        """Every group a stored workload of ``backend`` names."""
        return [(ns, name) for b, ns, name in self._by_group if b == backend]

    def group_pods(self, namespace: str, name: str, exclude: str) -> int | None:
        """The pods (``plan.total_pods``) of the stored gang workloads whose plan names group ``namespace/name``,
        other than the workload ``exclude`` (its identity, ``"apps/Deployment/web"``), or ``None`` when no other
        workload names it: what else fills a hand-written group several workloads join. Dict lookups."""
        total: int | None = None
        for backend in self.gangs:
            for wkey in self._by_group.get((backend, namespace, name)):
                claim = self._claims.get(wkey)
                if claim is not None and claim.plan is not None and claim.identity != exclude:
                    total = (total or 0) + (claim.plan.total_pods or 0)
        return total

    def countable(self, claim: Claim) -> Claim:
        """``claim`` with a plan whose minResources holds only what the scheduler can count (the DRA-served
        extended resources left out) and the pod overhead of its RuntimeClass, as admission applies them
        (``validate.drop_uncountable``, ``validate.add_overhead``); the claim itself when nothing changes."""
        plan = claim.plan
        if plan is None:
            return claim
        if plan.runtime_class and self.runtime_overheads:
            try:
                with_overhead, added = with_runtime_overhead(plan.min_resources, plan.runtime_class, plan.min_member,
                                                             self.runtime_overheads)
            except ResourceError:
                with_overhead, added = plan.min_resources, None  # admission refused the same quantity (and says why)
            if added:
                plan = dataclasses.replace(plan, min_resources=with_overhead)
                claim = dataclasses.replace(claim, plan=plan)
        if not plan.min_resources:
            return claim
        kept, left_out = countable_min_resources(plan.min_resources, self.dra_extended_resources)
        return dataclasses.replace(claim, plan=dataclasses.replace(plan, min_resources=kept)) if left_out else claim

    # ------------------------------------------------------------------ leadership

    async def _started_leading(self) -> None:
        self.leading = True
        for name, gang in self.gangs.items():
            self._lead(name, gang)

    def _lead(self, name: str, gang: GangController) -> None:
        gang.leading = True
        self._lead_tasks[name] = asyncio.create_task(gang.lead(), name=f"{name} gang controller")

    async def _stop_workers(self) -> None:
        self.leading = False
        tasks, self._lead_tasks = self._lead_tasks, {}
        await cancel(tasks.values())
        for gang in self.gangs.values():
            gang.stop_leading()


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (``None`` elsewhere): ``malloc_trim(0)`` gives the free pages inside the C heap back to
    the system, so the memory a relist's pages took does not stay in RSS (measured: see docs/performance.md)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


async def start_manager(api_client: client.ApiClient, config: Config, args: argparse.Namespace,
                        settings: ControllerSettings | None = None) -> Manager:
    """Start the controller for ``admit serve`` and return it (``.cache``, ``.readiness()``, ``await .stop()``), with
    its own ``ApiClient`` (same configuration and credentials, separate connection pool): its long-lived watches never
    take connections the admission path needs."""
    own = client.ApiClient(api_client.configuration)
    resolve_proxy_once(own)
    metrics.instrument_api_client(own)
    manager = Manager(own, config, settings or ControllerSettings.from_args(args), own_client=True)
    return await manager.start()
