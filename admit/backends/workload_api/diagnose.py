"""The ``workload-api`` backend's ``admit status`` diagnosis: one row per native gang (pure: objects in, rows out).

:func:`diagnose_native` takes the objects ``status.py`` lists and returns one ``diagnose.GangStatus`` per gang;
:func:`below_min_count` is also what the backend's gang controller counts every resync period.

kube-scheduler's GangScheduling plugin holds a native gang's pods at PreEnqueue until ``minCount`` of them exist,
with no ``PodScheduled`` condition and no event, by design (kubernetes#141900): these rows say why in their place
(for a user: docs/workload-api.md). Sources: ``PriorityMismatch`` / ``SchedulerMismatch`` / ``PreemptionMismatch``
are kube-scheduler's ``validatePodGroup`` (1.37); ``NotEnoughPods`` is PreEnqueue's "waiting for minCount pods from a
gang to appear in scheduling queue"; ``BelowMinCount`` exists because the scheduled condition
(``PodGroupInitiallyScheduled``, 1.37; ``PodGroupScheduled``, 1.36) never goes back (kubernetes#136334).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping

from ...config import KUBE_DEFAULT_SCHEDULER, WORKLOAD_API, Config
from ...gang.ownerrefs import controller_ref, has_controller
from ...gang.plan import get_path
from ..common import asked_backend
from ..diagnose import (JSON, GangStatus, WorkloadSize, is_live, is_scheduled, last_word, meta_of, one_line, owner_of,
                        pending_verdict, scheduling_group, size_cause, size_key, template_scheduling_group, to_int,
                        waited_seconds, workload_ref)
from . import SHAPES, not_served_message

__all__ = ["NATIVE_GROUP_PREFIX", "diagnose_native", "not_a_gang", "below_min_count"]

NATIVE_GROUP_PREFIX = "podgroup.scheduling.k8s.io/"


# PodGroupInitiallyScheduled (v1, v1beta1, v1alpha3) and PodGroupScheduled (v1alpha2): the table of versions
_NATIVE_CONDITIONS = frozenset(row.scheduled_condition for row in SHAPES.values())


def _native_condition(pg: JSON) -> JSON | None:
    """The PodGroup's scheduling condition under either name (both versions' ``types.go``), or None."""
    return next((cond for cond in get_path(pg, ("status", "conditions")) or []
                 if isinstance(cond, dict) and cond.get("type") in _NATIVE_CONDITIONS), None)


def _distinct(pods: list[JSON], key: str, default: Any = "") -> list[str]:
    return sorted({str(get_path(p, ("spec", key)) if get_path(p, ("spec", key)) is not None else default)
                   for p in pods})


def below_min_count(pg: JSON, pods: list[JSON]) -> tuple[int, int, int] | None:
    """``(scheduled, pending, minCount)`` of a native gang scheduled once and now below its ``minCount``, else None.

    ``pg``: a scheduling.k8s.io PodGroup; ``pods``: every pod naming it in ``spec.schedulingGroup`` (any phase).
    kube-scheduler sets ``PodGroupInitiallyScheduled`` (``PodGroupScheduled`` in 1.36) True once ``minCount`` pods were
    placed and never sets it back ("terminal by design", kubernetes#136334; the 1.37 docs: "The scheduler does not
    update status information regarding the ongoing operational state of a PodGroup"), so a gang that lost pods looks
    like a healthy one. It is below its quorum when, with the condition True, fewer than ``minCount`` live pods have a
    node and either a pod is pending (a replacement: it waits at PreEnqueue while fewer than ``minCount`` pods exist,
    kubernetes#142330, or cannot be placed) or the pods with a node and the finished ones together are fewer than
    ``minCount`` (a pod gone with no replacement yet). A gang whose pods finish one by one (a Job completing) is not:
    its Succeeded pods count.
    """
    cond = _native_condition(pg)
    min_count = to_int(get_path(pg, ("spec", "schedulingPolicy", "gang", "minCount")))
    if cond is None or cond.get("status") != "True" or min_count is None:
        return None
    live = [p for p in pods if is_live(p)]
    scheduled = sum(1 for p in live if is_scheduled(p))
    pending = len(live) - scheduled
    succeeded = sum(1 for p in pods if get_path(p, ("status", "phase")) == "Succeeded")
    if scheduled >= min_count or not (pending or (scheduled and scheduled + succeeded < min_count)):
        return None
    return scheduled, pending, min_count


def not_a_gang(pg: JSON, pods: list[JSON], config: Config, siblings: list[JSON] = ()) -> str | None:  # type: ignore[assignment]
    """Why a scheduling.k8s.io PodGroup is no gang for ``admit status`` to show, or None when it is one.

    - ``"basic"``: its ``spec.schedulingPolicy`` is ``basic`` (pods scheduled one by one). With ``WorkloadWithJob``
      (alpha in 1.37, KEP-5547) the Job controller makes one for every Job that names no ``schedulingGroup``
      (``shouldManageWorkloadForJob`` and ``buildWorkloadItem`` in kubernetes ``pkg/controller/job/
      job_scheduling_manager.go``: "every eligible Job gets a Workload/PodGroup, defaulting to Basic"), Jobs
      ganged by admit's Coscheduling backend included;
    - ``"coscheduling"``: every pod naming it (``pods``), or when none does, every pod of the Job that controls it
      (``siblings``: pods whose controller ownerReference has the uid of the PodGroup's), also carries the
      Coscheduling pod-group label: the Job controller's own gang (1.36 ``isGangSchedulingEligible``: an Indexed Job
      with ``completions == parallelism > 1``) of a Job whose pods go to the Coscheduling scheduler, which never
      reads this PodGroup; the Coscheduling row is that gang's.
    """
    if isinstance(get_path(pg, ("spec", "schedulingPolicy", "basic")), dict):
        return "basic"
    members = pods or siblings
    if members and all(config.pod_group_label in (meta_of(p).get("labels") or {}) for p in members):
        return "coscheduling"
    return None


def diagnose_native(*, pod_groups: list[JSON], pods: list[JSON], events: list[JSON] = (),  # type: ignore[assignment]
                    workloads: list[JSON] = (), served: str | None = "",  # type: ignore[assignment]
                    config: Config = Config(), now: _dt.datetime | None = None,
                    notes: list[str] | None = None,
                    sizes: Mapping[tuple[str, str, str], WorkloadSize] | None = None) -> list[GangStatus]:
    """One :class:`GangStatus` per native gang (module docstring), sorted by namespace and group; PodGroups that are
    no gang (:func:`not_a_gang`) and the pods naming them get no row.

    Args:
        pod_groups: scheduling.k8s.io PodGroups as listed (``spec.schedulingPolicy.gang.minCount``,
            ``spec.priorityClassName``/``priority``/``preemptionPolicy``, ``status.conditions``).
        pods / events / workloads / sizes: as ``status.Listed`` has them; the pods with
            ``spec.schedulingGroup.podGroupName`` are the members.
        served: the scheduling.k8s.io version the API server serves (``""``: none; ``None``: not checked).
        config: annotation keys and the default backend; now: as in ``coscheduling.diagnose.diagnose``.
        notes: where the line about the PodGroups left out goes (None: not said).
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    pgs = {(meta_of(pg).get("namespace", ""), meta_of(pg).get("name", "")): pg for pg in pod_groups}
    members: dict[tuple[str, str], list[JSON]] = {}
    everyone: dict[tuple[str, str], list[JSON]] = {}  # any phase: below_min_count counts the finished ones
    for pod in pods:
        group = scheduling_group(pod)
        if group:
            everyone.setdefault((meta_of(pod).get("namespace", ""), group), []).append(pod)
            if is_live(pod):
                members.setdefault((meta_of(pod).get("namespace", ""), group), []).append(pod)
    owners, rows = _native_owners(workloads, served, config)
    by_owner: dict[str, list[JSON]] = {}
    for pod in pods:
        ref = controller_ref(pod)
        if ref is not None and ref.get("kind") == "Job" and is_live(pod):
            by_owner.setdefault(str(ref.get("uid")), []).append(pod)
    left_out = {"basic": 0, "coscheduling": 0}
    for key in sorted(set(pgs) | set(members) | set(owners)):
        pg = pgs.get(key)
        job = controller_ref(pg) if pg is not None else None
        siblings = by_owner.get(str(job.get("uid")), []) if job is not None and job.get("kind") == "Job" else []
        why = not_a_gang(pg, members.get(key, []), config, siblings) if pg is not None else None
        if why is not None and key not in owners:
            left_out[why] += 1
            continue
        owner = owners.get(key)
        rows.append(_native_row(key, pg, members.get(key, []), owner, events, now, everyone.get(key, []),
                                (sizes or {}).get(size_key(owner)) if owner is not None else None))
    if notes is not None and any(left_out.values()):
        notes.append(_left_out_note(left_out, config))
    return sorted(rows, key=lambda r: (r.namespace, r.group, r.workload))


def _native_owners(workloads: list[JSON], served: str | None,
                   config: Config) -> tuple[dict[tuple[str, str], JSON], list[GangStatus]]:
    """``(owners, rows)`` of :func:`diagnose_native`'s ``workloads``: the gang workload (no controller, with the
    min-member annotation) whose pod template names each native group ``(namespace, group)``, and a
    ``WorkloadAPINotServed`` row for each one that asks for the workload-api backend where the API server serves no
    scheduling.k8s.io (``served == ""``)."""
    owners: dict[tuple[str, str], JSON] = {}
    rows: list[GangStatus] = []
    for wl in workloads:
        meta = meta_of(wl)
        annotations = meta.get("annotations") or {}
        if config.min_member_key not in annotations or has_controller(wl):
            continue
        group = template_scheduling_group(wl)
        backend = asked_backend(annotations, config)
        if group is None and backend != WORKLOAD_API:
            continue
        ns = meta.get("namespace", "")
        if served == "" and group is None:
            rows.append(GangStatus(ns, NATIVE_GROUP_PREFIX + str(annotations.get(config.pod_group_key)
                                                                  or meta.get("name", "")),
                                   workload_ref(wl), to_int(annotations.get(config.min_member_key)), 0, 0, 0, "-",
                                   None, "WorkloadAPINotServed",
                                   f"{workload_ref(wl)} asks for the workload-api backend, but "
                                   f"{not_served_message(config)}"))
            continue
        if group is not None:
            owners[(ns, group)] = wl
    return owners, rows


def _left_out_note(left_out: dict[str, int], config: Config) -> str:
    """The ``notes`` line of :func:`diagnose_native` saying how many PodGroups were no gang and why (``left_out``:
    counts by the answer of :func:`not_a_gang`)."""
    said = []
    if left_out["basic"]:
        said.append(f"{left_out['basic']} Basic PodGroup(s) (scheduling.k8s.io, schedulingPolicy basic: no gang; "
                    "with WorkloadWithJob the Job controller makes one per Job)")
    if left_out["coscheduling"]:
        said.append(f"{left_out['coscheduling']} PodGroup(s) whose pods all go to the Coscheduling gang of their "
                    f"{config.pod_group_label} label (the Job controller's own gang of such a Job; shown as "
                    "that Coscheduling gang)")
    return "left out: " + "; ".join(said)


def _native_row(key: tuple[str, str], pg: JSON | None, pods: list[JSON], workload: JSON | None,
                events: list[JSON], now: _dt.datetime, every_pod: list[JSON] = (),  # type: ignore[assignment]
                size: WorkloadSize | None = None) -> GangStatus:
    ns, name = key
    pending = [p for p in pods if not is_scheduled(p)]
    min_count = to_int(get_path(pg, ("spec", "schedulingPolicy", "gang", "minCount"))) if pg else None
    cond = _native_condition(pg) if pg else None
    phase = ("Missing" if pg is None else "-" if cond is None else
             f"{cond.get('type', '').removeprefix('PodGroup')}={cond.get('status')}")
    workload_name = get_path(pg, ("spec", "workloadRef", "workloadName")) or get_path(
        pg, ("spec", "podGroupTemplateRef", "workload", "workloadName"))
    ref = (workload_ref(workload) if workload else owner_of(pods[0]) if pods else
           f"Workload/{workload_name}" if workload_name else "-")

    def status(reason: str, message: str) -> GangStatus:
        return GangStatus(ns, NATIVE_GROUP_PREFIX + name, ref, min_count, len(pods), len(pods) - len(pending),
                          len(pending), phase, waited_seconds(pending, now), reason, one_line(message))

    silent = "kube-scheduler holds them at PreEnqueue with no event and no PodScheduled condition"
    sized = size_cause(size)
    if sized is not None:
        return status(*sized)
    if pg is None:
        if not pods:
            return status("PodGroupMissing", f"{ref} names PodGroup {ns}/{name} (scheduling.k8s.io), which does not "
                                             "exist; admit makes it at admission: re-apply the workload")
        return status("PodGroupMissing", f"{len(pods)} pod(s) name PodGroup {ns}/{name} (spec.schedulingGroup), "
                                         f"which does not exist: {silent}, for ever. Create it (or its workload's "
                                         "Workload), or re-apply the workload so admit makes both")
    schedulers = _distinct(pods, "schedulerName", KUBE_DEFAULT_SCHEDULER)
    if len(schedulers) > 1:
        return status("SchedulerMismatch", f"the pods name schedulers {', '.join(schedulers)}: \"all pods in a single "
                                           "pod group should have the same .spec.schedulerName\"; give them one")
    group_class = get_path(pg, ("spec", "priorityClassName")) or ""
    group_priority = get_path(pg, ("spec", "priority"))
    classes = _distinct(pods, "priorityClassName")
    priorities = sorted({p for pod in pods if isinstance(p := get_path(pod, ("spec", "priority")), int)})
    if isinstance(group_priority, int) and priorities:  # as priority admission resolved both: what the scheduler reads
        mismatch = priorities != [group_priority]
    else:
        mismatch = classes != [group_class]
    if pods and mismatch:
        shown = ", ".join(repr(c) if c else "(none)" for c in classes)
        number = f" (priority {', '.join(map(str, priorities))} vs {group_priority})" if isinstance(
            group_priority, int) and priorities else ""
        return status("PriorityMismatch", f"the pods name priorityClassName {shown} but the PodGroup has "
                                          f"{group_class or '(none)'!r}{number}: \"all pods in a single pod group "
                                          "should have the same priority as the pod group's priority\", so it is "
                                          "never scheduled. The field is immutable: re-create the workload with one "
                                          "class (admit copies it into the PodGroup)")
    group_policy = get_path(pg, ("spec", "preemptionPolicy"))
    policies = _distinct(pods, "preemptionPolicy")
    if len(policies) > 1 or (group_policy and pods and policies != [group_policy]):
        return status("PreemptionMismatch", f"the pods have preemptionPolicy {', '.join(policies)} but the PodGroup "
                                            f"{group_policy or '(none)'}: \"all pods in a single pod group should "
                                            "have the same preemption policy\"")
    if cond is not None and cond.get("status") == "False":
        said = str(cond.get("message") or cond.get("reason") or "")
        return status(str(cond.get("reason") or "Unschedulable"),
                      f"{cond.get('type')}=False: {said}" if said else f"{cond.get('type')}=False")
    broken = below_min_count(pg, list(every_pod) or pods)
    if broken is not None:
        scheduled, waiting, _ = broken
        _, said, _ = last_word(pending, events, len(pods))
        why = f" ({said})" if said else ""
        # below_min_count answers only for a PodGroup whose scheduled condition is True, so cond is that condition
        condition = cond.get("type") if cond is not None else "the scheduled condition"
        return status("BelowMinCount", f"scheduled once, now {scheduled} pod(s) on nodes, minCount {min_count}"
                                       + (f", {waiting} replacement(s) pending{why}" if waiting else "")
                                       + f"; {condition} stays True (kubernetes#136334). Free capacity, or "
                                         "restart the whole gang (delete its pods) so it is scheduled together")
    if min_count is not None and len(pods) < min_count and (pending or not pods):
        return status("NotEnoughPods", f"{len(pods)} pod(s) name the PodGroup, minCount is {min_count}: {silent} "
                                       f"until {min_count - len(pods)} more exist")
    return status(*pending_verdict(pending, events, len(pods)))
