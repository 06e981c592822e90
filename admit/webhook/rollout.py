"""Rolling updates that move running pods into a gang: when they deadlock (pure).

Found on a real control plane (the real test tier): annotating a running Deployment (3 replicas, minMember 3)
makes admit add the pod-group label to its template, so the Deployment controller rolls it over to a new ReplicaSet.
A rolling update creates the new pods a few at a time and removes old pods only once new ones are available; but
the first new pods are the only members of their PodGroup, Coscheduling keeps them Pending until minMember of them
exist (PreFilter "cannot find enough sibling pods", scheduler-plugins ``pkg/coscheduling/core/core.go``), and no
more come until some run. The rollout never finishes and no gang pod ever runs.

A rollout of a Deployment that is already a gang of the same group is not affected: its old pods carry the same
label, count as siblings, and are already bound (Permit counts them), so each new pod is admitted at once.

How many new pods a rollout makes before any of them is available (the rule refused here when below minMember; each
kind's own rule is its record's ``WorkloadKind.rollout``, written in ``admit/families/apps.py``):

- Deployment, ``strategy.type: RollingUpdate`` (the default): ``maxSurge`` + ``maxUnavailable``, both resolved
  against ``spec.replicas`` as ``deployment/util.ResolveFenceposts`` does (a percentage of maxSurge rounds up, of
  maxUnavailable rounds down; both 0 means maxUnavailable 1); kube-apiserver defaults both to 25% before admission.
  ``Recreate`` deletes every old pod first and then creates all new ones at once: never affected.
- StatefulSet, ``updateStrategy.type: RollingUpdate`` (the default): ``rollingUpdate.maxUnavailable`` pods at a
  time (default 1; a percentage rounds down, at least 1, as ``getStatefulSetMaxUnavailable`` in
  ``pkg/controller/statefulset/stateful_set_control.go``); ``OnDelete`` leaves the pace to the user: never refused.
  ``Recreate`` (alpha in Kubernetes 1.37 behind the gate ``StatefulSetRecreateStrategy`` on kube-apiserver and
  kube-controller-manager, kubernetes#137187; beta planned for 1.38) deletes every pod, waits until all are gone,
  then creates the new ones as ``podManagementPolicy`` says (KEP-3541, "Recreate Update Logic"); a gang of more than
  one is always ``Parallel`` (``families/apps.py``), so all start together: never affected, like a Deployment's
  Recreate. With the gate off kube-apiserver refuses the type ("must be 'RollingUpdate' or 'OnDelete'", the
  registry's validation test), so admit never sees it; with the gate on kube-apiserver but not on
  kube-controller-manager, the controller falls back to a rolling update (KEP-3541, "Version Skew Strategy"), which
  admit cannot see. The controller's own code is not in the stored sources: unconfirmed until a 1.37 plane runs it.

Only UPDATEs whose old object runs pods (``spec.replicas`` > 0) in another group (no pod-group label, or another
value; with a backend whose pods name their group in ``spec.schedulingGroup``, no such field naming it: kube-scheduler's
GangScheduling PreEnqueue likewise holds new pods until ``minCount`` of them exist) are judged; a paused or new
workload starts all its pods at once.
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
        f"{plan.ref} runs {old_replicas} pod{'s' if old_replicas != 1 else ''} outside gang {plan.group_name}; this "
        f"update moves them into it (minMember {plan.min_member}) by a rolling update, which makes at most {at_once} "
        f"new pod{'s' if at_once != 1 else ''} at a time ({how}) and waits for them to run, while "
        f"{scheduler_of(plan.backend)} keeps them Pending until {plan.min_member} exist: the rollout would never "
        f"finish. Instead, {fixes}"
    )


def _marked(obj: dict[str, Any], plan: GangPlan, config: Config, leaving: bool = False) -> dict[str, Any] | None:
    """``obj`` with the plan's marks put in as its backend writes them (``join_ops``; ``leaving``: taken off,
    ``leave_ops``), or ``None`` when they do not apply to it (a family's extra operations computed against another
    version of the object)."""
    backend = backend_of(plan.backend)
    ops = backend.leave_ops(obj, plan, config)[0] if leaving else backend.join_ops(obj, plan, config, True, None)[0]
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
    or nothing would happen.

    Args:
        obj / old: the workload as sent or admitted, and as stored before the UPDATE.
        old_plan: the gang plan of ``old`` (what admit's marks there are).
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
