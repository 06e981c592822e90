"""Gang plans for the built-in workload kinds: Deployment, ReplicaSet, StatefulSet (apps/v1), Job and CronJob
(batch/v1), Pod.

Rules and their sources:

- ``auto`` minMember: Deployment/ReplicaSet/StatefulSet ``spec.replicas`` (API default 1); Job ``spec.parallelism``
  (API default 1), capped by ``spec.completions`` and lowered to the Job's last wave (:func:`job_last_wave`).
- StatefulSet ``podManagementPolicy`` defaults to ``OrderedReady`` and is immutable (Kubernetes docs
  "StatefulSets", pod management policies): OrderedReady creates pod N+1 only after pod N is Ready, so a gang of
  more than one pod deadlocks; admit refuses it and says to recreate with ``Parallel``.
- Job ``spec.template`` is immutable after creation (Kubernetes API validation, ``ValidateJobUpdate``): on UPDATE
  admit cannot label it, so it warns instead of patching.
- ``replicas: 0`` is a paused workload, not a broken gang: it is allowed (no pods wait), with a note.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from typing import Any

from ..config import Config
from ..gang.foreign import (KUEUE_COMPLETIONS_FOLLOW, KUEUE_GROUP_NAME, KUEUE_MIN_PARALLELISM, KUEUE_TOTAL_COUNT,
                            MULTIKUEUE_MANAGED_BY, MULTIKUEUE_ORIGIN, kueue_group)
from ..gang.plan import (
    GangAnnotations, GangError, GangPlan, PodTarget, Wave, below_min_member, check_group_name,
    choose_group_name, counted_and_fix, get_map, get_path, int_field,
)
from .shared import POD_TARGET, Rollout, WorkloadKind, min_resources_of, object_ref, template_target

__all__ = ["KINDS", "resolve_replicated", "resolve_statefulset", "resolve_job", "job_last_wave", "job_can_still_run", "index_count", "resolve_pod",
           "GROUP_TEMPLATE_ANNOTATION", "job_scheduling", "resolve_cronjob",
           "job_from_cronjob", "JOB_TEMPLATE", "CRONJOB_SCHEDULED_ANNOTATION"]

TEMPLATE = template_target(("spec", "template"), "pod template")
POD = POD_TARGET


def runtime_class_of(pod_spec: Any, ann: GangAnnotations) -> str | None:
    """The ``runtimeClassName`` whose overhead kube-apiserver will add to pods of ``pod_spec`` (none when the spec
    sets ``overhead`` itself, or when ``min-resources: none``): see ``GangPlan.runtime_class``."""
    if not ann.min_resources or not isinstance(pod_spec, dict) or pod_spec.get("overhead"):
        return None
    name = pod_spec.get("runtimeClassName")
    return name if isinstance(name, str) and name else None


def _name(obj: dict[str, Any]) -> str:
    return str(get_path(obj, ("metadata", "name")) or "")


def _replicated_plan(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, kind: str, api_group: str,
    total: int, total_field: str, target: PodTarget, last_wave: Wave | None = None,
) -> GangPlan:
    name = _name(obj)
    group_name = choose_group_name(obj, ann, [target], config, kind, name)
    auto_size = min(total, last_wave.size) if last_wave is not None and total > 0 else total
    min_member = ann.min_member if ann.min_member is not None else max(auto_size, 1)
    pod_spec = get_path(obj, ("spec", "template", "spec"))
    plan = GangPlan(
        kind=kind, api_group=api_group, name=name, namespace=namespace, group_name=group_name, min_member=min_member,
        total_pods=total, total_field=total_field, schedule_timeout_seconds=ann.schedule_timeout_seconds,
        targets=[target], last_wave=last_wave, runtime_class=runtime_class_of(pod_spec, ann),
        min_resources=min_resources_of([(pod_spec, min_member)], min_member, ann,
                                       f"{kind} {namespace}/{name} pod template"))
    if ann.min_member is None and auto_size < total:
        assert last_wave is not None
        # a smaller gang that still gangs is admit's choice, explained (a note); a gang of 1 gangs nothing (a warning)
        if min_member == 1:  # the fix first: kube-apiserver may cut a warning to 256 characters
            plan.warnings.append(f"{last_wave.fix} to gang {total} pods: a last wave of 1 pod makes the auto minMember 1, "
                                 "no gang (docs/workloads.md#the-last-wave-of-a-job)")
            plan.notes.append(f"{plan.ref}: {last_wave.why}, so its auto minMember is 1, not {total}, for every wave "
                              "to start (a gang of 1: its pods are scheduled one by one)")
        else:
            plan.notes.append(
                f"{plan.ref}: {last_wave.why}, so its auto minMember is {min_member}, not {total}, for every wave to "
                f"start; {last_wave.fix} to gang {total} pods")
    if total == 0:
        plan.notes.append(
            f"{plan.ref} has {total_field}=0: no pods run; its PodGroup keeps minMember {min_member}"
        )
    return plan


def resolve_replicated(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str,
    kind: str = "Deployment",
) -> GangPlan:
    """Plan for a Deployment, ReplicaSet or StatefulSet (apps/v1): pods = ``spec.replicas`` (default 1)."""
    replicas = int_field(obj, ("spec", "replicas"), 1, "spec.replicas")
    assert replicas is not None
    return _replicated_plan(obj, ann, config, namespace, kind, "apps", replicas, "spec.replicas", TEMPLATE)


def resolve_statefulset(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
) -> GangPlan:
    """Plan for a StatefulSet; refuses ``podManagementPolicy: OrderedReady`` (the default) with minMember > 1."""
    plan = resolve_replicated(obj, ann, config, namespace, operation, kind="StatefulSet")
    policy = get_path(obj, ("spec", "podManagementPolicy")) or "OrderedReady"
    if plan.min_member > 1 and policy != "Parallel":
        # kube-apiserver defaults the field before admission, so an unset policy arrives as "OrderedReady": say that
        # it is the default either way (seen on a real control plane; an offline review sees the field unset).
        if policy == "OrderedReady":
            policy = "OrderedReady (the default when spec.podManagementPolicy is not set)"
        fix = (
            "Delete the StatefulSet (kubectl delete --cascade=orphan keeps the pods) and create it again with "
            "spec.podManagementPolicy set to Parallel (podManagementPolicy is immutable)"
            if operation == "UPDATE"
            else "Set spec.podManagementPolicy to Parallel"
        )
        raise GangError(
            f"{fix}: {plan.ref} uses podManagementPolicy {policy} with gang minMember {plan.min_member}, and "
            f"OrderedReady starts one pod only after the previous one is Ready, so the gang never reaches "
            f"{plan.min_member} pods and deadlocks"
        )
    return plan


def job_last_wave(parallelism: int, completions: int | None, indexed: bool, backoff_limit_per_index: int | None
                  ) -> Wave | None:
    """The smallest group of pods a Job starts on its own after its first wave, or ``None`` when every wave is as
    large as the first (pure; numbers as in ``spec``).

    - The Job controller keeps at most min(``parallelism``, remaining completions) pods active (Kubernetes docs
      "Jobs", "Controlling parallelism"), so ``completions`` run ``first = min(parallelism, completions)`` at a
      time and end with a wave of ``completions mod first`` pods when that is not 0; the same for
      ``completionMode: Indexed`` (the last indexes).
    - ``backoffLimitPerIndex`` > 0 (Indexed only, restartPolicy Never) retries a failed index with a new pod of its
      own, after a per-index back-off: a wave of 1 pod (Kubernetes docs "Jobs", "Backoff limit per index").
    """
    first = parallelism if completions is None else min(parallelism, completions)
    if first <= 0:
        return None
    waves: list[Wave] = []
    if completions is not None and completions % first:
        last = completions % first
        pods = f"{last} pod{'s' if last != 1 else ''}"
        done = completions - last
        if indexed:
            which = f"index {done}" if last == 1 else f"indexes {done}..{completions - 1}"
            why = (f"completionMode Indexed with spec.completions={completions} and spec.parallelism={parallelism} "
                   f"ends with a last wave of {pods} ({which}) once the first {done} have finished")
        else:
            why = (f"spec.completions={completions} with spec.parallelism={parallelism} ends with a last wave of "
                   f"{pods} once the first {done} completions have finished")
        waves.append(Wave(last, why, f"set spec.completions to a multiple of {first} (e.g. {done} or "
                                     f"{done + first})"))
    if indexed and backoff_limit_per_index:
        waves.append(Wave(1, f"spec.backoffLimitPerIndex={backoff_limit_per_index} retries a failed index with a pod "
                             "of its own, a wave of 1 pod that may start after the other indexes have finished",
                          "set spec.backoffLimitPerIndex to 0 (no index is then retried alone)"))
    return min(waves, key=lambda w: w.size) if waves else None


def index_count(intervals: Any) -> int:
    """How many indexes a Job status index list names (``status.completedIndexes`` / ``failedIndexes``:
    ``"1,3-5,7"``, the format of ``pkg/controller/job/indexed_job_utils.go`` ``succeededIndexesToString``); 0 for
    anything else (absent, empty, malformed: the Job controller writes it, a user never does)."""
    if not isinstance(intervals, str) or not intervals:
        return 0
    count = 0
    for part in intervals.split(",")[:10_000]:
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return 0
        count += (int(last) - int(first) + 1) if last else 1
    return max(count, 0)


def job_can_still_run(parallelism: int, completions: int | None, status: Any) -> tuple[int, str] | None:
    """How many of a started Job's pods can still run together, from its ``status``, and why; ``None`` while no pod
    has succeeded or an index failed for good (every pod of the first wave is still to come: the spec alone says it).

    The Job controller keeps ``wantActive`` pods active (``pkg/controller/job/job_controller.go``, ``manageJob``):
    with ``completions``, ``completions - succeeded`` capped at ``parallelism`` (a Job's last wave is this number
    once the first waves have succeeded); without, ``parallelism`` until a pod succeeds, then only the pods still
    ``active`` (no new ones). Indexes in ``status.failedIndexes`` (``backoffLimitPerIndex`` exhausted) never run
    again. A minMember above this number would keep a failed pod's replacement Pending (:func:`resolve_job`).
    """
    if not isinstance(status, dict):
        return None
    succeeded = status.get("succeeded")
    succeeded = succeeded if isinstance(succeeded, int) and not isinstance(succeeded, bool) and succeeded > 0 else 0
    failed_for_good = index_count(status.get("failedIndexes"))
    if not succeeded and not failed_for_good:
        return None
    if completions is None:
        active = status.get("active")
        active = active if isinstance(active, int) and not isinstance(active, bool) and active > 0 else 0
        return active, (f"status.succeeded={succeeded} of a Job without spec.completions: no new pod starts, "
                        f"{active} still active")
    left = max(0, min(parallelism, completions - succeeded - failed_for_good))
    lost = f", {failed_for_good} failed for good (status.failedIndexes)" if failed_for_good else ""
    return left, (f"status.succeeded={succeeded} of spec.completions={completions}{lost}: at most {left} of its "
                  f"pods can still run together")


def _partial_admission_breaks(low: int, min_member: int, parallelism: int, completions: int | None, indexed: bool,
                              per_index: int | None, completions_follow: bool) -> int | None:
    """The largest count from ``low`` up to ``parallelism`` - 1 that Kueue's partial admission may start a Job with
    (kueue v0.19.2 ``pkg/controller/jobs/job/job_controller.go`` ``Job.RunWithPodSetsInfo``: ``spec.parallelism`` =
    the admitted count, ``spec.completions`` too when ``completions_follow``,
    ``kueue.x-k8s.io/job-completions-equal-parallelism: "true"``) whose pods at once or last wave
    (:func:`job_last_wave`) are fewer than a fixed ``min_member``; None when every such count keeps the gang."""
    for count in range(min(parallelism - 1, low + 1000), max(low, 1) - 1, -1):
        done = count if completions_follow else completions
        wave = job_last_wave(count, done, indexed, per_index)
        if (count if done is None else min(count, done)) < min_member or (wave is not None and wave.size < min_member):
            return count
    return None


def _kueue_facts(obj: dict[str, Any], plan: GangPlan, ann: GangAnnotations, config: Config, operation: str,
                 shape: tuple[int, int | None, bool, int | None]) -> None:
    """What Kueue does to a Job later, said at admission (changes ``plan`` in place; the keys: ``gang.foreign``;
    ``shape``: parallelism, completions, Indexed, backoffLimitPerIndex): a partial admission count a fixed minMember
    cannot survive (:func:`_partial_admission_breaks`; Kueue's UPDATE of ``spec.parallelism`` would be refused, the Job
    suspended with its quota held) is refused at CREATE (``GangError``, 403), warned on UPDATE, and
    ``plan.refusal_note`` names the annotation; MultiKueue's manager copy left unchanged (a label copied to a worker
    without admit would make its pods wait for a PodGroup nobody creates there), a worker's copy ganged as usual, with
    a note."""
    annotations = get_path(obj, ("metadata", "annotations"))
    raw = annotations.get(KUEUE_MIN_PARALLELISM) if isinstance(annotations, dict) else None
    low = int(raw) if isinstance(raw, str) and raw.strip().isdigit() and len(raw.strip()) < 10 else None
    follow = str(annotations.get(KUEUE_COMPLETIONS_FOLLOW) if isinstance(annotations, dict) else "").lower() == "true"
    worst = None if low is None or ann.min_member is None else \
        _partial_admission_breaks(low, plan.min_member, *shape, follow)
    if worst is not None:
        word = (f"set {KUEUE_MIN_PARALLELISM} to at least {worst + 1}, or {config.min_member_key} to auto: Kueue's "
                f"partial admission may set spec.parallelism={worst}, which minMember {plan.min_member} cannot "
                "survive, and admit would refuse that write, the Job suspended with its quota held")
        if operation == "CREATE":
            raise GangError(f"{word[0].upper()}{word[1:]} ({plan.ref})")
        plan.warnings.append(word)
    if raw is not None and ann.min_member is not None:
        plan.refusal_note = (f"This Job has {KUEUE_MIN_PARALLELISM}={str(raw)[:16]}: if Kueue's partial admission set "
                             f"spec.parallelism, set {KUEUE_MIN_PARALLELISM} to at least {plan.min_member}, or "
                             f"{config.min_member_key} to auto")
    if get_path(obj, ("spec", "managedBy")) == MULTIKUEUE_MANAGED_BY:
        plan.mutate = False
        plan.create_pod_group = False
        plan.min_resources = None
        plan.warnings.append(
            "run admit on the MultiKueue worker clusters to gang this Job: its pods run there "
            f"(spec.managedBy={MULTIKUEUE_MANAGED_BY}); admit leaves this copy unchanged")
        plan.notes.append(
            f"{plan.ref} is dispatched by MultiKueue: its pods run on a worker cluster, where Kueue creates a copy "
            "with these annotations; admit creates no PodGroup here")
    origin = get_path(obj, ("metadata", "labels", MULTIKUEUE_ORIGIN))
    if isinstance(origin, str) and plan.mutate:
        plan.notes.append(
            f"{plan.ref} is MultiKueue's copy from manager {origin[:63]} ({MULTIKUEUE_ORIGIN}): it is ganged here, "
            "where its pods run; admit on the manager (if it runs there) leaves the manager's copy unchanged")


#: A Job's ``spec.backoffLimit`` when none is written: kube-apiserver's default (kubernetes
#: ``pkg/apis/batch/v1/defaults.go`` ``SetDefaults_Job``); a note quoting it says it is the default.
JOB_BACKOFF_LIMIT_DEFAULT = 6


def resolve_job(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a batch/v1 Job: pods at once = min(``spec.parallelism`` (default 1), ``spec.completions``); the
    last wave and per-index retries from :func:`job_last_wave` (``auto`` minMember is sized so that every wave
    starts; a fixed minMember larger than a wave is refused by ``backends.check_plan``).

    A started Job (its ``status``, on an UPDATE) gets minMember lowered to what can still run together
    (:func:`job_can_still_run`), ``auto`` or fixed: the pods that remain can never be more. The PodGroup controller
    keeps it there as the status changes (docs/behaviour.md, "What happens to a gang after admission")."""
    parallelism = int_field(obj, ("spec", "parallelism"), 1, "spec.parallelism")
    completions = int_field(obj, ("spec", "completions"), None, "spec.completions")
    per_index = int_field(obj, ("spec", "backoffLimitPerIndex"), None, "spec.backoffLimitPerIndex")
    assert parallelism is not None
    indexed = get_path(obj, ("spec", "completionMode")) == "Indexed"
    total = parallelism if completions is None else min(parallelism, completions)
    field = "spec.parallelism" if completions is None or parallelism <= completions else "spec.completions"
    target = replace(TEMPLATE, immutable=True) if operation == "UPDATE" else TEMPLATE
    wave = job_last_wave(parallelism, completions, indexed, per_index)
    plan = _replicated_plan(obj, ann, config, namespace, "Job", "batch", total, field, target, wave)
    still = job_can_still_run(parallelism, completions, obj.get("status")) if operation == "UPDATE" else None
    if still is not None and still[0] < plan.min_member:
        left, why = still
        before = plan.min_member
        plan.min_member = max(left, 1)
        plan.total_pods = left
        plan.last_wave = None  # the waves are behind it: what remains is counted from the status
        plan.min_resources = min_resources_of([(get_path(obj, ("spec", "template", "spec")), plan.min_member)],
                                              plan.min_member, ann, f"{plan.ref} pod template")
        plan.warnings.append(f"{plan.ref}: {why}, so its PodGroup's minMember is {plan.min_member}, not {before} "
                             "(a replacement of a failed pod can start only with the pods that remain)")
    _kueue_facts(obj, plan, ann, config, operation, (parallelism, completions, indexed, per_index))
    written = get_path(obj, ("spec", "backoffLimit"))
    backoff = JOB_BACKOFF_LIMIT_DEFAULT if written is None else written
    if isinstance(backoff, int) and not isinstance(backoff, bool) and backoff > 0 and plan.min_member > 1:
        quoted = f"spec.backoffLimit (default {backoff})" if written is None else f"spec.backoffLimit={backoff}"
        plan.notes.append(
            f"{plan.ref}: {quoted} replaces a failed pod with a new pod of its own; when its "
            "siblings have succeeded by then it is alone in its group, and it starts only because admit's controller "
            "lowers the PodGroup's minMember to the pods that can still run together (from status.succeeded and "
            "spec.completions; docs/behaviour.md, \"What happens to a gang after admission\"). Without admit's "
            "controller (admit serve --no-controller) such a pod waits until spec.activeDeadlineSeconds"
        )
    return plan


def resolve_pod(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a bare Pod carrying the gang annotations.

    Several bare pods may share one group (``gang.admit.dev/pod-group`` on each, ``min-member`` = their number), so
    the PodGroup's owner is "any Pod" rather than one pod, and no member lowers what another set (``shared``); a
    Kueue plain-pod group names it and counts it (``gang/foreign.py``). ``auto`` with no count is minMember 1, with a
    warning. Else the group is the pod's name (for a pod with only ``generateName``: ``plan.generated_group_name``).
    """
    name = _name(obj)
    ref_name = name or str(get_path(obj, ("metadata", "generateName")) or "")
    kueue = kueue_group(obj)
    warnings: list[str] = []
    default = name
    total: int | None = None
    if kueue is not None:
        warnings.extend(kueue.warnings)
        total = kueue.total_count
        if ann.pod_group is None:
            if check_group_name(kueue.name or ""):
                raise GangError(
                    f"Set annotation {config.pod_group_key} to a valid name: Pod {namespace}/{ref_name}: the Kueue "
                    f'group name {KUEUE_GROUP_NAME}="{kueue.name}" cannot be a PodGroup name '
                    f"({check_group_name(kueue.name or '')})",
                    400,
                )
            default = kueue.name or ""
        elif ann.pod_group != kueue.name:
            warnings.append(
                f"Pod {namespace}/{ref_name}: annotation {config.pod_group_key}={ann.pod_group} names the PodGroup, "
                f"not the Kueue group {KUEUE_GROUP_NAME}={kueue.name}"
            )
    group_name = choose_group_name(obj, ann, [POD], config, "Pod", default)
    min_member = ann.min_member if ann.min_member is not None else total
    if min_member is None:
        min_member = 1
        warnings.append(
            f"set {config.min_member_key} to the pods that must start together (or {KUEUE_TOTAL_COUNT}): auto on a "
            f"bare pod gives PodGroup {group_name[:63]} minMember 1, no gang")
    named = kueue is not None or ann.pod_group is not None or isinstance(
        get_path(obj, POD.labels + (config.pod_group_label,)), str)
    if min_member > 1 and not named:
        warnings.append(
            f"give each of the {min_member} pods the same {config.pod_group_key}, or use a Deployment or Job: this pod "
            f"names no group, so it waits for {min_member - 1} more pod(s) in PodGroup {str(group_name)[:63]}")
    spec = obj.get("spec")
    return GangPlan(
        kind="Pod", api_group="", name=ref_name, namespace=namespace, group_name=group_name, min_member=min_member,
        total_pods=total, total_field=f"annotation {KUEUE_TOTAL_COUNT}" if total is not None else "",
        min_resources=min_resources_of([(spec, min_member)], min_member, ann, f"Pod {namespace}/{ref_name}"),
        schedule_timeout_seconds=ann.schedule_timeout_seconds, targets=[POD], warnings=warnings, shared=True,
        runtime_class=runtime_class_of(spec, ann), size_known=ann.min_member is not None or total is not None)


def resolve_int_or_percent(value: Any, total: int, round_up: bool, default: int) -> int:
    """An ``IntOrString`` (``2`` or ``"25%"``) as a count of ``total`` (apimachinery
    ``intstr.GetScaledValueFromIntOrPercent``); ``default`` when absent or malformed."""
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = float(value[:-1])
        except ValueError:
            return default
        scaled = pct * total / 100
        return max(int(math.ceil(scaled) if round_up else math.floor(scaled)), 0)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return default


def deployment_at_once(obj: dict[str, Any], replicas: int) -> tuple[int, str] | None:
    """``Rollout.at_once`` of a Deployment: ``maxSurge`` + ``maxUnavailable`` (defaults 25% each, surge rounded up,
    unavailable down; both 0 counts as 1 unavailable, ``pkg/controller/deployment/util`` ``ResolveFenceposts``);
    ``None`` for ``strategy.type: Recreate``."""
    strategy = get_map(obj, ("spec", "strategy"))
    if strategy.get("type") == "Recreate":
        return None
    rolling = get_map(strategy, ("rollingUpdate",))
    surge = resolve_int_or_percent(rolling.get("maxSurge", "25%"), replicas, True, 1)
    unavailable = resolve_int_or_percent(rolling.get("maxUnavailable", "25%"), replicas, False, 0)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge + unavailable, f"maxSurge {surge} + maxUnavailable {unavailable}"


def statefulset_at_once(obj: dict[str, Any], replicas: int) -> tuple[int, str] | None:
    """``Rollout.at_once`` of a StatefulSet: ``rollingUpdate.maxUnavailable`` (default 1, at least 1, a percentage
    rounds down; ``getStatefulSetMaxUnavailable``); ``None`` for ``OnDelete`` and ``Recreate``."""
    strategy = get_map(obj, ("spec", "updateStrategy"))
    if strategy.get("type") in ("OnDelete", "Recreate"):
        return None
    rolling = get_map(strategy, ("rollingUpdate",))
    unavailable = max(1, resolve_int_or_percent(rolling.get("maxUnavailable", 1), replicas, False, 1))
    return unavailable, f"maxUnavailable {unavailable}"


def _deployment_fixes(min_member: int, replicas: int) -> str:
    return (f"Set spec.strategy.type: Recreate (the old pods go first, then all new ones start together), or "
            f"spec.strategy.rollingUpdate.maxSurge to at least {min_member} (e.g. 100%), or scale it to 0 "
            f"before this change and back to {replicas} after")


def _statefulset_fixes(min_member: int, replicas: int) -> str:
    return ("Set spec.updateStrategy.type: Recreate (Kubernetes 1.37 and later, feature gate "
            "StatefulSetRecreateStrategy: the old pods go first, then all new ones start together), or scale it "
            f"to 0 before this change and back to {replicas} after, or set spec.updateStrategy.type: OnDelete "
            "and delete the old pods together")


DEPLOYMENT = WorkloadKind("apps", "Deployment", (("v1", "deployments"),), partial(resolve_replicated, kind="Deployment"),
                          children=(("apps", "ReplicaSet"),), scalable=True,
                          pod_joiner=None, pod_watch_selector=None, allowed_backends=None, in_status=True,
                          rollout=Rollout(deployment_at_once, _deployment_fixes), gang_from_parent=None, handover=None,
                          controller_gang="the Deployment controller makes a Workload and one PodGroup per ReplicaSet")
"""A Deployment; its ReplicaSets are its children (``pkg/controller/deployment``: ``NewControllerRef``)."""
REPLICASET = WorkloadKind("apps", "ReplicaSet", (("v1", "replicasets"),), partial(resolve_replicated, kind="ReplicaSet"),
                          scalable=True, pod_joiner=None, pod_watch_selector=None, rollout=None, controller_gang=None,
                          gang_from_parent=None, handover=None, allowed_backends=None, in_status=True)
STATEFULSET = WorkloadKind("apps", "StatefulSet", (("v1", "statefulsets"),), resolve_statefulset, scalable=True,
                           pod_joiner=None, pod_watch_selector=None, allowed_backends=None, in_status=True,
                           rollout=Rollout(statefulset_at_once, _statefulset_fixes), gang_from_parent=None,
                           handover=None,
                           controller_gang="the StatefulSet controller makes its Workload and PodGroup")
#: A Job whose PodGroup a parent's Workload makes (KEP-5547, "Job Controller Changes": the parent's controller, a
#: JobSet's, names the Workload's pod group template; the Job controller makes no Workload of its own).
GROUP_TEMPLATE_ANNOTATION = "scheduling.k8s.io/group-template-name"


def job_scheduling(min_count: int) -> dict[str, Any]:
    """The ``spec.scheduling`` that hands a gang of ``min_count`` pods to the Job controller (``--controller-gang
    Job``): the ``JobSchedulingConfiguration`` of batch/v1 (KEP-5547, ``WorkloadWithJob``; shape from the
    kubernetes.io page "Workload building blocks" and the generated clients; the first alpha called it ``policy``)."""
    return {"schedulingPolicy": {"gang": {"minCount": min_count}}}


JOB = WorkloadKind("batch", "Job", (("v1", "jobs"),), resolve_job,
                   pod_joiner=None, pod_watch_selector=None, rollout=None, allowed_backends=None, in_status=True,
                   controller_gang="the Job controller (WorkloadWithJob) makes its Workload and PodGroup",
                   gang_from_parent=GROUP_TEMPLATE_ANNOTATION, handover=job_scheduling)

#: Where a CronJob keeps the Job it makes (``batch/v1`` ``CronJobSpec.jobTemplate``, a ``JobTemplateSpec``).
JOB_TEMPLATE = ("spec", "jobTemplate")
#: The annotation the CronJob controller writes on each Job: its scheduled time (RFC 3339; feature gate
#: ``CronJobsScheduledAnnotation``, kubernetes ``pkg/controller/cronjob/utils.go`` ``getJobFromTemplate2``).
CRONJOB_SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
#: A scheduled time in minutes since the epoch (2025-02-19 21:20 UTC): the name of the Job a CronJob is judged by.
EXAMPLE_SCHEDULED_MINUTE = 29_000_000


def job_from_cronjob(cronjob: dict[str, Any], namespace: str, minute: int = EXAMPLE_SCHEDULED_MINUTE
                     ) -> dict[str, Any]:
    """The batch/v1 Job the CronJob controller creates from ``cronjob`` for the time ``minute`` (minutes since the
    epoch), as kubernetes ``pkg/controller/cronjob/utils.go`` ``getJobFromTemplate2`` builds it (pure; ``cronjob``
    is not changed): labels and annotations copied from ``spec.jobTemplate.metadata``, plus
    :data:`CRONJOB_SCHEDULED_ANNOTATION`; name ``getJobName``, ``<cronjob>-<minute>``; one controller
    ownerReference to the CronJob (``metav1.NewControllerRef``: ``controller`` and ``blockOwnerDeletion`` true);
    ``spec`` a deep copy of ``spec.jobTemplate.spec``. The Job then goes through admission as any Job."""
    meta = get_map(cronjob, ("metadata",))
    template = get_map(cronjob, JOB_TEMPLATE)
    name = str(meta.get("name") or meta.get("generateName") or "")
    labels = get_map(template, ("metadata", "labels"))
    annotations = dict(get_map(template, ("metadata", "annotations")))
    annotations[CRONJOB_SCHEDULED_ANNOTATION] = datetime.fromtimestamp(minute * 60, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    job_meta: dict[str, Any] = {
        "name": f"{name}-{minute}", "namespace": namespace, "labels": dict(labels), "annotations": annotations,
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": name,
                             "uid": str(meta.get("uid") or ""), "controller": True, "blockOwnerDeletion": True}]}
    spec = template.get("spec")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta,
            "spec": copy.deepcopy(spec) if isinstance(spec, dict) else {}}


_TOP_PATH = re.compile(r"(?<![\w./-])(spec|metadata)\.")


def _in_job_template(text: str, job_ref: str, cronjob_ref: str) -> str:
    """A Job plan's message said of the CronJob that makes the Job: the Job named as "each Job of <CronJob>" and its
    ``spec.*`` / ``metadata.*`` paths moved under ``spec.jobTemplate``."""
    return _TOP_PATH.sub(r"spec.jobTemplate.\1.", text.replace(job_ref, f"each Job of {cronjob_ref}"))


def resolve_cronjob(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
                    ) -> GangPlan:
    """Plan for a batch/v1 CronJob: the plan of the Job it creates (:func:`job_from_cronjob`, resolved by
    :func:`resolve_job` as a CREATE; ``ann`` are the annotations of ``spec.jobTemplate.metadata``), said of the
    CronJob, with nothing to mutate and no PodGroup: each Job is a gang of its own, named after the Job, at its own
    admission (one group label on the template would put every Job in one PodGroup). What the Job's admission would
    refuse is refused here, its fields named under ``spec.jobTemplate``, instead of on every schedule.

    Raises:
        GangError: as :func:`resolve_job` for the Job, worded for the CronJob; ``BelowMinMember`` (data, rendered by
            ``backends.with_backend``) when each Job would run fewer pods than minMember.
    """
    name = _name(obj)
    job = job_from_cronjob(obj, namespace)
    job_ref = object_ref("Job", namespace, job["metadata"]["name"])
    ref = object_ref("CronJob", namespace, name)
    try:
        plan = resolve_job(job, ann, config, namespace, "CREATE")  # no BelowMinMember: the CronJob refuses below
    except GangError as e:
        raise GangError(f"{_in_job_template(e.message, job_ref, ref)} ({ref}: each Job it creates would be refused)",
                        e.code) from None
    reword = partial(_in_job_template, job_ref=job_ref, cronjob_ref=ref)
    wave = plan.last_wave
    cron = replace(
        plan, kind="CronJob", name=name, total_field=f"spec.jobTemplate.{plan.total_field}", min_resources=None,
        targets=[], mutate=False, create_pod_group=False, runtime_class=None,
        warnings=[reword(w) for w in plan.warnings], notes=[reword(n) for n in plan.notes],
        refusal_note=reword(plan.refusal_note),
        last_wave=None if wave is None else Wave(wave.size, f"each Job it creates would be refused: {reword(wave.why)}",
                                                 reword(wave.fix)))
    below_min_member(cron, ann, config, *counted_and_fix(cron), ref=f"{ref}: each Job it creates")
    shared = plan.group_name != job["metadata"]["name"]
    if shared:
        cron.warnings.append(
            f"remove {config.pod_group_key} (or the {config.pod_group_label} label) under spec.jobTemplate: every Job "
            "would name the same PodGroup, and admit refuses a Job whose PodGroup an earlier Job still holds")
        cron.notes.append(
            f"{ref}: every Job it creates names PodGroup {plan.group_name}, but each Job needs its own: admit refuses "
            "a Job whose PodGroup belongs to an earlier Job of the CronJob while that one is kept "
            "(spec.successfulJobsHistoryLimit, default 3) or still runs. Without it, each Job's PodGroup is named "
            f"after the Job ({name}-<scheduled time in minutes>)")
    own = get_path(obj, ("metadata", "annotations"))
    prefix = config.key_prefix
    if isinstance(own, dict) and any(isinstance(k, str) and k.startswith(prefix) for k in own):
        cron.notes.append(f"{ref}: the {prefix} annotations on its own metadata are not copied onto its Jobs; admit "
                          "reads those under spec.jobTemplate.metadata.annotations")
    group = plan.group_name if shared else f"{name}-<scheduled time in minutes>"
    if get_path(job, ("spec", "scheduling")) is None:  # else the Job controller makes each Job's gang
        cron.notes.append(
            f"{ref}: each Job it creates is a gang of its own (PodGroup {group}, minMember {cron.min_member}), "
            "labelled and given its PodGroup by admit when the CronJob controller creates it; the CronJob itself is "
            "not changed")
    return cron


CRONJOB = WorkloadKind("batch", "CronJob", (("v1", "cronjobs"),), resolve_cronjob,
                       pod_joiner=None, pod_watch_selector=None, rollout=None, controller_gang=None,
                       gang_from_parent=None, handover=None, allowed_backends=None, in_status=False,
                       annotations=JOB_TEMPLATE + ("metadata", "annotations"),
                       unwatched="no gang object belongs to a CronJob: each Job it creates claims its own PodGroup, "
                                 "and the controller watches Jobs")
"""A CronJob, judged by the Job it creates (:func:`resolve_cronjob`); its Jobs are no children (each a gang)."""

KINDS = (DEPLOYMENT, REPLICASET, STATEFULSET, JOB, CRONJOB)
