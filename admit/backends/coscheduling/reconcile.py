"""The pure reconcile decision of the PodGroup controller: (PodGroup, claims, clock) -> one
:class:`admit.backends.action.Action`.

Create, patch (adopt and/or keep the spec in step), delete, wait, or report a conflict / an invalid annotation /
a PodGroup that looks managed but is not admit's. Tested without HTTP (``tests/controller/test_controller.py``); the loop that
runs it, and the live reads that guard its destructive and owner-setting writes, are in ``controller/podgroups.py``.

Two writers, one rule: the validating webhook writes a PodGroup's spec from the incoming
workload before that workload is stored, and stamps it with the workload generation it came from
(``podgroup.generation_annotation``) and, for an UPDATE, with the ``resourceVersion`` of the stored workload that
update replaces (``podgroup.replaces_annotation``: an annotation-only change bumps the generation of a Deployment
only). :func:`decide` never writes a spec computed from an older generation than the stamp, nor from the stored
version the webhook's update replaces: it waits for the workload's own event (``Action.ahead``); only when the
cached workload stays so for the grace period (the update the webhook saw was refused by a later admission step
and never stored) does it put the spec back.
"""

from __future__ import annotations

from typing import Any

from ...gang.claim import Claim
from ..action import Action
from ...config import Config
from ...gang.ownerrefs import adopt_ops, controlled_by, is_managed, owner_reference
from ..common import not_admits_message
from ..common import object_owner as pod_group_owner
from ..common import ahead_of
from .podgroup import desired_pod_group, generation_patch, ownership, spec_differs, spec_json_patch

__all__ = ["decide", "spec_changes", "describe_spec", "is_managed"]

JSON = dict[str, Any]
GroupKey = tuple[str, str]  # (namespace, PodGroup name)


def spec_changes(pg: JSON, desired_spec: JSON) -> list[str]:
    """Human list of the managed spec fields that differ: ``["minMember 3 -> 5"]``."""
    found = pg.get("spec")
    spec: JSON = found if isinstance(found, dict) else {}
    out = []
    for key in ("minMember", "minResources", "scheduleTimeoutSeconds"):
        have, want = spec.get(key), desired_spec.get(key)
        if key == "minResources":
            if spec_differs({"spec": {"minMember": 0, "minResources": have}},
                            {"minMember": 0, "minResources": want}):
                out.append(f"minResources {have or {}} -> {want or {}}")
        elif have != want:
            out.append(f"{key} {have} -> {want}")
    return out


def describe_spec(spec: JSON) -> list[str]:
    """Human list of a PodGroup spec's fields: ``["minMember 3", "minResources {'cpu': '3'}"]``."""
    return [f"{k} {spec[k]}" for k in ("minMember", "minResources", "scheduleTimeoutSeconds") if k in spec]


def decide(key: GroupKey, pg: JSON | None, claims: list[Claim], config: Config, *, now: float,
           unclaimed_since: float | None, grace: float, ahead_since: float | None = None) -> Action:
    """The one thing to do for PodGroup ``key`` (pure).

    Args:
        key: ``(namespace, name)`` of the PodGroup.
        pg: the PodGroup as last seen (managed or not), or ``None`` when there is none.
        claims: stored workloads whose plan names ``key``, plus those whose identity is the PodGroup's owner
            annotation (so a workload whose annotations became invalid still protects its group).
        now / unclaimed_since: seconds on one monotonic clock; ``unclaimed_since`` is when this PodGroup was first
            seen unclaimed (``None``: not before).
        grace: orphan grace period, seconds; also how long a PodGroup stamped with a newer workload generation
            than the cached workload's is left as it is (``ahead_since``: when that was first seen).
    """
    ns, name = key
    pg_ref = f"PodGroup {ns}/{name}"
    owner = pod_group_owner(pg, config) if pg is not None else None
    valid = [c for c in claims if c.plan is not None and c.key == key]
    if valid:
        valid.sort(key=lambda c: (c.identity != owner, str(c.meta.get("creationTimestamp") or ""), c.identity))
        chosen = valid[0]
        others = [(c, f"{c.ref} names {pg_ref}, which {chosen.ref} already uses; set annotation "
                      f"{config.pod_group_key} on {c.ref} to another name") for c in valid[1:]]
        sharing = [c.plan.total_pods or 0 for c in valid[1:] if c.plan is not None]  # other workloads naming it
        return _claimed(pg_ref, pg, owner, chosen, others, sum(sharing) if sharing else None, config, now=now,
                        grace=grace, ahead_since=ahead_since)
    invalid = [c for c in claims if c.plan is None and c.identity == owner]
    return _unclaimed(pg_ref, pg, owner, invalid, config, now=now, unclaimed_since=unclaimed_since, grace=grace)


def _claimed(pg_ref: str, pg: JSON | None, owner: str | None, chosen: Claim, others: list[tuple[Claim, str]],
             sharing: int | None, config: Config, *, now: float, grace: float, ahead_since: float | None) -> Action:
    """The PodGroup of a gang a stored workload (``chosen``) claims: create it, leave it, or bring it in step
    (``sharing``: the pods of the other workloads naming it, for ``ownership``; ``None``: none)."""
    plan = chosen.plan
    assert plan is not None
    if chosen.deleting:
        return Action("none", claim=chosen, message=f"{chosen.ref} is being deleted", others=others)
    desired = desired_pod_group(plan, config, chosen.generation)
    if pg is None:
        if not plan.shared:
            desired["metadata"]["ownerReferences"] = [owner_reference(chosen.workload)]
        return Action("create", claim=chosen, body=desired, changes=describe_spec(desired["spec"]), others=others)
    if (pg.get("metadata") or {}).get("deletionTimestamp"):
        return Action("none", claim=chosen, message=f"{pg_ref} is being deleted", others=others)
    if is_managed(pg) and owner is None:
        return Action("foreign", claim=chosen, message=not_admits_message(pg_ref, config), others=others)
    own = ownership(pg, plan, config, chosen.explicit, sharing)
    if own.action == "conflict":
        return Action("conflict", claim=chosen, message=f"{chosen.ref}: {own.message}", others=others)
    if own.action != "manage":
        return Action("none", claim=chosen, message=own.action, others=others)  # "use" / "operator": leave it
    return _in_step(pg_ref, pg, desired, chosen, others, config, now=now, grace=grace, ahead_since=ahead_since)


def _in_step(pg_ref: str, pg: JSON, desired: JSON, chosen: Claim, others: list[tuple[Claim, str]], config: Config,
             *, now: float, grace: float, ahead_since: float | None) -> Action:
    """A managed PodGroup: adopt it and patch its spec where it differs, unless it was written from a newer
    workload generation than the cached one (wait up to ``grace`` for the cache)."""
    plan = chosen.plan
    assert plan is not None
    ops: list[JSON] = []
    adopt = False
    if not plan.shared and not controlled_by(pg, chosen.uid):
        ops.extend(adopt_ops(pg, chosen.workload))
        adopt = True
    changes: list[str] = []
    if spec_differs(pg, desired["spec"]):
        ahead = ahead_of(pg, chosen, config)
        if ahead is not None:
            waited = 0.0 if ahead_since is None else now - ahead_since
            if waited < grace:
                return Action("wait", claim=chosen, delay=grace - waited, ahead=True, others=others,
                              message=f"{pg_ref} was written {ahead}: waiting for it")
        changes = spec_changes(pg, desired["spec"])
        ops.extend(spec_json_patch(pg, desired["spec"]))
        ops.extend(generation_patch(pg, chosen.generation, config))
    if not ops:
        return Action("none", claim=chosen, others=others)
    rv = (pg.get("metadata") or {}).get("resourceVersion")
    if rv:
        ops.append({"op": "replace", "path": "/metadata/resourceVersion", "value": rv})
    return Action("patch", claim=chosen, ops=ops, adopt=adopt, changes=changes, others=others)


def _unclaimed(pg_ref: str, pg: JSON | None, owner: str | None, invalid: list[Claim], config: Config, *,
               now: float, unclaimed_since: float | None, grace: float) -> Action:
    """A PodGroup no stored workload claims: leave one admit did not make, or one an invalid claim protects; wait out
    the grace period, then delete it."""
    if pg is None or not is_managed(pg):
        return Action("none")
    if owner is None:
        return Action("foreign", message=not_admits_message(pg_ref, config))
    if invalid:
        c = invalid[0]
        if c.held:  # admit's marks outlived the annotation (admit.families.marks): the message says it all
            return Action("invalid", claim=c, message=str(c.error))
        return Action("invalid", claim=c, message=f"{c.ref}: {c.error}; {pg_ref} is left as it is until this is fixed")
    if (pg.get("metadata") or {}).get("deletionTimestamp"):
        return Action("none", unclaimed=True)
    since = now if unclaimed_since is None else unclaimed_since
    left = grace - (now - since)
    if left > 0:
        return Action("wait", delay=left, unclaimed=True)
    return Action("delete", unclaimed=True,
                  message=f"{pg_ref} (owner {owner}) is claimed by no stored workload for {grace:g}s")
