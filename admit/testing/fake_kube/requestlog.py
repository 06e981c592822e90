"""The request log a test reads, the faults it injects, and the watch streams' events.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .objects import Selector, parse_field_selector, parse_label_selector
from .resources import JSON, ResourceType


@dataclass
class RequestRecord:
    """One API request as received. ``query`` maps each parameter to its (last) string value, ``body`` is the parsed
    JSON (or None), ``resource`` the plural (None for discovery), ``verb`` the Kubernetes verb (get, list, watch,
    create, update, patch, delete, deletecollection; None for discovery), ``status`` the HTTP status answered
    (set once answered; 200 for a watch stream), ``time`` the ``time.monotonic()`` of arrival."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any
    resource: str | None = None
    subresource: str | None = None
    name: str | None = None
    namespace: str | None = None
    group: str | None = None
    version: str | None = None
    verb: str | None = None
    status: int | None = None
    time: float = field(default_factory=time.monotonic)

    @property
    def stats_key(self) -> str:
        """``"POST podgroups"``, ``"PATCH deployments/scale"``, ``"GET /apis"`` for non-resource requests."""
        if self.resource is None:
            return f"{self.method} {self.path}"
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.method} {res}"


def _method_matches(spec: str, rec: RequestRecord) -> bool:
    return spec == "*" or spec.upper() == rec.method or (rec.verb is not None and spec.lower() == rec.verb)


def _plural_matches(spec: str, rec: RequestRecord) -> bool:
    plural, _, sub = spec.partition("/")
    return rec.resource is not None and (spec == "*" or (plural == rec.resource and sub in ("", rec.subresource)))


@dataclass
class _Fault:
    kind: str  # "fail" | "delay" | "forbid"
    method: str
    plural: str
    remaining: int | None
    name: str | None = None
    status: int = 500
    reason: str = "InternalError"
    message: str | None = None
    seconds: float = 0.0
    retry_after: int | None = None

    def matches(self, rec: RequestRecord) -> bool:
        return (_method_matches(self.method, rec) and _plural_matches(self.plural, rec)
                and (self.name is None or self.name == rec.name))


@dataclass
class _Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    rt_key: tuple[str, str, str]
    namespace: str | None
    obj: JSON
    old: JSON | None


_CLOSE = object()
_ABORT = object()


@dataclass
class Selection:
    """What a list or a watch selects: a namespace (None: all) and its query's label and field selectors."""

    namespace: str | None
    labels: Selector | None
    fields: Callable[[JSON], bool] | None

    @classmethod
    def of(cls, namespace: str | None, query: Any) -> "Selection":
        """Parse ``labelSelector`` and ``fieldSelector`` of ``query``; ``ApiError`` 400 for a bad one."""
        return cls(namespace, parse_label_selector(query.get("labelSelector")),
                   parse_field_selector(query.get("fieldSelector")))

    def matches(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels(meta.get("labels") or {}):
            return False
        return self.fields is None or self.fields(obj)


class _Watcher:
    def __init__(self, rt: ResourceType, selection: Selection, bookmarks: bool) -> None:
        self.rt = rt
        self.matches = selection.matches
        self.bookmarks = bookmarks
        self.queue: asyncio.Queue = asyncio.Queue()
        #: While True, events and bookmarks for this stream are kept back (a half-open connection, a lagging watch
        #: cache); ``held`` keeps them for ``release_watches``.
        self.holding = False
        self.held: list[tuple[str, JSON]] = []

    def deliver(self, item: tuple[str, JSON]) -> None:
        if self.holding:
            self.held.append(item)
        else:
            self.queue.put_nowait(item)

    def translate(self, ev: _Event) -> tuple[str, JSON] | None:
        """The event this watcher sees: like the watch cache, an update that makes an object start (stop) matching
        the selectors is delivered as ADDED (DELETED)."""
        if ev.rt_key != self.rt.key:
            return None
        if ev.type == "MODIFIED":
            now, before = self.matches(ev.obj), self.matches(ev.old)
            if now and before:
                return ("MODIFIED", ev.obj)
            if now:
                return ("ADDED", ev.obj)
            if before:
                return ("DELETED", ev.obj)
            return None
        return (ev.type, ev.obj) if self.matches(ev.obj) else None
