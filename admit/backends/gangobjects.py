"""The controller's pure decision for the objects of one gang, for any backend: (objects, claims, clock) -> actions.

Keyed ``(namespace, name)`` (every object of a gang carries its name), through ``interface.GangBackend`` alone
(docs/behaviour.md, "The garbage-collector race"):

- **adopt**: once the workload is stored, a controller ownerReference to it (``blockOwnerDeletion: true``), so the
  garbage collector deletes the objects with it;
- **keep in step**: the backend's ``update_ops``; where an object cannot follow (``None``: the Workload API's
  immutable v1alpha2 ``minCount``, a changed priority) it stays and the workload gets a Warning
  (``cannot_follow``); a missing object is created again, directly with its ownerReference;
- **clean up**: managed objects no stored workload claims for the grace period are deleted (the controller first
  checks that no live pod waits on the group);
- objects admit did not make are used, left to the workload's own controller, or reported as a conflict (the
  backend's ``ownership``); managed-looking objects without a valid owner annotation are left alone.

Claims are ``gang.claim.Claim``-shaped: the stored gang workloads whose plan uses the backend.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..gang.ownerrefs import adopt_ops, controlled_by, is_managed, owner_reference
from .action import Action
from .common import ahead_of, generation_patch, not_admits_message, object_owner, stamp_annotations
from .interface import GangBackend

__all__ = ["decide_objects", "owner_reference", "object_owner"]

JSON = dict[str, Any]


def _with_owner(desired: JSON, claim: Any, config: Config) -> JSON:
    if not claim.plan.shared:
        desired["metadata"]["ownerReferences"] = [owner_reference(claim.workload)]
    desired["metadata"].setdefault("annotations", {}).update(stamp_annotations(config, claim.generation))
    return desired


def decide_objects(backend: GangBackend, key: tuple[str, str], objects: dict[str, JSON | None], claims: list[Any],
                   config: Config, *, now: float, unclaimed_since: float | None, grace: float,
                   ahead_since: float | None = None) -> list[Action]:
    """What to do for the gang ``key`` (pure; see the module docstring).

    Args:
        backend: the gang backend whose objects these are.
        key: ``(namespace, name)`` of the gang's objects.
        objects: ``{kind: obj | None}`` for every kind of ``backend.object_types(config)``, as last seen.
        claims: stored gang workloads of this backend whose plan names ``key``, plus those whose identity is the
            objects' owner annotation (a workload whose annotations became invalid still protects its gang).
        now / unclaimed_since: seconds on one monotonic clock (``unclaimed_since``: first seen unclaimed).
        grace: orphan grace period, seconds; also how long an object written (by the webhook) ahead of the cached
            workload (``common.ahead_of``) is left as it is (``ahead_since``: when that was first seen); past it, the
            update was refused after the webhook saw it, and the spec is put back.

    Returns: one action per object that needs one, in creation order (empty list: nothing to do).
    """
    present = {k: o for k, o in objects.items() if o is not None}
    owners = {w for o in present.values() if is_managed(o) and (w := object_owner(o, config)) is not None}
    owner = next(iter(sorted(owners)), None)
    valid = [c for c in claims if c.plan is not None and c.key == key]
    if valid:
        valid.sort(key=lambda c: (c.identity != owner, str(c.meta.get("creationTimestamp") or ""), c.identity))
        chosen, rest = valid[0], valid[1:]
        what = f"{' and '.join(t.kind for t in backend.object_types(config))} {key[0]}/{key[1]}"
        others = [(c, f"{c.ref} names {what}, which {chosen.ref} already uses; set annotation "
                      f"{config.pod_group_key} on {c.ref} to another name") for c in rest]
        sharing = sum(c.plan.total_pods or 0 for c in rest) if rest else None  # what else may fill the group
        actions = _claimed(backend, key, objects, chosen, config, sharing, now=now, grace=grace,
                           ahead_since=ahead_since)
        if others:
            actions = actions or [Action("none", claim=chosen)]
            actions[0].others = others
        return actions
    return _unclaimed(backend, key, present, claims, owner, config, now=now, unclaimed_since=unclaimed_since,
                      grace=grace)


def _claimed(backend: GangBackend, key: tuple[str, str], objects: dict[str, JSON | None], chosen: Any,
             config: Config, sharing: int | None, *, now: float, grace: float,
             ahead_since: float | None) -> list[Action]:
    """A gang a stored workload (``chosen``) claims: create what is missing, adopt and bring in step the rest
    (``sharing``: the pods of the other workloads naming it, for ``ownership``; ``None``: none)."""
    plan = chosen.plan
    if chosen.deleting:
        return [Action("none", claim=chosen, message=f"{chosen.ref} is being deleted")]
    types = backend.object_types(config)
    actions: list[Action] = []
    for kind, desired in zip((t.kind for t in types), backend.desired_objects(plan, config)):
        obj = objects.get(kind)
        what = f"{kind} {key[0]}/{key[1]}"
        if obj is None:
            describe = getattr(backend, "describe", None)  # interface.BackendHooks
            actions.append(Action("create", object_kind=kind, claim=chosen, body=_with_owner(desired, chosen, config),
                                  changes=describe(desired) if describe is not None
                                  else [f"{backend.size_name} {plan.min_member}"]))
            continue
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if is_managed(obj) and object_owner(obj, config) is None:
            actions.append(Action("foreign", object_kind=kind, claim=chosen,
                                  message=not_admits_message(what, config)))
            continue
        own = backend.ownership(obj, plan, config, chosen.explicit, sharing)
        if own.action == "conflict":
            return [Action("conflict", object_kind=kind, claim=chosen, message=f"{chosen.ref}: {own.message}")]
        if own.action == "manage":  # "use" / "operator": left as it is
            actions.extend(_in_step(backend, kind, obj, desired, chosen, types[0].version, config,
                                    now - ahead_since if ahead_since is not None else 0.0, grace))
    return actions


def _in_step(backend: GangBackend, kind: str, obj: JSON, desired: JSON, chosen: Any, version: str,
             config: Config, waited: float, grace: float) -> list[Action]:
    """The actions that bring one managed object in step with ``desired``: a report when it cannot follow, a patch
    that adopts it and/or changes its size (stamped with the workload's generation), or a wait while the object was
    written ahead of the workload read (``waited`` seconds so far, up to ``grace``)."""
    plan = chosen.plan
    actions: list[Action] = []
    ops = backend.update_ops(obj, desired, version)
    have = backend.size_of(obj)
    if ops is None:  # it cannot follow; say so (still adopt below)
        report = backend.cannot_follow(kind, obj, desired, plan, config)
        if report is not None:
            actions.append(Action(report[0], object_kind=kind, claim=chosen, message=report[1]))
        ops = []
        changes: list[str] = []
    else:
        ahead = ahead_of(obj, chosen, config) if ops else None
        if ahead is not None and waited < grace:
            meta = obj.get("metadata") or {}
            return [Action("wait", object_kind=kind, claim=chosen, delay=grace - waited, ahead=True,
                           message=f"{kind} {meta.get('namespace')}/{meta.get('name')} was written {ahead}: "
                                   "waiting for it")]
        describe = getattr(backend, "describe_changes", None)  # interface.BackendHooks
        changes = (describe(obj, desired) if describe is not None
                   else [f"{backend.size_name} {have} -> {plan.min_member}"]) if ops else []
        if ops:
            ops = ops + generation_patch(obj, chosen.generation, config)
    adopt = not plan.shared and not controlled_by(obj, chosen.uid)
    if adopt:
        ops = adopt_ops(obj, chosen.workload) + ops
    if ops:
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            ops.append({"op": "replace", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
        actions.append(Action("patch", object_kind=kind, claim=chosen, ops=ops, adopt=adopt, changes=changes))
    return actions


def _unclaimed(backend: GangBackend, key: tuple[str, str], present: dict[str, JSON], claims: list[Any],
               owner: str | None, config: Config, *, now: float, unclaimed_since: float | None,
               grace: float) -> list[Action]:
    """A gang no stored workload claims: leave foreign objects, those of an invalid claim and those another object
    keeps (``GangPlan.kept_by``: the garbage collector deletes them with it) alone, wait out the grace period, then
    delete the managed objects (in reverse creation order)."""
    ns, name = key
    managed = {k: o for k, o in present.items() if is_managed(o)}
    if not managed:
        return []
    foreign = [k for k, o in managed.items() if object_owner(o, config) is None]
    if foreign:
        return [Action("foreign", object_kind=k, message=not_admits_message(f"{k} {ns}/{name}", config))
                for k in foreign]
    kinds = [t.kind for t in backend.object_types(config)]
    invalid = [c for c in claims if c.plan is None and c.identity == owner]
    if invalid:
        c = invalid[0]
        kept = (f"{kinds[0]} {ns}/{name} is left as it is" if len(kinds) == 1
                else f"the {' and '.join(kinds)} {ns}/{name} are left as they are")
        # a claim whose marks outlived the annotation (admit.families.marks): its message says it all
        return [Action("invalid", claim=c, message=str(c.error) if c.held else f"{c.ref}: {c.error}; {kept} until "
                                                                                "this is fixed")]
    live = {k: o for k, o in managed.items() if not (o.get("metadata") or {}).get("deletionTimestamp")}
    if not live or any(not r.get("controller") for o in live.values()  # GangPlan.kept_by: the GC deletes it
                       for r in (o.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict)):
        return [Action("none", unclaimed=True)]
    since = now if unclaimed_since is None else unclaimed_since
    left = grace - (now - since)
    if left > 0:
        return [Action("wait", delay=left, unclaimed=True)]
    what = f"{kinds[0]} {ns}/{name}" if len(kinds) == 1 else f"{ns}/{name}"
    message = f"{what} (owner {owner}) is claimed by no stored workload for {grace:g}s"
    return [Action("delete", object_kind=k, uid=(o.get("metadata") or {}).get("uid"), unclaimed=True,
                   message=message)
            for k, o in sorted(live.items(), key=lambda kv: kinds.index(kv[0]), reverse=True)]
