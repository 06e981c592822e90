"""Rolling updates that move running pods into a gang: when they deadlock (pure).

Annotating a running Deployment (3 replicas, minMember 3) makes admit mark its template, so the Deployment controller
rolls it over to a new ReplicaSet, a few new pods at a time, removing old pods only once new ones are available; but the
first new pods are the only members of their group, the gang scheduler keeps them Pending until minMember of them exist
(Coscheduling's PreFilter "cannot find enough sibling pods", scheduler-plugins ``pkg/coscheduling/core/core.go``;
kube-scheduler's GangScheduling PreEnqueue likewise), and no more come until some run. A rollout of a workload already
in the same group is not affected: its old pods count as siblings and are bound.

So an UPDATE whose old object runs pods (``spec.replicas`` > 0) outside the plan's group is refused when its
rollout makes fewer new pods at once than minMember. Each kind's pace is its record's ``WorkloadKind.rollout``
(``families/apps.py``: a Deployment's ``maxSurge`` + ``maxUnavailable``, ``deployment_at_once``; a StatefulSet's
``maxUnavailable``, ``statefulset_at_once``); ``Recreate`` and ``OnDelete`` are never refused. A StatefulSet's
``Recreate`` (alpha in Kubernetes 1.37, gate ``StatefulSetRecreateStrategy``, kubernetes#137187; KEP-3541, "Recreate
Update Logic") deletes every pod first, then starts the new ones together (a gang is always ``Parallel``); with the
gate on kube-apiserver but not on kube-controller-manager it falls back to a rolling update (KEP-3541, "Version Skew
Strategy"), which admit cannot see; the controller's code is not in the stored sources (unconfirmed until a 1.37
plane runs it). A paused or new workload starts all its pods at once.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from ..backends import backend_of, scheduler_of
from ..config import Config
from ..families.apps import resolve_int_or_percent
from ..families.kinds import KINDS
from ..families.shared import RunningUpdate, RunningVerdict
from ..gang.plan import BelowMinMember, GangPlan, get_path

__all__ = ["removal_problem", "rollout_problem", "resolve_int_or_percent", "running_problem"]


def rollout_problem(obj: dict[str, Any], old: dict[str, Any] | None, plan: GangPlan, config: Config) -> str | None:
    """Why this UPDATE's rolling update can never form the gang, with the fixes; None when it can (or is not one).

    Args:
        obj / old: the workload after mutation and as stored before the UPDATE.
        plan: the gang plan of ``obj``.
    """
    kind = KINDS.get((plan.api_group, plan.kind))
    rollout = kind.rollout if kind is not None else None
    if old is None or rollout is None or plan.min_member <= 1:
        return None
    if any(backend_of(plan.backend).joined(old, t, plan, config) for t in plan.targets):
        return None  # already this gang (its backend's joined): old pods count as siblings
    old_replicas = get_path(old, ("spec", "replicas"))
    old_replicas = 1 if old_replicas is None else old_replicas
    if not isinstance(old_replicas, int) or isinstance(old_replicas, bool) or old_replicas <= 0:
        return None
    replicas = plan.total_pods or 0
    found = rollout.at_once(obj, replicas)
    if found is None:
        return None
    at_once, how = found
    if at_once >= plan.min_member:
        return None
    fixes = rollout.fixes(plan.min_member, replicas)
    return (
        f"{fixes}: {plan.ref} runs {old_replicas} pod{'s' if old_replicas != 1 else ''} outside gang "
        f"{plan.group_name}, and this update moves them into it (minMember {plan.min_member}) by a rolling update, "
        f"which makes at most {at_once} new pod{'s' if at_once != 1 else ''} at a time ({how}) and waits for them "
        f"to run, while {scheduler_of(plan.backend)} keeps them Pending until {plan.min_member} exist, so the "
        "rollout would never finish"
    )


def _marked(obj: dict[str, Any], plan: GangPlan, config: Config, leaving: bool = False) -> dict[str, Any] | None:
    """``obj`` with the plan's marks put in as ``mutate.plan_patch`` writes them (its backend's ``join_ops`` and the
    plan's ``extra_ops``; ``leaving``: taken off, ``leave_ops``), or ``None`` when they do not apply to it (a family's
    extra operations computed against another version of the object)."""
    backend = backend_of(plan.backend)
    ops = backend.leave_ops(obj, plan, config)[0] if leaving else \
        backend.join_ops(obj, plan, config, True, None)[0] + plan.extra_ops
    try:
        result = jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        return None
    return result if isinstance(result, dict) else None


def running_problem(obj: dict[str, Any], old: dict[str, Any] | None, plan: GangPlan,
                    config: Config) -> RunningVerdict | None:
    """What the kind's operator would do with admit's write on this UPDATE of a stored object, when it refuses or
    acts on it (the kind's ``WorkloadKind.running_update``: Trainer's ``runtimePatches`` immutability, the
    spark-operator's re-run, LWS's rolling update), or None. The same answer in both phases: the mutating phase
    writes nothing when it is a refusal (so that no other webhook refuses a write the user never made) and the
    validating phase refuses with the message; a warning is given by both (kube-apiserver sends a warning once).

    Args:
        obj / old: the workload as sent or admitted, and as stored before the UPDATE.
        plan: the gang plan of ``obj``.
    """
    kind = KINDS.get((plan.api_group, plan.kind))
    rule = kind.running_update if kind is not None else None
    if old is None or rule is None or not plan.mutate:
        return None
    try:
        return rule(RunningUpdate(obj, old, _marked(obj, plan, config), _marked(old, plan, config)), plan, config)
    except BelowMinMember as e:  # a family's refusal as data, named with the backend's scheduler here
        return RunningVerdict(e.message_for(scheduler_of(plan.backend)), True)


def removal_problem(obj: dict[str, Any], old: dict[str, Any], old_plan: GangPlan,
                    config: Config) -> RunningVerdict | None:
    """What the kind's operator would do with admit's write on an UPDATE that removes the gang annotations of a
    stored gang workload (admit takes its marks off: the backend's ``leave_ops``), judged by the same rule as adding
    them (``WorkloadKind.running_update``, with ``RunningUpdate.removing``): a re-run, a rolling restart, a field
    the operator keeps immutable. None when the kind has no rule, admit wrote nothing (``old_plan.mutate`` false)
    or nothing would happen. ``obj`` / ``old``: as :func:`running_problem`'s; ``old_plan``: the gang plan of ``old``.
    """
    kind = KINDS.get((old_plan.api_group, old_plan.kind))
    rule = kind.running_update if kind is not None else None
    if rule is None or not old_plan.mutate:
        return None
    update = RunningUpdate(obj, old, _marked(obj, old_plan, config, True), _marked(old, old_plan, config, True), True)
    try:
        return rule(update, old_plan, config)
    except BelowMinMember:  # a rule judging a gang that is going away has nothing to refuse
        return None
