"""``admit status``: one line per gang that answers "why are my pods Pending?" (pure: objects in, rows out).

:func:`diagnose` takes the objects as the Kubernetes API lists them (plain dicts) and returns one
:class:`GangStatus` per gang; :func:`format_table` and :func:`to_json` render them. The reading of the API lives in
``admit/cli/status.py``.

A *gang* is any of: a PodGroup; a value of the pod-group label on a pod; a workload with admit's
``<prefix>/min-member`` annotation; a workload whose annotations look like a misspelt admit annotation. What each
reason means and where it comes from:

- ``PodGroupMissing``: pods carry the group label but no PodGroup of that name exists. Coscheduling's Permit
  rejects such pods ("PodGroup not found", scheduler-plugins ``pkg/coscheduling/core/core.go``), so they stay
  Pending for ever. With a PodGroup of a near name (edit distance <= 2) it says which (a typo in the label value).
- ``NotMutated``: a workload has admit's annotations but its pod template has no group label: admit's webhook did not
  see it (not installed, namespace excluded, or ``failurePolicy: Ignore`` during an outage).
- ``AnnotationTypo`` / ``LabelTypo``: an annotation key under admit's prefix that admit does not read, or a pod label
  key that is near the group label (``scheduling.x-k8s.io/podgroup``): the object is not a gang.
- ``WrongScheduler``: pods of the group name a scheduler other than the one that runs Coscheduling
  (``Config.scheduler_name``): Coscheduling never sees them. When nothing ever tried to schedule them (no
  ``PodScheduled`` condition, no event), no scheduler of that name is running. Pods of a RayCluster sent to
  ``volcano``, ``yunikorn``, ``kai-scheduler`` or ``scheduler-plugins-scheduler`` were sent there by KubeRay's
  operator-wide ``--batch-scheduler`` (since v1.3.0), and the message names that flag.
- ``MinResourcesTooLarge``: the PodGroup's ``minResources`` (plus ``pods: minMember``, as Coscheduling's PreFilter
  adds) exceed the allocatable of all nodes together; Coscheduling's ``CheckClusterResource`` refuses it for ever.
- ``NotEnoughPods``: fewer pods exist than ``minMember`` (Coscheduling's PreFilter: "cannot find enough sibling
  pods"; e.g. replicas below minMember, or pods refused by a quota).
- ``Insufficient``, ``Timeout``, ``Unschedulable``: the scheduler's last word on the pending pods, from their
  ``PodScheduled`` condition (reason ``Unschedulable``) and their ``FailedScheduling`` events, whichever is newer:
  capacity ("Insufficient cpu", "resource gap"), the Permit wait that timed out ("rejected due to timeout"), or
  anything else the scheduler said.
- ``GroupBackedOff``: every message about the pending pods is an echo of their group's rejection or backoff
  ("optimistic rejection in PostFilter", "rejection in Unreserve", "podGroup x failed recently") and none states a
  cause. Coscheduling retries such pods only when a pod for its scheduler is added or the PodGroup is updated (its
  ``EventsToRegister``), kube-scheduler after they have been unschedulable for 5 minutes
  (``DefaultPodMaxInUnschedulablePodsDuration``): with ``podGroupBackoffSeconds`` above 0, a gang retried during the
  backoff on a quiet cluster waits that long (made on the real plane). ``retry`` is the ``kubectl annotate`` of the
  PodGroup that retries them at once.
- ``SecondGang``: the spark-operator gangs the SparkApplication too (``--enable-batch-scheduler`` with
  ``--default-batch-scheduler``, which admit cannot see): its PodGroup ``<app>-pg`` (controlled by the app, no pod
  joins it), or the Volcano (``scheduling.k8s.io/group-name``) or YuniKorn (``yunikorn.apache.org/task-group-name``)
  marks on pods that are in admit's gang. Only said when nothing else is wrong with the gang.
- ``Waiting``: pods are pending and the scheduler has not said why yet; ``Scheduled``: every pod has a node.

Native gangs (Kubernetes' Workload API, scheduling.k8s.io; pods with ``spec.schedulingGroup.podGroupName``;
:func:`diagnose_native`). kube-scheduler's GangScheduling plugin holds the pods of a gang at PreEnqueue until
``minCount`` of them exist, and such pods get no ``PodScheduled`` condition and no event, by design
(kubernetes#141900): these rows say why in their place. The GROUP column shows ``podgroup.scheduling.k8s.io/<name>``
apart from the Coscheduling PodGroups.

- No row: a ``basic`` PodGroup (the Job controller's own for every Job with ``WorkloadWithJob``, 1.37), and one whose
  pods all carry the Coscheduling label (:func:`not_a_gang`); a note says how many were left out.
- ``WorkloadAPINotServed``: a workload asks for the workload-api backend but the API server serves no version admit
  speaks (the feature gates and runtime-config are named).
- ``PodGroupMissing``: pods name a PodGroup that does not exist: they wait at PreEnqueue for ever, silently.
- ``PriorityMismatch`` / ``SchedulerMismatch`` / ``PreemptionMismatch``: kube-scheduler's ``validatePodGroup``
  (1.37) refuses a PodGroup whose pods' priority differs from its own ("all pods in a single pod group should have
  the same priority as the pod group's priority"), whose pods name different schedulers, or differ in
  ``preemptionPolicy``.
- ``NotEnoughPods``: fewer pods name the PodGroup than its ``minCount``: PreEnqueue keeps all of them out of the
  queue ("waiting for minCount pods from a gang to appear in scheduling queue").
- ``BelowMinCount``: the PodGroup's scheduled condition is True, but fewer than ``minCount`` of its pods have a node
  now, with a replacement pending or pods gone (:func:`below_min_count`): the condition never goes back
  (kubernetes#136334), so the gang looks healthy while it runs below its quorum.
- ``Unschedulable`` (and the other words of :func:`classify_message`): the PodGroup's condition
  ``PodGroupInitiallyScheduled`` (v1beta1, 1.37) or ``PodGroupScheduled`` (v1alpha2, 1.36) is False with its reason
  and message, or the pods' own scheduler messages say why. ``Scheduled``: the condition is True (terminal in
  v1beta1) and every pod has a node.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Callable, Iterable

from .workload_api import SHAPES
from ..config import KUBE_DEFAULT_SCHEDULER, Config
from ..gang.ownerrefs import controller_ref, has_controller
from ..gang.plan import get_path
from .common import asked_backend, owner_annotation
from ..gang.quantity import QuantityError, format_quantity, parse_quantity

__all__ = ["GangStatus", "diagnose", "diagnose_native", "not_a_gang", "below_min_count", "format_table", "to_json", "classify_message",
           "KNOWN_ANNOTATIONS", "NATIVE_GROUP_PREFIX"]

JSON = dict[str, Any]

KNOWN_ANNOTATIONS = ("min-member", "schedule-timeout-seconds", "min-resources", "pod-group", "spark-executors",
                     "spark-executor-resources", "owner", "backend")
"""Annotation names (after ``<prefix>/``) admit reads or writes."""


@dataclass
class GangStatus:
    """One gang. ``waiting_seconds``: since the oldest pending pod was created (None: nothing pending).
    ``reason``: a word from the module docstring; ``message``: one line a user can act on; ``retry``: a shell command
    that makes the scheduler try the gang again now (``GroupBackedOff``), ``""`` where there is none."""

    namespace: str
    group: str
    workload: str
    min_member: int | None
    pods: int
    scheduled: int
    pending: int
    phase: str
    waiting_seconds: float | None
    reason: str
    message: str
    retry: str = ""


def _time(value: Any) -> _dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _distance(a: str, b: str) -> int:
    """Levenshtein distance (small strings only)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _near(name: str, candidates: Iterable[str], limit: int = 2) -> str | None:
    best = min(((d, c) for c in candidates if c != name and (d := _distance(name, c)) <= limit), default=None)
    return best[1] if best else None


def classify_message(message: str) -> str:
    """The reason word for a scheduler message (FailedScheduling event or PodScheduled condition).

    Phrases from kube-scheduler (``Insufficient <resource>``, ``0/N nodes are available``) and scheduler-plugins'
    Coscheduling (``cannot find enough sibling pods``, ``resource gap``, ``PodGroup not found``, ``rejected due to
    timeout after waiting``, ``failed recently``).
    """
    low = message.lower()
    if "podgroup not found" in low:
        return "PodGroupMissing"
    if "cannot find enough sibling pods" in low:
        return "NotEnoughPods"
    if "timeout" in low or "timed out" in low:
        return "Timeout"
    if "insufficient " in low or "resource gap" in low or "too many pods" in low:
        return "Insufficient"
    return "Unschedulable"


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _scheduled(pod: JSON) -> bool:
    return bool(get_path(pod, ("spec", "nodeName")))


def _live(pod: JSON) -> bool:
    return get_path(pod, ("status", "phase")) not in ("Succeeded", "Failed") and not _meta(pod).get("deletionTimestamp")


# Coscheduling's echoes: the pod was turned away because its group was (another pod failed), not why.
ECHOES = ("failed recently", "optimistic rejection in postfilter", "rejection in unreserve")
_ECHO_CLAUSE = re.compile(r"podGroup \S+ failed recently|optimistic rejection in PostFilter|rejection in Unreserve",
                          re.IGNORECASE)
_SIBLINGS = re.compile(r"current pods number: (\d+), minMember of group: (\d+)")


def _words(pods: list[JSON], events: list[JSON]) -> list[tuple[_dt.datetime, str]]:
    """Every scheduler message about ``pods``: (time, message), from PodScheduled=False conditions and
    FailedScheduling events (core/v1 ``involvedObject``/``message`` or events.k8s.io/v1 ``regarding``/``note``;
    time: ``series.lastObservedTime``, ``lastTimestamp``, ``eventTime`` or creation)."""
    floor = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    names = {_meta(p).get("name") for p in pods}
    out = []
    for pod in pods:
        for cond in get_path(pod, ("status", "conditions")) or []:
            if isinstance(cond, dict) and cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                    and cond.get("message"):
                out.append((_time(cond.get("lastTransitionTime")) or floor, str(cond["message"])))
    for ev in events:
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        if ev.get("reason") != "FailedScheduling" or involved.get("kind") != "Pod" or involved.get("name") not in names:
            continue
        t = (_time(get_path(ev, ("series", "lastObservedTime"))) or _time(ev.get("lastTimestamp"))
             or _time(ev.get("eventTime")) or _time(_meta(ev).get("creationTimestamp")) or floor)
        message = str(ev.get("message") or ev.get("note") or "")
        if message:
            out.append((t, message))
    return out


def _echo(message: str) -> bool:
    """Whether ``message`` only repeats that the pod's group was turned away (:data:`ECHOES`), with no cause."""
    low = message.lower()
    return any(echo in low for echo in ECHOES) and "insufficient" not in low


def _telling(message: str, pod_count: int | None) -> bool:
    if _echo(message):
        return False
    m = _SIBLINGS.search(message)
    return not (m and pod_count is not None and pod_count >= int(m.group(2)))


def _last_word(pods: list[JSON], events: list[JSON],
               pod_count: int | None = None) -> tuple[_dt.datetime | None, str, bool]:
    """The scheduler's most telling recent message about ``pods``: (time, message, telling), (None, "", False) for
    none; ``telling`` is False when no message states a cause (the newest of all is returned then).

    Seen on the real plane (scheduler-plugins v0.34.7): after one pod of a gang fails Filter ("Insufficient cpu"),
    the group is rejected and the other pods get echoes ("optimistic rejection in PostFilter", "rejection in
    Unreserve", "podGroup x failed recently" with ``podGroupBackoffSeconds``) that hide the cause; a "cannot find
    enough sibling pods" written while the ReplicaSet was still creating pods is stale once ``pod_count`` reaches
    minMember. So: the newest message that is neither an echo nor stale, else the newest of all.
    """
    words = sorted(_words(pods, events), key=lambda w: w[0])
    if not words:
        return None, "", False
    useful = [w for w in words if _telling(w[1], pod_count)]
    when, said = (useful or words)[-1]
    return when, said, bool(useful)


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def _workload_ref(obj: JSON) -> str:
    return f"{obj.get('kind', '')}/{_meta(obj).get('name', '')}"


def _template_labels(obj: JSON) -> dict[str, Any]:
    """Labels of the pods a workload makes (``spec.template.metadata.labels``; a Pod's own labels)."""
    path = ("metadata", "labels") if obj.get("kind") == "Pod" else ("spec", "template", "metadata", "labels")
    labels = get_path(obj, path)
    return labels if isinstance(labels, dict) else {}


def diagnose(
    *,
    pod_groups: list[JSON],
    pods: list[JSON],
    events: list[JSON] = (),  # type: ignore[assignment]
    workloads: list[JSON] = (),  # type: ignore[assignment]
    nodes: list[JSON] | None = None,
    config: Config = Config(),
    now: _dt.datetime | None = None,
) -> list[GangStatus]:
    """One :class:`GangStatus` per gang, sorted by namespace and group (see the module docstring for the reasons).

    Args:
        pod_groups: PodGroup objects (``scheduling.x-k8s.io/v1alpha1``, or the legacy group per ``config``).
        pods: Pod objects of the same namespaces (all of them: label typos and wrong schedulers are found there).
        events: core/v1 Events (or events.k8s.io/v1: ``regarding``/``note``); only ``FailedScheduling`` about pods
            is read.
        workloads: Deployments, StatefulSets, ReplicaSets, Jobs (and other kinds with a pod template), to find gang
            workloads without pods or PodGroup and misspelt annotations.
        nodes: Node objects for the ``minResources`` check (None: not checked, e.g. RBAC forbids listing nodes).
        config: annotation prefix, group label and the Coscheduling scheduler name.
        now: the time waits are measured to (aware datetime; default: now in UTC).
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    label = config.pod_group_label
    pgs = {(_meta(pg).get("namespace", ""), _meta(pg).get("name", "")): pg for pg in pod_groups}
    members, typo_pods = _pods_by_group(pods, label)
    gang_workloads, extra_rows = _gang_workloads(workloads, config)
    rows: dict[tuple[str, str], GangStatus] = {}
    keys = set(pgs) | set(members) | {k for k in gang_workloads if k not in {(r.namespace, r.group)
                                                                             for r in extra_rows}}
    for key in sorted(keys):
        rows[key] = _row(key, pgs.get(key), members.get(key, []), gang_workloads.get(key), events, nodes, pgs,
                         typo_pods, config, now)
    # label-key typos whose value names no gang above still get a line
    for (ns, value), found in sorted(typo_pods.items()):
        if (ns, value) in rows:
            continue
        typo_key = found[0][0]
        pending = [p for _, p in found if not _scheduled(p)]
        extra_rows.append(GangStatus(
            ns, value, _owner(found[0][1]), None, len(found), len(found) - len(pending), len(pending), "-",
            _waited(pending, now), "LabelTypo",
            f"{len(found)} pod(s) carry {typo_key}={value}, not {label}: they are in no gang (a typo in the label "
            "key?)"))
    out = list(rows.values()) + extra_rows
    out.sort(key=lambda r: (r.namespace, r.group, r.workload))
    return out


def _pods_by_group(pods: list[JSON], label: str) -> tuple[dict[tuple[str, str], list[JSON]],
                                                          dict[tuple[str, str], list[tuple[str, JSON]]]]:
    """``(members, typo_pods)``: live pods by ``(namespace, group)`` of their group label, and those whose label
    key is a near miss of it (``(namespace, value) -> [(key, pod)]``)."""
    members: dict[tuple[str, str], list[JSON]] = {}
    typo_pods: dict[tuple[str, str], list[tuple[str, JSON]]] = {}
    for pod in pods:
        if not _live(pod):
            continue
        ns = _meta(pod).get("namespace", "")
        labels = _meta(pod).get("labels") or {}
        value = labels.get(label)
        if isinstance(value, str) and value:
            members.setdefault((ns, value), []).append(pod)
            continue
        for key, val in labels.items():
            if isinstance(val, str) and val and key != label and _distance(key, label) <= 3:
                typo_pods.setdefault((ns, val), []).append((key, pod))
                break
    return members, typo_pods


def _gang_workloads(workloads: list[JSON], config: Config) -> tuple[dict[tuple[str, str], JSON], list[GangStatus]]:
    """``(gang_workloads, rows)``: the Coscheduling gang workloads by ``(namespace, group)``, and the lines of those
    admit did not mutate and of misspelt annotations."""
    label = config.pod_group_label
    prefix = config.annotation_prefix.rstrip("/") + "/"
    gang_workloads: dict[tuple[str, str], JSON] = {}
    extra_rows: list[GangStatus] = []
    for wl in workloads:
        meta = _meta(wl)
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        annotations = meta.get("annotations") or {}
        if has_controller(wl):
            continue  # a child (a Deployment's ReplicaSet, a CronJob's Job) joins its parent's gang
        if config.min_member_key in annotations and _native_template_group(wl) is not None:
            continue  # a native gang: diagnose_native
        if config.min_member_key in annotations and asked_backend(annotations, config) == "workload-api":
            continue  # a native gang admit did not mutate yet, or one the API server cannot serve: diagnose_native
        if config.min_member_key in annotations:
            group = _template_labels(wl).get(label) or annotations.get(config.pod_group_key) or name
            gang_workloads[(ns, str(group))] = wl
            if not _template_labels(wl).get(label):
                extra_rows.append(GangStatus(
                    ns, str(group), _workload_ref(wl), _int(annotations.get(config.min_member_key)), 0, 0, 0,
                    "-", None, "NotMutated",
                    f"{_workload_ref(wl)} has {config.min_member_key} but its pod template has no {label} label: "
                    "admit's webhook did not mutate it (not installed, namespace excluded, or unreachable with "
                    "failurePolicy Ignore); re-apply it once admit is up"))
            continue
        unknown = [k for k in annotations if k.startswith(prefix) and k[len(prefix):] not in KNOWN_ANNOTATIONS]
        near = [(k, _near(k[len(prefix):], KNOWN_ANNOTATIONS, 3)) for k in unknown]
        near = [(k, n) for k, n in near if n]
        if near:
            key, meant = near[0]
            extra_rows.append(GangStatus(
                ns, name, _workload_ref(wl), None, 0, 0, 0, "-", None, "AnnotationTypo",
                f"annotation {key} is not one admit reads: did you mean {prefix}{meant}? {_workload_ref(wl)} is not "
                "a gang"))
    return gang_workloads, extra_rows


#: ``schedulerName`` -> KubeRay's ``--batch-scheduler`` value whose plugin sets it on every pod of every RayCluster
#: (ray-project/kuberay ``batchscheduler/*``: ``AddMetadataToChildResource``, ``AddSchedulerNameToObject``).
_KUBERAY_FLAG = {"volcano": "volcano", "yunikorn": "yunikorn", "kai-scheduler": "kai-scheduler",
                 "scheduler-plugins-scheduler": "scheduler-plugins"}


def _operator_scheduler(pods: list[JSON], config: Config) -> str:
    """The operator setting that sent ``pods`` (of one gang, with a wrong scheduler) elsewhere, as a sentence, or
    ``""``: KubeRay's operator-wide ``--batch-scheduler`` (since v1.3.0) for pods controlled by a
    RayCluster."""
    for pod in pods:
        ref = controller_ref(pod) or {}
        name = str(get_path(pod, ("spec", "schedulerName")) or "")
        if str(ref.get("apiVersion", "")).startswith("ray.io/") and ref.get("kind") == "RayCluster" \
                and name in _KUBERAY_FLAG:
            fix = ("unset it or set it to scheduler-plugins" if config.scheduler_name == "scheduler-plugins-scheduler"
                   else "unset it")
            return (f"KubeRay's --batch-scheduler={_KUBERAY_FLAG[name]} sets it on every pod of RayCluster "
                    f"{_meta(pod).get('namespace', '')}/{ref.get('name', '')}: {fix} (a setting of the KubeRay "
                    "operator, its Helm value batchScheduler.name)")
    return ""


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _owner(pod: JSON) -> str:
    """The workload that made ``pod``: its controller; a ReplicaSet named ``<deployment>-<pod-template-hash>`` is
    shown as its Deployment (the Deployment controller's naming)."""
    meta = _meta(pod)
    ref = controller_ref(pod)
    if ref is not None:
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        suffix = "-" + str((meta.get("labels") or {}).get("pod-template-hash", ""))
        if kind == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
            return f"Deployment/{name[: -len(suffix)]}"
        return f"{kind}/{name}"
    return f"Pod/{meta.get('name', '')}"


def _waited(pending: list[JSON], now: _dt.datetime) -> float | None:
    times = [t for p in pending if (t := _time(_meta(p).get("creationTimestamp"))) is not None]
    return round((now - min(times)).total_seconds(), 1) if times else None


def _row(key: tuple[str, str], pg: JSON | None, pods: list[JSON], workload: JSON | None, events: list[JSON],
         nodes: list[JSON] | None, pgs: dict[tuple[str, str], JSON], typo_pods: dict[tuple[str, str], list],
         config: Config, now: _dt.datetime) -> GangStatus:
    ns, group = key
    pending = [p for p in pods if not _scheduled(p)]
    scheduled = len(pods) - len(pending)
    min_member = _int(get_path(pg, ("spec", "minMember"))) if pg else None
    if pg is not None:
        owner = (_meta(pg).get("annotations") or {}).get(owner_annotation(config))
        refs = [r for r in _meta(pg).get("ownerReferences") or [] if isinstance(r, dict)]
        shown = (owner.split("/", 1)[1] if isinstance(owner, str) and "/" in owner else
                 f"{refs[0].get('kind')}/{refs[0].get('name')}" if refs else
                 _workload_ref(workload) if workload else _owner(pods[0]) if pods else "-")
    else:
        shown = _workload_ref(workload) if workload else (_owner(pods[0]) if pods else "-")
    phase = str(get_path(pg, ("status", "phase")) or "-") if pg is not None else "Missing"
    waited = _waited(pending, now)

    def status(reason: str, message: str, retry: str = "") -> GangStatus:
        return GangStatus(ns, group, str(shown), min_member, len(pods), scheduled, len(pending), phase, waited,
                          reason, _one_line(message), retry)

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
    near = _near(group, [n for (n_ns, n) in pgs if n_ns == ns])
    if near:
        return status("PodGroupMissing", f"no PodGroup {group}; PodGroup {near} exists: a typo in the "
                                         f"{config.pod_group_label} label value?")
    return status("PodGroupMissing", f"no PodGroup {ns}/{group}: Coscheduling rejects its pods ('PodGroup not "
                                     "found'); create it, or let admit do it (annotate the workload)")


def _setup_cause(status: _Status, key: tuple[str, str], pg: JSON, pods: list[JSON], events: list[JSON],
                 nodes: list[JSON] | None, typo_pods: dict[tuple[str, str], list], min_member: int | None,
                 config: Config) -> GangStatus | None:
    """The row of a Coscheduling gang that is set up so that it cannot be scheduled (the spark-operator's second
    PodGroup, pods for another scheduler, minResources above the cluster, a pod-group label typo), else None."""
    ns, group = key
    pending = [p for p in pods if not _scheduled(p)]
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
        seen, _, _ = _last_word([p for p in off if not _scheduled(p)], events)
        untouched = [p for p in off if not _scheduled(p)] and seen is None
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
    when, said, told = _last_word(pending, events, len(pods))
    echoes_only = bool(pending and said and not told and _echo(said))
    if echoes_only and (min_member is None or len(pods) >= min_member):
        clause = _ECHO_CLAUSE.search(said)
        age = f", {_duration((now - when).total_seconds())} ago" if when and when.year > 1 else ""
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
    if pending:
        return status("Waiting", f"{len(pending)} pod(s) pending; the scheduler has not reported why yet")
    return status("Scheduled", "")


def _spark_second_gang(pods: list[JSON]) -> tuple[str, str] | None:
    """``(app, what)`` when pods of a SparkApplication carry the marks of the spark-operator's own Volcano or
    YuniKorn gang (kubeflow/spark-operator ``internal/scheduler/volcano/scheduler.go``
    ``syncPodGroupInClusterMode``: ``scheduling.k8s.io/group-name``; ``internal/scheduler/yunikorn/scheduler.go``
    ``addTaskGroupAnnotations``: ``yunikorn.apache.org/task-group-name``), else None."""
    for pod in pods:
        app = (_meta(pod).get("labels") or {}).get("sparkoperator.k8s.io/app-name")
        annotations = _meta(pod).get("annotations") or {}
        if not app:
            continue
        if annotations.get("scheduling.k8s.io/group-name"):
            return str(app), f"Volcano PodGroup {annotations['scheduling.k8s.io/group-name']}"
        if annotations.get("yunikorn.apache.org/task-group-name"):
            return str(app), "YuniKorn task groups"
    return None


COLUMNS = ("NAMESPACE", "GROUP", "WORKLOAD", "MIN", "PODS", "SCHEDULED", "PENDING", "PHASE", "WAITING", "REASON")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s < 86400 else f"{s // 86400}d{(s % 86400) // 3600}h"


def format_table(rows: list[GangStatus], all_namespaces: bool = True) -> str:
    """Aligned columns like ``kubectl get`` (NAMESPACE only with ``all_namespaces``); the reason column is
    ``Reason: message``; after the table, one ``retry <namespace>/<group> now: <command>`` line per gang that has a
    ``retry`` command. ``No gangs found.`` for none."""
    if not rows:
        return "No gangs found."
    cols = COLUMNS if all_namespaces else COLUMNS[1:]
    table = []
    for r in rows:
        cells = [r.namespace, r.group, r.workload, "-" if r.min_member is None else str(r.min_member), str(r.pods),
                 str(r.scheduled), str(r.pending), r.phase, _duration(r.waiting_seconds),
                 f"{r.reason}: {r.message}" if r.message else r.reason]
        table.append(cells if all_namespaces else cells[1:])
    widths = [max(len(c), *(len(row[i]) for row in table)) for i, c in enumerate(cols[:-1])]
    lines = []
    for row in [list(cols), *table]:
        lines.append("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "   " + row[-1])
    retries = [f"retry {r.namespace}/{r.group} now: {r.retry}" for r in rows if r.retry]
    if retries:
        lines += ["", *retries]
    return "\n".join(line.rstrip() for line in lines)


def to_json(rows: list[GangStatus]) -> str:
    """A JSON array; keys ``namespace``, ``group``, ``workload``, ``minMember``, ``pods`` {total, scheduled,
    pending}, ``phase``, ``waitingSeconds``, ``reason``, ``message``, ``retry`` (a command, or null)."""
    out = []
    for r in rows:
        d = asdict(r)
        out.append({"namespace": d["namespace"], "group": d["group"], "workload": d["workload"],
                    "minMember": d["min_member"],
                    "pods": {"total": d["pods"], "scheduled": d["scheduled"], "pending": d["pending"]},
                    "phase": d["phase"], "waitingSeconds": d["waiting_seconds"], "reason": d["reason"],
                    "message": d["message"], "retry": d["retry"] or None})
    return json.dumps(out, indent=2)


# ------------------------------------------------------------------------------------------------ native gangs

NATIVE_GROUP_PREFIX = "podgroup.scheduling.k8s.io/"
# PodGroupInitiallyScheduled (v1, v1beta1, v1alpha3) and PodGroupScheduled (v1alpha2): the table of versions
_NATIVE_CONDITIONS = frozenset(row.scheduled_condition for row in SHAPES.values())


def _native_group(pod: JSON) -> str | None:
    value = get_path(pod, ("spec", "schedulingGroup", "podGroupName"))
    return value if isinstance(value, str) and value else None


def _native_template_group(wl: JSON) -> str | None:
    spec = get_path(wl, ("spec",) if wl.get("kind") == "Pod" else ("spec", "template", "spec"))
    return _native_group({"spec": spec}) if isinstance(spec, dict) else None


def _native_condition(pg: JSON) -> JSON | None:
    """The PodGroup's scheduling condition under either name (both versions' ``types.go``), or None."""
    for cond in get_path(pg, ("status", "conditions")) or []:
        if isinstance(cond, dict) and cond.get("type") in _NATIVE_CONDITIONS:
            return cond
    return None


def _distinct(pods: list[JSON], key: str, default: Any = "") -> list[str]:
    return sorted({str(get_path(p, ("spec", key)) if get_path(p, ("spec", key)) is not None else default)
                   for p in pods})


def below_min_count(pg: JSON, pods: list[JSON]) -> tuple[int, int, int] | None:
    """``(scheduled, pending, minCount)`` of a native gang that was scheduled and now runs below its ``minCount``, or
    None.

    ``pg``: a scheduling.k8s.io PodGroup; ``pods``: every pod naming it in ``spec.schedulingGroup`` (any phase).
    kube-scheduler sets ``PodGroupInitiallyScheduled`` (``PodGroupScheduled`` in 1.36) True once ``minCount`` pods
    were placed and never sets it back ("terminal by design", kubernetes#136334; the 1.37 docs: "The scheduler does
    not update status information regarding the ongoing operational state of a PodGroup"), so a gang that lost pods
    looks the same as a healthy one. It is below its quorum when, with the condition True, fewer than ``minCount``
    live pods have a node and either a pod is pending (a replacement: it waits at PreEnqueue while fewer than
    ``minCount`` pods exist, kubernetes#142330, or cannot be placed) or the pods with a node and the finished ones
    together are fewer than ``minCount`` (a pod gone with no replacement yet). A gang whose pods finish one by one
    (a Job completing) is not: its Succeeded pods count.
    """
    cond = _native_condition(pg)
    min_count = _int(get_path(pg, ("spec", "schedulingPolicy", "gang", "minCount")))
    if cond is None or cond.get("status") != "True" or min_count is None:
        return None
    live = [p for p in pods if _live(p)]
    scheduled = sum(1 for p in live if _scheduled(p))
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
    if members and all(config.pod_group_label in (_meta(p).get("labels") or {}) for p in members):
        return "coscheduling"
    return None


def diagnose_native(*, pod_groups: list[JSON], pods: list[JSON], events: list[JSON] = (),  # type: ignore[assignment]
                    workloads: list[JSON] = (), served: str | None = "",  # type: ignore[assignment]
                    config: Config = Config(), now: _dt.datetime | None = None,
                    notes: list[str] | None = None) -> list[GangStatus]:
    """One :class:`GangStatus` per native gang (module docstring, "Native gangs"), sorted by namespace and group.
    PodGroups that are no gang (:func:`not_a_gang`) and the pods naming them get no row; ``notes`` (when given)
    gets one line saying how many were left out and why.

    Args:
        pod_groups: scheduling.k8s.io PodGroups as listed (``spec.schedulingPolicy.gang.minCount``,
            ``spec.priorityClassName``/``priority``/``preemptionPolicy``, ``status.conditions``).
        pods: Pod objects; those with ``spec.schedulingGroup.podGroupName`` are the members.
        events: as for :func:`diagnose` (FailedScheduling about the pods).
        workloads: objects with a pod template; gang workloads of the workload-api backend without pods still get
            a row.
        served: the scheduling.k8s.io version the API server serves (``""``: none; ``None``: not checked).
        config: annotation keys and the default backend.
        now: aware datetime the waits are measured to (default: now, UTC).
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    pgs = {(_meta(pg).get("namespace", ""), _meta(pg).get("name", "")): pg for pg in pod_groups}
    members: dict[tuple[str, str], list[JSON]] = {}
    everyone: dict[tuple[str, str], list[JSON]] = {}  # any phase: below_min_count counts the finished ones
    for pod in pods:
        group = _native_group(pod)
        if group:
            everyone.setdefault((_meta(pod).get("namespace", ""), group), []).append(pod)
            if _live(pod):
                members.setdefault((_meta(pod).get("namespace", ""), group), []).append(pod)
    owners, rows = _native_owners(workloads, served, config)
    by_owner: dict[str, list[JSON]] = {}
    for pod in pods:
        ref = controller_ref(pod)
        if ref is not None and ref.get("kind") == "Job" and _live(pod):
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
        rows.append(_native_row(key, pg, members.get(key, []), owners.get(key), events, now,
                                everyone.get(key, [])))
    if notes is not None and any(left_out.values()):
        notes.append(_left_out_note(left_out, config))
    rows.sort(key=lambda r: (r.namespace, r.group, r.workload))
    return rows


def _native_owners(workloads: list[JSON], served: str | None,
                   config: Config) -> tuple[dict[tuple[str, str], JSON], list[GangStatus]]:
    """``(owners, rows)`` of :func:`diagnose_native`'s ``workloads``: the gang workload (no controller, with the
    min-member annotation) whose pod template names each native group ``(namespace, group)``, and a
    ``WorkloadAPINotServed`` row for each one that asks for the workload-api backend where the API server serves no
    scheduling.k8s.io (``served == ""``)."""
    from .workload_api import not_served_message

    owners: dict[tuple[str, str], JSON] = {}
    rows: list[GangStatus] = []
    for wl in workloads:
        meta = _meta(wl)
        annotations = meta.get("annotations") or {}
        if config.min_member_key not in annotations or has_controller(wl):
            continue
        group = _native_template_group(wl)
        backend = asked_backend(annotations, config)
        if group is None and backend != "workload-api":
            continue
        ns = meta.get("namespace", "")
        if served == "" and group is None:
            rows.append(GangStatus(ns, NATIVE_GROUP_PREFIX + str(annotations.get(config.pod_group_key)
                                                                  or meta.get("name", "")),
                                   _workload_ref(wl), _int(annotations.get(config.min_member_key)), 0, 0, 0, "-",
                                   None, "WorkloadAPINotServed",
                                   f"{_workload_ref(wl)} asks for the workload-api backend, but "
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
                events: list[JSON], now: _dt.datetime, every_pod: list[JSON] = ()) -> GangStatus:  # type: ignore[assignment]
    ns, name = key
    pending = [p for p in pods if not _scheduled(p)]
    min_count = _int(get_path(pg, ("spec", "schedulingPolicy", "gang", "minCount"))) if pg else None
    cond = _native_condition(pg) if pg else None
    phase = ("Missing" if pg is None else "-" if cond is None else
             f"{cond.get('type', '').removeprefix('PodGroup')}={cond.get('status')}")
    workload_name = get_path(pg, ("spec", "workloadRef", "workloadName")) or get_path(
        pg, ("spec", "podGroupTemplateRef", "workload", "workloadName"))
    ref = (_workload_ref(workload) if workload else _owner(pods[0]) if pods else
           f"Workload/{workload_name}" if workload_name else "-")

    def status(reason: str, message: str) -> GangStatus:
        return GangStatus(ns, NATIVE_GROUP_PREFIX + name, ref, min_count, len(pods), len(pods) - len(pending),
                          len(pending), phase, _waited(pending, now), reason, _one_line(message))

    silent = "kube-scheduler holds them at PreEnqueue with no event and no PodScheduled condition"
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
        _, said, _ = _last_word(pending, events, len(pods))
        why = f" ({said})" if said else ""
        return status("BelowMinCount", f"scheduled once, now {scheduled} pod(s) on nodes, minCount {min_count}"
                                       + (f", {waiting} replacement(s) pending{why}" if waiting else "")
                                       + f"; {cond.get('type')} stays True (kubernetes#136334). Free capacity, or "  # type: ignore[union-attr]
                                         "restart the whole gang (delete its pods) so it is scheduled together")
    if min_count is not None and len(pods) < min_count and (pending or not pods):
        return status("NotEnoughPods", f"{len(pods)} pod(s) name the PodGroup, minCount is {min_count}: {silent} "
                                       f"until {min_count - len(pods)} more exist")
    _, said, _ = _last_word(pending, events, len(pods))
    if pending and said:
        return status(classify_message(said), said)
    if pending:
        return status("Waiting", f"{len(pending)} pod(s) pending; the scheduler has not reported why yet")
    return status("Scheduled", "")
