"""The admission-time engine of every gang backend: make the gang's objects exist with the right spec.

One routine over ``interface.GangBackend`` (``desired_objects``, ``ownership``, ``update_ops``), applied to each of
the backend's objects in ``object_types`` order (a Workload before the PodGroup that references it); the rules
(docs/behaviour.md, "On each request"):

- an object is created without an ownerReference (the garbage collector would delete it while its owner is not
  stored; the controller adopts it), stamped with the workload's generation (``common.stamp_annotations``);
- 409 AlreadyExists is success: read it, decide with the backend's ``ownership`` (manage ours, leave an operator's,
  use one named explicitly, refuse one that belongs to something else) and bring ours in step with ``update_ops``;
  an object being deleted (a finalizer waits for its pods) is an API failure, with the reason;
- ``dryRun`` sends every write with ``dryRun=All``; one budget (``Config.api_timeout_seconds``) for all calls; a
  ``kube.KubeError`` goes back to ``Admission.validate``, which applies the failure mode.

What differs between backends are their optional hooks (``interface.BackendHooks``): ``merge_shared`` for a group
bare pods share (for one whose size follows its members the engine lists them first, ``members_selector``, and never
answers from the cache), ``cannot_admit`` for an object of ours that cannot follow; and ``BackendAPI.count``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from ..config import Config
from ..gang.plan import GangPlan
from ..kube.client import AlreadyExists, Budget, KubeError
from .common import generation_patch, stamp_annotations
from .interface import GangBackend
from .registry import backend_of
from .runtime import APIS

__all__ = ["ObjectStore", "ensure"]

log = logging.getLogger("admit.admission")

JSON = dict[str, Any]


class ObjectStore(Protocol):
    """The generic object calls admission needs (``kube.KubeAPI``; ``review.OfflineKube`` for ``admit review``);
    each takes ``timeout`` (seconds) and raises ``kube.KubeError`` (``AlreadyExists`` for a 409 on create);
    ``namespace`` ``""`` reads a cluster-scoped object (a Kubeflow Trainer ClusterTrainingRuntime)."""

    async def create_object(self, group: str, version: str, plural: str, body: JSON, dry_run: bool,
                            timeout: float) -> JSON: ...

    async def get_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                         timeout: float) -> JSON | None: ...

    async def patch_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                           ops: list[JSON], dry_run: bool, timeout: float) -> JSON: ...

    async def delete_object(self, group: str, version: str, plural: str, namespace: str, name: str, uid: str | None,
                            dry_run: bool, timeout: float) -> None: ...


class _Gang:
    """One admission's API work on one gang: the backend, its hooks, the request's settings and the budget (made
    at the first object the cache cannot answer for)."""

    def __init__(self, backend: GangBackend, merge: Any, store: Any, plan: GangPlan, config: Config, decision: Any,
                 explicit_name: bool, dry_run: bool, cache: Any, generation: int | None,
                 replaces: str | None) -> None:
        self.backend, self.merge, self.store, self.plan, self.config = backend, merge, store, plan, config
        self.decision, self.explicit_name, self.dry_run, self.cache = decision, explicit_name, dry_run, cache
        self.generation, self.replaces = generation, replaces
        api = APIS.get(backend.name)
        self.count: Callable[[str, str], None] = api.count if api is not None and api.count else (
            lambda kind, operation: None)
        self.cannot_admit = getattr(backend, "cannot_admit", None)
        self.left: Callable[[], float] = Budget(config.api_timeout_seconds).left
        self.warned_cannot_follow = False

    def warn(self, warnings: list[str]) -> None:
        self.decision.warnings.extend(w for w in warnings if w not in self.decision.warnings)

    def refuse(self, kind: str, code: int, message: str) -> bool:
        self.decision.allowed = False
        self.decision.code = code
        self.decision.message = message
        self.count(kind, "refused")
        return False


async def ensure(store: ObjectStore | None, plan: GangPlan, config: Config, decision: Any, explicit_name: bool,
                 dry_run: bool, cache: Any = None, generation: int | None = None, replaces: str | None = None) -> None:
    """Make ``plan``'s objects (its backend's ``desired_objects``) exist with the right spec; record each in
    ``decision.pod_groups`` (what is stored, else what would be).

    ``decision`` is the ``admissionreview.Decision`` to complete (a conflict turns it into a 409 denial, a gang
    the stored objects can never schedule into a 403, ownership warnings are added); ``store`` ``None`` only
    reports the desired objects; ``cache`` (optional, ``.gang_object(group, kind, namespace, name) -> dict | None``
    and ``.group_pods(namespace, name, exclude) -> int | None``, the other workloads' pods that name the group)
    lets a cached object that is ours and in step skip every call; ``generation`` / ``replaces``: the incoming
    object's ``metadata.generation`` and, on an UPDATE, its ``metadata.resourceVersion``, stamped on what is written
    (``common.generation_annotation``, ``common.replaces_annotation``).

    Raises:
        kube.KubeError: an API call failed, the budget ran out, or a stored object is being deleted (409).
    """
    backend = backend_of(plan.backend)
    desired_all = backend.desired_objects(plan, config)
    stamp = stamp_annotations(config, generation, replaces)
    if stamp:
        for desired in desired_all:
            desired["metadata"].setdefault("annotations", {}).update(stamp)
    start = len(decision.pod_groups)
    decision.pod_groups.extend(desired_all)
    merge = getattr(backend, "merge_shared", None) if plan.shared else None
    lookup = getattr(cache, "gang_object", None)
    gang: _Gang | None = None
    for at, desired in enumerate(desired_all, start):
        group, _, version = str(desired["apiVersion"]).rpartition("/")
        cached = lookup(group, desired["kind"], plan.namespace, plan.group_name) if lookup is not None else None
        if cached is not None and not plan.follows_members and _in_step(
                backend, merge, cached, desired, version, plan, config, explicit_name, decision):
            decision.pod_groups[at] = cached
            continue
        if store is None:
            continue
        gang = gang or _Gang(backend, merge, store, plan, config, decision, explicit_name, dry_run, cache, generation,
                             replaces)
        existing = await _create_or_read(gang, desired, at)
        if existing is not None and not await _keep_in_step(gang, desired, existing, at):
            return


def _in_step(backend: GangBackend, merge: Any, cached: JSON, desired: JSON, version: str, plan: GangPlan,
             config: Config, explicit_name: bool, decision: Any) -> bool:
    """True when a cached object is ours and in step (no call needed); the merge's warnings are added then."""
    if backend.ownership(cached, plan, config, explicit_name).action != "manage":
        return False
    want, warnings = merge(cached, desired, plan) if merge is not None else (desired, [])
    if backend.update_ops(cached, want, version) != []:
        return False
    decision.warnings.extend(w for w in warnings if w not in decision.warnings)
    return True


def _plural(gang: _Gang, desired: JSON) -> tuple[str, str, str]:
    """``(group, version, plural)`` of ``desired`` among the backend's ``object_types``."""
    group, _, version = str(desired["apiVersion"]).rpartition("/")
    plural = next(t.plural for t in gang.backend.object_types(gang.config)
                  if t.kind == desired["kind"] and t.group == group)
    return group, version, plural


async def _create_or_read(gang: _Gang, desired: JSON, at: int) -> JSON | None:
    """Create one object (``decision.pod_groups[at]`` becomes what is stored); the stored one when it already
    exists (409), ``None`` when nothing more is to be done for it (created).

    Raises:
        kube.KubeError: an API call failed, or the stored object is being deleted (409).
    """
    plan, kind = gang.plan, desired["kind"]
    group, version, plural = _plural(gang, desired)
    ns, name = plan.namespace, plan.group_name
    for attempt in range(2):  # once more when it was deleted between our create and read
        try:
            created = await gang.store.create_object(group, version, plural, desired, gang.dry_run, gang.left())
        except AlreadyExists:
            if attempt == 1:
                raise
            existing = await gang.store.get_object(group, version, plural, ns, name, gang.left())
            if existing is not None:
                break
            continue
        log.info("%s %s %s/%s for %s", "dry run: would create" if gang.dry_run else "created", kind, ns, name,
                 plan.ref)
        gang.decision.pod_groups[at] = created or desired
        if not gang.dry_run:
            gang.count(kind, "created")
        return None
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise KubeError(409, "Conflict", f"{kind} {ns}/{name} is being deleted (pods that name it are still going "
                                         "away); retry when it is gone")
    return existing


async def _members(gang: _Gang) -> list[JSON] | None:
    """The pods of a group whose size follows its members (``plan.follows_members``), for the backend's
    ``merge_shared``: one LIST by the backend's ``members_selector`` through the store's ``list_pods``, kept to
    the pods in the group (``pod_in_group``: a selector may not read where a pod names it); ``None`` when either is
    missing (``admit review`` reads no pods)."""
    select = getattr(gang.backend, "members_selector", None)
    lister = getattr(gang.store, "list_pods", None)
    if select is None or lister is None:
        return None
    pods: list[JSON] = await lister(gang.plan.namespace, select(gang.plan, gang.config), gang.left())
    return [p for p in pods if gang.backend.pod_in_group(p, gang.plan.group_name, gang.config)]


async def _keep_in_step(gang: _Gang, desired: JSON, existing: JSON, at: int) -> bool:
    """Decide on an object that exists (the backend's ``ownership``, with the pods of the other workloads that name the
    group), and bring ours in step with ``desired``; False when the admission is refused (``decision`` says why)."""
    plan, config, decision, kind = gang.plan, gang.config, gang.decision, desired["kind"]
    members = getattr(gang.cache, "group_pods", None)  # the controller's claims: other workloads naming this group
    others = members(plan.namespace, plan.group_name, plan.owner) if members is not None else None
    own = gang.backend.ownership(existing, plan, config, gang.explicit_name, others)
    gang.warn(own.warnings)
    if own.action == "conflict":
        return gang.refuse(kind, own.code, own.message)
    decision.pod_groups[at] = existing
    if own.action != "manage":
        return True
    group, version, plural = _plural(gang, desired)
    members = await _members(gang) if gang.merge is not None and plan.follows_members else None
    want, warnings = gang.merge(existing, desired, plan, members) if gang.merge is not None else (desired, [])
    gang.warn(warnings)
    ops = gang.backend.update_ops(existing, want, version)
    verdict = gang.cannot_admit(kind, existing, want, ops, plan, config) if gang.cannot_admit is not None else None
    if verdict is not None:
        code, message = verdict
        if code is not None:
            return gang.refuse(kind, code, message)
        if not gang.warned_cannot_follow:  # one warning for the gang, whichever of its objects says it first
            gang.warn([message])
            gang.warned_cannot_follow = True
    if ops:
        ops = ops + generation_patch(existing, gang.generation, config, gang.replaces)
        patched = await gang.store.patch_object(group, version, plural, plan.namespace, plan.group_name, ops,
                                                gang.dry_run, gang.left())
        log.info("patched %s %s/%s for %s: %s", kind, plan.namespace, plan.group_name, plan.ref, ops)
        decision.pod_groups[at] = patched or desired
        if not gang.dry_run:
            gang.count(kind, "patched")
    return True
