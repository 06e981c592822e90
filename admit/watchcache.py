"""A list+watch cache of one Kubernetes resource (an informer in the client-go sense), in plain JSON dicts.

``WatchCache`` keeps every object of one resource that matches a label selector, in memory, keyed by
``(namespace, name)``, and tells a handler about every change. It is what the PodGroup controller watches
workloads with, and the PodGroup cache the admission path reads (``get`` is a dict lookup: no API call).

Protocol (Kubernetes docs "API Concepts", *Efficient detection of changes* and *Resource versions*; client-go
``tools/cache/reflector.go``):

1. **list** ``GET {collection}?labelSelector=...&limit=500`` (``continue`` pages), no ``resourceVersion``: a
   consistent read. The list's ``metadata.resourceVersion`` is where the watch starts (never the newest item's
   resourceVersion: items come in no particular order, kubernetes-client/python#819).
2. **watch** ``GET {collection}?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T``: one JSON
   event per line, ``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``/``ERROR``. RV follows every event (bookmarks
   included), so a watch that ends - the server's ``timeoutSeconds`` (T random in 300..600 s, like the reflector's
   ``minWatchTimeout * (1 + rand)``), a dropped connection, a proxy idle timeout - resumes from RV with no relist and
   no missed or repeated event.
3. **410 Gone / Expired** (an ``ERROR`` event with ``code: 410``, or HTTP 410): RV was compacted out of etcd's
   history (about 5 minutes by default). The cache relists and compares: objects gone meanwhile are reported as
   ``DELETED``, changed ones as ``MODIFIED``, new ones as ``ADDED``.
4. **Errors**: connection errors, timeouts and 5xx back off exponentially with jitter (``backoff``, default
   0.8 s doubling to 30 s, as the reflector's), then watch again (or relist if the list failed). A watch that ends
   within a second with no event also backs off, so a server that closes every stream at once never makes a busy
   loop. **404** on list (a CRD that is not installed, a version not served: INFO, it is normal) and **403** (RBAC
   does not grant the resource: WARNING) are logged once, in one line, and retried every ``slow_retry`` seconds
   (default 60); a later success is logged once too.
5. **Resync**: every ``resync_period`` seconds the handler gets a ``SYNC`` event for every cached object, from
   memory, without any API call (client-go's ``resyncPeriod``), so a controller retries what it could not do.

Handlers are plain functions ``handler(event_type, obj, old)`` called on the event loop; they must be quick
(a controller enqueues a key). An exception in a handler is logged and does not stop the watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable

import aiohttp
from kubernetes_asyncio import client

from . import metrics
from .kube import KubeError, api_errors

__all__ = ["Resource", "KubeRaw", "WatchCache", "Handler", "object_key"]

log = logging.getLogger("admit.watchcache")

JSON = dict[str, Any]
Handler = Callable[[str, JSON, "JSON | None"], None]
"""``handler(event_type, obj, old)``: ``event_type`` is ADDED, MODIFIED, DELETED or SYNC; ``old`` is the cached
object before the change (``None`` for ADDED)."""


@dataclass(frozen=True, slots=True)
class Resource:
    """API coordinates of one resource: ``group`` ("" for core), ``version``, ``plural``, ``kind``, ``namespaced``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``"apps/v1"``, or ``"v1"`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def label(self) -> str:
        """``"deployments.apps/v1"`` for logs."""
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """REST path: the collection across namespaces (``namespace=None``), in one namespace, or one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        return base


def object_key(obj: JSON) -> tuple[str, str]:
    """``(namespace, name)`` of an object (namespace ``""`` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class KubeRaw:
    """Kubernetes REST calls in plain dicts over a ``kubernetes_asyncio`` ``ApiClient`` (its configuration gives
    the server, credentials and TLS).

    Plain dicts keep admit's pure resolvers usable on stored objects as they are on AdmissionReview objects.
    Every call raises :class:`admit.kube.KubeError` (status 0 for timeouts and connection errors).

    Attributes:
        writes: successful writes counted by ``"<METHOD> <plural>"`` (``"PATCH podgroups"``, ``"PUT leases"``), for
            tests and for "only the leader writes".
    """

    def __init__(self, api_client: client.ApiClient, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.writes: Counter[str] = Counter()

    async def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] = (), body: Any = None,
                      content_type: str = "application/json", timeout: float | None = None) -> Any:
        """One request; returns the decoded JSON answer (a dict for every Kubernetes verb)."""
        timeout = self.timeout if timeout is None else timeout
        what = f"{method} {path}"
        with api_errors(what, timeout):
            async with asyncio.timeout(timeout):
                data = await self.api_client.call_api(
                    path, method, query_params=list(query),
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body, response_types_map={200: "object", 201: "object", 202: "object"},
                    auth_settings=["BearerToken"], _return_http_data_only=True, _request_timeout=timeout,
                )
        if method != "GET":
            self.writes[f"{method} {_plural_of(path)}"] += 1
        return data

    async def watch(self, path: str, query: Iterable[tuple[str, str]], timeout_seconds: int) -> AsyncIterator[JSON]:
        """Open a watch and yield its events (``{"type", "object"}`` dicts) until the server ends the stream.

        A stream silent for ``timeout_seconds + 30`` s is treated as dead (``KubeError`` status 0). A non-200 answer
        raises ``KubeError`` with the server's status and reason.
        """
        what = f"watch {path}"
        params = [*query, ("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        with api_errors(what):
            resp = await self.api_client.call_api(
                path, "GET", query_params=params, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout,
                                                       sock_read=timeout_seconds + 30),
            )
        try:
            if resp.status != 200:
                text = await resp.text()
                raise _status_error(resp.status, text, what)
            while True:
                try:
                    line = await resp.content.readline()
                except TimeoutError:
                    raise KubeError(0, "Timeout", f"{what}: stream silent for {timeout_seconds + 30}s") from None
                except (aiohttp.ClientError, OSError, ValueError) as e:
                    raise KubeError(0, "ConnectionError", f"{what}: stream broken ({e!r})") from None
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise KubeError(0, "BadResponse", f"{what}: not a JSON watch event: {line[:200]!r}") from None
                if isinstance(event, dict):
                    yield event
        finally:
            resp.close()


def _plural_of(path: str) -> str:
    """``podgroups`` from ``/apis/g/v/namespaces/ns/podgroups/name`` (or ``/api/v1/pods``)."""
    segs = [s for s in path.split("/") if s]
    rest = segs[2:] if segs[:1] == ["api"] else segs[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return rest[0] if rest else path


def _status_error(status: int, text: str, what: str) -> KubeError:
    reason, message = "", ""
    try:
        body = json.loads(text)
        reason, message = body.get("reason") or "", body.get("message") or ""
    except (ValueError, AttributeError):
        pass
    return KubeError(status, reason, f"{what}: {status} {reason}{': ' + message if message else ''}")


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): relist."""


class WatchCache:
    """List+watch cache of one resource (see the module docstring for the protocol and timings).

    Args:
        api: the REST client.
        resource: what to watch (across all namespaces).
        label_selector: e.g. ``"app.kubernetes.io/managed-by=admit"`` (``None``: everything).
        handlers: called for each change (more can be added with :meth:`add_handler`).
        resync_period: seconds between ``SYNC`` deliveries of every cached object (``None``: never).
        backoff: ``(initial, maximum)`` seconds between retries after an error (doubling, with jitter).
        slow_retry: seconds between retries after 404 (resource not served) or 403 (forbidden).
        watch_timeout: ``(low, high)`` range of the watch's ``timeoutSeconds`` (server-side end of each watch).
        page_size: ``limit`` of each list page.
    """

    def __init__(self, api: KubeRaw, resource: Resource, *, label_selector: str | None = None,
                 handlers: Iterable[Handler] = (), resync_period: float | None = None,
                 backoff: tuple[float, float] = (0.8, 30.0), slow_retry: float = 60.0,
                 watch_timeout: tuple[int, int] = (300, 600), page_size: int = 500) -> None:
        self.api = api
        self.resource = resource
        self.label_selector = label_selector
        self.handlers: list[Handler] = list(handlers)
        self.resync_period = resync_period
        self.backoff = backoff
        self.slow_retry = slow_retry
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self._store: dict[tuple[str, str], JSON] = {}
        self._rv: str | None = None
        self._synced = asyncio.Event()
        self._attempted = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._problem: str | None = None
        #: Status of the last failed list ("forbidden", "not served", "error") or None once a list succeeded.
        self.state: str = "starting"
        #: Lists done (first one and every relist), for tests and metrics.
        self.lists = 0
        #: Watch streams opened.
        self.watches = 0

    # ------------------------------------------------------------------ reading

    def get(self, namespace: str, name: str) -> JSON | None:
        """The cached object, or ``None`` (a dict lookup; never an API call). Do not modify it."""
        return self._store.get((namespace, name))

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
    def absent(self) -> bool:
        """True when the last list answered 404: the resource is not served, so no such object exists."""
        return self.state == "not served"

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until :attr:`synced` (at most ``timeout`` seconds); returns :attr:`synced`."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._synced.wait()
        return self.synced

    async def wait_attempted(self, timeout: float | None = None) -> bool:
        """Wait until :attr:`attempted` (at most ``timeout`` seconds); returns :attr:`attempted`."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._attempted.wait()
        return self.attempted

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "WatchCache":
        """Start listing and watching in the background; returns at once."""
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self._run(), name=f"watch {self.resource.label}"))
            if self.resync_period:
                self._tasks.append(asyncio.create_task(self._resync_loop(), name=f"resync {self.resource.label}"))
        return self

    async def stop(self) -> None:
        """Stop watching (the cached objects stay readable). Idempotent."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    # ------------------------------------------------------------------ internals

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

    async def _list(self) -> None:
        query: list[tuple[str, str]] = []
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.page_size:
            query.append(("limit", str(self.page_size)))
        items: list[JSON] = []
        cont: str | None = None
        restarted = False
        while True:
            q = list(query) + ([("continue", cont)] if cont else [])
            try:
                doc = await self.api.request("GET", self.resource.path(), query=q)
            except KubeError as e:
                if e.status == 410 and cont and not restarted:  # continue token expired: list again from the start
                    items, cont, restarted = [], None, True
                    continue
                raise
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    # List items carry no apiVersion/kind; give them the ones a watch event and a GET would have.
                    item.setdefault("apiVersion", self.resource.api_version)
                    item.setdefault("kind", self.resource.kind)
                    items.append(item)
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or None
            if not cont:
                self._rv = str(meta.get("resourceVersion") or "") or None
                break
        self.lists += 1
        new = {object_key(o): o for o in items}
        old_store, self._store = self._store, new
        for key, obj in new.items():
            before = old_store.get(key)
            if before is None:
                self._emit("ADDED", obj, None)
            elif (before.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._emit("MODIFIED", obj, before)
        for key, obj in old_store.items():
            if key not in new:
                self._emit("DELETED", obj, obj)

    async def _watch_once(self) -> int:
        """One watch stream from ``self._rv``; returns the number of events seen. Raises _Expired on 410."""
        query: list[tuple[str, str]] = [("allowWatchBookmarks", "true")]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self._rv:
            query.append(("resourceVersion", self._rv))
        seen = 0
        self.watches += 1
        low, high = self.watch_timeout
        try:
            async with contextlib.aclosing(
                self.api.watch(self.resource.path(), query, random.randint(low, high))
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
        if etype == "DELETED":
            self._store.pop(key, None)
        else:
            self._store[key] = obj
        if rv:
            self._rv = str(rv)
        if etype == "DELETED":
            self._emit("DELETED", obj, before)
        else:
            self._emit("ADDED" if before is None else "MODIFIED", obj, before)
        metrics.watch_cache(self.resource.label, len(self._store))

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
                        self._report("forbidden" if e.status == 403 else "not served",
                                     f"{self.resource.label} {why}: {e.message}; retrying every "
                                     f"{self.slow_retry:g}s", logging.WARNING if e.status == 403 else logging.INFO)
                        if e.status == 404 and self._store:  # the CRD went away: so did its objects
                            gone, self._store = self._store, {}
                            for obj in gone.values():
                                self._emit("DELETED", obj, obj)
                        await asyncio.sleep(self.slow_retry)
                        continue
                    failures += 1
                    self._report("error", f"{self.resource.label}: list failed: {e.message}; retrying with backoff")
                    await asyncio.sleep(self._delay(failures))
                    continue
                if self._problem is not None:
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
        assert self.resync_period
        while True:
            await asyncio.sleep(self.resync_period)
            if not self.synced:
                continue
            for obj in list(self._store.values()):
                self._emit("SYNC", obj, obj)
