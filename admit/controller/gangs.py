"""The gang controller: one per enabled gang backend (``manager.Manager`` makes them), the same class for every
backend. It adopts, keeps in step and cleans up the objects of each gang (a scheduler-plugins PodGroup; a
scheduling.k8s.io Workload and PodGroup; any registered backend's), through the backend's interface alone
(``backends.interface.GangBackend``, its pure decision ``runtime.BackendAPI.decide``, by default
``backends/gangobjects.py`` ``decide_objects``).

Why it exists (docs/behaviour.md, "The garbage-collector race"): admission happens before the workload is stored,
so the objects admit creates then have no ownerReference (one naming an object that is not stored yet makes the
garbage collector delete them within ~25 ms); the rules once it is stored: ``gangobjects.py``. It also **follows the
members** of a group bare pods share whose size follows them (:meth:`GangController.follow`). Events on the
workload say each of these and what it cannot do; a namespace being deleted is left alone.

It keeps list+watch caches of the backend's object kinds, managed by admit (``app.kubernetes.io/managed-by``) and
not (a hand-written object a workload names is never written over), as small records (``claims.object_record``),
indexed by owner annotation; the claims are the manager's. Its key loop (``keyloop.KeyLoop``, keyed ``(namespace,
name)``: every object of a gang carries its name) runs while its replica leads. Every write goes behind
``guards.WriteGuards``; a decision waits while an object was written by the webhook ahead of the workload read
(``backends.common.ahead_of``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, AsyncIterator

from ..backends.action import Action
from ..backends.common import object_owner
from ..backends.gangobjects import decide_objects
from ..backends.interface import BackendAPI, GangBackend, GangDecide
from ..config import MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config
from ..eventloop import Pacer
from ..gang.ownerrefs import is_managed
from ..gang.plan import get_path
from ..kube.client import KubeError, namespace_terminating
from ..kube.watchcache import Resource, WatchCache, object_key
from .claims import JSON, PODS, Claim, claim_of, object_record
from .guards import WriteGuards
from .keyloop import Key, KeyLoop
from .leader import NotLeader
from .multiindex import MultiIndex

if TYPE_CHECKING:
    from .manager import Manager

__all__ = ["GangController"]

log = logging.getLogger("admit.controller")

REPORTS = {"conflict": "{}Conflict", "invalid": "InvalidGangAnnotation", "foreign": "{}NotManaged",
           "immutable": "GangSizeImmutable", "priority": "GangPriorityImmutable"}
"""The actions that write nothing and are reported (once per change), with the reason of their Warning Event
(``{}``: the backend's first object kind, ``PodGroupConflict``, ``WorkloadConflict``)."""
_TOPICS = ("other:", "problem:", "notice:", *REPORTS)


class GangController:
    """See the module docstring. ``manager``: the :class:`manager.Manager` it runs in; ``backend`` / ``api``: the two
    halves of the backend; ``config``: the settings its objects are read with (a version found again after an
    upgrade, else the manager's).

    Attributes:
        managed / others: ``{kind: WatchCache}`` of its objects, managed by admit and not.
        loop: its key loop; guards: its write guards (``guards.WriteGuards``).
        leading / working: this replica leads (keys are queued) / its workers run (after the caches synced).
        reconciles, actions: reconciles run and the last actions ``(kind, key)`` (tests, debugging).
    """

    def __init__(self, manager: "Manager", backend: GangBackend, api: BackendAPI, config: Config) -> None:
        self.manager, self.backend, self.config = manager, backend, config
        self.settings = s = manager.settings
        self.api = manager.api
        self.decide: GangDecide = api.decide or functools.partial(decide_objects, backend)
        self._count = api.count
        self._below_min_count, self._below_min_gauge = api.below_min_count, api.below_min_gauge
        self.resources = {t.kind: Resource(t.group, t.version, t.plural, t.kind) for t in backend.object_types(config)}
        self.kinds = tuple(self.resources)
        options: dict[str, Any] = dict(manager.cache_options(), handlers=[self._on_object],
                                       transform=functools.partial(object_record, config=config))
        self.managed = {k: WatchCache(self.api, r, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}", **options)
                        for k, r in self.resources.items()}
        self.others = {k: WatchCache(self.api, r, label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}", **options)
                       for k, r in self.resources.items()}
        self.loop = KeyLoop(self._reconcile, s, leading=lambda: self.leading, subject=self.subject, log=log)
        self.guards = WriteGuards(config, s, self.api, self.loop, manager.workloads, backend.name, self.subject,
                                  " and ".join(f"{k}s" for k in self.kinds))
        self.leading = False
        self.working = False
        self._owner: dict[Key, str] = {}
        self._by_owner: MultiIndex[tuple[str, str], Key] = MultiIndex()
        # Leader-only bookkeeping: when a key was first seen unclaimed / written ahead of its workload.
        self._unclaimed_since: dict[Key, float] = {}
        self._ahead_since: dict[Key, float] = {}
        self._kept_for_pods: set[Key] = set()
        self._below: set[Key] = set()
        self.reconciles = 0
        self.actions: deque[tuple[str, Key]] = deque(maxlen=200)

    def subject(self, key: Key) -> str:
        """How messages name a gang's key: ``"PodGroup team-a/web"``, ``"Workload and PodGroup team-a/web"``."""
        return f"{' and '.join(self.kinds)} {key[0]}/{key[1]}"

    # ------------------------------------------------------------------ caches

    def caches(self) -> list[WatchCache]:
        return [*self.managed.values(), *self.others.values()]

    async def start(self) -> "GangController":
        for cache in self.caches():
            await cache.start()
        log.info("%s gang controller started (%s)", self.backend.name,
                 ", ".join(f"{r.api_version} {r.plural}" for r in self.resources.values()))
        return self

    async def stop(self) -> None:
        self.stop_leading()
        for cache in self.caches():
            await cache.stop()

    def get(self, kind: str, namespace: str, name: str) -> JSON | None:
        """A cached object of the gang (managed or not), or ``None``: dict lookups, never an API call."""
        return self.managed[kind].get(namespace, name) or self.others[kind].get(namespace, name)

    def _objects(self, key: Key) -> dict[str, JSON | None]:
        return {kind: self.get(kind, *key) for kind in self.kinds}

    def _owners(self, objects: dict[str, JSON | None]) -> list[str]:
        """The owner annotations of the gang's objects (admit's, well formed), in creation order."""
        return [o for x in objects.values() if x is not None and (o := object_owner(x, self.config)) is not None]

    def _on_object(self, event: str, obj: JSON, old: JSON | None) -> None:
        """Index the gang's owner annotation (both caches share the index: an object may move between them)."""
        key = object_key(obj)
        if event != "SYNC":
            prior = self._owner.pop(key, None)
            if prior is not None:
                self._by_owner.discard((key[0], prior), key)
            owner = next(iter(self._owners(self._objects(key))), None)
            if owner is not None:
                self._owner[key] = owner
                self._by_owner.add((key[0], owner), key)
        if self.leading:
            self.loop.queue.add(key)

    def owned(self, namespace: str, identity: str) -> frozenset[Key]:
        """The keys whose objects' owner annotation is ``identity``."""
        return self._by_owner.get((namespace, identity))

    def missing(self, namespace: str, name: str) -> str | None:
        """For the admission of a Pod whose group is not cached: when a stored workload claims ``namespace/name``
        and none of the gang's objects exists (the caches listed), queue the key (the object is created again) and
        return the warning for the answer; else ``None``. Dict lookups; never an API call, never blocks."""
        key = (namespace, name)
        if not all(c.synced for c in self.caches()) or self.get(self.kinds[-1], *key) is not None \
                or not self.manager.claimed(self.backend.name, key):
            return None
        if self.leading:
            self.loop.queue.add(key)
        return f"{self.kinds[-1]} {namespace}/{name} not found yet; admit is re-creating it"

    # ------------------------------------------------------------------ leadership

    async def lead(self) -> None:
        """While this replica leads: once the caches listed, queue every key and run the workers (and the count of
        broken gangs, :meth:`check_quorum`); cancel the task to stop."""
        s = self.settings
        # Like client-go's WaitForCacheSync: decide nothing before the object caches hold the whole collection;
        # give the workload caches sync_timeout seconds to answer once (a kind that never answers blocks nothing
        # but the deletion of orphans it might own).
        waited = False
        while not await self._wait_synced(s.sync_timeout):
            if not waited:
                waited = True
                log.warning("%ss cannot be listed yet (%s); the controller writes nothing until they can",
                            " and ".join(self.kinds), ", ".join(c.state for c in self.caches()))
        deadline = time.monotonic() + s.sync_timeout
        for cache in self.manager.workloads.values():
            await cache.wait_attempted(max(0.0, deadline - time.monotonic()))
        # Every managed object and every group a claim names, in list order (the queue drops repeats). Not sorted:
        # building and sorting 40,000 keys in one go held admissions for 50 to 90 ms at 20,000 gang workloads.
        pacer = Pacer()
        for key in (*(k for c in self.managed.values() for k in c.keys()), *self.manager.group_keys(self.backend.name)):
            self.loop.queue.add(key)
            await pacer.tick()
        log.info("%s controller leading: %d keys queued", self.backend.name, len(self.loop.queue))
        tasks = [asyncio.create_task(self.loop.worker(), name=f"{self.backend.name} worker {i}")
                 for i in range(s.workers)]
        if self._below_min_count is not None:
            tasks.append(asyncio.create_task(self._count_quorum(), name=f"{self.backend.name} quorum"))
        self.working = True
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    async def _wait_synced(self, timeout: float) -> bool:
        for cache in self.caches():
            if not await cache.wait_synced(timeout):
                return False
        return True

    def stop_leading(self) -> None:
        """Forget the queue and the leader-only bookkeeping."""
        self.leading = self.working = False
        self.loop.reset()
        self._unclaimed_since.clear()
        self._ahead_since.clear()
        self.guards.reset()
        self._below.clear()  # filled by check_quorum only, which needs _below_min_count
        if self._below_min_count is not None and self._below_min_gauge is not None:
            self._below_min_gauge(0)

    def _check_leader(self) -> None:
        if not self.manager.is_leader():
            raise NotLeader()

    # ------------------------------------------------------------------ one key

    async def _reconcile(self, key: Key, fetched: dict[str, JSON] | None = None, depth: int = 0,
                         live: Claim | None = None) -> None:
        """Decide for ``key`` and carry the actions out; a write that adopts, creates or patches is made only once
        the workload read live agrees (``guards.WriteGuards.live_claim``; decided again on ``live`` when the cache
        is behind). ``fetched``: objects read from the API after a 409 (newer than the cache)."""
        self.reconciles += 1
        objects = {**self._objects(key), **(fetched or {})}
        if await self.follow(key, objects, depth):
            return
        claims = self.manager.claims_for(self.backend.name, key, set(self._owners(objects)))
        if live is not None:
            claims = [live if (c.namespace, c.identity) == (live.namespace, live.identity) else c for c in claims]
        claims = [self.manager.countable(c) for c in claims]
        now = time.monotonic()
        actions = self.decide(key, objects, claims, self.config, now=now,
                              unclaimed_since=self._unclaimed_since.get(key), grace=self.settings.orphan_grace_period,
                              ahead_since=self._ahead_since.get(key))
        self._bookkeep(key, actions, now)
        writer = next((a.claim for a in actions if a.kind in ("create", "patch") and a.claim is not None), None)
        if writer is not None and live is None:
            checked = await self.guards.live_claim(key, writer)
            if checked is None:
                return
            if checked is not writer:
                return await self._reconcile(key, fetched, depth, live=checked)
        if all(x is None for x in objects.values()) and not claims:
            self.loop.forget(key)
            self._kept_for_pods.discard(key)
        self._report(key, actions, claims)
        deletes = [a for a in actions if a.kind == "delete"]
        if deletes and not any(self.guards.repeating(key, a) for a in deletes):
            self.actions.extend((a.kind, key) for a in deletes)
            await self._delete(key, objects, deletes)
        for action in actions:
            if action.kind == "wait":
                self.loop.queue.add_after(key, action.delay)
            elif action.kind in ("create", "patch") and not self.guards.repeating(key, action):
                self.actions.append((action.kind, key))
                await self._write(key, action, depth)
            elif action.kind != "delete":
                self.actions.append((action.kind, key))

    async def follow(self, key: Key, objects: dict[str, JSON | None], depth: int = 0) -> bool:
        """Size a group whose size follows its members (``GangPlan.follows_members``) for the member that waits: the
        first pending one without a node (a retry), its plan as its claim computed it, and the backend's
        ``merge_shared`` over the other members (``backends.common.members_left``: the same rule as at that member's
        admission). Written (a patch of admit's object, ``Event`` ``<Kind>Updated`` on the pod) only when it lowers the
        size: kube-scheduler no longer counts a member that succeeded while the retry waited (argo-workflows#734,
        volcano#2720), and a new admission may never come. A member whose pod was deleted after it succeeded (Argo's
        ``podGC``) is recorded on the object by the merge, waiting member or not, so that the admissions that list the
        group's pods still count it; such members are forgotten only once every object's write of them went through (a
        409 twice, or a backed-off write, is tried again with them). True when it wrote."""
        merge: Any = getattr(self.backend, "merge_shared", None)  # interface.BackendHooks
        members = self.manager.members_of(self.backend.name, key) if merge is not None else []
        gone = self.manager.gone_members(self.backend.name, key) if merge is not None else []
        waiting = next((m for m in members if not get_path(m, ("spec", "nodeName")) and get_path(
            m, ("status", "phase")) in (None, "Pending") and not get_path(m, ("metadata", "deletionTimestamp"))), None)
        source = waiting if waiting is not None else next(iter(gone), None)
        claim = self.manager.countable(source["claim"]) if source is not None and source.get("claim") else None
        if claim is None or claim.plan is None or not claim.plan.follows_members:
            self.manager.gone_members(self.backend.name, key, forget=gone)
            return False
        plan, wrote, recorded = claim.plan, False, True
        for kind, desired in zip(self.kinds, self.backend.desired_objects(plan, self.config)):
            obj = objects.get(kind)
            if obj is None or not is_managed(obj) or self.backend.ownership(obj, plan, self.config,
                                                                            claim.explicit).action != "manage":
                continue
            want, _ = merge(obj, desired, plan, [m for m in members + gone if m is not waiting])
            have, size = self.backend.size_of(obj), self.backend.size_of(want)
            lower = waiting is not None and isinstance(have, int) and isinstance(size, int) and size < have
            ops = self.backend.update_ops(obj, want if lower else {**want, "spec": obj.get("spec")},
                                          self.resources[kind].version) or []  # else only the members recorded
            if not ops:
                continue
            ops.append({"op": "replace", "path": "/metadata/resourceVersion",
                        "value": (obj.get("metadata") or {}).get("resourceVersion")})
            action = Action("patch", object_kind=kind, claim=claim, ops=ops, changes=[
                f"{self.backend.size_name} {have} -> {size}: the members still to run"] if lower else [])
            if self.guards.repeating(key, action):
                recorded = False
                continue
            self.actions.append(("follow", key))
            recorded = await self._write(key, action, depth) and recorded
            wrote = True
        if recorded:  # kept until every object records them: a 409 or a backed-off write is tried again
            self.manager.gone_members(self.backend.name, key, forget=gone)
        return wrote

    def _bookkeep(self, key: Key, actions: list[Action], now: float) -> None:
        """When ``key`` was first seen unclaimed, and first seen written ahead of its workload (said once)."""
        if any(a.unclaimed for a in actions):
            self._unclaimed_since.setdefault(key, now)
        else:
            self._unclaimed_since.pop(key, None)
        ahead = next((a for a in actions if a.ahead), None)
        if ahead is None:
            self._ahead_since.pop(key, None)
        elif self._ahead_since.setdefault(key, now) == now:
            log.info("%s", ahead.message)

    def _report(self, key: Key, actions: list[Action], claims: list[Claim]) -> None:
        """Log and record, once per change, what the decision says but does not write: another workload naming
        the gang, a workload below its minMember, an operator setting, a conflict, invalid annotations, an object
        admit did not make, a change an object cannot follow. A topic no longer reported is resolved."""
        current: set[str] = set()

        def say(topic: str, regarding: JSON | None, type_: str, reason: str, message: str, note: str,
                level: int = logging.WARNING) -> None:
            current.add(topic)
            if self.loop.report(key, topic, message, level) and regarding is not None:
                self._event(regarding, type_, reason, "Reconcile", note)

        for action in actions:
            for other, message in action.others:
                say(f"other:{other.identity}", other.workload, "Warning", f"{self.kinds[0]}NameTaken", message,
                    message)
            if action.kind in REPORTS:
                reason = "GangAnnotationRemoved" if action.claim is not None and action.claim.held else \
                    REPORTS[action.kind].format(self.kinds[0])
                # the Event is on the workload (kubectl describe names it): its note leads with the fix
                say(action.kind + (f":{action.object_kind}" if action.object_kind else ""),
                    action.claim.workload if action.claim is not None else None, "Warning", reason, action.message,
                    action.message.removeprefix(f"{action.claim.ref}: ") if action.claim else action.message)
        for c in claims:
            if c.problem:
                say(f"problem:{c.identity}", c.workload, "Warning", "GangBelowMinMember", f"{c.ref}: {c.problem}",
                    c.problem)
            if c.notice:
                say(f"notice:{c.identity}", c.workload, "Normal", "OperatorSetting", f"{c.ref}: {c.notice}", c.notice,
                    logging.INFO)
        for topic in self.loop.topics(key):
            if topic.startswith(_TOPICS) and topic not in current:
                self.loop.resolved(key, topic)  # fixed: report it again if it comes back

    def _event(self, regarding: JSON, type_: str, reason: str, action: str, note: str,
               related: JSON | None = None) -> None:
        """An Event on ``regarding`` (a workload reference or one of the gang's objects), unless it has no uid."""
        if regarding.get("metadata", {}).get("uid"):
            self.manager.recorder.record(regarding, type_, reason, action, note, related)

    def _counted(self, kind: str, operation: str) -> None:
        if self._count is not None:
            self._count(kind, operation)

    # ------------------------------------------------------------------ writes

    async def _refetch(self, key: Key, kind: str, depth: int) -> None:
        """Our cache is behind the server (409 on create or patch): decide again on the stored object."""
        try:
            fetched = await self.api.request("GET", self.resources[kind].path(*key))
        except KubeError as e:
            if e.status != 404:
                raise
            fetched = None
        if fetched is None or depth > 0:
            self.loop.queue.add_after(key, 0.05)
            return
        await self._reconcile(key, {kind: fetched}, depth + 1)

    async def _write(self, key: Key, action: Action, depth: int) -> bool:
        """Carry out a ``create`` or ``patch`` action (a patch names the ``resourceVersion`` it was decided on): a
        409 is decided again on the stored object; a 404 of a patch (deleted meanwhile) waits for its DELETED event;
        a namespace being deleted gets nothing re-created; other errors raise, with a Warning Event once. True when
        this action itself was written (not when it was decided again or left)."""
        claim, kind, create = action.claim, action.object_kind, action.kind == "create"
        assert claim is not None and (action.body is not None or not create)
        what = f"{kind} {key[0]}/{key[1]}"
        self.guards.strip_block_owner_deletion(action)
        self._check_leader()
        try:
            if create:
                written = await self.api.request("POST", self.resources[kind].path(key[0]), body=action.body)
            else:
                written = await self.api.request("PATCH", self.resources[kind].path(*key), body=action.ops,
                                                 content_type="application/json-patch+json")
        except KubeError as e:
            if e.status == 409:
                await self._refetch(key, kind, depth)
                return False
            if e.status == 404 and not create:
                self.loop.queue.add_after(key, 0.05)
                return False
            if create and namespace_terminating(e):  # the namespace and the workload in it are going
                self.loop.report(key, "terminating", f"{what} not re-created for {claim.ref}: its namespace is being "
                                                      "deleted", logging.INFO)
                return False
            if self.guards.blocked_owner_deletion(e, claim):
                return await self._write(key, action, depth)
            raise self._fail(claim, key, e, f"cannot {'create' if create else 'update'} {what} for {claim.ref}: "
                                            f"{e.message}")
        self.loop.resolved(key, "fail")
        self.guards.wrote(key, action)
        if create:
            self.loop.resolved(key, "terminating")
            log.info("created %s for %s (%s), owned by uid %s", what, claim.ref, ", ".join(action.changes), claim.uid)
            self._counted(kind, "recreated")
            self._event(claim.workload, "Normal", f"{kind}Created", "Create",
                        f"created {kind} {key[1]} ({', '.join(action.changes)}); owned by this {claim.kind}, deleted "
                        f"with it", related=written)
            return True
        if action.adopt:
            log.info("adopted %s: owner %s uid %s", what, claim.ref, claim.uid)
            self._counted(kind, "adopted")
            self._event(claim.workload, "Normal", f"{kind}Adopted", "Adopt",
                        f"{kind} {key[1]} is now owned by this {claim.kind}: the garbage collector deletes it "
                        f"with the {claim.kind}", related=written)
        if action.changes:
            log.info("updated %s for %s: %s", what, claim.ref, "; ".join(action.changes))
            self._counted(kind, "patched")
            self._event(claim.workload, "Normal", f"{kind}Updated", "Update",
                        f"{kind} {key[1]} spec updated: {'; '.join(action.changes)}", related=written)
        return True

    async def _delete(self, key: Key, objects: dict[str, JSON | None], deletes: list[Action]) -> None:
        """Delete the unclaimed gang's objects (``deletes``, in reverse creation order), once the caches of its
        owner's kind are current, its owner read live does not claim it, and no live pod waits on it."""
        present = {a.object_kind: o for a in deletes if (o := objects.get(a.object_kind)) is not None}
        if not present or not await self._may_delete(key, present):
            return
        for action in deletes:
            obj = present.get(action.object_kind)
            if obj is None:
                continue
            meta = obj.get("metadata") or {}
            body = {"apiVersion": "v1", "kind": "DeleteOptions",
                    "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
            self._check_leader()
            try:
                await self.api.request("DELETE", self.resources[action.object_kind].path(*key), body=body)
            except KubeError as e:
                if e.status == 404:
                    continue
                if e.status == 409:
                    self.loop.queue.add_after(key, 0.05)
                    return
                raise
            self.guards.wrote(key, action)
            log.info("deleted %s %s/%s: %s", action.object_kind, key[0], key[1], action.message)
            self._counted(action.object_kind, "orphan_deleted")
            self._event(obj, "Normal", f"{action.object_kind}Deleted", "Delete",
                        f"deleted: {action.message}; pods no longer use it")
        self._unclaimed_since.pop(key, None)

    async def _may_delete(self, key: Key, present: dict[str, JSON]) -> bool:
        """False (and the key looked at again after the grace period) while the owner's kind cannot be listed,
        the owner read live still claims the gang (its watch is behind), or live pods wait on the group."""
        grace = self.settings.orphan_grace_period
        owner = object_owner(next(iter(present.values())), self.config) or ""
        group, _, rest = owner.partition("/")
        owner_kinds = [r for r in self.manager.workloads if (r.group, r.kind) == (group, rest.partition("/")[0])]
        unknown = [r.label for r in owner_kinds
                   if not (self.manager.workloads[r].current or self.manager.workloads[r].absent)]
        if unknown:
            self.loop.report(key, "delete", f"{self.subject(key)} looks unclaimed, but {', '.join(unknown)} cannot be "
                                             "listed; not deleting it", logging.INFO)
        elif (holder := await self._live_owner(key, owner, owner_kinds)) is not None:
            self.guards.stale_skips += 1
            self.loop.report(key, "delete", f"{self.subject(key)} looks unclaimed in the cache, but {holder} claims "
                                             "it on the server (its watch is behind); not deleting it", logging.INFO)
            self._unclaimed_since.pop(key, None)
        elif await self._pods_using(key):
            if key not in self._kept_for_pods:
                self._kept_for_pods.add(key)
                log.info("%s has no stored workload but live pods still wait on it; keeping it", self.subject(key))
        else:
            self._kept_for_pods.discard(key)
            return True
        self.loop.queue.add_after(key, grace)
        return False

    async def _live_owner(self, key: Key, owner: str, kinds: list[Resource]) -> str | None:
        """Before deleting an unclaimed gang: read its owner workload live (the name in the owner annotation, in
        every served version of its kind). Returns ``"Deployment team/web"`` when a stored, not deleting workload
        claims ``key`` (the cache missed it: a dead or lagging watch), else ``None``."""
        name = owner.split("/", 2)[2] if owner.count("/") >= 2 else ""
        if not name:
            return None  # a group bare Pods share: its pods decide
        for resource in kinds:
            try:
                obj = await self.api.request("GET", resource.path(key[0], name))
            except KubeError as e:
                if e.status == 404:
                    continue
                raise
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            claim = claim_of(obj, resource, self.config, backend=self.backend.name)
            if claim is not None and (claim.key == key or claim.identity == owner):
                return claim.ref
        return None

    async def _pods_using(self, key: Key) -> int:
        """1 when a live pod (not terminating, not finished) waits on the group (``GangBackend.pod_in_group``), else
        0: pages of 100 unfinished pods, narrowed by the backend's ``pod_selector`` hook, until one is found."""
        selector = getattr(self.backend, "pod_selector", None)  # interface.BackendHooks
        query = [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed"), ("limit", "100")]
        if selector is not None:
            query.insert(0, ("labelSelector", selector(key[1], self.config)))
        async for pods in self._pod_pages(key[0], query):
            if any(self.backend.pod_in_group(pod, key[1], self.config) and not get_path(
                    pod, ("metadata", "deletionTimestamp")) and get_path(pod, ("status", "phase")) not in (
                    "Succeeded", "Failed") for pod in pods):
                return 1
        return 0

    async def _pod_pages(self, namespace: str, query: list[tuple[str, str]]) -> AsyncIterator[list[JSON]]:
        """The pods of ``namespace`` that ``query`` asks for, a page at a time (its ``limit``)."""
        token = ""
        while True:
            doc = await self.api.request("GET", PODS.path(namespace),
                                         query=query + ([("continue", token)] if token else []))
            yield doc.get("items") or []
            token = get_path(doc, ("metadata", "continue")) or ""
            if not token:
                return

    def _fail(self, claim: Claim, key: Key, error: KubeError, message: str) -> KubeError:
        """A Warning Event on the workload, once per distinct failure that is no longer transient
        (``KeyLoop.quiet``); returns the error to raise (the retry logs its message)."""
        if not self.loop.quiet(key, error) and self.loop.record(key, "fail", message):
            self._event(claim.workload, "Warning", f"{self.kinds[0]}SyncFailed", "Reconcile", message)
        return KubeError(error.status, error.reason, message, error.retry_after)

    # ------------------------------------------------------------------ gangs that broke after scheduling

    async def _count_quorum(self) -> None:
        while True:
            try:
                await self.check_quorum()
            except (KubeError, NotLeader) as e:
                log.info("could not count the %s gangs below their size: %s", self.backend.name,
                         getattr(e, "message", e))
            await asyncio.sleep(self.settings.resync_period)

    async def check_quorum(self) -> set[Key]:
        """Count the managed gangs that broke after they were scheduled (the API half's ``below_min_count``: the object
        pods wait on has a scheduled condition True, which kube-scheduler never sets back, kubernetes#136334, and fewer
        than its size have a node, with a replacement pending or a pod gone); set the API half's ``below_min_gauge``;
        for each gang that newly broke, log one warning and record a Warning Event ``GangBelowMinCount`` on its
        workload. Returns their keys. Costs one paged pod list per namespace holding a scheduled managed group, every
        resync period, on the leader only.

        Raises:
            kube.KubeError: a pod list failed.
        """
        assert self._below_min_count is not None
        kind = self.kinds[-1]
        by_ns: dict[str, list[JSON]] = {}
        for group in self.managed[kind].items():
            if any(isinstance(c, dict) and c.get("status") == "True" and "Scheduled" in str(c.get("type"))
                   for c in get_path(group, ("status", "conditions")) or []):
                by_ns.setdefault(str(get_path(group, ("metadata", "namespace")) or ""), []).append(group)
        below: set[Key] = set()
        for ns, groups in by_ns.items():
            pods = [p async for page in self._pod_pages(ns, [("limit", "500")]) for p in page]
            for group in groups:
                key = object_key(group)
                found = self._below_min_count(group, [p for p in pods
                                                      if self.backend.pod_in_group(p, key[1], self.config)])
                if found is None:
                    continue
                below.add(key)
                if key not in self._below:
                    self._broke(key, group, *found)
        self._below = below
        if self._below_min_gauge is not None:
            self._below_min_gauge(len(below))
        return below

    def _broke(self, key: Key, group: JSON, scheduled: int, pending: int, size: int) -> None:
        kind = self.kinds[-1]
        note = (f"{kind} {key[0]}/{key[1]} was scheduled and now has {scheduled} pod(s) on nodes, minCount {size}"
                + (f", {pending} pending" if pending else "")
                + ": its scheduled condition never goes back (kubernetes#136334); free capacity or restart the whole "
                  "gang")
        log.warning("%s", note)
        claims = self.manager.claims_for(self.backend.name, key, set(self._owners(self._objects(key))))
        if claims:
            self._event(claims[0].workload, "Warning", "GangBelowMinCount", "Check", note, group)
