"""Leader election with a ``coordination.k8s.io/v1`` Lease, following client-go ``tools/leaderelection``.

Every ``admit serve`` replica serves the webhooks and keeps its caches warm; exactly one (the Lease holder) runs the
gang controllers' writes. The Lease ``spec``: ``holderIdentity``, ``leaseDurationSeconds`` (int),
``acquireTime``/``renewTime`` (``MicroTime``, six fractional digits), ``leaseTransitions``. As client-go's
``LeaderElector.tryAcquireOrRenew``:

- **acquire**: GET the Lease; 404 -> create it. A held Lease may be taken once the ``leaseDurationSeconds`` its
  holder wrote (``isLeaseValid``; else this candidate's own ``lease_duration``) have passed since this candidate
  last saw the record change (``observedTime``), measured on its own monotonic clock, never against ``renewTime``
  (another machine's clock): tolerant to clock skew (``leaderelection/doc.go``).
- **optimistic concurrency**: every write is a PUT with the ``resourceVersion`` just read; 409 means another
  candidate wrote first.
- **renew**: every ``retry_period``; after ``renew_deadline`` seconds without success the leader stops leading
  (``on_stopped_leading``), before any other candidate may take over (``renew_deadline < lease_duration``);
  callers check :meth:`LeaderElector.is_leader` right before each write.
- **release** (``ReleaseOnCancel``): on :meth:`stop` a leader writes an empty holder, so another takes over at once.
- ``acquireTime`` changes and ``leaseTransitions`` grows only when the holder changes.

Defaults are client-go's: lease 15 s, renew deadline 10 s, retry 2 s. Not ``kubernetes_asyncio.leaderelection``,
which writes local naive timestamps, never releases, and logs a stack trace for every lost race.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from ..eventloop import cancel
from ..observability import metrics
from ..kube.client import KubeError
from ..kube.watchcache import KubeRaw, Resource

__all__ = ["LeaderElector", "NotLeader", "LEASES", "default_identity", "micro_time"]

log = logging.getLogger("admit.leader")

LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
Callback = Callable[[], "Awaitable[None] | None"]


class NotLeader(Exception):
    """The Lease is no longer held: write nothing (raised by a controller's check before each write)."""


def micro_time(when: datetime | None = None) -> str:
    """A ``metav1.MicroTime`` string in UTC: ``2024-05-01T10:00:00.123456Z`` (exactly six fractional digits)."""
    when = when or datetime.now(timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """``$POD_NAME`` (else the hostname) plus ``_`` and a random suffix, unique per process (as controller-runtime's
    ``hostname_uuid``): a restarted process never believes it already holds its predecessor's Lease."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "admit"
    return f"{base}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """Campaign for one Lease, hold it while alive, give it back on stop.

    Args:
        api: REST client.
        namespace / name: the Lease.
        identity: this candidate's ``holderIdentity``.
        lease_duration / renew_deadline / retry_period: seconds (client-go defaults 15 / 10 / 2); must satisfy
            ``lease_duration > renew_deadline > retry_period``.
        on_started_leading / on_stopped_leading: called (function or coroutine function) when this candidate
            becomes leader and when it stops being leader (lost, or on :meth:`stop`).
        clock: monotonic seconds (tests may inject one).
    """

    def __init__(self, api: KubeRaw, namespace: str, name: str, identity: str, *, lease_duration: float = 15.0,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0 (client-go leaderelection)")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.clock = clock
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = 0.0
        self._renewed_at: float | None = None  # monotonic time of our last successful acquire/renew
        self._leading = False
        self._task: asyncio.Task | None = None
        self._reported: str | None = None
        #: Holder seen in the last read of the Lease ("" when released, None before the first read).
        self.holder: str | None = None
        #: Times this candidate became leader.
        self.terms = 0

    # ------------------------------------------------------------------ state

    def is_leader(self) -> bool:
        """True while this candidate holds the Lease and renewed it less than ``renew_deadline`` seconds ago."""
        return (self._leading and self._renewed_at is not None
                and self.clock() - self._renewed_at < self.renew_deadline)

    @property
    def path(self) -> str:
        return LEASES.path(self.namespace, self.name)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "LeaderElector":
        """Campaign in the background (returns at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"leader election {self.namespace}/{self.name}")
        return self

    async def stop(self, release: bool = True) -> None:
        """Stop campaigning; a leader stops leading and (``release``) gives the Lease back. Idempotent."""
        task, self._task = self._task, None
        await cancel([task])
        if self._leading:
            await self._stop_leading("stopping")
            if release:
                await self._release()

    # ------------------------------------------------------------------ one attempt

    def _spec(self, now: str, acquire_time: str, transitions: int, holder: str | None = None,
              duration: int | None = None) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity if holder is None else holder,
            "leaseDurationSeconds": duration if duration is not None else max(1, round(self.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _report(self, message: str, level: int = logging.INFO) -> None:
        if message != self._reported:
            self._reported = message
            log.log(level, "%s", message)

    async def try_acquire_or_renew(self) -> bool:
        """One client-go ``tryAcquireOrRenew``: True when this candidate holds the Lease afterwards. Never raises for
        API errors (logged once, they count as a failed attempt)."""
        now = micro_time()
        try:
            lease = await self.api.request("GET", self.path, timeout=self.renew_deadline)
        except KubeError as e:
            if e.status != 404:
                self._report(f"Lease {self.namespace}/{self.name}: cannot read it: {e.message}", logging.WARNING)
                return False
            body = {
                "apiVersion": LEASES.api_version, "kind": LEASES.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0),
            }
            return await self._write("POST", LEASES.path(self.namespace), body, "create")
        spec = spec_v if isinstance(spec_v := lease.get("spec"), dict) else {}
        self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity:
            duration = spec.get("leaseDurationSeconds")
            valid_for = float(duration) if isinstance(duration, int) and not isinstance(duration, bool) and \
                duration > 0 else self.lease_duration
            if self.clock() - self._observed_time < valid_for:
                self._report(
                    f"Lease {self.namespace}/{self.name} is held by {holder!r}; this replica ({self.identity}) waits "
                    f"until it goes {valid_for:g}s without renewal"
                )
                return False
            self._report(
                f"Lease {self.namespace}/{self.name}: holder {holder!r} has not renewed for {valid_for:g}s; "
                f"{self.identity} takes over", logging.WARNING,
            )
        transitions = spec.get("leaseTransitions")
        transitions = transitions if isinstance(transitions, int) and transitions >= 0 else 0
        if holder == self.identity:
            acquire_time = spec.get("acquireTime") or now
        else:
            acquire_time = now
            transitions += 1
        updated = dict(lease, metadata=dict(lease.get("metadata") or {}),
                       spec=dict(spec, **self._spec(now, acquire_time, transitions)))
        return await self._write("PUT", self.path, updated, "update")

    async def _write(self, verb: str, path: str, body: dict[str, Any], what: str) -> bool:
        """Create (``POST``) or update (``PUT``) the Lease; False when the API refuses (409: another candidate
        wrote first, logged at INFO)."""
        try:
            stored = await self.api.request(verb, path, body=body, timeout=self.renew_deadline)
        except KubeError as e:
            level = logging.INFO if e.status == 409 else logging.WARNING
            self._report(f"Lease {self.namespace}/{self.name}: cannot {what} it: {e.message}", level)
            return False
        self._observe(stored)
        self._renewed_at = self.clock()
        return True

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = spec_v if isinstance(spec_v := lease.get("spec"), dict) else {}
        if spec != self._observed_spec:
            self._observed_spec = dict(spec)
            self._observed_time = self.clock()
        self.holder = spec.get("holderIdentity") or ""

    # ------------------------------------------------------------------ loop

    async def _call(self, callback: Callback | None) -> None:
        if callback is None:
            return
        try:
            result = callback()
            if inspect.isawaitable(result):
                await result
        except Exception:  # noqa: BLE001 - a callback bug must not end the election
            log.exception("leader election callback failed")

    async def _stop_leading(self, why: str) -> None:
        self._leading = False
        metrics.leader(False)
        self._renewed_at = None
        log.log(logging.INFO if why == "stopping" else logging.WARNING,
                "%s stopped leading Lease %s/%s (%s); it writes nothing more", self.identity, self.namespace,
                self.name, why)
        await self._call(self.on_stopped_leading)

    async def _run(self) -> None:
        while True:
            # Follower: try every retry_period until we hold the Lease.
            while not await self.try_acquire_or_renew():
                await asyncio.sleep(self.retry_period)
            self._leading = True
            self.terms += 1
            self._reported = None
            log.info("%s is now the leader (Lease %s/%s)", self.identity, self.namespace, self.name)
            metrics.leader(True)
            await self._call(self.on_started_leading)
            # Leader: renew every retry_period; give up after renew_deadline without success.
            while True:
                await asyncio.sleep(self.retry_period)
                deadline = self.clock() + self.renew_deadline
                renewed = False
                while self.clock() < deadline:
                    try:
                        async with asyncio.timeout(max(0.001, deadline - self.clock())):
                            renewed = await self.try_acquire_or_renew()
                    except TimeoutError:
                        renewed = False
                    if renewed or self.holder not in (None, "", self.identity):
                        break  # renewed, or someone else holds it now: stop trying
                    await asyncio.sleep(min(self.retry_period, max(0.0, deadline - self.clock())))
                if not renewed:
                    await self._stop_leading(
                        f"Lease now held by {self.holder!r}" if self.holder not in (None, "", self.identity)
                        else f"could not renew within {self.renew_deadline:g}s"
                    )
                    break

    async def _release(self) -> None:
        """Give the Lease back: empty holder, leaseDurationSeconds 1 (client-go ``release``)."""
        try:
            lease = await self.api.request("GET", self.path, timeout=self.retry_period * 2)
            spec = spec_v if isinstance(spec_v := lease.get("spec"), dict) else {}
            if (spec.get("holderIdentity") or "") != self.identity:
                return
            now = micro_time()
            transitions = count if isinstance(count := spec.get("leaseTransitions"), int) else 0
            body = dict(lease, spec=dict(spec, **self._spec(now, now, transitions, holder="", duration=1)))
            await self.api.request("PUT", self.path, body=body, timeout=self.retry_period * 2)
            log.info("%s released Lease %s/%s", self.identity, self.namespace, self.name)
        except (KubeError, TimeoutError) as e:
            log.warning("%s could not release Lease %s/%s (%s); another replica takes over after %gs",
                        self.identity, self.namespace, self.name, getattr(e, "message", e), self.lease_duration)
