"""Kubernetes Events for what the controller does, so ``kubectl describe <workload>`` shows it.

``events.k8s.io/v1`` (GA since 1.19), what client-go's current recorder (``tools/events``) and kube-scheduler write:
the same stored object as core ``v1`` Event (``regarding`` <-> ``involvedObject``, ``note`` <-> ``message``), with
required fields that say who acted: ``reportingController`` (``admit.dev/podgroup-controller``),
``reportingInstance`` (the replica's identity), ``action``. The chart grants ``create`` and ``patch`` on ``events``
in both groups. Shape (API reference "Event v1 events.k8s.io"): ``metadata.name`` ``<object>.<16 hex>`` in the
``regarding`` object's namespace; ``eventTime`` MicroTime; ``type`` Normal or Warning; ``reason`` (UpperCamelCase, at
most 128 characters); ``note`` (at most 1 kB); ``regarding`` and ``related`` object references.

Repeats and bursts, as client-go's recorders do:

- the same (object uid, reason, note) again within 6 minutes bumps the first Event's ``series`` (``count``,
  ``lastObservedTime``; client-go ``tools/events`` ``EventSeries``);
- ``EventCorrelator``'s rule (``tools/record/events_cache.go`` ``EventAggregatorByReasonFunc``: after 10 Events of
  one reason and type within 10 minutes, the next ones fold into one ``"(combined from similar events): "`` Event
  whose series counts them), keyed by the objects' kind and namespace, not their name: admit's bursts span many
  objects (a new leader adopting 20,000 PodGroups). The log keeps one line per object.

An Event waiting in the queue is written once, with the count reached when its turn comes (one write per distinct
Event); bookkeeping expires oldest first (amortised O(1)). Recording never blocks or fails the caller: one
background task drains a bounded queue; a full queue drops events (logged once), API errors are logged once per
reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ..eventloop import cancel
from ..kube.client import KubeError, namespace_terminating
from .leader import micro_time
from ..kube.watchcache import KubeRaw, Resource

__all__ = ["EventRecorder", "EVENTS", "object_reference", "REPORTING_CONTROLLER"]

log = logging.getLogger("admit.events")

EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
REPORTING_CONTROLLER = "admit.dev/podgroup-controller"
MAX_NOTE = 1024
SERIES_WINDOW = 360.0  # seconds: client-go events isomorphic window (6 minutes)


def object_reference(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``ObjectReference`` of a stored object: ``{apiVersion, kind, name, namespace, uid, resourceVersion}``
    (keys whose value is missing are left out)."""
    meta = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
           **{k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}}
    return {k: v for k, v in ref.items() if v}


AGGREGATE_MAX = 10  # client-go defaultAggregateMaxEvents
AGGREGATE_WINDOW = 600.0  # seconds: client-go defaultAggregateIntervalInSeconds
COMBINED_PREFIX = "(combined from similar events): "


@dataclass(slots=True)
class _Entry:
    """One Event as written (or about to be): what it says, how often it happened, and where it is stored."""

    regarding: dict[str, Any]
    related: dict[str, Any] | None
    type: str
    reason: str
    action: str
    note: str
    first_seen: float
    count: int = 1
    written: int = 0
    name: str | None = None
    namespace: str = ""
    pending: bool = False


class EventRecorder:
    """Queue Events and write them in the background (see the module docstring for repeats and bursts).

    Args:
        api: REST client.
        instance: ``reportingInstance`` (the replica's identity).
        allowed: called before each write; the event is dropped when it returns False (a replica that lost the
            leader Lease writes nothing).
        queue_size: distinct Events waiting at most; more are dropped (repeats of a waiting one never count).
        clock: monotonic seconds (tests may inject one).
    """

    def __init__(self, api: KubeRaw, instance: str, allowed: Callable[[], bool] = lambda: True,
                 queue_size: int = 1000, timeout: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.instance = instance[:128]
        self.allowed = allowed
        self.timeout = timeout
        self.clock = clock
        self._queue: asyncio.Queue[_Entry] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task | None = None
        self._series: dict[tuple[str, str, str], _Entry] = {}  # insertion order = first_seen order
        self._similar: dict[tuple[str, str, str, str], deque[float]] = {}
        self._combined: dict[tuple[str, str, str, str], _Entry] = {}
        self._reported: set[str] = set()
        #: Events written (created or series-patched), and dropped.
        self.written = 0
        self.dropped = 0

    def record(self, regarding: dict[str, Any], type_: str, reason: str, action: str, note: str,
               related: dict[str, Any] | None = None) -> None:
        """Note one Event about ``regarding`` (a stored object: needs metadata.name/namespace/uid). Never blocks;
        costs a few dict operations."""
        if self._task is None:
            self.start()
        now = self.clock()
        self._expire(now)
        ref = object_reference(regarding)
        reason, action, note = reason[:128], action[:128], note[:MAX_NOTE]
        key = (str(ref.get("uid") or ref.get("name")), reason, note)
        entry = self._series.get(key)
        if entry is None:
            similar_key = (str(ref.get("namespace") or ""), str(ref.get("kind") or ""), type_, reason)
            times = self._similar.setdefault(similar_key, deque())
            while times and now - times[0] > AGGREGATE_WINDOW:
                times.popleft()
            times.append(now)
            if len(times) > AGGREGATE_MAX:
                entry = self._combined.get(similar_key)
                if entry is None or now - entry.first_seen > AGGREGATE_WINDOW:
                    entry = _Entry(ref, None, type_, reason, action, (COMBINED_PREFIX + note)[:MAX_NOTE], now,
                                   count=0)
                    self._combined[similar_key] = entry
            else:
                entry = _Entry(ref, object_reference(related) if related else None, type_, reason, action, note,
                               now, count=0)
                self._series[key] = entry
        entry.count += 1
        if entry.pending:  # written once, with the count reached when its turn comes
            return
        entry.pending = True
        try:
            self._queue.put_nowait(entry)
        except asyncio.QueueFull:
            entry.pending = False
            self.dropped += 1
            self._once("full", f"event queue full ({self._queue.maxsize}); dropping events such as {reason}: {note}")

    def _expire(self, now: float) -> None:
        while self._series:
            key, entry = next(iter(self._series.items()))
            if now - entry.first_seen <= SERIES_WINDOW or entry.pending:
                break
            del self._series[key]
        if len(self._similar) > 4 * AGGREGATE_MAX and len(self._similar) > 1000:
            for k in [k for k, t in self._similar.items() if not t or now - t[-1] > AGGREGATE_WINDOW]:
                del self._similar[k]
            for k in [k for k, e in self._combined.items() if now - e.first_seen > AGGREGATE_WINDOW]:
                del self._combined[k]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event recorder")

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued event has been written or dropped (tests)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._queue.join()

    async def stop(self, timeout: float = 2.0) -> None:
        """Write what is queued (at most ``timeout`` seconds), then stop."""
        if self._task is None:
            return
        await self.flush(timeout)
        task, self._task = self._task, None
        await cancel([task])

    def _once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.warning("%s", message)

    async def _run(self) -> None:
        while True:
            entry = await self._queue.get()
            entry.pending = False
            try:
                if self.allowed():
                    await self._write(entry)
            except KubeError as e:
                if namespace_terminating(e):  # the Event's namespace is being deleted, its object with it
                    log.debug("Event %s not recorded: %s", entry.reason, e.message)
                    continue
                self._once(f"{e.status}:{entry.reason}", f"cannot record Event {entry.reason} on "
                           f"{entry.regarding.get('kind')} {entry.regarding.get('namespace')}/"
                           f"{entry.regarding.get('name')}: {e.message}")
            except Exception:  # noqa: BLE001 - the recorder must survive anything
                log.exception("recording Event %s failed", entry.reason)
            finally:
                self._queue.task_done()

    async def _write(self, entry: _Entry) -> None:
        """Create the Event (with its ``series`` when it already happened more than once), or patch its series."""
        count = entry.count
        if count <= entry.written:
            return
        now = micro_time()
        if entry.name is not None:
            patch = {"series": {"count": count, "lastObservedTime": now}}
            try:
                await self.api.request("PATCH", EVENTS.path(entry.namespace, entry.name), body=patch,
                                       content_type="application/merge-patch+json", timeout=self.timeout)
                entry.written = count
                self.written += 1
                return
            except KubeError as e:
                if e.status != 404:
                    raise
                entry.name = None  # the Event expired (TTL 1 h): create a new one
        ns = entry.regarding.get("namespace") or "default"
        name = f"{entry.regarding.get('name') or 'object'}"[:200] + "." + secrets.token_hex(8)
        body: dict[str, Any] = {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {"name": name, "namespace": ns},
            "eventTime": now,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": entry.action,
            "reason": entry.reason,
            "note": entry.note,
            "type": entry.type,
            "regarding": entry.regarding,
        }
        if entry.related:
            body["related"] = entry.related
        if count > 1:
            body["series"] = {"count": count, "lastObservedTime": now}
        await self.api.request("POST", EVENTS.path(ns), body=body, timeout=self.timeout)
        entry.name, entry.namespace, entry.written = name, ns, count
        self.written += 1
