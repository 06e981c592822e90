"""The gang-object controller inside ``admit serve``, one per backend whose API half has a ``decide``
(``backends.runtime.BackendAPI``; the ``workload-api`` backend's, and any registered one): adopt, keep in step, clean
up the objects of each gang (the workload-api backend's scheduling.k8s.io Workload and PodGroup; decisions in
``backends/gangobjects.py``; docs/behaviour.md, "The garbage-collector race").

It runs beside the PodGroup controller (``admit/controller/podgroups.py`` ``Controller``), through the narrow
:class:`GangHost` interface that controller gives: the same gang-workload watch caches (it adds a handler to each,
after taking what they already hold), the same Lease (it writes only while that replica leads, and checks before
every write), the same Event recorder, REST client and settings. Its own caches watch the Workloads and PodGroups of
the served version (``GangBackend.object_types``), managed by admit and not (a Workload the Job controller made, a
hand-written one a workload names). The key loop is the PodGroup controller's (``keyloop.KeyLoop``: a
de-duplicating work queue keyed ``(namespace, name)``, per-key exponential backoff on API errors, each problem
reported once per change), run here one reconcile at a time; ``resync_period`` re-delivers everything.

Its writes go behind the guards the PodGroup controller's go behind (``guards.WriteGuards``): an adopt, create or
patch is made only once the workload read live agrees (decided again on it when the cache is behind, none at all
when it is gone or re-created under another uid); the same write needed again and again (another writer undoing
it) backs off; adoption goes on without ``blockOwnerDeletion`` where the API refuses it. A decision waits while an
object was written by the webhook ahead of the workload read (``backends.common.ahead_of``). A write that the API
refuses with 409 (changed since the decision) is decided again on the next event.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any, Protocol

from ..observability import metrics
from .claims import Claim, claim_of
from ..config import MANAGED_BY_LABEL, MANAGED_BY_VALUE, WORKLOAD_API, Config
from ..kube.client import KubeError
from ..eventloop import Pacer
from .events import EventRecorder
from .guards import WriteGuards
from .keyloop import KeyLoop
from .leader import NotLeader
from .multiindex import MultiIndex
from .settings import ControllerSettings
from ..gang.plan import get_path
from ..kube.watchcache import KubeRaw, Resource, WatchCache, object_key
from ..backends.action import Action
from ..backends.common import object_owner
from ..backends.interface import GangBackend
from ..backends.registry import backend_of
from ..backends.runtime import APIS, GangDecide, api_of


__all__ = ["NativeClaim", "native_claim_of", "GangHost", "NativeGangController", "GangCacheView",
           "NativeControllers", "start_native_controller"]

log = logging.getLogger("admit.controller.native")
JSON = dict[str, Any]
Key = tuple[str, str]
WKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name) of a gang workload


NativeClaim = Claim
"""What one stored ``workload-api`` gang workload asks for: the same shape as the PodGroup controller's
:class:`admit.gang.claim.Claim` (workload reference, identity, plan or ``error``, ``problem``, ``explicit``), which
``backends.gangobjects.decide_objects`` reads."""


def native_claim_of(obj: JSON, resource: Resource, config: Config, backend: str = WORKLOAD_API) -> NativeClaim | None:
    """The claim of a stored workload whose gang uses ``backend``: :func:`admit.controller.claims.claim_of` with
    that backend (``None`` for any other object; an invalid annotation gives a claim with ``error`` only when the
    object still names that backend, or that is the default)."""
    return claim_of(obj, resource, config, backend=backend)


class GangHost(Protocol):
    """What a gang-object controller uses of the controller it runs beside (``podgroups.Controller`` is one), all of
    it set up before the gang-object controller is made and only read:

    ``config`` (the settings gangs are read with, unless the gang-object controller is given others), ``api`` (the
    REST client of its writes and caches), ``settings`` (``resync_period``, ``watch_backoff``, ``slow_retry``,
    ``retry_period``, ``retry_backoff``, ``orphan_grace_period``, seconds), ``recorder`` (the Events on the gang
    workloads), ``workloads`` (one cache per watched gang workload kind, of ``claims.workload_record`` records) and
    ``is_leader()`` (this replica holds the Lease now; checked before every write).
    """

    config: Config
    api: KubeRaw
    settings: ControllerSettings
    recorder: EventRecorder
    workloads: dict[Resource, WatchCache]

    def is_leader(self) -> bool: ...


class GangCacheView:
    """``cache``'s attributes (``get``, ``missing`` of ``controller.PodGroupView``) and ``gang_object(group, kind,
    namespace, name)`` over the gang-object controllers' caches, keyed by API group and kind (read by
    ``backends.ensure``: two backends whose objects share a kind, a Volcano and a native PodGroup, never hide each
    other), else ``cache``'s own."""

    def __init__(self, cache: Any, *natives: "NativeGangController") -> None:
        self._cache = cache
        self._natives = {(r.group, kind): native for native in natives for kind, r in native.resources.items()}
        self._fallback = getattr(cache, "gang_object", None)

    def gang_object(self, group: str, kind: str, namespace: str, name: str) -> JSON | None:
        native = self._natives.get((group, kind))
        if native is not None:
            return native.get_native(kind, namespace, name)
        return self._fallback(group, kind, namespace, name) if self._fallback is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


class NativeGangController:
    """See the module docstring. ``host`` is the :class:`GangHost` it runs beside (the PodGroup controller,
    ``podgroups.Controller``, before or after it starts); ``config`` other settings than the host's; ``backend`` the
    gang backend whose objects it keeps (``interface.GangBackend``) and ``decide`` its pure decision
    (``runtime.BackendAPI.decide``; default: the workload-api backend's)."""

    def __init__(self, host: GangHost, config: Config | None = None, backend: GangBackend | None = None,
                 decide: GangDecide | None = None) -> None:
        self.host = host
        self.config: Config = config or host.config
        self.api = host.api
        self.backend = backend if backend is not None else backend_of(WORKLOAD_API)
        decide = decide if decide is not None else api_of(self.backend.name).decide
        assert decide is not None, f"backend {self.backend.name} has no controller decision"
        self.decide: GangDecide = decide
        #: ``below_min_count(pod_group, pods) -> (scheduled, pending, minCount) | None`` of the backend's API half
        #: (``runtime.BackendAPI``), or ``None``: no count of the gangs that broke after they were scheduled.
        self._below_min_count = api_of(self.backend.name).below_min_count if self.backend.name in APIS else None
        s = host.settings
        self.resources = {t.kind: Resource(t.group, t.version, t.plural, t.kind)
                          for t in self.backend.object_types(self.config)}
        self.kinds = tuple(self.resources)
        common: dict[str, Any] = dict(resync_period=s.resync_period, backoff=s.watch_backoff, slow_retry=s.slow_retry)
        self.managed: dict[str, WatchCache] = {}
        self.others: dict[str, WatchCache] = {}
        for kind, resource in self.resources.items():
            self.managed[kind] = WatchCache(self.api, resource, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
                                            handlers=[self._on_object], **common)
            self.others[kind] = WatchCache(self.api, resource, label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}",
                                           handlers=[self._on_object], **common)
        self._claims: dict[WKey, NativeClaim] = {}
        self._by_group: MultiIndex[Key, WKey] = MultiIndex()
        self._by_identity: MultiIndex[tuple[str, str], WKey] = MultiIndex()
        self.loop = KeyLoop(self._reconcile, s, leading=lambda: self._leading,
                            subject=functools.partial(_subject, self.backend.name), log=log)
        self._task: asyncio.Task[None] | None = None
        self._leading = False
        self._unclaimed_since: dict[Key, float] = {}
        self._ahead_since: dict[Key, float] = {}
        #: The live read before adopt or patch, the back-off from undone writes, the blockOwnerDeletion fallback:
        #: the same guards as the PodGroup controller's (``guards.WriteGuards``).
        self.guards = WriteGuards(self.config, s, self.api, self.loop, host.workloads, self.backend.name,
                                  functools.partial(_subject, self.backend.name),
                                  " and ".join(f"{kind}s" for kind in self.kinds))
        #: Seconds between two counts of the gangs that broke after they were scheduled (:meth:`check_quorum`).
        self.quorum_period: float = s.resync_period
        self._quorum_at = 0.0
        self._below: set[Key] = set()
        self._noticed: dict[Key, str] = {}  # the operator notice last recorded per gang (once per change)
        #: Actions taken, ``(action kind, object kind, key)``, newest last (tests, debugging).
        self.actions: list[tuple[str, str, Key]] = []
        for resource, cache in host.workloads.items():  # what the caches hold already, then every change
            for obj in cache.items():
                self._on_workload(resource, "ADDED", obj, None)
            cache.add_handler(functools.partial(self._on_workload, resource))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "NativeGangController":
        for cache in (*self.managed.values(), *self.others.values()):
            await cache.start()
        self._task = asyncio.create_task(self._run(), name=f"{self.backend.name} gang controller")
        log.info("%s gang controller started (%s)", self.backend.name,
                 ", ".join(f"{r.api_version} {r.plural}" for r in self.resources.values()))
        return self

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.loop.queue.clear()
        for cache in (*self.managed.values(), *self.others.values()):
            await cache.stop()

    def view(self, cache: Any) -> "GangCacheView":
        """The admission cache for both backends: ``cache`` (the PodGroup controller's view) plus :meth:`get_native`,
        so that admitting a workload-api gang whose objects are cached, managed and in step costs no API call."""
        return GangCacheView(cache, self)

    def get_native(self, kind: str, namespace: str, name: str) -> JSON | None:
        """A cached Workload or PodGroup (managed or not), or ``None``: a dict lookup, never an API call."""
        return self.managed[kind].get(namespace, name) or self.others[kind].get(namespace, name)

    # ------------------------------------------------------------------ indexes

    def _on_workload(self, resource: Resource, event: str, obj: JSON, old: JSON | None) -> None:
        ns, name = object_key(obj)
        wkey = (resource.api_version, resource.kind, ns, name)
        touched: set[Key] = set()
        before = self._claims.pop(wkey, None)
        if before is not None:
            touched |= self._unindex(wkey, before)
        if event != "DELETED":
            # The PodGroup controller's caches keep records (claims.workload_record) with the claim computed once.
            claims = obj.get("backend_claims")
            claim = claims.get(self.backend.name) if isinstance(claims, dict) else native_claim_of(
                obj, resource, self.config, self.backend.name)
            if claim is not None:
                self._claims[wkey] = claim
                if claim.key is not None:
                    self._by_group.add(claim.key, wkey)
                    touched.add(claim.key)
                self._by_identity.add((ns, claim.identity), wkey)
        if self._leading:
            for key in touched:
                self.loop.queue.add(key)

    def _unindex(self, wkey: WKey, claim: NativeClaim) -> set[Key]:
        touched: set[Key] = set()
        if claim.key is not None:
            self._by_group.discard(claim.key, wkey)
            touched.add(claim.key)
        self._by_identity.discard((wkey[2], claim.identity), wkey)
        return touched

    def _on_object(self, event: str, obj: JSON, old: JSON | None) -> None:
        if self._leading:
            self.loop.queue.add(object_key(obj))

    def _objects(self, key: Key) -> dict[str, JSON | None]:
        return {kind: self.get_native(kind, *key) for kind in self.kinds}

    def _claims_for(self, key: Key, objects: dict[str, JSON | None]) -> list[NativeClaim]:
        wkeys = set(self._by_group.get(key))
        for obj in objects.values():
            owner = object_owner(obj, self.config) if obj is not None else None
            if owner is not None:
                wkeys |= self._by_identity.get((key[0], owner))
        return [self._claims[w] for w in sorted(wkeys) if w in self._claims]

    # ------------------------------------------------------------------ the loop

    def _synced(self) -> bool:
        return all(c.synced for c in (*self.managed.values(), *self.others.values()))

    async def _run(self) -> None:
        """Follow the Lease (:meth:`_follow_lease`), count the broken gangs every :attr:`quorum_period` while
        leading, and reconcile the queued keys one at a time (``KeyLoop.process``)."""
        period = max(0.05, min(1.0, self.host.settings.retry_period))
        while True:
            await self._follow_lease()
            if self._leading and self._below_min_count is not None and \
                    time.monotonic() - self._quorum_at >= self.quorum_period:
                self._quorum_at = time.monotonic()
                try:
                    await self.check_quorum()
                except (KubeError, NotLeader) as e:
                    log.info("could not count the native gangs below minCount: %s", getattr(e, "message", e))
            if not self._leading:
                await asyncio.sleep(period)
                continue
            try:
                async with asyncio.timeout(period):
                    key = await self.loop.queue.get()
            except TimeoutError:
                continue
            await self.loop.process(key)

    async def _follow_lease(self) -> None:
        """Start leading once the host holds the Lease and this controller's caches synced (queue every gang key,
        giving the event loop back every few milliseconds); stop when the Lease is gone (forget the queue and the
        leader-only bookkeeping)."""
        leading = self.host.is_leader() and self._synced()
        if leading and not self._leading:
            self._leading = True
            # In list order (the queue drops repeats).
            pacer = Pacer()
            for key in (*self._by_group, *(k for c in self.managed.values() for k in c.keys())):
                self.loop.queue.add(key)
                await pacer.tick()
            log.info("%s gang controller leading: %d gang keys queued", self.backend.name, len(self.loop.queue))
        elif not leading and self._leading:
            self._leading = False
            self.loop.reset()
            self._unclaimed_since.clear()
            self._ahead_since.clear()
            self.guards.reset()
            self._below.clear()
            self._quorum_at = 0.0
            metrics.native_gangs_below_min_count(0)

    def _report(self, key: Key, message: str) -> bool:
        """Log ``message`` unless it is what was last reported for the gang (topic ``"gang"``, resolved by each
        reconcile that finds nothing to wait for or report; the key loop's ``"retry"`` is apart, resolved when the
        key reconciles); True when logged."""
        return self.loop.report(key, "gang", message)

    def _event(self, claim: NativeClaim | None, type_: str, reason: str, action: str, note: str,
               related: JSON | None = None) -> None:
        if claim is not None and claim.uid:
            self.host.recorder.record(claim.workload, type_, reason, action, note, related)

    def _check_leader(self) -> None:
        if not self.host.is_leader():
            raise NotLeader()

    async def _reconcile(self, key: Key, live: NativeClaim | None = None) -> None:
        """Decide for ``key`` and carry the actions out; a write that adopts, creates or patches is made only once
        the workload read live agrees (``guards.WriteGuards.live_claim``; decided again on ``live`` when the cache
        is behind)."""
        objects = self._objects(key)
        claims = self._claims_for(key, objects)
        if live is not None:
            claims = [live if (c.namespace, c.identity) == (live.namespace, live.identity) else c for c in claims]
        now = time.monotonic()
        actions = self.decide(key, objects, claims, self.config, now=now,
                              unclaimed_since=self._unclaimed_since.get(key),
                              grace=self.host.settings.orphan_grace_period, ahead_since=self._ahead_since.get(key))
        if any(a.unclaimed for a in actions):
            self._unclaimed_since.setdefault(key, now)
        else:
            self._unclaimed_since.pop(key, None)
        ahead = next((a for a in actions if a.ahead), None)
        if ahead is None:
            self._ahead_since.pop(key, None)
        elif self._ahead_since.setdefault(key, now) == now:
            log.info("%s", ahead.message)
        writer = next((a.claim for a in actions if a.kind in ("create", "patch") and a.claim is not None), None)
        if writer is not None and live is None:
            checked = await self.guards.live_claim(key, writer)
            if checked is None:
                return
            if checked is not writer:
                return await self._reconcile(key, live=checked)
        if not any(c.notice for c in claims):
            self._noticed.pop(key, None)
        for c in claims:
            if c.problem and self._report(key, f"{c.ref}: {c.problem}"):
                self._event(c, "Warning", "GangBelowMinMember", "Reconcile", c.problem)
            if c.notice and self._noticed.get(key) != c.notice:
                self._noticed[key] = c.notice
                self._event(c, "Normal", "OperatorSetting", "Reconcile", c.notice)
        if not any(a.kind in ("delete", "wait", "immutable", "priority") for a in actions) and not any(
                c.problem for c in claims):
            self.loop.resolved(key, "gang")
        for action in actions:
            self.actions.append((action.kind, action.object_kind, key))
            await self._do(key, action)

    async def _do(self, key: Key, action: Action) -> None:
        ns, name = key
        what = f"{action.object_kind} {ns}/{name}"
        resource = self.resources.get(action.object_kind)
        if action.kind == "wait":
            self.loop.queue.add_after(key, action.delay)
            return
        if action.kind in ("conflict", "invalid", "foreign", "immutable", "priority"):
            if self._report(key, action.message):
                reason = {"conflict": "WorkloadConflict", "invalid": "InvalidGangAnnotation",
                          "foreign": "WorkloadNotManaged", "immutable": "GangSizeImmutable",
                          "priority": "GangPriorityImmutable"}[action.kind]
                self._event(action.claim, "Warning", reason, "Reconcile", action.message)
            return
        if resource is None or action.kind == "none" or self.guards.repeating(key, action):
            return
        if action.kind == "delete":
            if action.object_kind == self.kinds[-1] and await self._pods_using(key):
                self.loop.queue.add_after(key, self.host.settings.orphan_grace_period)
                return
            await self._delete(resource, key, action.uid)
            self.guards.wrote(key, action)
            log.info("deleted %s: %s", what, action.message)
            metrics.native_gang(action.object_kind, "orphan_deleted")
            return
        claim = action.claim
        assert claim is not None, f"{action.kind} {what} without a claim"  # decide_objects writes only for one
        self.guards.strip_block_owner_deletion(action)
        if action.kind == "create":
            self._check_leader()
            try:
                created = await self.api.request("POST", resource.path(ns), body=action.body)
            except KubeError as e:
                if self.guards.blocked_owner_deletion(e, claim):
                    return await self._do(key, action)
                if e.status == 409:  # our cache is behind: its event brings the key back
                    self.loop.queue.add_after(key, 0.05)
                    return
                raise
            self.guards.wrote(key, action)
            log.info("created %s for %s (%s)", what, claim.ref, ", ".join(action.changes))
            metrics.native_gang(action.object_kind, "created")
            self._event(claim, "Normal", f"{action.object_kind}Created", "Create",
                        f"created {what} ({', '.join(action.changes)}); owned by this {claim.kind}",
                        related=created)
            return
        self._check_leader()  # patch: adopt and/or minCount (v1beta1)
        try:
            patched = await self.api.request("PATCH", resource.path(ns, name), body=action.ops,
                                             content_type="application/json-patch+json")
        except KubeError as e:
            if self.guards.blocked_owner_deletion(e, claim):
                return await self._do(key, action)
            if e.status in (404, 409, 422):  # gone or changed since the decision: decide again
                self.loop.queue.add_after(key, 0.05)
                return
            raise
        self.guards.wrote(key, action)
        if action.adopt:
            log.info("adopted %s: owner %s uid %s", what, claim.ref, claim.uid)
            metrics.native_gang(action.object_kind, "adopted")
            self._event(claim, "Normal", f"{action.object_kind}Adopted", "Adopt",
                        f"{what} is now owned by this {claim.kind}: the garbage collector deletes it with the "
                        f"{claim.kind}", related=patched)
        if action.changes:
            log.info("updated %s for %s: %s", what, claim.ref, "; ".join(action.changes))
            metrics.native_gang(action.object_kind, "patched")

    async def _delete(self, resource: Resource, key: Key, uid: str | None) -> None:
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        self._check_leader()
        try:
            await self.api.request("DELETE", resource.path(*key), body=body)
        except KubeError as e:
            if e.status not in (404, 409):
                raise

    async def check_quorum(self) -> set[Key]:
        """Count the managed native gangs that broke after they were scheduled (``diagnose.below_min_count``: the
        PodGroup's scheduled condition is True, which kube-scheduler never sets back, kubernetes#136334, and fewer
        than ``minCount`` pods have a node, with a replacement pending or a pod gone); set the gauge
        ``admit_native_gangs_below_min_count``; for each gang that newly broke, log one warning and record a Warning
        Event ``GangBelowMinCount`` on its workload. Returns their keys.

        Costs one paged pod list per namespace holding a scheduled managed PodGroup, every :attr:`quorum_period`
        seconds (the resync period), on the leader only.

        Raises:
            kube.KubeError: a pod list failed.
        """
        by_ns: dict[str, list[JSON]] = {}
        for pg in self.managed["PodGroup"].items():
            if any(isinstance(c, dict) and c.get("status") == "True" and "Scheduled" in str(c.get("type"))
                   for c in get_path(pg, ("status", "conditions")) or []):
                by_ns.setdefault(str(get_path(pg, ("metadata", "namespace")) or ""), []).append(pg)
        below: set[Key] = set()
        for ns, groups in by_ns.items():
            members: dict[str, list[JSON]] = {}
            for pod in await self._list_pods(ns):
                name = get_path(pod, ("spec", "schedulingGroup", "podGroupName"))
                if isinstance(name, str):
                    members.setdefault(name, []).append(pod)
            for pg in groups:
                key = object_key(pg)
                assert self._below_min_count is not None
                found = self._below_min_count(pg, members.get(key[1], []))
                if found is None:
                    continue
                below.add(key)
                if key not in self._below:
                    scheduled, pending, min_count = found
                    note = (f"PodGroup {key[0]}/{key[1]} was scheduled and now has {scheduled} pod(s) on nodes, "
                            f"minCount {min_count}" + (f", {pending} pending" if pending else "")
                            + ": its scheduled condition never goes back (kubernetes#136334); free capacity or "
                              "restart the whole gang")
                    log.warning("%s", note)
                    claims = self._claims_for(key, self._objects(key))
                    self._event(claims[0] if claims else None, "Warning", "GangBelowMinCount", "Check", note, pg)
        self._below = below
        metrics.native_gangs_below_min_count(len(below))
        return below

    async def _list_pods(self, namespace: str) -> list[JSON]:
        """Every pod of ``namespace`` (paged, 500 a page)."""
        items: list[JSON] = []
        token = ""
        path = Resource("", "v1", "pods", "Pod").path(namespace)
        while True:
            query = [("limit", "500")] + ([("continue", token)] if token else [])
            doc = await self.api.request("GET", path, query=query)
            items.extend(doc.get("items") or [])
            token = get_path(doc, ("metadata", "continue")) or ""
            if not token:
                return items

    async def _pods_using(self, key: Key) -> int:
        """Live pods in the namespace that wait on the gang (``GangBackend.pod_in_group``: for workload-api, whose
        ``spec.schedulingGroup.podGroupName`` names it; one list, pods have no field selector for it)."""
        doc = await self.api.request("GET", Resource("", "v1", "pods", "Pod").path(key[0]), query=[("limit", "500")])
        return sum(1 for pod in doc.get("items") or []
                   if self.backend.pod_in_group(pod, key[1], self.config)
                   and not get_path(pod, ("metadata", "deletionTimestamp"))
                   and get_path(pod, ("status", "phase")) not in ("Succeeded", "Failed"))


def _subject(backend: str, key: Key) -> str:
    """How messages name a gang's key: ``"workload-api gang team-a/web"``."""
    return f"{backend} gang {key[0]}/{key[1]}"


class NativeControllers:
    """The started gang-object controllers, one per enabled and served backend that has one."""

    def __init__(self, controllers: list[NativeGangController]) -> None:
        self.controllers = controllers

    async def stop(self) -> None:
        for controller in reversed(self.controllers):
            await controller.stop()

    def view(self, cache: Any) -> GangCacheView:
        """The admission cache for every backend: ``cache`` plus each controller's ``get_native``."""
        return GangCacheView(cache, *self.controllers)


async def start_native_controller(host: GangHost, config: Config | None = None) -> NativeControllers | None:
    """Start a gang-object controller beside ``host`` (a started ``podgroups.Controller``) for each enabled backend
    that is served (``GangBackend.served``) and whose API half has a ``decide`` (the ``workload-api`` backend
    when the API server serves it); ``None`` when there is none. ``config``: other settings than ``host``'s (a
    Workload API version found by ``discovery.Rediscovery`` after an upgrade)."""
    config = config or host.config
    started: list[NativeGangController] = []
    for name in sorted(config.allowed_backends):
        backend, api = backend_of(name), api_of(name)
        if api.decide is not None and backend.served(config):
            started.append(await NativeGangController(host, config, backend, api.decide).start())
    return NativeControllers(started) if started else None
