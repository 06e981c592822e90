"""LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``): one gang per group (a leader and its workers).

Sources: kubernetes-sigs/lws ``api/leaderworkerset/v1/leaderworkerset_types.go`` (fields, defaults, the labels the
controller puts on pods) and ``pkg/schedulerprovider/volcano_provider.go`` (LWS's own gang support: one PodGroup
per group, created when the group's leader pod is created, owned by that pod; ``minMember = size``, ``minMember =
1`` under ``LeaderReady``; ``minResources`` = leader + (size - 1) workers).

- An LWS runs ``spec.replicas`` groups (default 1) of ``spec.leaderWorkerTemplate.size`` pods (default 1): a leader
  from ``leaderTemplate`` (the ``workerTemplate`` when absent) and ``size - 1`` workers. The leader of group *i* is
  the pod ``<lws>-<i>`` ("the name of the group too"), made by the leader StatefulSet; its workers ``<lws>-<i>-<j>``
  are made by a worker StatefulSet the LWS controller creates once the leader pod exists (``LeaderCreated``, the
  default) or once it is Ready (``LeaderReady``). Every pod carries the labels
  ``leaderworkerset.sigs.k8s.io/name``, ``leaderworkerset.sigs.k8s.io/group-index`` and
  ``leaderworkerset.sigs.k8s.io/worker-index`` (0 for the leader); the StatefulSet templates hold some of them and
  LWS's own pod webhook adds the rest from the pod's ordinal (``pkg/webhooks/pod_webhook.go``). admit's pod webhook
  has ``reinvocationPolicy: IfNeeded`` in the chart, so kube-apiserver calls it again after a later webhook changed
  the pod: it sees those labels whichever webhook runs first.
- One template makes the pods of every group, so admit cannot put a group label on it. It puts the
  ``schedulerName`` and one annotation on the templates instead: ``gang.admit.dev/group-spec``, the PodGroup spec
  every group gets (compact JSON: ``{"minMember":4,"minResources":{...}}``), and each pod joins its group at
  creation (:func:`join_lws_pod`): one gang per group *and revision* (:func:`group_name`), so during a rolling update
  or a group restart the old revision's pods stay in their own PodGroup, outside the new leader's quorum. A
  PodGroup whose group or revision is gone is deleted by admit's controller once no live pod carries its label
  (``--orphan-grace-period``).
- LWS's StatefulSets are children (``WorkloadKind.children``, ``pod_owned_children``): the leader StatefulSet
  ``<lws>`` (controller: the LWS) and each worker StatefulSet ``<lws>-<i>`` (controller: the group's leader *Pod*,
  labelled ``leaderworkerset.sigs.k8s.io/name``). Since LWS v0.10.0 both carry the LWS's labels and annotations
  (``pkg/controllers/leaderworkerset_controller.go`` ``constructLeaderStatefulSetApplyConfiguration``,
  ``pod_controller.go`` ``constructWorkerStatefulSetApplyConfiguration``: ``mergeMetadata(lws.Labels, ...)``), admit's
  gang annotations among them; as gangs of their own they would be refused (2 leaders below minMember 4) or
  labelled for one gang of all leaders.
- ``auto`` minMember = ``size`` (``LeaderCreated``). Under ``LeaderReady`` the workers appear only after the leader
  is Ready, so a gang of ``size`` deadlocks: minMember is 1 (the leader alone first), with ``minResources`` still
  covering the whole group (so the leader is not let in while the cluster cannot hold its workers), as LWS does for
  Volcano. An explicit minMember above 1 under ``LeaderReady``, or above ``size``, is refused.
- ``leaderworkerset.sigs.k8s.io/exclusive-topology`` on the LWS: LWS creates a group's worker StatefulSet only once
  the leader pod is scheduled (``pod_controller.go`` ``Reconcile``: "if exclusive placement is enabled but leader pod
  is not scheduled, don't create the worker sts"): ganged as under ``LeaderReady`` (``subgroup-exclusive-topology``
  holds no pod back: it only sets affinities).
- Group names are checked at CREATE and UPDATE up to the last group a rolling update makes
  (:func:`_check_group_names`): a surge group's PodGroup name past 63 characters would leave its pods out of any gang.
- Annotating an LWS that runs groups, or changing its gang settings, changes the templates and LWS rolls every group
  over: allowed with a warning (:func:`running_leaderworkerset`).
"""

from __future__ import annotations

import json
from typing import Any

from ..config import Config
from ..gang.plan import GangAnnotations, GangError, GangPlan, PodTarget, check_group_name, get_map, get_path, int_field
from ..gang.quantity import add_resources, format_resources, parse_quantity, QuantityError, scale_resources
from .apps import resolve_int_or_percent
from .shared import POD_TARGET, RunningUpdate, RunningVerdict, WorkloadKind, object_ref, requests_of, template_target

__all__ = ["LWS", "KINDS", "resolve_leaderworkerset", "join_lws_pod", "group_spec_key", "group_name",
           "LWS_NAME_LABEL", "LWS_GROUP_INDEX_LABEL", "LWS_REVISION_LABEL",
           "EXCLUSIVE_TOPOLOGY", "burst_replicas", "running_leaderworkerset"]

GROUP = "leaderworkerset.x-k8s.io"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LEADER_READY = "LeaderReady"
#: The longest ``template-revision-hash``: ``rand.SafeEncodeString`` of a 32-bit FNV hash in decimal (LWS
#: ``pkg/utils/revision/revision_utils.go`` ``hashRevision``), at most 10 characters.
REVISION_HASH_MAX = 10

_TEMPLATE = ("spec", "leaderWorkerTemplate")


def group_spec_key(config: Config) -> str:
    """The template annotation carrying each group's PodGroup spec: ``<prefix>/group-spec``."""
    return f"{config.annotation_prefix.rstrip('/')}/group-spec"


def group_name(lws: str, index: str, revision: str | None) -> str:
    """The PodGroup of one group of one revision: ``<lws>-<group index>-<revision>`` (the name LWS gives its own
    PodGroups, ``pkg/schedulerprovider/interface.go`` ``GetPodGroupName``: ``"%s-%s-%s"``), or ``<lws>-<group index>``
    for a pod without the revision label (an LWS before revisions)."""
    return f"{lws}-{index}-{revision}" if revision else f"{lws}-{index}"


def resolve_leaderworkerset(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
) -> GangPlan:
    """Plan for a LeaderWorkerSet (rules in the module docstring).

    The plan's ``group_name`` is group 0's (``<lws>-0``); ``create_pod_group`` is false (leader pods create their
    groups); ``template_annotations`` holds ``{"gang.admit.dev/group-spec": "<json>"}``.

    Raises:
        GangError: 400 for a malformed LWS (no workerTemplate, bad counts or quantities), a group name that would
            exceed 63 characters, ``gang.admit.dev/pod-group`` or a pod-group label on a template; 403 for a gang
            that can never start (minMember above ``size``, or above 1 under ``LeaderReady``).
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("LeaderWorkerSet", namespace, name)
    if not isinstance(get_path(obj, _TEMPLATE + ("workerTemplate",)), dict):
        raise GangError(f"Add a worker pod template at spec.leaderWorkerTemplate.workerTemplate: {ref} has none, and "
                        "an LWS needs one", 400)
    replicas = int_field(obj, ("spec", "replicas"), 1, "spec.replicas")
    size = int_field(obj, _TEMPLATE + ("size",), 1, "spec.leaderWorkerTemplate.size")
    assert replicas is not None and size is not None
    has_leader = isinstance(get_path(obj, _TEMPLATE + ("leaderTemplate",)), dict)
    targets = [template_target(_TEMPLATE + (f"{role}Template",), f"{role} template", group_label=False)
               for role in (("leader", "worker") if has_leader else ("worker",))]
    _check_group_names(obj, ann, config, ref, name, replicas, targets)

    policy = get_path(obj, ("spec", "startupPolicy")) or "LeaderCreated"
    exclusive = get_path(obj, ("metadata", "annotations", EXCLUSIVE_TOPOLOGY))
    leader_ready = policy == LEADER_READY
    if leader_ready:
        if ann.min_member is not None and ann.min_member > 1:
            raise GangError(
                f"Set {config.min_member_key} to \"auto\" (the leader alone first, minResources covering the whole "
                "group, as LWS does for its own gang support) or use startupPolicy: LeaderCreated: "
                f"{ref} uses startupPolicy LeaderReady, and its workers are created only once the leader pod is Ready, "
                f"so a gang of {ann.min_member} ({config.min_member_key}={ann.min_member}) never gets its workers and "
                "deadlocks")
        min_member = 1
    elif exclusive is not None and size > 1:
        if ann.min_member is not None and ann.min_member > 1:
            raise GangError(
                f"Set {config.min_member_key} to \"auto\" (the leader alone first, minResources covering the whole "
                f"group, so the leader is placed only where the group fits), or remove {EXCLUSIVE_TOPOLOGY}: {ref} "
                f"has {EXCLUSIVE_TOPOLOGY}={exclusive}, and LWS creates a group's workers only once its leader pod "
                f"is scheduled, so a gang of {ann.min_member} ({config.min_member_key}={ann.min_member}) waits for "
                "workers that wait for it, and deadlocks")
        leader_ready = True  # the same shape as LeaderReady: the leader first, then its workers
        min_member = 1
    else:
        min_member = ann.min_member if ann.min_member is not None else max(size, 1)

    plan = GangPlan(
        kind="LeaderWorkerSet", api_group=GROUP, name=name, namespace=namespace, group_name=f"{name}-0",
        min_member=min_member, total_pods=size if size else None,
        total_field="spec.leaderWorkerTemplate.size (pods per group)",
        schedule_timeout_seconds=ann.schedule_timeout_seconds, targets=targets, create_pod_group=False,
    )
    if ann.min_resources:
        leader_spec = get_path(obj, _TEMPLATE + ("leaderTemplate" if has_leader else "workerTemplate", "spec"))
        worker_spec = get_path(obj, _TEMPLATE + ("workerTemplate", "spec"))
        leader = requests_of(leader_spec, f"{ref} leader template")
        worker = requests_of(worker_spec, f"{ref} worker template")
        count = size if leader_ready else min_member  # LeaderReady: the whole group, as LWS's provider does
        total = add_resources(leader, scale_resources(worker, max(count - 1, 0))) if count else {}
        plan.min_resources = format_resources(total) or None
    plan.template_annotations = {group_spec_key(config): json.dumps(plan.pod_group_spec(), sort_keys=True,
                                                                    separators=(",", ":"))}
    if replicas:
        names = f"{name}-0" if replicas == 1 else f"{name}-0 ... {name}-{replicas - 1}"
        first = ""
        if leader_ready:
            first = (", the leader first: startupPolicy LeaderReady" if policy == LEADER_READY
                     else f", the leader first: {EXCLUSIVE_TOPOLOGY} places the workers after it")
        plan.notes.append(
            f"{ref}: one PodGroup per group ({names}, each with its template revision appended: "
            f"<lws>-<group index>-<revision>; minMember {min_member}{first}), each created when its leader pod is "
            "admitted; the pods join their group by their LWS labels")
    return plan


def _check_group_names(obj: dict[str, Any], ann: GangAnnotations, config: Config, ref: str, name: str, replicas: int,
                       targets: list[PodTarget]) -> None:
    """Refuse (``GangError``, 400) what would name the groups of LWS ``name`` otherwise than :func:`group_name`
    (``gang.admit.dev/pod-group``, a pod-group label on a template), and a name too long for the last group a rolling
    update makes (:func:`burst_replicas`)."""
    if ann.pod_group is not None:
        raise GangError(
            f"Remove annotation {config.pod_group_key}: it cannot name the PodGroups of {ref}, as each group of an LWS "
            f"gets its own, named <lws>-<group index> ({name}-0, {name}-1, ...)", 400)
    for t in targets:
        if get_path(obj, t.labels + (config.pod_group_label,)) is not None:
            raise GangError(
                f"Remove the label {config.pod_group_label} from the {t.where} of {ref}: it would put every group in "
                f"one PodGroup, and admit labels each pod with its own group ({name}-<group index>)", 400)
    groups, surge = burst_replicas(obj, replicas)
    last = group_name(name, str(max(groups - 1, 0)), "x" * REVISION_HASH_MAX)
    problem = check_group_name(last)
    if problem:
        during = (f" (spec.replicas {replicas} + maxSurge {surge}: a rolling update makes groups up to index "
                  f"{groups - 1})") if surge else ""
        raise GangError(f"Use a shorter LeaderWorkerSet name: the PodGroup of the last group of {ref}{during} would be "
                        f"named like {last!r} (<lws>-<group index>-<template revision>): {problem}", 400)


def burst_replicas(obj: dict[str, Any], replicas: int) -> tuple[int, int]:
    """``(groups, surge)``: the most groups an LWS of ``replicas`` groups runs at once, during a rolling update with
    ``spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge`` (kubernetes-sigs/lws v0.10.0
    ``pkg/controllers/leaderworkerset_controller.go`` ``rollingUpdateParameters``: ``maxSurge`` scaled against
    ``replicas`` rounding up, capped at ``replicas``, ``burstReplicas := lwsReplicas + maxSurge``; the leader
    StatefulSet then makes groups ``<lws>-<replicas>`` ... ``<lws>-<burst - 1>``), and that surge (0: none; the
    CRD's default)."""
    surge_value = get_path(obj, ("spec", "rolloutStrategy", "rollingUpdateConfiguration", "maxSurge"))
    surge = min(resolve_int_or_percent(surge_value, replicas, True, 0), replicas)
    return replicas + surge, surge


def running_leaderworkerset(update: RunningUpdate, plan: GangPlan, config: Config) -> RunningVerdict | None:
    """``WorkloadKind.running_update`` of an LWS: warn when admit's write alone changes the
    ``leaderWorkerTemplate`` of an LWS that runs groups. LWS takes any template change as a new revision
    (kubernetes-sigs/lws v0.10.0 ``pkg/utils/revision/revision_utils.go`` ``getPatch``: the revision is the
    ``leaderWorkerTemplate`` and ``networkConfig``) and rolls every group over to it (``rollingUpdateParameters``),
    so annotating a serving LWS, or changing its gang settings, recreates every group. Allowed: each new group is
    ganged as its leader comes, and the roll is LWS's own paced update; the warning says it happens. Removing the
    annotations (``update.removing``) takes admit's marks off the template: the same roll, warned alike."""
    replicas = get_path(update.old, ("spec", "replicas"))
    replicas = 1 if replicas is None else replicas
    if not isinstance(replicas, int) or replicas <= 0 or not update.admit_alone_changes(_TEMPLATE):
        return None
    partition = get_map(update.obj, ("spec", "rolloutStrategy", "rollingUpdateConfiguration")).get("partition") or 0
    kept = f"; those below partition {partition} stay unganged" if isinstance(partition, int) and partition > 0 else ""
    groups = f"{replicas} group{'s' if replicas != 1 else ''}"
    if update.removing:  # admit takes its annotation and schedulerName off the template: a new revision too
        return RunningVerdict(
            "remove the gang annotations only when rolling every group is acceptable: admit takes its group spec "
            f"and schedulerName off spec.leaderWorkerTemplate, a new revision, and LWS recreates all {groups} "
            "without a gang (revision_utils.go getPatch)", False)
    return RunningVerdict(
        "annotate a serving LWS only when rolling all its groups is acceptable: admit's marks in "
        f"spec.leaderWorkerTemplate are a new revision, so LWS recreates all {groups}, each then ganged{kept}", False)


def join_lws_pod(pod: dict[str, Any], config: Config, namespace: str, known_groups: Any) -> GangPlan | None:
    """POD_JOINERS entry: a pod of a ganged LWS (the LWS name and group-index labels and admit's ``group-spec``
    annotation, from its template) joins its group's PodGroup (:func:`group_name`); ``None`` for other pods.

    The spec travels on the pod: no cache needed. Every pod's plan asks for its PodGroup (``create_pod_group``): the
    leader, which comes first, creates it; a worker re-creates it only if it was deleted meanwhile (admit's orphan
    clean-up while a restarted group had no pod). A malformed annotation leaves the pod unchanged, with a warning.
    """
    labels = get_path(pod, ("metadata", "labels"))
    if not isinstance(labels, dict) or LWS_GROUP_INDEX_LABEL not in labels:
        return None
    raw = get_path(pod, ("metadata", "annotations", group_spec_key(config)))
    lws, index = labels.get(LWS_NAME_LABEL), labels.get(LWS_GROUP_INDEX_LABEL)
    if raw is None or not lws or index is None or GROUP in config.ignored_api_groups:
        return None
    revision = labels.get(LWS_REVISION_LABEL)
    plan = GangPlan(
        kind="LeaderWorkerSet", api_group=GROUP, name=str(lws), namespace=namespace,
        group_name=group_name(str(lws), str(index), str(revision) if revision else None),
        min_member=1, total_pods=None, total_field="",
        targets=[POD_TARGET],
    )
    try:
        spec = json.loads(str(raw))
        plan.min_member = int(spec["minMember"])
        if plan.min_member < 1 or check_group_name(plan.group_name):
            raise ValueError("bad minMember or group name")
        if spec.get("minResources") is not None:
            plan.min_resources = format_resources({k: parse_quantity(v) for k, v in dict(spec["minResources"]).items()})
        if spec.get("scheduleTimeoutSeconds") is not None:
            plan.schedule_timeout_seconds = int(spec["scheduleTimeoutSeconds"])
    except (ValueError, KeyError, TypeError, QuantityError):
        plan.mutate = False
        plan.create_pod_group = False
        plan.warnings.append(
            f"this pod is not gang-scheduled: annotation {group_spec_key(config)}={str(raw)[:40]!r} is not the group "
            f"spec admit writes on LeaderWorkerSet {str(lws)[:63]}'s templates")
    return plan


LWS = WorkloadKind(GROUP, "LeaderWorkerSet", (("v1", "leaderworkersets"),), resolve_leaderworkerset,
                   children=(("apps", "StatefulSet"),),
                   pod_owned_children=(("apps", "StatefulSet", LWS_NAME_LABEL),),
                   pod_joiner=join_lws_pod, pod_watch_selector=None, rollout=None, gang_from_parent=None, handover=None, allowed_backends=None,
                   in_status=False, running_update=running_leaderworkerset,
                   # kubernetes-sigs/lws keps/666-gang-scheduling-in-lws (LeaderWorkerSetSpec.scheduling, gate
                   # WorkloadAwareScheduling): alpha with Kubernetes 1.37's building blocks; the field name is the
                   # KEP's, the Go types in api/ are unconfirmed here
                   controller_gang="the LeaderWorkerSet controller makes its Workload and one PodGroup per group")

KINDS = (LWS,)
