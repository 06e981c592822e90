"""PodGroup objects (scheduling.x-k8s.io/v1alpha1): the desired object, spec comparison, ownership. Pure.

The PodGroup shape follows scheduler-plugins ``apis/scheduling/v1alpha1/types.go``: ``spec.minMember`` (int32 >= 1),
``spec.minResources`` (ResourceList), ``spec.scheduleTimeoutSeconds`` (int32, optional). admit's marks on the
PodGroups it creates (``common.py``) mean that:

- a second workload that would take the same name is refused (its author picks another with
  ``gang.admit.dev/pod-group``);
- a PodGroup admit did not create is never modified: one named explicitly by annotation is used as it is (the seed
  blog post's hand-written ``pg1``); one that merely has the workload's default name is refused with a hint;
- a PodGroup whose controller ownerReference names the same workload was made by that workload's operator
  (Kubeflow training-operator, spark-operator): admit leaves it alone and says so.
"""

from __future__ import annotations

from typing import Any

from ...config import Config
from ...gang.ownerrefs import controller_identity
from ...gang.plan import GangPlan
from ...gang.quantity import QuantityError, format_resources, parse_quantity
from ..common import (Ownership, gang_metadata, generation_annotation, managed_ownership, members_left,
                      succeeded_record)

__all__ = ["desired_pod_group", "spec_differs", "spec_json_patch", "merge_shared_spec", "members_still_to_run",
           "ownership", "spec_changes", "describe_spec"]


def desired_pod_group(plan: GangPlan, config: Config, generation: int | None = None) -> dict[str, Any]:
    """The PodGroup admit creates for ``plan``: ``{"apiVersion", "kind", "metadata", "spec": {...}}``
    (``common.gang_metadata``). ``generation``: the workload's ``metadata.generation`` the spec comes from, stamped
    as :func:`generation_annotation`."""
    meta = gang_metadata(plan, config)
    if generation is not None:
        meta["annotations"][generation_annotation(config)] = str(generation)
    return {"apiVersion": config.pod_group_api_version, "kind": "PodGroup", "metadata": meta,
            "spec": plan.pod_group_spec()}


_FIELDS = ("minMember", "minResources", "scheduleTimeoutSeconds")  # the spec fields admit manages


def _same_resources(a: Any, b: Any) -> bool:
    a = a or {}
    b = b or {}
    if not isinstance(a, dict) or not isinstance(b, dict) or a.keys() != b.keys():
        return False
    try:
        return all(parse_quantity(a[k]) == parse_quantity(b[k]) for k in a)
    except QuantityError:
        return False


def _differs(key: str, have: Any, want: Any) -> bool:
    return not _same_resources(have, want) if key == "minResources" else have != want


def spec_differs(existing: dict[str, Any], desired_spec: dict[str, Any]) -> bool:
    """True when ``existing`` (a PodGroup) differs from ``desired_spec`` in the fields admit manages.

    Quantities compare by value (``"1"`` equals ``"1000m"``); a field admit does not set must be absent.
    """
    spec = spec_v if isinstance(spec_v := existing.get("spec"), dict) else {}
    return any(_differs(key, spec.get(key), desired_spec.get(key)) for key in _FIELDS)


def spec_json_patch(existing: dict[str, Any], desired_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch that makes the managed spec fields of ``existing`` equal ``desired_spec`` (exact: resource names
    that disappear are removed, which a merge patch of a map cannot express without knowing the old keys)."""
    spec = existing.get("spec")
    if not isinstance(spec, dict):
        return [{"op": "add", "path": "/spec", "value": dict(desired_spec)}]
    ops: list[dict[str, Any]] = []
    for key in _FIELDS:
        want = desired_spec.get(key)
        if want is None:
            if key in spec:
                ops.append({"op": "remove", "path": f"/spec/{key}"})
        elif key not in spec:
            ops.append({"op": "add", "path": f"/spec/{key}", "value": want})
        elif _differs(key, spec.get(key), want):
            ops.append({"op": "replace", "path": f"/spec/{key}", "value": want})
    return ops


def merge_shared_spec(existing: dict[str, Any], plan: GangPlan,
                      members: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The spec a PodGroup shared by bare pods gets from one more member ``plan``, and the warnings.

    No member lowers what another member set: the largest minMember wins (with the ``minResources`` that came with
    it), and ``scheduleTimeoutSeconds`` set by another member stays when this one sets none. When this member gives
    a size (``plan.size_known``) that differs from the group's, the answer carries a warning naming both numbers.
    A group whose size follows its members (``plan.follows_members``, with ``members``, the group's pods as read)
    is sized by :func:`members_still_to_run` instead once one of them has succeeded.
    Returns ``(spec, warnings)``; ``existing`` is the stored PodGroup.
    """
    desired = plan.pod_group_spec()
    spec = spec_v if isinstance(spec_v := existing.get("spec"), dict) else {}
    if plan.follows_members and members is not None:
        following = members_still_to_run(desired, spec, plan.min_member, members, succeeded_record(existing)[1])
        if following is not None:
            return following, []
    have = spec.get("minMember")
    want = desired["minMember"]
    pg = f"PodGroup {plan.namespace}/{plan.group_name}"
    warnings: list[str] = []
    out = dict(desired)
    if isinstance(have, int) and not isinstance(have, bool) and have > want:
        out["minMember"] = have
        if isinstance(spec.get("minResources"), dict):
            out["minResources"] = dict(spec["minResources"])
        else:
            out.pop("minResources", None)
        if plan.size_known:
            warnings.append(
                f"give every member of {str(pg)[:100]} the same size: it keeps minMember {have}, set by another "
                f"member; this {plan.kind} says {want}")
    elif isinstance(have, int) and have < want and plan.size_known and have != 1:
        warnings.append(
            f"{pg} minMember raised from {have} to {want} by {plan.ref}: the pods of one group disagree on its size"
        )
    if "scheduleTimeoutSeconds" not in out and spec.get("scheduleTimeoutSeconds") is not None:
        out["scheduleTimeoutSeconds"] = spec["scheduleTimeoutSeconds"]
    return out, warnings


def members_still_to_run(desired: dict[str, Any], stored: dict[str, Any], asked: int,
                          members: list[dict[str, Any]], recorded: set[str] | None = None) -> dict[str, Any] | None:
    """The spec of a shared group whose size follows its members (``GangPlan.follows_members``): ``desired`` with
    ``minMember`` :func:`common.members_left` of ``asked`` (this member's minMember), the group's other pods
    ``members`` and the members that succeeded ``recorded`` on the PodGroup (``common.succeeded_record``), or ``None``
    while none of them has finished. ``minResources`` (``asked`` pods' requests) follows in proportion;
    ``scheduleTimeoutSeconds`` set by another member stays (``stored``: the stored spec).
    """
    left = members_left(asked, members, recorded)
    if left is None:
        return None
    out = dict(desired, minMember=left)
    if isinstance(out.get("minResources"), dict) and asked > 0:
        try:
            out["minResources"] = format_resources(
                {k: parse_quantity(v) * left / asked for k, v in out["minResources"].items()})
        except QuantityError:
            pass  # kept as this member computed it
    if "scheduleTimeoutSeconds" not in out and stored.get("scheduleTimeoutSeconds") is not None:
        out["scheduleTimeoutSeconds"] = stored["scheduleTimeoutSeconds"]
    return out


def ownership(existing: dict[str, Any], plan: GangPlan, config: Config, explicit_name: bool,
              others: int | None = None) -> Ownership:
    """Decide whether ``plan`` may manage, use, or must leave the existing PodGroup (rules in module docstring).

    ``explicit_name`` is True when the user named the group with ``gang.admit.dev/pod-group``; ``others``: as
    ``interface.GangBackend.ownership`` (``None`` also for ``admit review``, no controller). A PodGroup admit did
    not create whose ``minMember`` is above the pods that can join it can never be filled: the Coscheduling plugin's
    PreFilter rejects every pod while fewer than minMember pods carry its label (scheduler-plugins
    ``pkg/coscheduling/core/core.go``). Joining it alone with fewer pods (``plan.total_pods`` above 0) is refused
    (403), naming both numbers and the fixes (scheduler-plugins' own example: PodGroup ``pg1`` with minMember 3 and
    a Deployment of 2 labelled for it); when other workloads name it too, their pods count, and a shortfall is a
    warning (one of them may still grow).
    """
    pg = f"PodGroup {plan.namespace}/{plan.group_name}"
    managed = managed_ownership(existing, plan, config, pg)
    if managed is not None:
        return managed
    ref_owner = controller_identity(existing)
    if ref_owner is not None and ref_owner == plan.owner:
        return _operator_owned(existing, plan, pg)
    if explicit_name:
        return _use_named(existing, plan, config, pg, others)
    return Ownership(
        "conflict",
        f"Set annotation {config.pod_group_key} to another name, or to {plan.group_name!r} to join that PodGroup as "
        f"it is: {pg} already exists and was not created by admit",
    )


def _operator_owned(existing: dict[str, Any], plan: GangPlan, pg: str) -> Ownership:
    """``ownership`` of a PodGroup made by the workload's own operator (its controller ownerReference names the
    workload, and admit did not create it): never written by admit, whatever the replicas say. The operator reconciles
    its own spec, so a second writer would undo and redo it on every sync (the training-operator and the
    spark-operator set minMember from their own fields). When its minMember no longer matches the pods, admit says
    so. ``pg`` is ``"PodGroup <namespace>/<name>"``."""
    warning = f"{pg[:140]} is managed by the {plan.kind}'s own operator; admit leaves it unchanged"
    have = (existing.get("spec") or {}).get("minMember")
    total = plan.total_pods
    if isinstance(have, int) and not isinstance(have, bool) and total is not None and 0 < total != have:
        warning = (f"change its minMember {have} where the {plan.kind}'s operator sets it, or delete {pg[:140]} so "
                   f"that admit makes its own: this {plan.kind} runs {total} pod{'s' if total != 1 else ''}"
                   + (", so every pod stays Pending until they match" if total < have else ""))
    return Ownership("operator", warnings=[warning])


def _use_named(existing: dict[str, Any], plan: GangPlan, config: Config, pg: str, others: int | None) -> Ownership:
    """``ownership`` of a PodGroup admit did not create that the user named with ``gang.admit.dev/pod-group``: used as
    it is, refused (403) when its minMember is above the pods that can ever join it and no other workload names it,
    a warning when others do (see ``ownership``). ``pg`` is ``"PodGroup <namespace>/<name>"``."""
    warnings = []
    spec = existing.get("spec") or {}
    have = spec.get("minMember")
    total = plan.total_pods
    if isinstance(have, int) and not isinstance(have, bool) and total is not None and total > 0 \
            and have > total + (others or 0):
        counted = f"{total} pod{'s' if total != 1 else ''}" + (f" ({plan.total_field}={total})"
                                                                 if plan.total_field else "")
        if others is not None:
            warnings.append(
                f"run {have} pods together in the workloads that name {str(pg)[:100]}: it needs minMember {have} (not set "
                f"by admit), this one runs {total}, the others {others}; until then all stay Pending")
            return Ownership("use", warnings=warnings)
        return Ownership(
            "conflict", code=403, message=(
                f"Run at least {have} pods{' (' + plan.total_field + ')' if plan.total_field else ''}, or lower the "
                f"PodGroup's spec.minMember to {total} (kubectl patch podgroup {plan.group_name} -n {plan.namespace} "
                f"--type merge -p '{{\"spec\":{{\"minMember\":{total}}}}}'), or remove {config.pod_group_key} to "
                "let admit make a PodGroup of its own (workloads that share one PodGroup: create them all with 0 "
                f"replicas, then scale them up): {pg} was not created by admit and needs minMember {have}, but "
                f"{plan.ref} runs {counted}, so the Coscheduling plugin would keep every pod Pending forever"))
    if spec.get("minMember") != plan.min_member:
        warnings.append(
            f"{pg} was not created by admit and is used as it is: its minMember is {spec.get('minMember')}, "
            f"not {plan.min_member}"
        )
    return Ownership("use", warnings=warnings)


def spec_changes(pg: dict[str, Any], desired_spec: dict[str, Any]) -> list[str]:
    """Human list of the managed spec fields that differ: ``["minMember 3 -> 5"]``."""
    spec = spec_v if isinstance(spec_v := pg.get("spec"), dict) else {}
    out = []
    for key in _FIELDS:
        have, want = spec.get(key), desired_spec.get(key)
        if key == "minResources":
            have, want = have or {}, want or {}
        if _differs(key, have, want):
            out.append(f"{key} {have} -> {want}")
    return out


def describe_spec(spec: dict[str, Any]) -> list[str]:
    """Human list of a PodGroup spec's fields: ``["minMember 3", "minResources {'cpu': '3'}"]``."""
    return [f"{k} {spec[k]}" for k in _FIELDS if k in spec]
