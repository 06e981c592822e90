"""A list+watch cache of one Kubernetes resource (an informer in the client-go sense), in plain JSON dicts.

``WatchCache`` keeps every object of one resource that matches a label selector in memory, keyed by
``(namespace, name)``, and tells a handler about every change: the PodGroup controller watches workloads with it,
and the admission path reads the PodGroup cache (``get`` is a dict lookup, no API call). The protocol (Kubernetes
docs "API Concepts", *Efficient detection of changes* and *Resource versions*; client-go ``tools/cache/reflector.go``):

1. **list** ``GET {collection}?labelSelector=...&limit=500`` (``page_size``; ``continue`` pages), no
   ``resourceVersion`` (a consistent read); the watch starts at the list's ``metadata.resourceVersion``, never the
   newest item's (items come in no particular order, kubernetes-client/python#819).
2. **watch** ``?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T`` (``watch_timeout``: T
   random in 300..600 s, the reflector's ``minWatchTimeout * (1 + rand)``): RV follows every event, bookmarks
   included, so a watch that ends (the server's timeout, a dropped connection, a proxy) resumes from RV with no
   relist, nothing missed or repeated.
3. **410 Gone / Expired** (RV compacted out of etcd's history, about 5 minutes): relist and compare; what went
   meanwhile is reported ``DELETED``, what changed ``MODIFIED``, what is new ``ADDED``.
4. **Errors** back off exponentially with jitter (``backoff``: 0.8 s doubling to 30 s, as the reflector's), a watch
   that ends within a second with no event too (no busy loop). **404** on list (a CRD not installed: INFO) and
   **403** (RBAC: WARNING) are logged once and retried every ``slow_retry`` seconds (60); a 404 never empties the
   cache (a kube-apiserver restart or an aggregated-API outage answers 404 for a moment, and reporting every object
   deleted would make the controller delete what they own): it stops being :attr:`WatchCache.current` instead.
5. **Dead streams**: HTTP/1.1 has no pings; kube-apiserver sends a BOOKMARK about once a minute, so a watch silent
   for ``idle_timeout`` seconds (130: two bookmark periods and a margin) is opened again from the last
   resourceVersion (client-go notices in about 45 s with HTTP/2 health checks).
6. **Resync**: every ``resync_period`` seconds a ``SYNC`` of every cached object, from memory (client-go's
   ``resyncPeriod``), so a controller retries what it could not do.
7. **Memory and the event loop**: ``transform`` (client-go's ``SetTransform``) makes each object the small record
   the cache keeps, page by page; a relist keeps the record of every object whose resourceVersion did not change.
   Handler calls after a list, and a resync, give the loop back every 5 ms (``loop.Pacer``).
8. **Supervision**: an unexpected exception is logged, the cache marked ``crashed`` (``/readyz`` reports it), and
   the loop starts again with a list after a back-off.

Handlers are plain functions ``handler(event_type, obj, old)`` called on the event loop; they must be quick (a
controller enqueues a key). An exception in a handler is logged and does not stop the watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any, Callable, Iterable

from ..observability import metrics
from .client import KubeError, KubeRaw, Resource
from ..eventloop import Pacer, cancel

__all__ = ["Resource", "KubeRaw", "WatchCache", "Handler", "object_key"]

log = logging.getLogger("admit.watchcache")

JSON = dict[str, Any]
Handler = Callable[[str, JSON, "JSON | None"], None]
"""``handler(event_type, obj, old)``: ``event_type`` is ADDED, MODIFIED, DELETED or SYNC; ``old`` is the cached
object before the change (``None`` for ADDED)."""


def object_key(obj: JSON) -> tuple[str, str]:
    """``(namespace, name)`` of an object (namespace ``""`` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): relist."""


class WatchCache:
    """List+watch cache of one resource across all namespaces (the module docstring has the protocol; the
    arguments' units and defaults are its numbered points).

    Args:
        label_selector: e.g. ``"app.kubernetes.io/managed-by=admit"`` (``None``: everything).
        transform: ``transform(obj) -> record`` applied to every listed or watched object before it is stored and
            handed to the handlers (point 7); the record must keep ``metadata.name``, ``metadata.namespace`` and
            ``metadata.resourceVersion``. ``None``: store as received.
        on_listed: called after each list page's records are made and after every successful list, once its
            handler calls are done (``Manager._listed`` keeps the garbage collector off what is cached so far).
    """

    def __init__(self, api: KubeRaw, resource: Resource, *, label_selector: str | None = None,
                 handlers: Iterable[Handler] = (), transform: Callable[[JSON], JSON] | None = None,
                 resync_period: float | None = None, backoff: tuple[float, float] = (0.8, 30.0),
                 slow_retry: float = 60.0, watch_timeout: tuple[int, int] = (300, 600),
                 idle_timeout: float = 130.0, page_size: int = 500,
                 on_listed: Callable[[], None] | None = None) -> None:
        self.api = api
        self.resource = resource
        self.label_selector = label_selector
        self.handlers: list[Handler] = list(handlers)
        self.transform = transform
        self.resync_period = resync_period
        self.backoff = backoff
        self.slow_retry = slow_retry
        self.watch_timeout = watch_timeout
        self.idle_timeout = idle_timeout
        self.page_size = page_size
        self.on_listed = on_listed
        self._store: dict[tuple[str, str], JSON] = {}
        self._rv: str | None = None
        self._synced = asyncio.Event()
        self._attempted = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._problem: str | None = None
        #: Status: "starting", "synced" (listed, watching), "not served" / "forbidden" / "error" (the last list
        #: failed), "crashed" (the loop failed unexpectedly and is restarting after a back-off).
        self.state: str = "starting"
        #: Lists done (first one and every relist), for tests and metrics.
        self.lists = 0
        #: Watch streams opened; watches restarted because they went silent; unexpected crashes of the loop.
        self.watches = 0
        self.idle_restarts = 0
        self.crashes = 0

    def get(self, namespace: str, name: str) -> JSON | None:
        """The cached object, or ``None`` (a dict lookup; never an API call). Do not modify it."""
        return self._store.get((namespace, name))

    def keys(self) -> list[tuple[str, str]]:
        """The ``(namespace, name)`` of every cached object (a new list, in the order the objects were listed)."""
        return list(self._store)

    def items(self) -> list[JSON]:
        """All cached objects (a new list; the dicts are the cached ones: do not modify them)."""
        return list(self._store.values())

    def __len__(self) -> int:
        return len(self._store)

    @property
    def synced(self) -> bool:
        """True once a list has succeeded (the cache holds the whole collection)."""
        return self._synced.is_set()

    @property
    def attempted(self) -> bool:
        """True once the first list has been answered, successfully or not."""
        return self._attempted.is_set()

    @property
    def current(self) -> bool:
        """True while the cache follows the server: listed, and the last list did not fail since. False before the
        first list, after a failed relist (a 404 or 403 after objects were seen, a server error) and while the loop
        restarts after a crash: decisions that would destroy something must not trust it then."""
        return self.synced and self.state == "synced"

    @property
    def absent(self) -> bool:
        """True when the last list answered 404 and nothing is cached: the resource is not served, so no such object
        exists. A 404 after objects were seen keeps them (point 4): neither this nor :attr:`current` is True then."""
        return self.state == "not served" and not self._store

    @property
    def crashed(self) -> bool:
        """True while the watch loop is restarting after an unexpected exception (``/readyz`` reports it)."""
        return self.state == "crashed"

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until :attr:`synced` (at most ``timeout`` seconds); returns :attr:`synced`."""
        return await _wait(self._synced, timeout)

    async def wait_attempted(self, timeout: float | None = None) -> bool:
        """Wait until :attr:`attempted` (at most ``timeout`` seconds); returns :attr:`attempted`."""
        return await _wait(self._attempted, timeout)

    async def start(self) -> "WatchCache":
        """Start listing and watching in the background; returns at once."""
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self._supervise(), name=f"watch {self.resource.label}"))
            if self.resync_period:
                self._tasks.append(asyncio.create_task(self._resync_loop(), name=f"resync {self.resource.label}"))
        return self

    async def stop(self) -> None:
        """Stop watching (the cached objects stay readable). Idempotent."""
        tasks, self._tasks = self._tasks, []
        await cancel(tasks)

    def _emit(self, event_type: str, obj: JSON, old: JSON | None) -> None:
        for handler in self.handlers:
            try:
                handler(event_type, obj, old)
            except Exception:  # noqa: BLE001 - one bad handler must not stop the watch
                log.exception("handler for %s %s failed on %s", self.resource.label, event_type, object_key(obj))

    def _report(self, state: str, message: str, level: int = logging.WARNING) -> None:
        """Log a problem once: again only when it changes."""
        self.state = state
        if message != self._problem:
            self._problem = message
            log.log(level, "%s", message)

    def _delay(self, failures: int) -> float:
        initial, maximum = self.backoff
        delay = min(maximum, initial * (2 ** max(0, failures - 1)))
        return delay * (0.5 + random.random() / 2)

    def _query(self, *more: tuple[str, str]) -> list[tuple[str, str]]:
        """The request's parameters: the label selector (if any), then those of ``more`` that have a value."""
        return [(k, v) for k, v in (("labelSelector", self.label_selector or ""), *more) if v]

    def _record(self, item: JSON) -> JSON:
        # List items carry no apiVersion/kind; give them the ones a watch event and a GET would have.
        item.setdefault("apiVersion", self.resource.api_version)
        item.setdefault("kind", self.resource.kind)
        return self.transform(item) if self.transform is not None else item

    async def _list(self) -> None:
        query = self._query(("limit", str(self.page_size or "")))
        old_store = self._store
        new: dict[tuple[str, str], JSON] = {}
        cont: str | None = None
        restarted = False
        pacer = Pacer()
        while True:
            q = list(query) + ([("continue", cont)] if cont else [])
            try:
                doc = await self.api.request("GET", self.resource.path(), query=q)
            except KubeError as e:
                if e.status == 410 and cont and not restarted:  # continue token expired: list again from the start
                    new, cont, restarted = {}, None, True
                    continue
                raise
            # The page was parsed in this step: give the loop back before walking it.
            await pacer.tick()
            # Point 7: the page is the only raw data alive; an unchanged object keeps its cached record.
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    key = object_key(item)
                    before = old_store.get(key)
                    if before is not None and _rv_of(before) == _rv_of(item):
                        new[key] = before
                    else:
                        new[key] = self._record(item)
                        await pacer.tick()
            meta = doc.get("metadata") or {}
            del doc
            self._call_on_listed()
            cont = meta.get("continue") or None
            if not cont:
                self._rv = str(meta.get("resourceVersion") or "") or None
                break
        self.lists += 1
        self._store = new
        # Handler calls for what changed, paced (point 7: a 20,000-object first list must not hold admissions).
        pacer = Pacer()
        for key, obj in new.items():
            before = old_store.get(key)
            if before is None:
                self._emit("ADDED", obj, None)
            elif before is not obj:
                self._emit("MODIFIED", obj, before)
            await pacer.tick()
        for key, obj in old_store.items():
            if key not in new:
                self._emit("DELETED", obj, obj)
                await pacer.tick()
        del old_store
        self._call_on_listed()

    def _call_on_listed(self) -> None:
        if self.on_listed is not None:
            try:
                self.on_listed()
            except Exception:  # noqa: BLE001
                log.exception("on_listed callback of %s failed", self.resource.label)

    async def _watch_once(self) -> int:
        """One watch stream from ``self._rv``; returns the number of events seen. Raises _Expired on 410."""
        query = [("allowWatchBookmarks", "true"), *self._query(("resourceVersion", self._rv or ""))]
        seen = 0
        self.watches += 1
        low, high = self.watch_timeout
        try:
            async with contextlib.aclosing(
                self.api.watch(self.resource.path(), query, random.randint(low, high), idle_timeout=self.idle_timeout)
            ) as events:
                async for event in events:
                    seen += 1
                    self._apply(event)
        except KubeError as e:
            if e.status == 410:
                raise _Expired(e.message) from None
            raise
        return seen

    def _apply(self, event: JSON) -> None:
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired(str(obj.get("message") or "resource version too old"))
            raise KubeError(int(code or 0), str(obj.get("reason") or ""),
                            f"watch {self.resource.label}: {obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self._rv = str(rv)
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = object_key(obj)
        before = self._store.get(key)
        record = self._record(obj)
        if rv:
            self._rv = str(rv)
        if etype == "DELETED":
            self._store.pop(key, None)
        else:
            self._store[key] = record
            etype = "ADDED" if before is None else "MODIFIED"
        self._emit(etype, record, before)
        metrics.watch_cache(self.resource.label, len(self._store))

    async def _supervise(self) -> None:
        """Run the list+watch loop, again after a back-off when it fails unexpectedly (module docstring, point 8)."""
        crashes = 0
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a cache must never end silently
                crashes += 1
                self.crashes += 1
                delay = self._delay(crashes)
                self.state = "crashed"
                log.exception("%s: watch loop failed (%s); restarting in %.1fs", self.resource.label,
                              type(e).__name__, delay)
                await asyncio.sleep(delay)

    async def _run(self) -> None:
        failures = 0
        need_list = True
        while True:
            if need_list:
                try:
                    await self._list()
                except KubeError as e:
                    self._attempted.set()
                    if e.status in (403, 404):
                        why = "forbidden (RBAC does not grant list)" if e.status == 403 else \
                            "not served (CRD not installed, or version not served)"
                        kept = f"; keeping the {len(self._store)} cached objects" if self._store else ""
                        # Listed before: most likely a kube-apiserver just restarted, whose RBAC and CRD informers
                        # refuse until synced (about a second on the real plane): the normal backoff, not slow_retry.
                        transient = self.lists > 0
                        failures += transient
                        wait = self._delay(failures) if transient else self.slow_retry
                        self._report("forbidden" if e.status == 403 else "not served",
                                     f"{self.resource.label} {why}: {e.message}; retrying "
                                     f"{'with backoff' if transient else f'every {self.slow_retry:g}s'}{kept}",
                                     logging.WARNING if e.status == 403 or kept else logging.INFO)
                        await asyncio.sleep(wait)
                        continue
                    failures += 1
                    self._report("error", f"{self.resource.label}: list failed: {e.message}; retrying with backoff")
                    await asyncio.sleep(self._delay(failures))
                    continue
                if self._problem is not None or self.state == "crashed":
                    self._problem = None
                    log.info("%s: listed %d objects; watching again", self.resource.label, len(self._store))
                self.state = "synced"
                metrics.watch_cache(self.resource.label, len(self._store), relisted=True)
                self._synced.set()
                self._attempted.set()
                need_list = False
                failures = 0
            started = time.monotonic()
            try:
                seen = await self._watch_once()
            except _Expired as e:
                log.info("%s: watch expired (%s); relisting", self.resource.label, e)
                need_list = True
                continue
            except KubeError as e:
                failures += 1
                if e.status in (403, 404):
                    need_list = True  # the list reports it once and retries slowly
                    continue
                if e.status == 0 and e.reason == "Timeout":
                    self.idle_restarts += 1
                    log.warning("%s: %s; the stream is dead (no bookmark either), watching again", self.resource.label,
                                e.message)
                    continue  # from the last resourceVersion, at once: nothing was wrong with the server's answers
                delay = self._delay(failures)
                log.warning("%s: watch failed (%s); retrying in %.1fs", self.resource.label, e.message, delay)
                await asyncio.sleep(delay)
                continue
            if seen == 0 and time.monotonic() - started < 1.0:
                failures += 1  # the server ends streams at once: do not spin
                await asyncio.sleep(self._delay(failures))
            else:
                failures = 0

    async def _resync_loop(self) -> None:
        """Every ``resync_period``: a ``SYNC`` for every cached object, paced (module docstring, point 6)."""
        assert self.resync_period
        while True:
            await asyncio.sleep(self.resync_period)
            if not self.synced:
                continue
            pacer = Pacer()
            for obj in list(self._store.values()):
                self._emit("SYNC", obj, obj)
                await pacer.tick()


async def _wait(event: asyncio.Event, timeout: float | None) -> bool:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


def _rv_of(obj: JSON) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")
