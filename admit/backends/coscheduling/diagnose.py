"""The ``coscheduling`` backend's ``admit status`` diagnosis: one row per scheduler-plugins gang that answers "why
are my pods Pending?" (pure: objects in, rows out).

:func:`diagnose` takes the objects as the Kubernetes API lists them (plain dicts, listed by
``admit/backends/coscheduling/status.py``) and returns one ``diagnose.GangStatus`` per gang; what every backend's
diagnosis shares (the row, the scheduler's words, the rendering) is ``admit/backends/diagnose.py``.

A *gang* is any of: a PodGroup; a value of the pod-group label on a pod; a workload with admit's
``<prefix>/min-member`` annotation that asks for this backend (``<prefix>/backend``, else ``--gang-backend``) and
whose pods do not name a ``spec.schedulingGroup``; a workload whose annotations look like a misspelt admit
annotation. What each reason means for a user: the table of docs/operations.md ("Why are my pods Pending"). Where
they come from:

- ``PodGroupMissing``: Coscheduling's Permit rejects such pods ("PodGroup not found", scheduler-plugins
  ``pkg/coscheduling/core/core.go``); ``NotEnoughPods``: its PreFilter's "cannot find enough sibling pods";
  ``MinResourcesTooLarge``: its ``CheckClusterResource``, with ``pods: minMember`` added as PreFilter adds it.
- ``BelowMinMember`` / ``ScaledToZero``: the workload's kind resolver counts its pods (``sizes``,
  ``diagnose.size_cause``); said before any other cause: no other fix schedules such a gang.
- ``WrongScheduler``: with no ``PodScheduled`` condition and no event, no scheduler of that name is running; a
  RayCluster's pods sent to ``volcano``, ``yunikorn``, ``kai-scheduler`` or ``scheduler-plugins-scheduler`` were sent
  there by KubeRay's operator-wide ``--batch-scheduler`` (since v1.3.0).
- ``Insufficient``, ``Timeout``, ``Unschedulable``: the pending pods' ``PodScheduled`` condition (reason
  ``Unschedulable``) or ``FailedScheduling`` events, whichever is newer.
- ``GroupBackedOff``: only echoes of the group's rejection ("optimistic rejection in PostFilter", "rejection in
  Unreserve", "podGroup x failed recently"). Coscheduling retries such pods only when a pod for its scheduler is
  added or the PodGroup is updated (its ``EventsToRegister``), kube-scheduler after 5 minutes unschedulable
  (``DefaultPodMaxInUnschedulablePodsDuration``); ``retry`` is the ``kubectl annotate`` of the PodGroup that retries
  them at once.
- ``SecondGang``: the spark-operator's own PodGroup ``<app>-pg`` (``--enable-batch-scheduler`` with
  ``--default-batch-scheduler``), or the Volcano (``scheduling.k8s.io/group-name``) or YuniKorn
  (``yunikorn.apache.org/task-group-name``) marks on admit's pods; only when nothing else is wrong with the gang.
"""

from __future__ import annotations

import datetime as _dt
import re
from fractions import Fraction
from typing import Any, Callable, Mapping

from ...config import COSCHEDULING, KUBE_DEFAULT_SCHEDULER, Config
from ...gang.foreign import KUBERAY_BATCH_SCHEDULERS
from ...gang.ownerrefs import controller_ref, has_controller
from ...gang.plan import get_path, template_annotation_warnings, unknown_annotation_warnings
from ...gang.quantity import QuantityError, format_quantity, parse_quantity
from ..common import asked_backend, owner_annotation
from ..diagnose import (JSON, GangStatus, WorkloadSize, classify_message, distance, duration, is_echo, is_live,
                        is_scheduled, last_word, meta_of, near, one_line, owner_of, pending_verdict, size_cause,
                        size_key, template_scheduling_group, to_int, waited_seconds, workload_ref)

__all__ = ["diagnose"]

_ECHO_CLAUSE = re.compile(r"podGroup \S+ failed recently|optimistic rejection in PostFilter|rejection in Unreserve",
                          re.IGNORECASE)


def _cluster_allocatable(nodes: list[JSON]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for node in nodes:
        if get_path(node, ("spec", "unschedulable")):
            continue
        for name, value in (get_path(node, ("status", "allocatable")) or {}).items():
            try:
                total[name] = total.get(name, Fraction(0)) + parse_quantity(value)
            except QuantityError:
                continue
    return total


def _min_resources_gap(pg: JSON, nodes: list[JSON] | None) -> str:
    """'cpu 64 > 8' style text when minResources (+ pods: minMember) exceed the whole cluster, else ''."""
    if not nodes:
        return ""
    wanted = dict(get_path(pg, ("spec", "minResources")) or {})
    if not wanted:
        return ""
    wanted.setdefault("pods", get_path(pg, ("spec", "minMember")) or 0)
    have = _cluster_allocatable(nodes)
    gaps = []
    for name, value in sorted(wanted.items()):
        try:
            need = parse_quantity(value)
        except QuantityError:
            continue
        if need > have.get(name, Fraction(0)):
            gaps.append(f"{name} {format_quantity(name, need)} > {format_quantity(name, have.get(name, Fraction(0)))}")
    return ", ".join(gaps)


def _has_template(obj: JSON) -> bool:
    """Whether ``obj`` makes its pods from ``spec.template`` (a Deployment, a Job; a Pod is its own), so that
    :func:`_template_labels` can tell admit did not mutate it (a Kubeflow job's are in ``spec.<x>ReplicaSpecs``)."""
    return obj.get("kind") == "Pod" or isinstance(get_path(obj, ("spec", "template")), dict)


def _template_labels(obj: JSON) -> dict[str, Any]:
    """Labels of the pods a workload makes (``spec.template.metadata.labels``; a Pod's own labels)."""
    path = ("metadata", "labels") if obj.get("kind") == "Pod" else ("spec", "template", "metadata", "labels")
    labels = get_path(obj, path)
    return labels if isinstance(labels, dict) else {}


def diagnose(*, pod_groups: list[JSON], pods: list[JSON], events: list[JSON] = (),  # type: ignore[assignment]
             workloads: list[JSON] = (), nodes: list[JSON] | None = None,  # type: ignore[assignment]
             config: Config = Config(), now: _dt.datetime | None = None,
             sizes: Mapping[tuple[str, str, str], WorkloadSize] | None = None) -> list[GangStatus]:
    """One :class:`GangStatus` per gang, sorted by namespace and group (see the module docstring for the reasons).

    Args:
        pod_groups: PodGroup objects (``scheduling.x-k8s.io/v1alpha1``, or the legacy group per ``config``).
        pods / events / workloads / nodes / sizes: as ``status.Listed`` has them (all the pods of the namespaces:
            label typos and wrong schedulers are found there; ``nodes`` None: no ``minResources`` check).
        config: annotation prefix, group label and the Coscheduling scheduler name.
        now: the time waits are measured to (aware datetime; default: now in UTC).
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    sizes = sizes or {}
    label = config.pod_group_label
    pgs = {(meta_of(pg).get("namespace", ""), meta_of(pg).get("name", "")): pg for pg in pod_groups}
    members, typo_pods = _pods_by_group(pods, label)
    gang_workloads, extra_rows = _gang_workloads(workloads, config)
    rows: dict[tuple[str, str], GangStatus] = {}
    keys = set(pgs) | set(members) | {k for k in gang_workloads if k not in {(r.namespace, r.group)
                                                                             for r in extra_rows}}
    for key in sorted(keys):
        workload = gang_workloads.get(key)
        rows[key] = _row(key, pgs.get(key), members.get(key, []), workload, events, nodes, pgs,
                         typo_pods, config, now, sizes.get(size_key(workload)) if workload is not None else None)
    # label-key typos whose value names no gang above still get a line
    for (ns, value), found in sorted(typo_pods.items()):
        if (ns, value) in rows:
            continue
        typo_key = found[0][0]
        pending = [p for _, p in found if not is_scheduled(p)]
        extra_rows.append(GangStatus(
            ns, value, owner_of(found[0][1]), None, len(found), len(found) - len(pending), len(pending), "-",
            waited_seconds(pending, now), "LabelTypo",
            f"{len(found)} pod(s) carry {typo_key}={value}, not {label}: they are in no gang (a typo in the label "
            "key?)"))
    return sorted([*rows.values(), *extra_rows], key=lambda r: (r.namespace, r.group, r.workload))


def _pods_by_group(pods: list[JSON], label: str) -> tuple[dict[tuple[str, str], list[JSON]],
                                                          dict[tuple[str, str], list[tuple[str, JSON]]]]:
    """``(members, typo_pods)``: live pods by ``(namespace, group)`` of their group label, and those whose label
    key is a near miss of it (``(namespace, value) -> [(key, pod)]``)."""
    members: dict[tuple[str, str], list[JSON]] = {}
    typo_pods: dict[tuple[str, str], list[tuple[str, JSON]]] = {}
    for pod in pods:
        if not is_live(pod):
            continue
        ns = meta_of(pod).get("namespace", "")
        labels = meta_of(pod).get("labels") or {}
        value = labels.get(label)
        if isinstance(value, str) and value:
            members.setdefault((ns, value), []).append(pod)
            continue
        for key, val in labels.items():
            if isinstance(val, str) and val and key != label and distance(key, label) <= 3:
                typo_pods.setdefault((ns, val), []).append((key, pod))
                break
    return members, typo_pods


def _gang_workloads(workloads: list[JSON], config: Config) -> tuple[dict[tuple[str, str], JSON], list[GangStatus]]:
    """``(gang_workloads, rows)``: the Coscheduling gang workloads by ``(namespace, group)``, and the lines of those
    admit did not mutate and of misspelt annotations."""
    label = config.pod_group_label
    gang_workloads: dict[tuple[str, str], JSON] = {}
    extra_rows: list[GangStatus] = []
    for wl in workloads:
        meta = meta_of(wl)
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        annotations = meta.get("annotations") or {}
        if has_controller(wl):
            continue  # a child (a Deployment's ReplicaSet, a JobSet's Job) joins its parent's gang (a CronJob's Job is its own gang)
        if config.min_member_key in annotations and template_scheduling_group(wl) is not None:
            continue  # its pods join kube-scheduler's own gang (spec.schedulingGroup): not a Coscheduling one
        if config.min_member_key in annotations and asked_backend(annotations, config) != COSCHEDULING:
            continue  # another backend's gang (made or not yet): that backend's status part reports it
        if config.min_member_key in annotations:
            group = _template_labels(wl).get(label) or annotations.get(config.pod_group_key) or name
            gang_workloads[(ns, str(group))] = wl
            if not _template_labels(wl).get(label) and _has_template(wl):
                extra_rows.append(GangStatus(
                    ns, str(group), workload_ref(wl), to_int(annotations.get(config.min_member_key)), 0, 0, 0,
                    "-", None, "NotMutated",
                    f"{workload_ref(wl)} has {config.min_member_key} but its pod template has no {label} label: "
                    "admit's webhook did not mutate it (not installed, namespace excluded, or unreachable with "
                    "failurePolicy Ignore); re-apply it once admit is up"))
            continue
        # a misspelt name (gang.admit.dev/min-members) or prefix (gang.admit.io/min-member), or the annotations put
        # on the pod template, as admission warns
        renames = [w for w in unknown_annotation_warnings(annotations, config) if w.startswith("rename")]
        renames += template_annotation_warnings(wl, config)
        if renames:
            extra_rows.append(GangStatus(ns, name, workload_ref(wl), None, 0, 0, 0, "-", None, "AnnotationTypo",
                                         f"{renames[0]}; {workload_ref(wl)} is not a gang"))
    return gang_workloads, extra_rows


#: ``schedulerName`` -> the KubeRay ``--batch-scheduler`` value whose plugin sets it on every pod of a RayCluster.
_KUBERAY_FLAG = {name: flag for flag, name in KUBERAY_BATCH_SCHEDULERS.items()}


def _operator_scheduler(pods: list[JSON], config: Config) -> str:
    """The operator setting that sent ``pods`` (of one gang, with a wrong scheduler) elsewhere, as a sentence, or
    ``""``: KubeRay's operator-wide ``--batch-scheduler`` (since v1.3.0) for pods a RayCluster controls."""
    for pod in pods:
        ref = controller_ref(pod) or {}
        name = str(get_path(pod, ("spec", "schedulerName")) or "")
        if str(ref.get("apiVersion", "")).startswith("ray.io/") and ref.get("kind") == "RayCluster" \
                and name in _KUBERAY_FLAG:
            fix = ("unset it or set it to scheduler-plugins"
                   if config.scheduler_name == KUBERAY_BATCH_SCHEDULERS["scheduler-plugins"] else "unset it")
            return (f"KubeRay's --batch-scheduler={_KUBERAY_FLAG[name]} sets it on every pod of RayCluster "
                    f"{meta_of(pod).get('namespace', '')}/{ref.get('name', '')}: {fix} (a setting of the KubeRay "
                    "operator, its Helm value batchScheduler.name)")
    return ""


def _row(key: tuple[str, str], pg: JSON | None, pods: list[JSON], workload: JSON | None, events: list[JSON],
         nodes: list[JSON] | None, pgs: dict[tuple[str, str], JSON], typo_pods: dict[tuple[str, str], list],
         config: Config, now: _dt.datetime, size: WorkloadSize | None = None) -> GangStatus:
    ns, group = key
    pending = [p for p in pods if not is_scheduled(p)]
    scheduled = len(pods) - len(pending)
    min_member = to_int(get_path(pg, ("spec", "minMember"))) if pg else None
    if pg is not None:
        owner = (meta_of(pg).get("annotations") or {}).get(owner_annotation(config))
        refs = [r for r in meta_of(pg).get("ownerReferences") or [] if isinstance(r, dict)]
        shown = (owner.split("/", 1)[1] if isinstance(owner, str) and "/" in owner else
                 f"{refs[0].get('kind')}/{refs[0].get('name')}" if refs else
                 workload_ref(workload) if workload else owner_of(pods[0]) if pods else "-")
    else:
        shown = workload_ref(workload) if workload else (owner_of(pods[0]) if pods else "-")
    phase = str(get_path(pg, ("status", "phase")) or "-") if pg is not None else "Missing"
    waited = waited_seconds(pending, now)

    def status(reason: str, message: str, retry: str = "") -> GangStatus:
        return GangStatus(ns, group, str(shown), min_member, len(pods), scheduled, len(pending), phase, waited,
                          reason, one_line(message), retry)

    sized = size_cause(size)
    if sized is not None:
        return status(*sized)
    if pg is None:
        return _pod_group_missing(status, ns, group, pgs, config)
    return (_setup_cause(status, key, pg, pods, events, nodes, typo_pods, min_member, config)
            or _progress(status, key, pods, pending, events, min_member, config, now))


_Status = Callable[..., GangStatus]
"""``status(reason, message, retry="")``: the :class:`GangStatus` of the row being built, with that cause."""


def _pod_group_missing(status: _Status, ns: str, group: str, pgs: dict[tuple[str, str], JSON],
                       config: Config) -> GangStatus:
    """The row of a Coscheduling gang whose pods name PodGroup ``ns/group``, which does not exist (a near name that
    does is named as a likely label typo)."""
    close = near(group, [n for (n_ns, n) in pgs if n_ns == ns])
    if close:
        return status("PodGroupMissing", f"no PodGroup {group}; PodGroup {close} exists: a typo in the "
                                         f"{config.pod_group_label} label value?")
    return status("PodGroupMissing", f"no PodGroup {ns}/{group}: Coscheduling rejects its pods ('PodGroup not "
                                     "found'); create it, or let admit do it (annotate the workload)")


def _setup_cause(status: _Status, key: tuple[str, str], pg: JSON, pods: list[JSON], events: list[JSON],
                 nodes: list[JSON] | None, typo_pods: dict[tuple[str, str], list], min_member: int | None,
                 config: Config) -> GangStatus | None:
    """The row of a Coscheduling gang that is set up so that it cannot be scheduled (the spark-operator's second
    PodGroup, pods for another scheduler, minResources above the cluster, a pod-group label typo), else None."""
    ns, group = key
    pending = [p for p in pods if not is_scheduled(p)]
    ref = controller_ref(pg) or {}
    app = str(ref.get("name", ""))
    if not pods and ref.get("kind") == "SparkApplication" and group == f"{app}-pg":
        return status("SecondGang", f"PodGroup {group} was made by the spark-operator for SparkApplication {ns}/{app} "
                                    "(--enable-batch-scheduler with --default-batch-scheduler, or spec.batchScheduler, "
                                    "naming a kube-scheduler); no pod joins it: the app's pods are in admit's PodGroup "
                                    f"{app}. Run the operator without --default-batch-scheduler, or remove "
                                    f"{config.min_member_key} from the app")
    wrong = sorted({str(get_path(p, ("spec", "schedulerName")) or KUBE_DEFAULT_SCHEDULER) for p in pods}
                   - {config.scheduler_name})
    if wrong:
        off = [p for p in pods if (get_path(p, ("spec", "schedulerName")) or KUBE_DEFAULT_SCHEDULER) in wrong]
        seen, _, _ = last_word([p for p in off if not is_scheduled(p)], events)
        untouched = [p for p in off if not is_scheduled(p)] and seen is None
        extra = (f"; nothing has tried to schedule them: no scheduler named {wrong[0]} is running" if untouched
                 else ": Coscheduling never sees them (they are scheduled one by one)")
        operator = _operator_scheduler(off, config)
        if operator:  # the cause first: the message is cut to one line
            return status("WrongScheduler", f"{len(off)} pod(s) use schedulerName {', '.join(wrong)}, not "
                                            f"{config.scheduler_name}, so Coscheduling never sees them. {operator}")
        return status("WrongScheduler", f"{len(off)} pod(s) use schedulerName {', '.join(wrong)}, not "
                                        f"{config.scheduler_name}{extra}")
    gap = _min_resources_gap(pg, nodes)
    if gap and pending:
        return status("MinResourcesTooLarge", f"minResources exceed the allocatable of all nodes together ({gap}): "
                                              "Coscheduling refuses the gang until the cluster grows; lower them "
                                              "(or set min-resources: none)")
    if typo_pods.get(key) and len(pods) < (min_member or 0):
        typo_key = typo_pods[key][0][0]
        return status("LabelTypo", f"{len(typo_pods[key])} pod(s) carry {typo_key}={group}, not "
                                   f"{config.pod_group_label}: they do not count for this gang")
    return None


def _progress(status: _Status, key: tuple[str, str], pods: list[JSON], pending: list[JSON], events: list[JSON],
              min_member: int | None, config: Config, now: _dt.datetime) -> GangStatus:
    """The row of a Coscheduling gang that is set up right: what the scheduler last said about its pending pods, or
    how many pods it still waits for, or that it is scheduled."""
    ns, group = key
    when, said, told = last_word(pending, events, len(pods))
    echoes_only = bool(pending and said and not told and is_echo(said))
    if echoes_only and (min_member is None or len(pods) >= min_member):
        clause = _ECHO_CLAUSE.search(said)
        age = f", {duration((now - when).total_seconds())} ago" if when and when.year > 1 else ""
        return status("GroupBackedOff", f"every pending pod was last refused only because its group was "
                                        f"(\"{clause.group(0) if clause else said}\"{age}), for no cause of its "
                                        "own; Coscheduling tries them again when the PodGroup changes, "
                                        "kube-scheduler after 5 minutes at the latest",
                      f"kubectl annotate {config.pod_group_plural}.{config.pod_group_group} {group} -n {ns} "
                      "retried-at=\"$(date +%s)\" --overwrite")
    if pending and said and not echoes_only:
        return status(classify_message(said), said)
    if min_member is not None and len(pods) < min_member:
        return status("NotEnoughPods", f"{len(pods)} pod(s) exist, minMember is {min_member}: the gang waits for "
                                       f"{min_member - len(pods)} more")
    second = _spark_second_gang(pods)
    if second:
        return status("SecondGang", f"the spark-operator gangs SparkApplication {ns}/{second[0]} too ({second[1]}): it "
                                    "runs with --enable-batch-scheduler and --default-batch-scheduler. The pods are in "
                                    f"admit's PodGroup {group} and the operator's gang goes unused; run it without "
                                    f"--default-batch-scheduler, or remove {config.min_member_key} from the app")
    return status(*pending_verdict(pending, events, len(pods)))


def _spark_second_gang(pods: list[JSON]) -> tuple[str, str] | None:
    """``(app, what)`` when pods of a SparkApplication carry the marks of the spark-operator's own Volcano or
    YuniKorn gang (kubeflow/spark-operator ``internal/scheduler/volcano/scheduler.go``
    ``syncPodGroupInClusterMode``: ``scheduling.k8s.io/group-name``; ``internal/scheduler/yunikorn/scheduler.go``
    ``addTaskGroupAnnotations``: ``yunikorn.apache.org/task-group-name``), else None."""
    for pod in pods:
        app = (meta_of(pod).get("labels") or {}).get("sparkoperator.k8s.io/app-name")
        annotations = meta_of(pod).get("annotations") or {}
        if not app:
            continue
        if annotations.get("scheduling.k8s.io/group-name"):
            return str(app), f"Volcano PodGroup {annotations['scheduling.k8s.io/group-name']}"
        if annotations.get("yunikorn.apache.org/task-group-name"):
            return str(app), "YuniKorn task groups"
    return None
