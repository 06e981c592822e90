"""Admission-time API work of the ``workload-api`` backend: make the gang's Workload and PodGroup exist.

The same rules as the PodGroup path of ``admission.py`` (docs/behaviour.md, "On each request"), applied to
each object in order (Workload first: the PodGroup references it):

- create without an ownerReference (the garbage collector would delete an object whose owner is not stored yet;
  the controller adopts them once the workload is stored);
- 409 AlreadyExists is success: read it, decide with ``workload_api.ownership`` (manage ours, leave an operator's,
  use one named explicitly, refuse one that belongs to something else: 409 with a message pointing to
  ``gang.admit.dev/pod-group``), and bring ours in step: a JSON patch of ``minCount`` where the version allows it
  (v1beta1); where it does not (v1alpha2), the stored objects stay, with a warning, and a workload that would run
  fewer pods than their ``minCount`` is refused (``workload_api.immutable_message``); a stored
  ``priorityClassName``/``preemptionPolicy`` other than the pods' (immutable) is refused with the fix
  (``workload_api.priority_message``): kube-scheduler would never schedule the new pods; an object being deleted (its
  ``podgroup-protection`` finalizer waits for its pods) is an API failure for the failure mode, with the reason;
- ``dryRun`` requests send every write with ``dryRun=All`` and store nothing;
- one budget (``Config.api_timeout_seconds``) for all calls of the request; a ``kube.KubeError`` goes back to
  ``Admission.validate``, which applies the failure mode.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ...observability import metrics
from ...config import WORKLOAD_API_GROUP, Config
from ...kube.client import AlreadyExists, Budget, KubeError
from ...gang.plan import GangPlan
from .. import workload_api

__all__ = ["ObjectStore", "ensure_workload_api"]

log = logging.getLogger("admit.admission")


class ObjectStore(Protocol):
    """The generic object calls this needs (``kube.KubeAPI``; ``offline.OfflineKube`` for ``admit review``); each
    takes ``timeout`` (seconds) and raises ``kube.KubeError`` (``AlreadyExists`` for a 409 on create)."""

    async def create_object(self, group: str, version: str, plural: str, body: dict[str, Any], dry_run: bool,
                            timeout: float) -> dict[str, Any]: ...

    async def get_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                         timeout: float) -> dict[str, Any] | None: ...

    async def patch_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                           ops: list[dict[str, Any]], dry_run: bool, timeout: float) -> dict[str, Any]: ...

    async def delete_object(self, group: str, version: str, plural: str, namespace: str, name: str, uid: str | None,
                            dry_run: bool, timeout: float) -> None: ...


async def ensure_workload_api(store: ObjectStore | None, plan: GangPlan, config: Config, decision: Any,
                              explicit_name: bool, dry_run: bool, cache: Any = None) -> None:
    """Make ``plan``'s Workload and PodGroup exist with the right spec; record them in ``decision.pod_groups``.

    ``decision`` is the ``review.Decision`` to complete (a conflict turns it into a 409 denial, ownership warnings
    are added); ``store`` ``None`` only reports the desired objects (offline without a store); ``cache`` (optional,
    ``.get_native(kind, namespace, name) -> dict | None``) lets a known, managed, in-step object skip its calls.

    Raises:
        kube.KubeError: an API call failed or the budget ran out.
    """
    desired_all = workload_api.desired_objects(plan, config)
    version = config.workload_api_version or "v1alpha2"
    start = len(decision.pod_groups)
    decision.pod_groups.extend(desired_all)
    if store is None:
        return
    left = Budget(config.api_timeout_seconds).left
    for i, desired in enumerate(desired_all):
        at = start + i
        existing = await _create_or_read(store, plan, config, decision, explicit_name, dry_run, cache, desired, at,
                                         version, left)
        if existing is None:
            continue
        if not await _in_step(store, plan, config, decision, explicit_name, dry_run, desired, existing, at, version,
                              left):
            return


async def _create_or_read(store: ObjectStore, plan: GangPlan, config: Config, decision: Any, explicit_name: bool,
                          dry_run: bool, cache: Any, desired: dict[str, Any], at: int, version: str,
                          left: Any) -> dict[str, Any] | None:
    """Create one object (``decision.pod_groups[at]`` becomes what is stored); the stored one when it already
    exists (409), ``None`` when nothing more is to be done for it (created, or cached, managed and in step).

    Raises:
        kube.KubeError: an API call failed, or the stored object is being deleted (409).
    """
    kind = desired["kind"]
    plural = workload_api.KIND_PLURALS[kind]
    ns, name = plan.namespace, plan.group_name
    get_native = getattr(cache, "get_native", None)
    cached = get_native(kind, ns, name) if get_native is not None else None
    if cached is not None and workload_api.ownership(cached, plan, config, explicit_name).action == "manage" \
            and not workload_api.spec_differs(cached, desired):
        decision.pod_groups[at] = cached
        return None
    try:
        created = await store.create_object(WORKLOAD_API_GROUP, version, plural, desired, dry_run, left())
        log.info("%s %s %s/%s for %s", "dry run: would create" if dry_run else "created", kind, ns, name, plan.ref)
        decision.pod_groups[at] = created or desired
        if not dry_run:
            metrics.native_gang(kind, "created")
        return None
    except AlreadyExists:
        pass
    existing = await store.get_object(WORKLOAD_API_GROUP, version, plural, ns, name, left())
    if existing is None:  # deleted between our create and read: create once more
        decision.pod_groups[at] = await store.create_object(
            WORKLOAD_API_GROUP, version, plural, desired, dry_run, left()) or desired
        if not dry_run:
            metrics.native_gang(kind, "created")
        return None
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise KubeError(409, "Conflict", f"{kind} {ns}/{name} is being deleted (pods that name it are still going "
                                         "away); retry when it is gone")
    return existing


def _refuse(decision: Any, kind: str, code: int, message: str) -> bool:
    decision.allowed = False
    decision.code = code
    decision.message = message
    metrics.native_gang(kind, "refused")
    return False


async def _in_step(store: ObjectStore, plan: GangPlan, config: Config, decision: Any, explicit_name: bool,
                   dry_run: bool, desired: dict[str, Any], existing: dict[str, Any], at: int, version: str,
                   left: Any) -> bool:
    """Decide on an object that exists (ownership), and bring ours in step with ``desired``; False when the
    admission is refused (``decision`` says why)."""
    kind = desired["kind"]
    plural = workload_api.KIND_PLURALS[kind]
    ns, name = plan.namespace, plan.group_name
    own = workload_api.ownership(existing, plan, config, explicit_name)
    decision.warnings.extend(w for w in own.warnings if w not in decision.warnings)
    if own.action == "conflict":
        return _refuse(decision, kind, 409, own.message)
    decision.pod_groups[at] = existing
    if own.action != "manage":
        return True
    mismatch = workload_api.priority_mismatch(existing, desired)
    if mismatch:  # immutable, and the pods would never be scheduled with it: refuse with the fix
        return _refuse(decision, kind, 403, workload_api.priority_message(kind, plan, mismatch))
    ops = workload_api.update_ops(existing, desired, version)
    if ops:
        patched = await store.patch_object(WORKLOAD_API_GROUP, version, plural, ns, name, ops, dry_run, left())
        log.info("patched %s %s/%s for %s: %s", kind, ns, name, plan.ref, ops)
        decision.pod_groups[at] = patched or desired
        if not dry_run:
            metrics.native_gang(kind, "patched")
    elif ops is None:  # immutable here (v1alpha2): keep it; refuse a gang its stored minCount can never schedule
        message, refuse = workload_api.immutable_message(kind, plan, workload_api.min_count_of(existing), version)
        if refuse:
            return _refuse(decision, kind, 403, message)
        if not any("minCount is immutable" in w for w in decision.warnings):
            decision.warnings.append(message)
    return True
