"""The guards the gang controller (``gangs.GangController``, one per backend) puts around its writes:

- **read live before adopt or patch**: the cache's watch may lag (a deletion not seen yet, an update in flight), so
  the workload is read live first, as kube-controller-manager's ControllerRefManager does before adopting
  (``RecheckDeletionTimestamp``, uid match), and the write is made only for the stored workload
  (:meth:`WriteGuards.live_claim`);
- **back off from a write something keeps undoing** (the garbage collector deleting an object whose owner is gone,
  another writer; without it: 351 creates, 351 GC deletes and 351 Events in 10 s): :meth:`WriteGuards.repeating`;
- **adopt without ``blockOwnerDeletion`` where the API refuses it** (OwnerReferencesPermissionEnforcement without
  ``update`` on ``<workloads>/finalizers``, e.g. OpenShift): the garbage collector still deletes the objects with
  the workload (:meth:`WriteGuards.blocked_owner_deletion`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Iterable

from ..backends.action import Action
from ..config import Config
from ..kube.client import KubeError
from ..kube.watchcache import KubeRaw, Resource
from .claims import Claim, claim_of
from .keyloop import Key, KeyLoop

__all__ = ["WriteGuards"]

log = logging.getLogger("admit.controller")


class WriteGuards:
    """The guards of one gang controller's writes (see the module docstring).

    Args:
        config / settings: the controller's (``settings.repeat_window``, ``settings.retry_backoff``, seconds).
        api: the REST client of the live reads.
        loop: the controller's key loop (its reports, queue and per-key backoff).
        workloads: the controller's workload caches (their resources: where a claim's workload is read live).
        backend: the backend whose claims the controller keeps (a live read computes the claim for it).
        subject: how messages name a key (``"PodGroup team/web"``).
        objects: how the adoption warning names the objects (``"PodGroups"``).

    Attributes:
        repeats: per key, ``(signature of the last write, how often it repeated, when the run began, when the next may
            be made)``.
        stale_skips: writes not made because a live read showed the cache behind (tests, debugging).
    """

    def __init__(self, config: Config, settings: Any, api: KubeRaw, loop: KeyLoop, workloads: Iterable[Resource],
                 backend: str, subject: Callable[[Key], str], objects: str) -> None:
        self.config, self.settings, self.api, self.loop = config, settings, api, loop
        self._workloads, self._backend, self._subject, self._objects = workloads, backend, subject, objects
        self.repeats: dict[Key, tuple[str, int, float, float]] = {}
        self._no_block_owner_deletion: set[str] = set()
        self.stale_skips = 0

    def reset(self) -> None:
        """Forget the leader-only bookkeeping (the lease was lost)."""
        self.repeats.clear()

    # ------------------------------------------------------------------ read live before adopt or patch

    async def live_claim(self, key: Key, claim: Claim) -> Claim | None:
        """The claim as the stored workload makes it now: ``claim`` itself when the cache is current, a fresher
        claim when the cache is behind, or ``None`` when no write must be made for it (the workload is gone, was
        re-created under another uid, is being deleted, or no longer claims ``key``); then the key is looked at again
        when its watch catches up (and after a back-off, in case it never does).

        Raises:
            kube.KubeError: the read failed (not 404).
        """
        resource = self._resource_of(claim)
        if resource is None or claim.plan is None or claim.plan.shared:
            return claim
        try:
            obj = await self.api.request("GET", resource.path(claim.namespace, claim.name))
        except KubeError as e:
            if e.status != 404:
                raise
            obj = None
        meta = (obj or {}).get("metadata") or {}
        if obj is None:
            why = "is gone"
        elif str(meta.get("uid") or "") != claim.uid:
            why = "was re-created under another uid"
        elif meta.get("deletionTimestamp"):
            why = "is being deleted"
        elif meta.get("resourceVersion") == claim.meta.get("resourceVersion"):
            return claim
        else:
            fresh = claim_of(obj, resource, self.config, backend=self._backend)
            if fresh is not None and fresh.key == key:
                return fresh
            why = "no longer claims it"
        self.stale_skips += 1
        self.loop.report(key, "stale", f"{self._subject(key)}: not writing for {claim.ref}, which {why} on the server "
                                        "(the watch is behind); looking again when it catches up", logging.INFO)
        self.loop.queue.add_after(key, self.loop.backoff(key))
        return None

    def _resource_of(self, claim: Claim) -> Resource | None:
        api_version, kind = claim.workload.get("apiVersion"), claim.kind
        return next((r for r in self._workloads if r.api_version == api_version and r.kind == kind), None)

    # ------------------------------------------------------------------ back off from a write that is undone

    @staticmethod
    def _signature(action: Action) -> str:
        return json.dumps([action.kind, action.object_kind, action.body, action.ops,
                           action.claim.uid if action.claim else None], sort_keys=True, default=str)

    def repeating(self, key: Key, action: Action) -> bool:
        """True (and the key queued again for later) when this write would repeat too soon the same write that already
        succeeded for ``key`` twice, less than ``repeat_window`` seconds apart: something keeps undoing it. From the
        third time on, the same write waits ``retry_backoff`` doubling (0.5 s to 60 s) after the last."""
        prior = self.repeats.get(key)
        if prior is None or prior[1] < 2:
            return False
        now = time.monotonic()
        if prior[0] != self._signature(action) or now - prior[2] > self.settings.repeat_window or now >= prior[3]:
            return False
        self.loop.queue.add_after(key, prior[3] - now)
        return True

    def wrote(self, key: Key, action: Action) -> None:
        """Count a successful write for :meth:`repeating` (and say so once a run of the same write begins)."""
        signature = self._signature(action)
        now = time.monotonic()
        prior = self.repeats.get(key)
        if prior is None or prior[0] != signature or now - prior[2] > self.settings.repeat_window:
            self.repeats[key] = (signature, 1, now, now)
            return
        count = prior[1] + 1
        base, maximum = self.settings.retry_backoff
        delay = min(maximum, base * 2 ** (count - 2))
        self.repeats[key] = (signature, count, now, now + delay)
        if count >= 3:
            self.loop.report(key, "repeat", f"{self._subject(key)}: the same {action.kind} was needed {count} times; "
                                             f"something undoes it, so it is repeated with back-off (next after "
                                             f"{delay:.1f}s)")

    # ------------------------------------------------------------------ blockOwnerDeletion

    def strip_block_owner_deletion(self, action: Action) -> None:
        """Drop ``blockOwnerDeletion`` from the ownerReferences ``action`` writes, once the API refused it for the
        claim's kind (:meth:`blocked_owner_deletion`)."""
        claim = action.claim
        if claim is None or claim.kind not in self._no_block_owner_deletion:
            return
        refs = list((action.body or {}).get("metadata", {}).get("ownerReferences") or [])
        for op in action.ops:
            if op.get("path") == "/metadata/ownerReferences":
                refs.extend(op.get("value") or [])
        for ref in refs:
            ref.pop("blockOwnerDeletion", None)

    def blocked_owner_deletion(self, e: KubeError, claim: Claim) -> bool:
        """OwnerReferencesPermissionEnforcement (e.g. OpenShift) refuses ``blockOwnerDeletion`` without ``update`` on
        ``<workloads>/finalizers``: True (write again without it) the first time for the claim's kind, and say so."""
        if e.status in (403, 422) and "blockOwnerDeletion" in e.message and claim.kind not in \
                self._no_block_owner_deletion:
            self._no_block_owner_deletion.add(claim.kind)
            log.warning("%s: %s; adopting %s %s without blockOwnerDeletion (grant 'update' on the %s finalizers "
                        "subresource to keep it)", claim.ref, e.message, claim.kind, self._objects, claim.kind)
            return True
        return False
