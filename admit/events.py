"""Kubernetes Events for what the PodGroup controller does, so ``kubectl describe <workload>`` shows it.

API choice: ``events.k8s.io/v1`` (GA since Kubernetes 1.19), the API client-go's current recorder
(``k8s.io/client-go/tools/events``) and kube-scheduler write. It is the same stored object as core ``v1`` Event
(kube-apiserver converts ``regarding`` <-> ``involvedObject``, ``note`` <-> ``message``), so ``kubectl describe`` and
``kubectl get events`` show it; and its required fields say who acted: ``reportingController``
(``admit.dev/podgroup-controller``), ``reportingInstance`` (the replica's identity) and ``action``. The chart's
RBAC grants ``create`` and ``patch`` on ``events`` in both groups.

Shape (Kubernetes API reference "Event v1 events.k8s.io"): ``metadata.name`` ``<object>.<16 hex>`` in the namespace of
the ``regarding`` object; ``eventTime`` MicroTime; ``type`` Normal or Warning; ``reason`` (UpperCamelCase, at most
128 characters); ``note`` (at most 1 kB); ``regarding`` and ``related`` object references.

Repeats: the same (object uid, reason, note) again within 6 minutes patches the first Event's ``series``
(``count``, ``lastObservedTime``) instead of creating another, as client-go's ``EventSeries`` does.

Recording never blocks or fails the caller: events go through a bounded queue to one background task; a full
queue drops events (logged once), and API errors are logged once per reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable

from .kube import KubeError, namespace_terminating
from .leader import micro_time
from .watchcache import KubeRaw, Resource

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
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v}


@dataclass(slots=True)
class _Pending:
    regarding: dict[str, Any]
    related: dict[str, Any] | None
    type: str
    reason: str
    action: str
    note: str


class EventRecorder:
    """Queue Events and write them in the background.

    Args:
        api: REST client.
        instance: ``reportingInstance`` (the replica's identity).
        allowed: called before each write; the event is dropped when it returns False (a replica that lost the
            leader Lease writes nothing).
        queue_size: events waiting at most; more are dropped.
    """

    def __init__(self, api: KubeRaw, instance: str, allowed: Callable[[], bool] = lambda: True,
                 queue_size: int = 1000, timeout: float = 5.0) -> None:
        self.api = api
        self.instance = instance[:128]
        self.allowed = allowed
        self.timeout = timeout
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task | None = None
        self._series: dict[tuple[str, str, str], tuple[str, str, int, float]] = {}
        self._reported: set[str] = set()
        #: Events written (created or series-patched), for tests.
        self.written = 0

    def record(self, regarding: dict[str, Any], type_: str, reason: str, action: str, note: str,
               related: dict[str, Any] | None = None) -> None:
        """Queue one Event about ``regarding`` (a stored object: needs metadata.name/namespace/uid). Never blocks."""
        if self._task is None:
            self.start()
        try:
            self._queue.put_nowait(_Pending(object_reference(regarding), object_reference(related) if related else None,
                                            type_, reason[:128], action[:128], note[:MAX_NOTE]))
        except asyncio.QueueFull:
            self._once("full", f"event queue full ({self._queue.maxsize}); dropping events such as {reason}: {note}")

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
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.warning("%s", message)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if self.allowed():
                    await self._write(item)
            except KubeError as e:
                if namespace_terminating(e):  # the Event's namespace is being deleted, its object with it
                    log.debug("Event %s not recorded: %s", item.reason, e.message)
                    continue
                self._once(f"{e.status}:{item.reason}", f"cannot record Event {item.reason} on "
                           f"{item.regarding.get('kind')} {item.regarding.get('namespace')}/"
                           f"{item.regarding.get('name')}: {e.message}")
            except Exception:  # noqa: BLE001 - the recorder must survive anything
                log.exception("recording Event %s failed", item.reason)
            finally:
                self._queue.task_done()

    async def _write(self, item: _Pending) -> None:
        ns = item.regarding.get("namespace") or "default"
        key = (str(item.regarding.get("uid") or item.regarding.get("name")), item.reason, item.note)
        now_mono = time.monotonic()
        for k in [k for k, v in self._series.items() if now_mono - v[3] > SERIES_WINDOW]:
            del self._series[k]
        prior = self._series.get(key)
        now = micro_time()
        if prior is not None:
            ev_ns, name, count, _ = prior
            patch = {"series": {"count": count + 1, "lastObservedTime": now}}
            try:
                await self.api.request("PATCH", EVENTS.path(ev_ns, name), body=patch,
                                       content_type="application/merge-patch+json", timeout=self.timeout)
                self._series[key] = (ev_ns, name, count + 1, prior[3])
                self.written += 1
                return
            except KubeError as e:
                if e.status != 404:
                    raise
                del self._series[key]  # the Event expired (TTL 1 h): create a new one
        name = f"{item.regarding.get('name') or 'object'}"[:200] + "." + secrets.token_hex(8)
        body: dict[str, Any] = {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {"name": name, "namespace": ns},
            "eventTime": now,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": item.action,
            "reason": item.reason,
            "note": item.note,
            "type": item.type,
            "regarding": item.regarding,
        }
        if item.related:
            body["related"] = item.related
        await self.api.request("POST", EVENTS.path(ns), body=body, timeout=self.timeout)
        self._series[key] = (ns, name, 1, now_mono)
        self.written += 1
