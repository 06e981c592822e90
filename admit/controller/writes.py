"""The guarded writes of one PodGroup key, the part of the PodGroup controller (``podgroups.Controller``) that runs
on the Lease holder's workers: decide (:func:`decide`, the one decision of every backend) on the cached PodGroup and claims,
read the workload live before a write that sets an owner, changes a spec or deletes, then create / patch / delete
with optimistic concurrency (``resourceVersion``, delete ``preconditions``), and slow down a write that something
keeps undoing (the guards every gang controller shares, ``guards.WriteGuards``). The rules are in ``podgroups``' module docstring; the state it reads (caches, indexes, the raw client,
settings, declared on :class:`KeyWrites`) is set up by ``podgroups.Controller``, whose key loop (``keyloop.KeyLoop``)
runs :meth:`KeyWrites._reconcile` for each key, retries what it raises and keeps the once-per-change reports.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from typing import Any

from ..backends.action import Action
from ..backends.gangobjects import decide_objects
from ..backends.registry import backend_of
from ..config import COSCHEDULING
from ..config import Config
from ..gang.resources import ResourceError, countable_min_resources, with_runtime_overhead
from ..kube.client import KubeError, namespace_terminating
from ..kube.watchcache import KubeRaw, Resource, WatchCache
from ..observability import metrics
from .claims import PODS, Claim, claim_of, pod_group_owner
from .events import EventRecorder
from .guards import WriteGuards
from .keyloop import KeyLoop
from .leader import LeaderElector, NotLeader
from .multiindex import MultiIndex
from .settings import ControllerSettings



log = logging.getLogger("admit.controller")

JSON = dict[str, Any]
GroupKey = tuple[str, str]  # (namespace, PodGroup name)


def _countable(claim: Claim, served: dict[str, str], overheads: dict[str, dict[str, str]] | None = None) -> Claim:
    """``claim`` with a plan whose minResources holds only what the scheduler can count (the same rule admission
    applies, ``validate.drop_uncountable``) and the pod overhead of its RuntimeClass (``validate.add_overhead``);
    the claim itself when nothing changes (the common case: no copy)."""
    plan = claim.plan
    if plan is None:
        return claim
    if plan.runtime_class and overheads:
        try:
            with_overhead, added = with_runtime_overhead(plan.min_resources, plan.runtime_class, plan.min_member,
                                                         overheads)
        except ResourceError:
            with_overhead, added = plan.min_resources, None  # admission refused the same quantity (and says why)
        if added:
            plan = dataclasses.replace(plan, min_resources=with_overhead)
            claim = dataclasses.replace(claim, plan=plan)
    if not plan.min_resources:
        return claim
    kept, left_out = countable_min_resources(plan.min_resources, served)
    if not left_out:
        return claim
    return dataclasses.replace(claim, plan=dataclasses.replace(plan, min_resources=kept))


def decide(key: GroupKey, pg: JSON | None, claims: list[Claim], config: Config, *, now: float,
           unclaimed_since: float | None, grace: float, ahead_since: float | None = None) -> Action:
    """The one thing to do for Coscheduling's PodGroup ``key`` (pure): the decision of every backend
    (``backends.gangobjects.decide_objects``, with the Coscheduling backend's hooks) for its one object, or
    ``Action("none")``. ``pg``: the PodGroup as last seen (managed or not), or ``None``; the rest as
    ``decide_objects`` takes them."""
    actions = decide_objects(backend_of(COSCHEDULING), key, {"PodGroup": pg}, claims, config, now=now,
                             unclaimed_since=unclaimed_since, grace=grace, ahead_since=ahead_since)
    return actions[0] if actions else Action("none")


WKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name) of a gang workload


class KeyWrites:
    """The one-key half of :class:`admit.controller.podgroups.Controller` (a mixin): what it reads and keeps is
    declared below and set up by the controller's ``__init__``; the key's reports and retries go through
    :attr:`loop` (``keyloop.KeyLoop``)."""

    # What the controller sets up (podgroups.Controller.__init__).
    config: Config
    settings: ControllerSettings
    api: KubeRaw
    pod_group_resource: Resource
    pod_groups: WatchCache
    other_pod_groups: WatchCache
    workloads: dict[Resource, WatchCache]
    elector: LeaderElector
    recorder: EventRecorder
    loop: KeyLoop
    dra_extended_resources: dict[str, str]
    runtime_overheads: dict[str, dict[str, str]]
    # The claim indexes (kept on every replica from the caches' events).
    _claims: dict[WKey, Claim]
    _by_group: MultiIndex[GroupKey, WKey]
    _by_identity: MultiIndex[tuple[str, str], WKey]
    # Leader-only bookkeeping (podgroups.Controller.__init__ says what each is).
    _unclaimed_since: dict[GroupKey, float]
    _ahead_since: dict[GroupKey, float]
    _kept_for_pods: dict[GroupKey, int]
    guards: WriteGuards
    reconciles: int
    actions: deque[tuple[str, GroupKey]]

    # ------------------------------------------------------------------ what one key's decision reads

    def _claims_for(self, key: GroupKey, pg: JSON | None) -> list[Claim]:
        """The claims on ``key``: the stored workloads whose plan names it, and those whose identity is the
        PodGroup's owner annotation (a workload whose annotations became invalid still protects its group)."""
        wkeys = set(self._by_group.get(key))
        owner = pod_group_owner(pg, self.config) if pg is not None else None
        if owner is not None:
            wkeys |= self._by_identity.get((key[0], owner))
        return [self._claims[w] for w in sorted(wkeys) if w in self._claims]

    def _pod_group(self, key: GroupKey) -> JSON | None:
        """The cached PodGroup ``key``, managed or not (``None``: neither cache has it)."""
        return self.pod_groups.get(*key) or self.other_pod_groups.get(*key)

    def _event(self, regarding: JSON, type_: str, reason: str, action: str, note: str,
               related: JSON | None = None) -> None:
        """Record an Event on ``regarding`` (a workload reference or a PodGroup) unless it has no uid."""
        if regarding.get("metadata", {}).get("uid"):
            self.recorder.record(regarding, type_, reason, action, note, related)

    # ------------------------------------------------------------------ one key

    def _check_leader(self) -> None:
        if not self.elector.is_leader():
            raise NotLeader()

    async def _reconcile(self, key: GroupKey, fetched: JSON | None = None, depth: int = 0,
                         live: Claim | None = None) -> None:
        self.reconciles += 1
        pg = fetched if fetched is not None else self._pod_group(key)
        claims = self._claims_for(key, pg)
        if live is not None:
            claims = [live if c.identity == live.identity and c.namespace == live.namespace else c for c in claims]
        claims = [_countable(c, self.dra_extended_resources, self.runtime_overheads) for c in claims]
        now = time.monotonic()
        action = decide(key, pg, claims, self.config, now=now, unclaimed_since=self._unclaimed_since.get(key),
                        grace=self.settings.orphan_grace_period, ahead_since=self._ahead_since.get(key))
        if action.unclaimed:
            self._unclaimed_since.setdefault(key, now)
        else:
            self._unclaimed_since.pop(key, None)
        if action.ahead:
            if self._ahead_since.setdefault(key, now) == now:
                log.info("%s", action.message)
        else:
            self._ahead_since.pop(key, None)
        if action.kind in ("create", "patch") and live is None and action.claim is not None:
            # Owner-setting and spec writes are decided from the cache; the workload's watch may lag (a deletion
            # not seen yet, an update in flight). Read it live first, as kube-controller-manager's
            # ControllerRefManager does before adopting (RecheckDeletionTimestamp, uid match).
            checked = await self.guards.live_claim(key, action.claim)
            if checked is None:
                return
            if checked is not action.claim:
                return await self._reconcile(key, fetched, depth, live=checked)
        if action.kind in ("create", "patch", "delete") and self.guards.repeating(key, action):
            return
        self.actions.append((action.kind, key))
        if pg is None and not claims:
            self.loop.forget(key)
            self._kept_for_pods.pop(key, None)
        current: set[str] = set()
        for other, message in action.others:
            current.add(f"other:{other.identity}")
            if self.loop.report(key, f"other:{other.identity}", message):
                self._event(other.workload, "Warning", "PodGroupNameTaken", "Reconcile", message)
        for c in claims:
            if c.problem:
                current.add(f"problem:{c.identity}")
                if self.loop.report(key, f"problem:{c.identity}", f"{c.ref}: {c.problem}"):
                    self._event(c.workload, "Warning", "GangBelowMinMember", "Reconcile", c.problem)
            if c.notice:
                current.add(f"notice:{c.identity}")
                if self.loop.report(key, f"notice:{c.identity}", f"{c.ref}: {c.notice}", level=logging.INFO):
                    self._event(c.workload, "Normal", "OperatorSetting", "Reconcile", c.notice)
        for topic in [t for t in self.loop.topics(key) if t.startswith(("other:", "problem:", "notice:"))]:
            if topic not in current:
                self.loop.resolved(key, topic)  # fixed: report it again if it comes back
        if action.kind not in ("conflict", "invalid", "foreign"):
            for topic in ("conflict", "invalid", "foreign"):
                self.loop.resolved(key, topic)
        handler = {
            "create": self._create, "patch": self._patch, "delete": self._delete,
        }.get(action.kind)
        if handler is not None:
            await handler(key, action, depth)
        elif action.kind == "wait":
            self.loop.queue.add_after(key, action.delay)
        elif action.kind in ("conflict", "invalid", "foreign"):
            if self.loop.report(key, action.kind, action.message) and action.claim is not None:
                reason = {"conflict": "PodGroupConflict", "invalid": "InvalidGangAnnotation",
                          "foreign": "PodGroupNotManaged"}[action.kind]
                if action.claim.held:
                    reason = "GangAnnotationRemoved"
                self._event(action.claim.workload, "Warning", reason, "Reconcile", action.message)

    async def _refetch(self, key: GroupKey, depth: int) -> None:
        """Our cache is behind the server (409 on create or patch): decide again on the stored object."""
        fetched = await self._get(key)
        if fetched is None or depth > 0:
            self.loop.queue.add_after(key, 0.05)
            return
        await self._reconcile(key, fetched, depth + 1)

    async def _create(self, key: GroupKey, action: Action, depth: int) -> None:
        claim = action.claim
        assert claim is not None and action.body is not None
        self.guards.strip_block_owner_deletion(action)
        self._check_leader()
        try:
            created = await self.api.request("POST", self.pod_group_resource.path(key[0]), body=action.body)
        except KubeError as e:
            if e.status == 409:
                return await self._refetch(key, depth)
            if namespace_terminating(e):  # the namespace and the workload in it are going: nothing to re-create
                self.loop.report(key, "terminating", f"PodGroup {key[0]}/{key[1]} not re-created for {claim.ref}: "
                                                      "its namespace is being deleted", logging.INFO)
                return None
            if self.guards.blocked_owner_deletion(e, claim):
                return await self._create(key, action, depth)
            raise self._fail(claim, key, e, f"cannot create PodGroup {key[0]}/{key[1]} for {claim.ref}: {e.message}")
        self.loop.resolved(key, "fail")
        self.loop.resolved(key, "terminating")
        self.guards.wrote(key, action)
        log.info("created PodGroup %s/%s for %s (%s), owned by uid %s", key[0], key[1], claim.ref,
                 ", ".join(action.changes), claim.uid)
        metrics.pod_group("recreated")
        self._event(claim.workload, "Normal", "PodGroupCreated", "Create",
                    f"created PodGroup {key[1]} ({', '.join(action.changes)}); owned by this {claim.kind}, deleted "
                    f"with it", related=created)

    async def _patch(self, key: GroupKey, action: Action, depth: int) -> None:
        claim = action.claim
        assert claim is not None
        self.guards.strip_block_owner_deletion(action)
        self._check_leader()
        try:
            patched = await self.api.request("PATCH", self.pod_group_resource.path(*key), body=action.ops,
                                             content_type="application/json-patch+json")
        except KubeError as e:
            if e.status == 409:  # changed since we decided (resourceVersion precondition)
                return await self._refetch(key, depth)
            if e.status == 404:  # deleted meanwhile: its DELETED event brings it back here
                self.loop.queue.add_after(key, 0.05)
                return
            if self.guards.blocked_owner_deletion(e, claim):
                return await self._patch(key, action, depth)
            raise self._fail(claim, key, e, f"cannot update PodGroup {key[0]}/{key[1]} for {claim.ref}: {e.message}")
        self.loop.resolved(key, "fail")
        self.guards.wrote(key, action)
        if action.adopt:
            log.info("adopted PodGroup %s/%s: owner %s uid %s", key[0], key[1], claim.ref, claim.uid)
            metrics.pod_group("adopted")
            self._event(claim.workload, "Normal", "PodGroupAdopted", "Adopt",
                        f"PodGroup {key[1]} is now owned by this {claim.kind}: the garbage collector deletes it "
                        f"with the {claim.kind}", related=patched)
        if action.changes:
            log.info("updated PodGroup %s/%s for %s: %s", key[0], key[1], claim.ref, "; ".join(action.changes))
            metrics.pod_group("patched")
            self._event(claim.workload, "Normal", "PodGroupUpdated", "Update",
                        f"PodGroup {key[1]} spec updated: {'; '.join(action.changes)}", related=patched)

    async def _delete(self, key: GroupKey, action: Action, depth: int) -> None:
        pg = self._pod_group(key)
        if pg is None:
            return
        owner = pod_group_owner(pg, self.config) or ""
        group, _, rest = owner.partition("/")
        owner_kind = rest.partition("/")[0]
        owner_kinds = [r for r in self.workloads if (r.group, r.kind) == (group, owner_kind)]
        unknown = [r.label for r in owner_kinds if not (self.workloads[r].current or self.workloads[r].absent)]
        if unknown:
            self.loop.report(key, "delete", f"PodGroup {key[0]}/{key[1]} looks unclaimed, but {', '.join(unknown)} "
                                             f"cannot be listed; not deleting it", logging.INFO)
            self.loop.queue.add_after(key, self.settings.orphan_grace_period)
            return
        holder = await self._live_owner(key, owner, owner_kinds)
        if holder is not None:
            self.guards.stale_skips += 1
            self.loop.report(key, "delete", f"PodGroup {key[0]}/{key[1]} looks unclaimed in the cache, but {holder} "
                                             "claims it on the server (its watch is behind); not deleting it",
                             logging.INFO)
            self._unclaimed_since.pop(key, None)
            self.loop.queue.add_after(key, self.settings.orphan_grace_period)
            return
        users = await self._pods_using(key)
        if users:
            if self._kept_for_pods.get(key) != users:
                self._kept_for_pods[key] = users
                log.info("PodGroup %s/%s has no stored workload but live pods still carry its label; keeping it",
                         key[0], key[1])
            self.loop.queue.add_after(key, self.settings.orphan_grace_period)
            return
        self._kept_for_pods.pop(key, None)
        meta = pg.get("metadata") or {}
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
        self._check_leader()
        try:
            await self.api.request("DELETE", self.pod_group_resource.path(*key), body=body)
        except KubeError as e:
            if e.status == 404:
                return
            if e.status == 409:
                self.loop.queue.add_after(key, 0.05)
                return
            raise
        self._unclaimed_since.pop(key, None)
        self.guards.wrote(key, action)
        log.info("deleted PodGroup %s/%s: %s", key[0], key[1], action.message)
        metrics.pod_group("orphan_deleted")
        self._event(pg, "Normal", "PodGroupDeleted", "Delete",
                    f"deleted: {action.message}; pods no longer use it")

    # ------------------------------------------------------------------ helpers

    async def _get(self, key: GroupKey) -> JSON | None:
        try:
            return await self.api.request("GET", self.pod_group_resource.path(*key))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def _live_owner(self, key: GroupKey, owner: str, kinds_: list[Resource]) -> str | None:
        """Before deleting an unclaimed PodGroup: read its owner workload live (the name in the owner annotation, in
        every served version of its kind). Returns ``"Deployment team/web"`` when a stored, not deleting workload
        claims ``key`` (the cache missed it: a dead or lagging watch), else ``None``."""
        name = owner.split("/", 2)[2] if owner.count("/") >= 2 else ""
        if not name:
            return None  # a group bare Pods share: its pods decide
        for resource in kinds_:
            try:
                obj = await self.api.request("GET", resource.path(key[0], name))
            except KubeError as e:
                if e.status == 404:
                    continue
                raise
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            claim = claim_of(obj, resource, self.config)
            if claim is not None and (claim.key == key or claim.identity == owner):
                return claim.ref
        return None

    async def _pods_using(self, key: GroupKey) -> int:
        """Live pods (not terminating, not finished) carrying the group label: a field selector on ``status.phase``
        asks only for pods that are not finished (kube-apiserver supports ``status.phase`` for pods), in pages of
        100 until one that is not terminating is found (returns 1) or none is left (0). One page of 100 without the
        selector could be all finished pods ahead of a Pending one."""
        query = [("labelSelector", f"{self.config.pod_group_label}={key[1]}"),
                 ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed"), ("limit", "100")]
        cont: str | None = None
        while True:
            doc = await self.api.request("GET", PODS.path(key[0]), query=query + ([("continue", cont)] if cont else []))
            for pod in doc.get("items") or []:
                if (pod.get("metadata") or {}).get("deletionTimestamp"):
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                return 1
            cont = (doc.get("metadata") or {}).get("continue") or None
            if not cont:
                return 0

    def _fail(self, claim: Claim, key: GroupKey, error: KubeError, message: str) -> KubeError:
        """A Warning Event on the workload, once per distinct failure that is no longer transient
        (``KeyLoop.quiet``); returns the error to raise (the retry logs its message)."""
        if not self.loop.quiet(key, error) and self.loop.record(key, "fail", message):
            self._event(claim.workload, "Warning", "PodGroupSyncFailed", "Reconcile", message)
        return KubeError(error.status, error.reason, message, error.retry_after)
