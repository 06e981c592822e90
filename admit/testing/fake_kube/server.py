"""The fake kube-apiserver itself: :class:`FakeKubeAPI`, an aiohttp server with the resource registry, watches,
garbage collection, the namespace controller, and the :class:`Controller` hook other controllers plug into.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import functools
import json
import random
import time
import uuid
from collections import Counter, deque
from typing import Any, Callable, Coroutine, Mapping, Protocol, TypeVar

from aiohttp import web

from ..fake_defaults import apply_defaults, job_selector_and_labels
from .admission import REQUEST_WARNINGS, AdmissionChain, warning_headers
from .errors import (ApiError, _REASON_BY_CODE, _already_exists, _bad_request, _conflict, _details, _dumps, _forbidden,
                     _invalid, _json_response, _not_found, status_object)
from .objects import (_GENERATE_CHARS, _label_selector_string, _normalize, _now, _query_bool, _validate, apply_patch,
                      patch_media_type)
from .requestlog import (RequestRecord, Selection, _ABORT, _CLOSE, _Event, _Fault, _Watcher, _method_matches,
                         _plural_matches)
from .resources import BUILTIN_RESOURCES, JSON, SHORT_NAMES, ResourceType, _rt, workload_api_resources

#: The namespaces kube-apiserver creates itself (pkg/controlplane/controller/systemnamespaces).
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

#: What ``GET /version`` answers.
VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake", "gitCommit": "fake", "gitTreeState": "clean",
           "buildDate": "2024-01-01T00:00:00Z", "goVersion": "go1.22.0", "compiler": "gc", "platform": "linux/amd64"}


class Controller(Protocol):
    """What :class:`FakeKubeAPI` calls on a controller added with :meth:`~FakeKubeAPI.add_controller`: your own, or
    an operator's or kube-controller-manager's emulation (this repository's ``tests/emulations``)."""

    def observe(self, rt: ResourceType, ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """A write was committed (``obj``: the new object, None when deleted; ``old``: the previous one, None when
        created); called in the server's event loop, so it must not block (start a task)."""

    @property
    def busy(self) -> bool:
        """A sync is running or queued (:meth:`FakeKubeAPI.settle` waits until no controller is busy)."""

    def stop(self) -> None:
        """Cancel its syncs: the server stops."""


_C = TypeVar("_C", bound=Controller)


def list_item(rt: ResourceType, obj: JSON) -> JSON:
    """``obj`` as an item of a list of ``rt`` (a shallow copy): kube-apiserver encodes a built-in kind's typed list
    (``PodList.Items []Pod``) without the items' TypeMeta, so only the list has ``apiVersion`` and ``kind``
    (kubernetes/kubernetes#3030, open; #98925; the 1.36 plane answers so); a GET, a write's answer and a watch event
    carry both. A custom resource's items are returned as stored: the unstructured JSON written, both included."""
    if rt.custom:
        return obj
    return {k: v for k, v in obj.items() if k != "apiVersion" and k != "kind"}


def _carry(src: JSON, dst: JSON, keys: tuple[str, ...]) -> None:
    """Set each of ``keys`` in ``dst`` to (a copy of) ``src``'s value, or remove it where ``src`` has none."""
    for k in keys:
        if k in src:
            dst[k] = copy.deepcopy(src[k])
        else:
            dst.pop(k, None)


class FakeKubeAPI:
    """An in-memory Kubernetes API server on ``127.0.0.1`` (docs/fake-api.md says what it emulates).

    Args:
        gc_orphans_after: seconds (e.g. 0.025) after which an object whose ``ownerReferences`` all name uids not stored
            is deleted, unless such an owner is stored by then (kube-controller-manager's garbage collector); checked
            when such an object is written and when an owner is deleted. None (default): never.
        history_limit: watch events kept for ``resourceVersion`` replay; older resourceVersions get 410 Expired.
        bookmark_interval: seconds between BOOKMARK events on watches that sent ``allowWatchBookmarks=true``
            (None: only on ``send_bookmarks()`` and after ``sendInitialEvents``).
        record_requests: keep ``requests`` (the counters behind ``stats()`` are always kept).
        admission: the :class:`~admission.AdmissionChain` HTTP writes and the controllers' writes go through (None:
            none; it can be set later, before the first write).
        workload_api: also serve ``scheduling.k8s.io`` in this version (:func:`workload_api_resources`); None: not
            served, like a cluster without ``GenericWorkload``.
        namespace_lifecycle: a write into a namespace not stored is 404, as the NamespaceLifecycle admission plugin
            answers, and :data:`SYSTEM_NAMESPACES` are stored. Off by default: most tests write where they like.
    """

    def __init__(self, *, gc_orphans_after: float | None = None, history_limit: int = 10_000,
                 bookmark_interval: float | None = None, record_requests: bool = True,
                 admission: AdmissionChain | None = None, workload_api: str | None = None,
                 namespace_lifecycle: bool = False) -> None:
        self.admission = admission
        #: Every controller syncing on this server's writes (:meth:`add_controller`), in the order registered.
        self.controllers: list[Controller] = []
        self.gc_orphans_after = gc_orphans_after
        self.bookmark_interval = bookmark_interval
        self.record_requests = record_requests
        self._registry: dict[tuple[str, str, str], ResourceType] = {rt.key: rt for rt in BUILTIN_RESOURCES}
        if workload_api is not None:
            self.serve_workload_api(workload_api)
        self.namespace_lifecycle = namespace_lifecycle
        self._data: dict[tuple[str, str, str], dict[tuple[str | None, str], JSON]] = {}
        self._uids: dict[str, tuple[tuple[str, str, str], str | None, str]] = {}
        self._rv = 1000
        self._list_memo: dict[tuple, tuple[int, int, list[JSON]]] = {}
        self._history: deque[_Event] = deque(maxlen=max(1, history_limit))
        self._compacted_rv = 0
        self._watchers: set[_Watcher] = set()
        self._faults: list[_Fault] = []
        self._tasks: dict[tuple, asyncio.Task] = {}  # the GC's and the namespace controller's (:meth:`_spawn`)
        #: Objects the GC emulation deleted, as ``{"apiVersion", "kind", "namespace", "name", "uid"}``.
        self.gc_deleted: list[JSON] = []
        #: Every API request received (not ``/_fake/*``), oldest first.
        self.requests: list[RequestRecord] = []
        self._counts: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    def add_controller(self, controller: _C) -> _C:
        """Run ``controller`` on this server's writes (its ``observe`` sees every committed write); stopped with the
        server. Returns it."""
        self.controllers.append(controller)
        return controller

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait until every controller is idle (tests): a write of one controller may start another's sync, so
        this waits for several quiet turns of the event loop in a row. Raises TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        quiet = 0
        while quiet < 3:
            if loop.time() > deadline:
                raise TimeoutError("the fake's controllers are still syncing")
            busy = any(c.busy for c in self.controllers)
            quiet = 0 if busy else quiet + 1
            await asyncio.sleep(0.005 if busy else 0)

    def namespace_labels(self, ns: str | None) -> JSON:
        """The labels a webhook's namespaceSelector sees: the stored Namespace's, else only
        ``kubernetes.io/metadata.name`` (which kube-apiserver puts on every namespace)."""
        if ns is None:
            return {}
        stored = self._bucket(self.resource_type("v1", "namespaces")).get((None, ns))
        labels = dict(((stored or {}).get("metadata") or {}).get("labels") or {})
        labels.setdefault("kubernetes.io/metadata.name", ns)
        return labels

    # ---------------------------------------------------------------- lifecycle

    async def start(self, port: int = 0) -> "FakeKubeAPI":
        """Bind ``127.0.0.1:port`` (0: a random free port) and serve. Returns self."""
        if self._runner is not None:
            return self
        if self.namespace_lifecycle:  # kube-apiserver's system namespaces controller makes these
            for name in SYSTEM_NAMESPACES:
                if self.get("v1", "namespaces", None, name) is None:
                    self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        app = web.Application(client_max_size=3 * 1024 * 1024)  # kube-apiserver's request body limit
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True,
                               shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        self._runner = runner
        self._port = runner.addresses[0][1]  # the bound (host, port): the port port=0 got
        return self

    async def stop(self) -> None:
        """End open watches, cancel pending GC, stop serving. Idempotent."""
        if self._runner is None:
            return
        await self.drop_watches()
        for task in list(self._tasks.values()):
            task.cancel()
        self._tasks.clear()
        for controller in self.controllers:
            controller.stop()
        if self.admission is not None:
            await self.admission.close()
        runner, self._runner = self._runner, None
        await runner.cleanup()

    async def __aenter__(self) -> "FakeKubeAPI":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeKubeAPI is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (after ``start``)."""
        return f"http://127.0.0.1:{self.port}"

    def api_client(self) -> Any:
        """A new ``kubernetes_asyncio.client.ApiClient`` for this server (plain HTTP, no auth); close it (``async
        with`` or ``close()``)."""
        from kubernetes_asyncio import client as k8s

        return k8s.ApiClient(configuration=k8s.Configuration(host=self.url))

    # ---------------------------------------------------------------- registry

    def register(self, group: str, version: str, kind: str, plural: str, namespaced: bool = True, *,
                 status: bool = True, scale: bool = False, custom: bool | None = None) -> ResourceType:
        """Serve another resource (``custom`` defaults to True for non-built-in groups: CRD semantics)."""
        rt = _rt(group, version, kind, plural, namespaced, status=status, scale=scale, custom=custom)
        self._registry[rt.key] = rt
        return rt

    def serve_workload_api(self, version: str) -> None:
        """Serve ``scheduling.k8s.io/<version>`` ``workloads`` and ``podgroups`` (``workload_api_resources``), as
        kube-apiserver does with ``GenericWorkload`` on and the version in ``--runtime-config``."""
        for rt in workload_api_resources(version):
            self._registry[rt.key] = rt

    def unregister(self, api_version: str, plural: str) -> None:
        """Stop serving a resource, as deleting its CRD does (kube-apiserver answers 404 "the server could not find
        the requested resource" for its paths and drops it from discovery); its objects go with it."""
        self._drop(self.resource_type(api_version, plural))

    def stop_serving_workload_api(self, version: str) -> None:
        """:meth:`unregister` ``scheduling.k8s.io/<version>``: an upgrade that drops it, as 1.37 drops ``v1alpha2``
        (there is no conversion in the fake)."""
        for rt in workload_api_resources(version):
            self._drop(rt)

    def _drop(self, rt: ResourceType) -> None:
        self._registry.pop(rt.key, None)
        self._data.pop(rt.key, None)

    @property
    def resources(self) -> list[ResourceType]:
        return list(self._registry.values())

    def resource_type(self, api_version: str, kind_or_plural: str) -> ResourceType:
        """Look up a served resource by ``apiVersion`` and kind or plural (case-insensitive); KeyError if unknown."""
        group, _, version = api_version.rpartition("/")
        want = kind_or_plural.lower()
        for rt in self._registry.values():
            if rt.group == group and rt.version == version and want in (rt.plural, rt.kind.lower()):
                return rt
        raise KeyError(f"{api_version} {kind_or_plural} is not served by FakeKubeAPI; use register()")

    # ---------------------------------------------------------------- direct store access

    def put(self, obj: JSON) -> JSON:
        """Insert or replace ``obj`` (with ``apiVersion``/``kind``; namespace "default" when namespaced and unset),
        bypassing HTTP, validation and status strategies: a missing ``uid`` and ``creationTimestamp`` are the stored
        object's or new, a ``generation`` missing or as stored is computed as the server would (:meth:`_spec_part`),
        the ``resourceVersion`` is always fresh (a caller-chosen one would break watch ordering). Emits ADDED or
        MODIFIED; returns a copy of what was stored."""
        rt = self.resource_type(obj["apiVersion"], obj["kind"])
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        ns = (meta.get("namespace") or "default") if rt.namespaced else None
        self._place(rt, ns, meta, ValueError("put() needs metadata.name or metadata.generateName"))
        existing = self._bucket(rt).get((ns, meta["name"]))
        old_meta = existing["metadata"] if existing is not None else {}
        meta.setdefault("uid", old_meta.get("uid", str(uuid.uuid4())))
        meta.setdefault("creationTimestamp", old_meta.get("creationTimestamp", _now()))
        gen = old_meta.get("generation", 1)
        if existing is None:
            meta.setdefault("generation", 1)
        elif meta.get("generation") in (None, gen):  # absent or as read: compute it like the server
            meta["generation"] = gen + 1 if self._spec_part(rt, new) != self._spec_part(rt, existing) else gen
        stored = self._commit(rt, ns, meta["name"], existing, new)
        return copy.deepcopy(stored)

    def get(self, api_version: str, kind_or_plural: str, namespace: str | None, name: str) -> JSON | None:
        """A copy of the stored object, or None."""
        rt = self.resource_type(api_version, kind_or_plural)
        obj = self._bucket(rt).get((namespace if rt.namespaced else None, name))
        return copy.deepcopy(obj) if obj is not None else None

    def delete_object(self, api_version: str, kind_or_plural: str, namespace: str | None, name: str) -> JSON | None:
        """Remove an object at once (finalizers are ignored), emitting DELETED. Returns it, or None if absent."""
        rt = self.resource_type(api_version, kind_or_plural)
        ns = namespace if rt.namespaced else None
        existing = self._bucket(rt).get((ns, name))
        if existing is None:
            return None
        return copy.deepcopy(self._commit(rt, ns, name, existing, None))

    def objects(self, plural: str, namespace: str | None = None, api_version: str | None = None) -> list[JSON]:
        """Copies of all stored objects of a plural (or kind), in every group/version serving it unless
        ``api_version`` is given, optionally in one namespace; sorted by (namespace, name). Whole, as stored
        (``apiVersion`` and ``kind`` included): for tests' checks; a list over HTTP, and :meth:`list_objects`, answer
        items shaped as kube-apiserver's."""
        want = plural.lower()
        return [copy.deepcopy(obj) for rt in self._registry.values()
                if want in (rt.plural, rt.kind.lower()) and api_version in (None, rt.api_version)
                for (ns, _), obj in self._sorted(rt) if namespace in (None, ns)]

    def list_objects(self, api_version: str, kind_or_plural: str, namespace: str | None = None, *,
                     label_selector: str | None = None, field_selector: str | None = None) -> list[JSON]:
        """The ``items`` a ``GET`` of the collection answers (all namespaces when ``namespace`` is None), shaped as
        kube-apiserver's (:func:`list_item`: a built-in kind's items carry no ``apiVersion``/``kind``), sorted by
        (namespace, name): what a controller's informer lists, for the operator emulations. Selectors in the query
        syntax; ``ApiError`` 400 for a bad one. :meth:`objects` gives the stored objects whole."""
        rt = self.resource_type(api_version, kind_or_plural)
        query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        return copy.deepcopy(self._list(rt, namespace if rt.namespaced else None, query)["items"])

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return str(self._rv)

    # ---------------------------------------------------------------- faults

    def fail(self, method: str, plural: str, status: int = 500, times: int | None = 1, reason: str | None = None,
             name: str | None = None, message: str | None = None, retry_after: int | None = None) -> None:
        """Answer the next ``times`` (None: all) matching requests with a ``Status`` of HTTP ``status``, ``reason``
        by default its (500 InternalError, 409 Conflict, 429 TooManyRequests...).

        ``method``: an HTTP method ("GET" covers get, list and watch), a verb ("list", "create", ...) or "*";
        ``plural``: "podgroups" (any subresource), "deployments/scale" (only that one) or "*"; ``name``: one object.
        ``retry_after`` (seconds) goes into ``Retry-After`` and the Status' ``details.retryAfterSeconds``, as
        kube-apiserver's ``responsewriters`` write it; a 429 has ``Retry-After: 1`` unless told otherwise (what API
        Priority and Fairness and the max-in-flight filter send, ``filters/maxinflight.go`` ``tooManyRequests``).
        """
        if retry_after is None and status == 429:
            retry_after = 1
        self._faults.append(_Fault("fail", method, plural, times, name, status,
                                   reason or _REASON_BY_CODE.get(status, "InternalError"), message,
                                   retry_after=retry_after))

    def delay(self, method: str, plural: str, seconds: float, times: int | None = None) -> None:
        """Sleep ``seconds`` before answering the next ``times`` (None: all) matching requests (matching as in
        ``fail``); delays of several matching rules add up."""
        self._faults.append(_Fault("delay", method, plural, times, seconds=seconds))

    def forbid(self, plural: str, method: str = "*") -> None:
        """Answer every request for ``plural`` (and ``method``) with 403 Forbidden, as RBAC would."""
        self._faults.append(_Fault("forbid", method, plural, None, status=403, reason="Forbidden"))

    def allow(self, plural: str) -> None:
        """Undo ``forbid(plural)``."""
        self._faults = [f for f in self._faults if not (f.kind == "forbid" and f.plural == plural)]

    def clear_faults(self) -> None:
        """Remove every fail/delay/forbid rule."""
        self._faults.clear()

    # ---------------------------------------------------------------- watches

    @property
    def open_watches(self) -> int:
        """How many watch streams are open right now."""
        return len(self._watchers)

    def compact(self) -> None:
        """Forget the event history, like an etcd compaction: a watch from any resourceVersion older than the current
        one gets an ERROR event with a 410 Expired Status."""
        self._history.clear()
        self._compacted_rv = self._rv

    async def drop_watches(self, abrupt: bool = False, timeout: float = 2.0) -> None:
        """Make the server end every open watch stream now. ``abrupt=False``: the response ends cleanly (as when the
        apiserver closes a watch on its own; the client sees end of stream). ``abrupt=True``: the TCP connection is
        aborted mid-response (the client sees a connection/payload error). Returns once they are closed."""
        for w in list(self._watchers):
            w.queue.put_nowait(_ABORT if abrupt else _CLOSE)
        deadline = time.monotonic() + timeout
        while self._watchers and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def send_bookmarks(self) -> None:
        """Send a BOOKMARK (current resourceVersion) on every open watch that allowed bookmarks (held ones excepted)."""
        for w in list(self._watchers):
            if w.bookmarks and not w.holding:
                w.queue.put_nowait(("BOOKMARK", self._bookmark(w.rt)))

    def hold_watches(self, plural: str) -> int:
        """Keep every watch stream of ``plural`` that is open now open but silent: no event, no bookmark, until
        :meth:`release_watches` (a half-open connection after a network partition, or a lagging watch). Streams
        opened later are not held (a client that reconnects gets a working stream, with the events it missed
        replayed from the history). Returns how many streams are held."""
        held = [w for w in self._watchers if w.rt.plural == plural]
        for w in held:
            w.holding = True
        return len(held)

    def release_watches(self, plural: str) -> None:
        """Deliver what :meth:`hold_watches` kept back, in order, and let the streams flow again."""
        for w in self._watchers:
            if w.rt.plural == plural and w.holding:
                w.holding = False
                for item in w.held:
                    w.queue.put_nowait(item)
                w.held.clear()

    def _bookmark(self, rt: ResourceType, initial_end: bool = False) -> JSON:
        meta: JSON = {"resourceVersion": str(self._rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

    # ---------------------------------------------------------------- request log

    def requests_for(self, plural: str | None = None, method: str | None = None, *, name: str | None = None,
                     subresource: str | None = None) -> list[RequestRecord]:
        """Logged requests filtered by plural ("deployments/scale" also restricts the subresource), method (HTTP
        method or verb, as in ``fail``), name and subresource."""
        return [rec for rec in self.requests if (plural is None or _plural_matches(plural, rec))
                and (method is None or _method_matches(method, rec)) and name in (None, rec.name)
                and subresource in (None, rec.subresource)]

    def clear_requests(self) -> None:
        self.requests.clear()

    def stats(self) -> JSON:
        """``{"total": N, "counts": {"POST podgroups": 3, ...}, "by": [{"method", "resource", "count"}, ...]}``;
        ``resource`` is "plural" or "plural/subresource", or the path for discovery requests."""
        by = [{"method": key.split(" ", 1)[0], "resource": key.split(" ", 1)[1], "count": n}
              for key, n in sorted(self._counts.items())]
        return {"total": sum(self._counts.values()), "counts": dict(sorted(self._counts.items())), "by": by}

    def reset_stats(self) -> None:
        self._counts.clear()

    # ---------------------------------------------------------------- store internals

    def _bucket(self, rt: ResourceType) -> dict[tuple[str | None, str], JSON]:
        return self._data.setdefault(rt.key, {})

    def _stored(self, rt: ResourceType, ns: str | None, name: str) -> JSON:
        """The stored object; ApiError 404 when there is none."""
        existing = self._bucket(rt).get((ns, name))
        if existing is None:
            raise _not_found(rt, name)
        return existing

    def _sorted(self, rt: ResourceType) -> list[tuple[tuple[str | None, str], JSON]]:
        """The stored objects of ``rt`` as ``((namespace, name), object)``, in (namespace, name) order."""
        return sorted(self._bucket(rt).items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))

    def _spec_part(self, rt: ResourceType, obj: JSON) -> JSON:
        """What a change of bumps ``metadata.generation``, as the registry strategies' ``PrepareForUpdate`` compare:
        ``spec``, not the annotations, for built-in workloads (``pkg/registry/apps/{statefulset,replicaset,daemonset}/
        strategy.go``, ``pkg/registry/batch/job/strategy.go``); also ``metadata.annotations`` for a Deployment
        (``pkg/registry/apps/deployment/strategy.go``: they are copied to its ReplicaSets); everything but ``metadata``
        (and ``status`` with the status subresource) for a custom resource
        (``apiextensions-apiserver/pkg/registry/customresource/strategy.go`` ``copyNonMetadata``)."""
        skip = {"metadata", "status"} if rt.status else {"metadata"}
        part = {k: v for k, v in obj.items() if k not in skip}
        if (rt.group, rt.kind) == ("apps", "Deployment"):
            part["metadata.annotations"] = (obj.get("metadata") or {}).get("annotations") or {}
        return part

    def _place(self, rt: ResourceType, ns: str | None, meta: JSON, no_name: Exception) -> str:
        """Set ``meta``'s namespace (``ns``; none for a cluster-scoped ``rt``) and, from ``generateName``, a missing
        name; raises ``no_name`` when neither is set. Returns the name."""
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise no_name
            meta["name"] = self._generate_name(rt, ns, meta["generateName"])
        return str(meta["name"])

    def _generate_name(self, rt: ResourceType, ns: str | None, prefix: str) -> str:
        bucket = self._bucket(rt)
        for _ in range(100):
            name = prefix[:58] + "".join(random.choice(_GENERATE_CHARS) for _ in range(5))
            if (ns, name) not in bucket:
                return name
        raise ApiError(500, "InternalError", "the server was not able to generate a unique name for the object")

    def _commit(self, rt: ResourceType, ns: str | None, name: str, old: JSON | None, new: JSON | None,
                final_state: JSON | None = None) -> JSON:
        """Store ``new`` (or delete when None; the DELETED object is ``final_state`` or ``old``) under a fresh
        resourceVersion and emit the watch event. ``new`` must be a fresh dict that nobody else holds: stored dicts
        are never mutated afterwards."""
        self._rv += 1
        bucket = self._bucket(rt)
        if new is not None:
            new["apiVersion"] = rt.api_version
            new["kind"] = rt.kind
            new["metadata"]["resourceVersion"] = str(self._rv)
            bucket[(ns, name)] = new
            if old is not None and old["metadata"].get("uid") != new["metadata"].get("uid"):
                self._uids.pop(old["metadata"].get("uid"), None)
            if new["metadata"].get("uid"):
                self._uids[new["metadata"]["uid"]] = (rt.key, ns, name)
            ev = _Event(self._rv, "ADDED" if old is None else "MODIFIED", rt.key, ns, new, old)
            result = new
        else:
            assert old is not None
            gone = copy.deepcopy(final_state if final_state is not None else old)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            del bucket[(ns, name)]
            self._uids.pop(old["metadata"].get("uid"), None)
            ev = _Event(self._rv, "DELETED", rt.key, ns, gone, old)
            result = gone
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(ev)
        for w in self._watchers:
            seen = w.translate(ev)
            if seen is not None:
                w.deliver(seen)
        if self.gc_orphans_after is not None:
            self._gc_after_write(rt, ns, name, new, old)
        for controller in self.controllers:
            controller.observe(rt, ns or "", name, new, old)
        return result

    # ---------------------------------------------------------------- garbage collector emulation

    def _is_orphan(self, obj: JSON) -> bool:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        return bool(refs) and all(ref.get("uid") not in self._uids for ref in refs)

    def _gc_after_write(self, rt: ResourceType, ns: str | None, name: str, new: JSON | None, old: JSON | None) -> None:
        orphans = [(rt, ns, name)] if new is not None and self._is_orphan(new) else []
        if new is None and old is not None:
            uid = old["metadata"].get("uid")
            orphans += [(self._registry[key], dns, dname) for key, bucket in self._data.items()
                        for (dns, dname), obj in bucket.items()
                        if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])
                        and self._is_orphan(obj)]
        for o_rt, o_ns, o_name in orphans:
            self._spawn(("gc", o_rt.key, o_ns, o_name), functools.partial(self._gc_later, o_rt, o_ns, o_name))

    def _spawn(self, key: tuple, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work()`` in a task that :meth:`stop` cancels, unless one for ``key`` runs or no event loop does (a
        ``put`` outside one)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if key not in self._tasks or self._tasks[key].done():
            task = self._tasks[key] = loop.create_task(work())
            task.add_done_callback(lambda t: self._tasks.pop(key) if self._tasks.get(key) is t else None)

    async def _gc_later(self, rt: ResourceType, ns: str | None, name: str) -> None:
        await asyncio.sleep(self.gc_orphans_after or 0)
        obj = self._bucket(rt).get((ns, name))
        if obj is None or not self._is_orphan(obj) or obj["metadata"].get("deletionTimestamp"):
            return
        self.gc_deleted.append({"apiVersion": rt.api_version, "kind": rt.kind, "namespace": ns, "name": name,
                                "uid": obj["metadata"].get("uid")})
        self._delete(rt, ns, name, obj, dry_run=False)

    # ---------------------------------------------------------------- namespace lifecycle

    def _check_namespace_open(self, rt: ResourceType, ns: str | None, obj: JSON) -> None:
        """The NamespaceLifecycle admission plugin (plugin/pkg/admission/namespace/lifecycle/admission.go): a create
        in a stored namespace that is being deleted is 403, with a ``NamespaceTerminating`` cause. (A namespace that
        is not stored is not checked unless ``namespace_lifecycle`` is on: then it is 404 NotFound, ``namespaces
        "<ns>" not found``, as lifecycle/admission.go answers with ``errors.NewNotFound``.)"""
        if not rt.namespaced or ns is None:
            return
        nss = self._registry[("", "v1", "namespaces")]
        namespace = self._bucket(nss).get((None, ns))
        if namespace is None and self.namespace_lifecycle:
            raise _not_found(nss, ns)
        if namespace is None or not (namespace["metadata"].get("deletionTimestamp") or
                                     (namespace.get("status") or {}).get("phase") == "Terminating"):
            return
        why = f"unable to create new content in namespace {ns} because it is being terminated"
        raise _forbidden(rt, (obj.get("metadata") or {}).get("name"), why,
                         causes=[{"reason": "NamespaceTerminating", "message": why, "field": "metadata.namespace"}])

    def namespace_content(self, namespace: str) -> list[JSON]:
        """Every stored object of ``namespace`` (all namespaced resources)."""
        return [obj for _, _, obj in self._in_namespace(namespace)]

    def _in_namespace(self, namespace: str) -> list[tuple[ResourceType, str, JSON]]:
        return [(self._registry[key], name, obj) for key, bucket in self._data.items() if self._registry[key].namespaced
                for (ns, name), obj in bucket.items() if ns == namespace]

    async def _namespace_controller(self, name: str) -> None:
        """The namespace controller (``pkg/controller/namespace/deletion/namespaced_resources_deleter.go``): every
        namespaced object in the terminating namespace is deleted (those with finalizers only marked), polled until
        none is left, then the ``kubernetes`` finalizer is removed (``/finalize``) and the namespace goes. The first
        pass runs on the next loop iteration, as the controller acts on the watch event."""
        nss = self._registry[("", "v1", "namespaces")]
        while True:
            await asyncio.sleep(0.005)
            namespace = self._bucket(nss).get((None, name))
            if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
                return
            for rt, oname, obj in self._in_namespace(name):
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(rt, name, oname, obj, dry_run=False)
            if self.namespace_content(name):
                continue
            done = copy.deepcopy(namespace)
            done["spec"]["finalizers"] = [f for f in done["spec"].get("finalizers") or [] if f != "kubernetes"]
            # another finalizer left: it stays, Terminating; else it goes (DELETED shows it without "kubernetes")
            self._commit(nss, None, name, namespace, done if done["spec"]["finalizers"] else None, final_state=done)
            return

    # ---------------------------------------------------------------- write semantics (no awaits inside)

    def _check_body(self, rt: ResourceType, body: Any) -> JSON:
        if not isinstance(body, dict):
            raise _bad_request(f"the body of the request is not a {rt.kind} object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if rt.custom and (not api_version or not kind):
            missing = "Kind" if not kind else "apiVersion"
            raise _bad_request(f"Object '{missing}' is missing in '{json.dumps(body)[:200]}'")
        if api_version and api_version != rt.api_version:
            raise _bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                               f"version ({rt.api_version})")
        if kind and kind != rt.kind:
            raise _bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        obj = copy.deepcopy(body)
        meta = obj.get("metadata")
        if meta is None:
            obj["metadata"] = {}
        elif not isinstance(meta, dict):
            raise _bad_request("metadata must be an object")
        return obj

    def _create(self, rt: ResourceType, ns: str | None, body: Any) -> JSON:
        """The object a create of ``body`` stores (not stored yet: :meth:`admitted_create` does it)."""
        obj = self._check_body(rt, body)
        self._check_namespace_open(rt, ns, obj)
        apply_defaults(rt.group, rt.plural, obj)
        if rt.key == ("", "v1", "namespaces"):
            # the namespace strategy's PrepareForCreate (pkg/registry/core/namespace/strategy.go): phase Active and
            # the "kubernetes" finalizer, which the namespace controller removes once the namespace is empty
            obj["status"] = {"phase": "Active"}
            spec = obj["spec"] = spec_v if isinstance(spec_v := obj.get("spec"), dict) else {}
            if "kubernetes" not in (spec.get("finalizers") or []):
                spec["finalizers"] = [*(spec.get("finalizers") or []), "kubernetes"]
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise _bad_request("resourceVersion should not be set on objects to be created")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        name = self._place(rt, ns, meta, _invalid(rt, "", "metadata.name: Required value: name or generateName is "
                                                      "required"))
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(k, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        if rt.key == ("batch", "v1", "jobs"):
            job_selector_and_labels(obj)
        if rt.status and rt.plural != "namespaces":
            obj.pop("status", None)
            if rt.group == "" and rt.plural == "pods":
                obj["status"] = {"phase": "Pending"}
        _normalize(rt, obj)
        _validate(rt, obj)
        if (ns, name) in self._bucket(rt):
            raise _already_exists(rt, name)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        return obj

    def _update(self, rt: ResourceType, ns: str | None, name: str, existing: JSON, new: JSON, *,
                subresource: str | None, dry_run: bool, require_rv: bool) -> JSON:
        """Shared tail of PUT and PATCH on the main resource or ``/status``: ``new`` is the complete desired object
        (already a private copy)."""
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        old_meta = existing["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise _bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the "
                               "request")
        rv = meta.get("resourceVersion")
        if rv:
            if rv != old_meta.get("resourceVersion"):
                raise _conflict(rt, name)
        elif require_rv and rt.custom:
            raise _invalid(rt, name, "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update")
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            raise _conflict(rt, name, f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                                      f"{old_meta.get('uid')}")
        if subresource == "status":
            result = copy.deepcopy(existing)
            _carry(new, result, ("status",))
        else:
            result = new
            if rt.status:
                _carry(existing, result, ("status",))
            rmeta = result["metadata"]
            rmeta["name"] = name
            if rt.namespaced:
                rmeta["namespace"] = ns
            else:
                rmeta.pop("namespace", None)
            _carry(old_meta, rmeta, ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                                     "generation"))
            _normalize(rt, result)
            if self._spec_part(rt, result) != self._spec_part(rt, existing):
                rmeta["generation"] = old_meta.get("generation", 1) + 1
            _validate(rt, result, existing)
        result["apiVersion"], result["kind"] = rt.api_version, rt.kind
        result["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
        if result == existing:
            return existing  # no-op write: no new resourceVersion, no event (as etcd's GuaranteedUpdate)
        if dry_run:
            return result
        if old_meta.get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            # The update that removes the last finalizer of a deleting object deletes it (only DELETED is seen).
            return self._commit(rt, ns, name, existing, None, final_state=result)
        return self._commit(rt, ns, name, existing, result)

    def _delete(self, rt: ResourceType, ns: str | None, name: str, existing: JSON, dry_run: bool,
                options: JSON | None = None) -> JSON:
        """DELETE (``generic/registry/store.go`` ``Delete``): an object with finalizers is only marked
        (``updateForGracefulDeletionAndFinalizers``), and so is a namespace with ``spec.finalizers``, phase Terminating
        (``pkg/registry/core/namespace/storage/storage.go``), whose content :meth:`_namespace_controller` deletes."""
        pre = (options or {}).get("preconditions") or {}
        meta = existing["metadata"]
        for key, field in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if pre.get(key) and pre[key] != meta.get(key):
                raise _conflict(rt, name, f"Precondition failed: {field} in precondition: {pre[key]}, {field} in "
                                          f"object meta: {meta.get(key)}")
        if dry_run:
            return existing
        namespace = rt.key == ("", "v1", "namespaces") and (existing.get("spec") or {}).get("finalizers")
        if not namespace and not meta.get("finalizers"):
            return self._commit(rt, ns, name, existing, None)
        if meta.get("deletionTimestamp"):
            return existing
        marked = copy.deepcopy(existing)
        marked["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
        if not namespace:
            marked["metadata"]["generation"] = meta.get("generation", 1) + 1
            return self._commit(rt, ns, name, existing, marked)
        marked["status"] = {**(marked.get("status") or {}), "phase": "Terminating"}
        result = self._commit(rt, None, name, existing, marked)
        self._spawn(("namespace", name), lambda: self._namespace_controller(name))
        return result

    # ---------------------------------------------------------------- writes through admission (awaits inside)

    async def admitted_create(self, rt: ResourceType, ns: str | None, body: Any, dry_run: bool,
                              user: JSON | None = None) -> JSON:
        """Create as kube-apiserver does with admission: mutating webhooks, then name/uid/defaults, then validating
        webhooks, then store. ``user`` is the AdmissionReview's ``userInfo`` (default: an admin). Raises ApiError."""
        adm = self.admission
        if adm is not None and adm.handles(rt, None, "CREATE"):
            obj = self._check_body(rt, body)
            self._check_namespace_open(rt, ns, obj)  # NamespaceLifecycle runs before the webhooks
            apply_defaults(rt.group, rt.plural, obj)  # decoding defaults, before the admission chain
            labels = self.namespace_labels(ns)
            obj = await adm.mutate("CREATE", rt, ns, obj, None, dry_run, user, ns_labels=labels)
            prepared = self._create(rt, ns, obj)
            await adm.validate("CREATE", rt, ns, prepared, None, dry_run, user=user, ns_labels=labels)
        else:
            prepared = self._create(rt, ns, body)
        if dry_run:
            return prepared
        name = prepared["metadata"]["name"]
        if (ns, name) in self._bucket(rt):
            raise _already_exists(rt, name)
        return self._commit(rt, ns, name, None, prepared)

    async def admitted_update(self, rt: ResourceType, ns: str | None, name: str, new: JSON, dry_run: bool, *,
                              require_rv: bool = False, user: JSON | None = None) -> JSON:
        """Update the main resource through admission (``new``: the complete desired object). Raises ApiError."""
        existing = self._stored(rt, ns, name)
        apply_defaults(rt.group, rt.plural, new)  # decoding defaults, before the admission chain
        adm = self.admission
        if adm is not None and adm.handles(rt, None, "UPDATE"):
            labels = self.namespace_labels(ns)
            new = await adm.mutate("UPDATE", rt, ns, new, existing, dry_run, user, ns_labels=labels)
            result = self._update(rt, ns, name, existing, copy.deepcopy(new), subresource=None, dry_run=True,
                                  require_rv=require_rv)
            if result is existing:
                return existing
            await adm.validate("UPDATE", rt, ns, result, existing, dry_run, user=user, ns_labels=labels)
            existing = self._stored(rt, ns, name)
        return self._update(rt, ns, name, existing, new, subresource=None, dry_run=dry_run, require_rv=require_rv)

    def _scale_of(self, rt: ResourceType, obj: JSON) -> JSON:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {k: meta[k] for k in keep if k in meta},
                "spec": {"replicas": spec.get("replicas", 1)},
                "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                           "selector": _label_selector_string(spec.get("selector"))}}

    def _write_scale(self, rt: ResourceType, ns: str | None, name: str, existing: JSON, scale: Any,
                     dry_run: bool) -> JSON:
        if not isinstance(scale, dict):
            raise _bad_request("the body of the request is not a Scale object")
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != existing["metadata"].get("resourceVersion"):
            raise _conflict(rt, name)
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise _invalid(rt, name, f"spec.replicas: Invalid value: {replicas!r}: must be greater than or equal "
                                     f"to 0")
        new = copy.deepcopy(existing)
        new.setdefault("spec", {})["replicas"] = replicas
        result = self._update(rt, ns, name, existing, new, subresource=None, dry_run=dry_run, require_rv=False)
        return self._scale_of(rt, result)

    # ---------------------------------------------------------------- HTTP

    def _route(self, path: str) -> tuple[str, Any]:
        """Classify a request path: ("discovery", doc) or ("resource", (rt, ns, name, subresource, legacy_watch))."""
        segs = [s for s in path.split("/") if s]
        if segs == ["version"]:
            return ("discovery", VERSION)
        if segs == ["api"]:
            return ("discovery", {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self._port}"}]})
        if segs == ["apis"]:
            return ("discovery", self._group_list_doc())
        not_served = ApiError(404, "NotFound", "the server could not find the requested resource")
        if len(segs) < 2 or segs[0] not in ("api", "apis"):
            raise not_served
        if len(segs) == 2 and segs[0] == "apis":
            doc = next((g for g in self._group_list_doc()["groups"] if g["name"] == segs[1]), None)
            if doc is None:
                raise not_served
            return ("discovery", {"kind": "APIGroup", "apiVersion": "v1", **doc})
        group, version, rest = ("", segs[1], segs[2:]) if segs[0] == "api" else (segs[1], segs[2], segs[3:])
        if not rest:
            doc = self._resource_list_doc(group, version)
            if doc is None:
                raise not_served
            return ("discovery", doc)
        legacy_watch = rest[0] == "watch"
        if legacy_watch:
            rest = rest[1:]
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            cand = self._registry.get((group, version, rest[2]))
            if cand is not None and cand.namespaced:
                ns, rest = rest[1], rest[2:]
        rt = self._registry.get((group, version, rest[0])) if rest else None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if rt is None or len(rest) > 3 or (rt.namespaced and ns is None and name is not None) or (
                sub is not None and not ((sub == "status" and rt.status) or (sub == "scale" and rt.scale))):
            raise not_served
        return ("resource", (rt, ns, name, sub, legacy_watch))

    @staticmethod
    def _verb(method: str, name: str | None, sub: str | None, query: dict[str, str], legacy_watch: bool) -> str | None:
        if method == "GET" and sub is None and (legacy_watch or _query_bool(query.get("watch"))):
            return "watch"
        if name is None:
            return {"GET": "list", "POST": "create", "DELETE": "deletecollection"}.get(method)
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch"}
        return verbs.get(method) if sub is not None else {**verbs, "DELETE": "delete"}.get(method)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/_fake/"):
            return await self._handle_control(request)
        raw = await request.read()
        body: Any = None
        body_error = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as e:
                body_error = _bad_request(f"the request body is not valid JSON: {e}")
        query = {k: v for k, v in request.query.items()}
        ctype = request.headers.get("Content-Type")
        rec = RequestRecord(request.method, request.path, query, ctype.split(";")[0].strip() if ctype else None, body)
        route_error = None
        route: Any = None
        try:
            kind, route = self._route(request.path)
        except ApiError as e:
            kind, route_error = "error", e
        if kind == "resource":
            rt, ns, name, sub, legacy_watch = route
            rec.resource, rec.subresource, rec.name, rec.namespace = rt.plural, sub, name, ns
            rec.group, rec.version = rt.group, rt.version
            rec.verb = self._verb(request.method, name, sub, query, legacy_watch)
        self._counts[rec.stats_key] += 1
        if self.record_requests:
            self.requests.append(rec)
        warnings: list[str] = []
        token = REQUEST_WARNINGS.set(warnings)
        try:
            if route_error is not None:
                raise route_error
            if kind == "discovery":
                if request.method != "GET":
                    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                            "resource")
                resp: web.StreamResponse = _json_response(route)
            else:
                await self._apply_faults(rec, route[0])
                if rec.verb == "patch":  # the media type first, as handlers/patch.go PatchResource checks it
                    patch_media_type(None if route[3] == "scale" else route[0], rec.content_type)
                if body_error is not None:
                    raise body_error
                resp = await self._serve(request, rec, route, body)
        except ApiError as e:
            resp = e.response()
        finally:
            REQUEST_WARNINGS.reset(token)
        if warnings and not resp.prepared:  # the admission webhooks' warnings, refused requests' too, as kubectl sees
            for header in warning_headers(warnings):
                resp.headers.add("Warning", header)
        rec.status = resp.status
        return resp

    async def _apply_faults(self, rec: RequestRecord, rt: ResourceType) -> None:
        total = 0.0
        for f in self._faults:
            if f.kind == "delay" and f.matches(rec) and f.remaining != 0:
                total += f.seconds
                if f.remaining is not None:
                    f.remaining -= 1
        if total > 0:
            await asyncio.sleep(total)
        for f in self._faults:
            if f.kind == "forbid" and f.matches(rec):
                where = f' in the namespace "{rec.namespace}"' if rec.namespace else ""
                res = f"{rec.resource}/{rec.subresource}" if rec.subresource else rec.resource
                raise _forbidden(rt, rec.name, f'User "system:anonymous" cannot {rec.verb} resource "{res}" in API '
                                               f'group "{rt.group}"{where}')
        for f in self._faults:
            if f.kind == "fail" and f.matches(rec) and f.remaining != 0:
                if f.remaining is not None:
                    f.remaining -= 1
                headers, details = {}, _details(rt, rec.name)
                if f.retry_after is not None:
                    headers["Retry-After"] = str(f.retry_after)
                    details["retryAfterSeconds"] = f.retry_after
                raise ApiError(f.status, f.reason, f.message or f"injected failure: {f.status} {f.reason}",
                               details, headers)
        self._faults = [f for f in self._faults if f.remaining != 0]

    @staticmethod
    def _dry_run(request: web.Request, options: Any = None) -> bool:
        values = request.query.getall("dryRun", [])
        if isinstance(options, dict) and options.get("dryRun"):
            values = list(values) + list(options["dryRun"])
        for v in values:
            if v != "All":
                raise _bad_request(f'Invalid value: "{v}": supported values: "All"')
        return bool(values)

    async def _serve(self, request: web.Request, rec: RequestRecord, route: Any, body: Any) -> web.StreamResponse:
        rt, ns, name, sub, _ = route
        verb = rec.verb
        if verb is None:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if verb == "watch":
            return await self._serve_watch(request, rt, ns, name)
        if verb == "list":
            return _json_response(self._list(rt, ns, request.query))
        if verb == "create":
            obj = await self.admitted_create(rt, ns, body, self._dry_run(request))
            return _json_response(obj, 201)
        if verb == "deletecollection":
            dry = self._dry_run(request, body)
            doc = self._list(rt, ns, request.query)
            deleted = []
            for item in doc["items"]:
                key = (item["metadata"].get("namespace"), item["metadata"]["name"])
                existing = self._bucket(rt).get(key)
                if existing is not None:
                    deleted.append(list_item(rt, self._delete(rt, key[0], key[1], existing, dry)))
            doc["items"] = deleted
            doc["metadata"]["resourceVersion"] = str(self._rv)
            return _json_response(doc)
        existing = self._stored(rt, ns, name)
        if verb == "get":
            return _json_response(self._scale_of(rt, existing) if sub == "scale" else existing)
        if verb == "delete":
            dry = self._dry_run(request, body)
            return _json_response(self._delete(rt, ns, name, existing, dry, body if isinstance(body, dict) else None))
        dry = self._dry_run(request)
        if sub == "scale":
            old_scale = self._scale_of(rt, existing)
            if verb == "update":
                new_scale = body
            else:
                new_scale = apply_patch(None, old_scale, rec.content_type, body)
                if (new_scale.get("metadata") or {}).get("resourceVersion") == old_scale["metadata"]["resourceVersion"]:
                    new_scale["metadata"].pop("resourceVersion")
            if self.admission is not None and self.admission.handles(rt, "scale", "UPDATE") and \
                    isinstance(new_scale, dict):
                await self.admission.validate("UPDATE", rt, ns, {**old_scale, **new_scale}, old_scale, dry,
                                              sub="scale", ns_labels=self.namespace_labels(ns))
                existing = self._stored(rt, ns, name)
            return _json_response(self._write_scale(rt, ns, name, existing, new_scale, dry))
        if verb == "update":
            new = self._check_body(rt, body)
        else:
            new = apply_patch(rt, existing, rec.content_type, body)
            if not isinstance(new.get("metadata"), dict):
                new["metadata"] = {}
        if sub is None:
            result = await self.admitted_update(rt, ns, name, new, dry, require_rv=verb == "update")
        else:
            result = self._update(rt, ns, name, existing, new, subresource=sub, dry_run=dry, require_rv=False)
        return _json_response(result)

    def _list(self, rt: ResourceType, ns: str | None, query: Any) -> JSON:
        # The matching objects in (namespace, name) order, computed once per collection state and selector: the pages
        # of one list (a 20,000-object list is 200 pages of 100) reuse it instead of sorting and filtering the whole
        # collection for each page, which made the fake API the busiest process of a benchmark at scale.
        memo_key = (rt.key, ns, query.get("labelSelector"), query.get("fieldSelector"))
        memo = self._list_memo.get(memo_key)
        if memo is not None and memo[0] == self._rv and memo[1] == len(self._bucket(rt)):
            items = memo[2]
        else:
            selection = Selection.of(ns, query)
            items = [obj for _, obj in self._sorted(rt) if selection.matches(obj)]
            if len(self._list_memo) > 64:
                self._list_memo.clear()
            self._list_memo[memo_key] = (self._rv, len(self._bucket(rt)), items)
        meta: JSON = {"resourceVersion": str(self._rv)}
        cont = query.get("continue")
        if cont:
            try:
                start = json.loads(base64.urlsafe_b64decode(cont.encode()))
                items = items[int(start):]
            except (ValueError, TypeError, binascii.Error):
                raise _bad_request("invalid continue token") from None
        else:
            start = 0
        try:
            n = int(query.get("limit") or 0)
        except ValueError:
            raise _bad_request(f"invalid limit: {query.get('limit')!r}") from None
        if n > 0 and len(items) > n:
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(int(start) + n).encode()).decode()
            meta["remainingItemCount"] = len(items) - n
            items = items[:n]
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta,
                "items": [list_item(rt, obj) for obj in items]}

    async def _serve_watch(self, request: web.Request, rt: ResourceType, ns: str | None,
                           name: str | None) -> web.StreamResponse:
        q: Mapping[str, str] = request.query
        if name is not None:  # legacy /watch/namespaces/{ns}/{plural}/{name}
            q = {**q, "fieldSelector": ",".join(filter(None, (q.get("fieldSelector"), f"metadata.name={name}")))}
        timeout = None
        if q.get("timeoutSeconds"):
            try:
                timeout = float(q["timeoutSeconds"])
            except ValueError:
                raise _bad_request(f"invalid timeoutSeconds: {q['timeoutSeconds']!r}") from None
        watcher = _Watcher(rt, Selection.of(ns, q), _query_bool(q.get("allowWatchBookmarks")))
        # Snapshot and registration happen with no await in between, so no event can fall in the gap.
        initial, error = self._watch_start(watcher, q.get("resourceVersion") or "",
                                           _query_bool(q.get("sendInitialEvents")))
        if error is None:
            self._watchers.add(watcher)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if error is not None:
                await resp.write(_dumps({"type": "ERROR", "object": error}) + b"\n")
                await resp.write_eof()
                return resp
            if initial:
                await resp.write(b"".join(_dumps({"type": t, "object": o}) + b"\n" for t, o in initial))
            if await self._stream_watch(request, resp, watcher, timeout):
                await resp.write_eof()
        except ConnectionError:  # the client went away
            pass
        finally:
            self._watchers.discard(watcher)
        return resp

    def _watch_start(self, watcher: _Watcher, rv_param: str,
                     send_initial: bool) -> tuple[list[tuple[str, JSON]], JSON | None]:
        """``(initial events, error Status)`` of a new watch: the stored objects as ADDED (from ``""``/``"0"`` or
        with ``sendInitialEvents``, then the initial-events-end BOOKMARK), else the history after ``rv_param``
        (a 410 Expired Status when it is compacted)."""
        initial: list[tuple[str, JSON]] = []
        rt = watcher.rt
        if send_initial or rv_param in ("", "0"):
            for _, obj in sorted(self._bucket(rt).items(), key=lambda kv: int(kv[1]["metadata"]["resourceVersion"])):
                if watcher.matches(obj):
                    initial.append(("ADDED", obj))
            if send_initial and watcher.bookmarks:
                initial.append(("BOOKMARK", self._bookmark(rt, initial_end=True)))
            return initial, None
        try:
            since = int(rv_param)
        except ValueError:
            raise _bad_request(f'Invalid value: "{rv_param}": resourceVersion must be an integer') from None
        if since < self._compacted_rv:
            return [], status_object(410, "Expired", f"too old resource version: {since} ({self._compacted_rv})")
        for ev in self._history:
            if ev.rv > since:
                seen = watcher.translate(ev)
                if seen is not None:
                    initial.append(seen)
        return initial, None

    async def _stream_watch(self, request: web.Request, resp: web.StreamResponse, watcher: _Watcher,
                            timeout: float | None) -> bool:
        """Write ``watcher``'s events (and periodic BOOKMARKs) until ``timeout`` seconds pass or the stream is
        closed. Returns False when it was aborted (the connection is gone), True when the response may end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        while True:
            wait = None if deadline is None else deadline - loop.time()
            if wait is not None and wait <= 0:
                return True
            if watcher.bookmarks and self.bookmark_interval:
                wait = self.bookmark_interval if wait is None else min(wait, self.bookmark_interval)
            try:
                item = await asyncio.wait_for(watcher.queue.get(), wait)
            except asyncio.TimeoutError:
                if watcher.bookmarks and self.bookmark_interval and not watcher.holding and (
                        deadline is None or loop.time() < deadline):
                    await resp.write(_dumps({"type": "BOOKMARK", "object": self._bookmark(watcher.rt)}) + b"\n")
                continue
            if item is _CLOSE:
                return True
            if item is _ABORT:
                self._watchers.discard(watcher)
                if request.transport is not None:
                    request.transport.abort()
                return False
            chunk = [item]
            while not watcher.queue.empty():
                nxt = watcher.queue.get_nowait()
                if nxt is _CLOSE or nxt is _ABORT:
                    watcher.queue.put_nowait(nxt)
                    break
                chunk.append(nxt)
            await resp.write(b"".join(_dumps({"type": t, "object": o}) + b"\n" for t, o in chunk))

    # ---------------------------------------------------------------- discovery documents

    def _group_list_doc(self) -> JSON:
        groups: dict[str, dict[str, None]] = {}  # each group's versions, in the order registered
        for rt in self._registry.values():
            if rt.group:
                groups.setdefault(rt.group, {})[rt.version] = None
        docs = []
        for g, versions in groups.items():
            vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
            docs.append({"name": g, "versions": vs, "preferredVersion": vs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": docs}

    def _resource_list_doc(self, group: str, version: str) -> JSON | None:
        rts = [rt for rt in self._registry.values() if rt.group == group and rt.version == version]
        if not rts:
            return None
        resources = []
        for rt in rts:
            verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            resources.append({"name": rt.plural, "singularName": rt.kind.lower(), "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": verbs})
            short = SHORT_NAMES.get((rt.group, rt.plural))
            if short:  # omitted when empty, as kube-apiserver's APIResource (omitempty)
                resources[-1]["shortNames"] = list(short)
            scale = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
            for sub, kind in (("status", {"kind": rt.kind}), ("scale", scale)):
                if getattr(rt, sub):
                    resources.append({"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                      **kind, "verbs": ["get", "patch", "update"]})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    # ---------------------------------------------------------------- control endpoints (/_fake/...)

    async def _handle_control(self, request: web.Request) -> web.StreamResponse:
        """What a benchmark's process reaches over HTTP: ``GET /_fake/stats``, ``POST /_fake/reset-stats``,
        ``POST /_fake/compact``, ``POST /_fake/drop-watches`` (``?abrupt=1``), ``POST /_fake/put`` (a JSON list of
        objects, each stored as by ``put``: bulk preloading). Not logged or counted."""
        op = f"{request.method} {request.path[len('/_fake/'):]}"
        try:
            if op == "GET stats":
                return _json_response(self.stats())
            if op in ("POST reset-stats", "POST compact"):
                (self.reset_stats if op == "POST reset-stats" else self.compact)()
            elif op == "POST drop-watches":
                await self.drop_watches(abrupt=_query_bool(request.query.get("abrupt")))
            elif op == "POST put":
                objs = await request.json()
                if not isinstance(objs, list):
                    raise TypeError("put takes a JSON list of objects")
                for obj in objs:
                    self.put(obj)
            else:
                return _json_response({"ok": False, "error": f"unknown control endpoint {op}"}, 404)
            return _json_response({"ok": True})
        except (TypeError, ValueError, KeyError) as e:
            return _json_response({"ok": False, "error": repr(e)}, 400)
