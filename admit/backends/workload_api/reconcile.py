"""The pure reconcile decision for a ``workload-api`` gang: (Workload, PodGroup, claims, clock) -> actions.

The same life as a scheduler-plugins PodGroup (``admit/controller/podgroups.py``; docs/behaviour.md, "The
garbage-collector race"), for the two scheduling.k8s.io objects of one gang, keyed ``(namespace, name)`` (both objects
carry the gang's name):

- **adopt**: once the workload is stored, give each object a controller ownerReference to it (its ``uid``,
  ``blockOwnerDeletion: true``), so the garbage collector deletes both with the workload;
- **keep in step**: a changed minMember is a JSON patch of ``minCount`` in v1beta1; in v1alpha2 ``minCount`` is
  immutable and a PodGroup cannot be re-created under its pods (``podgroup-protection`` finalizer), so the objects
  stay and the workload gets a Warning event (``"immutable"``); a missing object is created again, directly with
  its ownerReference (the workload is stored: no race);
- **clean up**: managed objects that no stored workload claims for the grace period are deleted (the loop first
  checks that no live pod still names the PodGroup);
- objects admit did not make are used (named explicitly), left to the workload's own controller, or reported as a
  conflict, by ``workload_api.ownership``; managed-looking objects without a valid owner annotation are left alone.

Claims are ``controller.Claim``-shaped (``plan``, ``workload``, ``identity``, ``uid``, ``ref``, ``deleting``,
``explicit``, ``meta``, ``key``): the stored gang workloads whose plan uses the ``workload-api`` backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...config import Config
from ...gang.ownerrefs import adopt_ops, controlled_by, is_managed, owner_reference
from ..common import not_admits_message, object_owner
from .. import workload_api

__all__ = ["KINDS", "NativeAction", "decide_native", "owner_reference", "object_owner"]

JSON = dict[str, Any]
KINDS = ("Workload", "PodGroup")  # creation order: the PodGroup references the Workload


@dataclass(slots=True)
class NativeAction:
    """One thing to do for one object of a gang.

    Attributes:
        kind: ``"none"``, ``"create"`` (``body``), ``"patch"`` (``ops``; ``adopt`` and/or ``changes``),
            ``"delete"`` (``uid``), ``"wait"`` (``delay`` seconds), ``"conflict"`` / ``"invalid"`` / ``"foreign"`` /
            ``"immutable"`` (``minCount``) / ``"priority"`` (``priorityClassName``/``preemptionPolicy``) (report
            ``message``; write nothing).
        object_kind: ``"Workload"`` or ``"PodGroup"`` (``""`` for a decision about the whole gang).
        claim: the claim acted for (``None`` for orphans).
        unclaimed: no stored workload claims the gang (grace-period bookkeeping).
    """

    kind: str
    object_kind: str = ""
    claim: Any = None
    body: JSON | None = None
    ops: list[JSON] = field(default_factory=list)
    uid: str | None = None
    adopt: bool = False
    changes: list[str] = field(default_factory=list)
    delay: float = 0.0
    message: str = ""
    unclaimed: bool = False


def _with_owner(desired: JSON, claim: Any) -> JSON:
    if not claim.plan.shared:
        desired["metadata"]["ownerReferences"] = [owner_reference(claim.workload)]
    return desired


def decide_native(key: tuple[str, str], objects: dict[str, JSON | None], claims: list[Any], config: Config, *,
                  now: float, unclaimed_since: float | None, grace: float) -> list[NativeAction]:
    """What to do for the gang ``key`` (pure; see the module docstring).

    Args:
        key: ``(namespace, name)`` of the gang's Workload and PodGroup.
        objects: ``{"Workload": obj | None, "PodGroup": obj | None}`` as last seen.
        claims: stored workload-api gang workloads whose plan names ``key``, plus those whose identity is the
            objects' owner annotation (a workload whose annotations became invalid still protects its gang).
        now / unclaimed_since: seconds on one monotonic clock (``unclaimed_since``: first seen unclaimed).
        grace: orphan grace period, seconds.

    Returns: one action per object that needs one, in creation order (empty list: nothing to do).
    """
    ns, name = key
    version = config.workload_api_version or "v1alpha2"
    present = {k: o for k, o in objects.items() if o is not None}
    owners = {object_owner(o, config) for o in present.values() if is_managed(o)} - {None}
    owner = next(iter(sorted(owners)), None)
    valid = [c for c in claims if c.plan is not None and c.key == key]
    if valid:
        valid.sort(key=lambda c: (c.identity != owner, str(c.meta.get("creationTimestamp") or ""), c.identity))
        chosen = valid[0]
        plan = chosen.plan
        if chosen.deleting:
            return [NativeAction("none", claim=chosen, message=f"{chosen.ref} is being deleted")]
        actions: list[NativeAction] = []
        for kind, desired in zip(KINDS, workload_api.desired_objects(plan, config)):
            obj = objects.get(kind)
            what = f"{kind} {ns}/{name}"
            if obj is None:
                actions.append(NativeAction("create", kind, chosen, body=_with_owner(desired, chosen),
                                            changes=[f"minCount {plan.min_member}"]))
                continue
            meta = obj.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            if is_managed(obj) and object_owner(obj, config) is None:
                actions.append(NativeAction("foreign", kind, chosen, message=not_admits_message(what, config)))
                continue
            own = workload_api.ownership(obj, plan, config, chosen.explicit)
            if own.action == "conflict":
                return [NativeAction("conflict", kind, chosen, message=f"{chosen.ref}: {own.message}")]
            if own.action != "manage":
                continue  # "use" / "operator": left as it is
            ops = workload_api.update_ops(obj, desired, version)
            have = workload_api.min_count_of(obj)
            mismatch = workload_api.priority_mismatch(obj, desired)
            if ops is None:  # minCount (v1alpha2) or a priority field cannot follow; say so (still adopt below)
                if mismatch:
                    actions.append(NativeAction("priority", kind, chosen, message=workload_api.priority_message(
                        kind, plan, mismatch)))
                elif kind == "PodGroup":
                    actions.append(NativeAction("immutable", kind, chosen, message=workload_api.immutable_message(
                        kind, plan, have, version)[0]))
                ops = []
                changes: list[str] = []
            else:
                changes = [f"minCount {have} -> {plan.min_member}"] if ops else []
            adopt = not plan.shared and not controlled_by(obj, chosen.uid)
            if adopt:
                ops = adopt_ops(obj, chosen.workload) + ops
            if ops:
                if meta.get("resourceVersion"):
                    ops.append({"op": "replace", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
                actions.append(NativeAction("patch", kind, chosen, ops=ops, adopt=adopt, changes=changes))
        return actions
    managed = {k: o for k, o in present.items() if is_managed(o)}
    if not managed:
        return []
    foreign = [k for k, o in managed.items() if object_owner(o, config) is None]
    if foreign:
        return [NativeAction("foreign", k, message=not_admits_message(f"{k} {ns}/{name}", config)) for k in foreign]
    invalid = [c for c in claims if c.plan is None and c.identity == owner]
    if invalid:
        c = invalid[0]
        return [NativeAction("invalid", claim=c, message=f"{c.ref}: {c.error}; the Workload and PodGroup {ns}/{name} "
                                                          "are left as they are until this is fixed")]
    live = {k: o for k, o in managed.items() if not (o.get("metadata") or {}).get("deletionTimestamp")}
    if not live:
        return [NativeAction("none", unclaimed=True)]
    since = now if unclaimed_since is None else unclaimed_since
    left = grace - (now - since)
    if left > 0:
        return [NativeAction("wait", delay=left, unclaimed=True)]
    message = f"{ns}/{name} (owner {owner}) is claimed by no stored workload for {grace:g}s"
    return [NativeAction("delete", k, uid=(o.get("metadata") or {}).get("uid"), unclaimed=True, message=message)
            for k, o in sorted(live.items(), key=lambda kv: KINDS.index(kv[0]), reverse=True)]
