"""What every gang backend's ``admit status`` diagnosis shares (pure: objects in, rows out).

A backend's status part (``admit/backends/status.py``) hands what it lists to its pure diagnosis
(``admit/backends/coscheduling/diagnose.py``, ``admit/backends/workload_api/diagnose.py``; the reasons each gives
are listed in its module's docstring), which returns one :class:`GangStatus` per gang. Here: that row, its
rendering, the reading of the scheduler's words about pods, what a gang workload asks for (:class:`WorkloadSize`),
the near-name helpers that find a typo and the small readers of pods and workloads the diagnoses share.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from ..gang.ownerrefs import controller_ref
from ..gang.plan import get_path

__all__ = ["GangStatus", "JSON", "WorkloadSize", "size_key", "size_cause", "ECHOES", "COLUMNS", "parse_time", "distance", "near",
           "classify_message", "pending_verdict", "meta_of", "is_scheduled", "is_live", "is_echo", "last_word", "one_line",
           "workload_ref", "to_int", "owner_of", "waited_seconds", "scheduling_group", "template_scheduling_group",
           "duration", "format_table", "to_json"]

JSON = dict[str, Any]


@dataclass
class GangStatus:
    """One gang. ``waiting_seconds``: since the oldest pending pod was created (None: nothing pending). ``reason``: a
    word from the docstring of the diagnosis that made it; ``message``: one line a user can act on; ``retry``: a shell
    command that makes the scheduler try the gang again now (``GroupBackedOff``), else ``""``."""

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


@dataclass(frozen=True, slots=True)
class WorkloadSize:
    """How many pods a gang workload asks for, as its kind's resolver counts them (``GangPlan.total_pods``, or the
    numbers of the ``gang.plan.BelowMinMember`` it refused with); ``admit/cli/status.py`` ``workload_sizes`` makes
    them, the diagnoses read them by :func:`size_key`.

    Attributes:
        ref: how the resolver names the workload (``"Deployment team/web"``).
        pods: the pods it asks for (``spec.replicas``, a Job's ``parallelism``, a Kubeflow job's replicas summed).
        counted: what those pods are (``"spec.replicas=2"``, ``"Worker.replicas=1 + Master.replicas=1"``).
        min_member: the gang's minMember; source: where it came from (``"gang.admit.dev/min-member=6"``).
        fix: which field to raise (``"Set spec.replicas to at least 6"``); lower: what to lower instead.
    """

    ref: str
    pods: int
    counted: str
    min_member: int
    source: str
    fix: str
    lower: str


def size_key(obj: JSON) -> tuple[str, str, str]:
    """``(namespace, kind, name)`` of a listed workload: the key of its :class:`WorkloadSize`."""
    meta = meta_of(obj)
    return str(meta.get("namespace", "")), str(obj.get("kind", "")), str(meta.get("name", ""))


def size_cause(size: WorkloadSize | None) -> tuple[str, str] | None:
    """``(reason, message)`` when the workload itself keeps its gang from forming, else None:

    - ``ScaledToZero``: it asks for no pods (a Deployment at ``replicas: 0``): nothing to schedule, not a failure;
    - ``BelowMinMember``: it asks for fewer pods than minMember (replicas scaled below it, a quota-sized Job's
      ``parallelism``): the scheduler keeps every pod Pending for ever, as admission and the controller's Warning
      ``GangBelowMinMember`` Event say; the message names the field to raise and the annotation to lower.
    """
    if size is None or size.pods >= size.min_member:
        return None
    if size.pods <= 0:
        return "ScaledToZero", (f"{size.ref} asks for no pods ({size.counted}): scaled to zero, nothing to schedule "
                                f"(not a failure); its gang forms once it runs at least {size.min_member} pods "
                                f"({size.source})")
    return "BelowMinMember", (f"{size.ref} asks for {size.pods} pod(s) ({size.counted}), minMember {size.min_member} "
                              f"({size.source}): the gang can never form. {size.fix}, or lower {size.lower}")


def parse_time(value: Any) -> _dt.datetime | None:
    """An RFC 3339 timestamp as the API server writes it (``2026-01-02T03:04:05Z``) as an aware datetime, else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def distance(a: str, b: str) -> int:
    """Levenshtein distance (small strings only)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def near(name: str, candidates: Iterable[str], limit: int = 2) -> str | None:
    """The name a typo meant: the nearest other candidate within ``limit`` edits (:func:`distance`), else None."""
    best = min(((d, c) for c in candidates if c != name and (d := distance(name, c)) <= limit), default=None)
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


def meta_of(obj: JSON) -> JSON:
    """``obj.metadata`` as a dict (``{}`` when absent or not a mapping)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def is_scheduled(pod: JSON) -> bool:
    """True when the pod has a node (``spec.nodeName``)."""
    return bool(get_path(pod, ("spec", "nodeName")))


def is_live(pod: JSON) -> bool:
    """True for a pod that still counts: not ``Succeeded`` or ``Failed`` and not being deleted."""
    return (get_path(pod, ("status", "phase")) not in ("Succeeded", "Failed")
            and not meta_of(pod).get("deletionTimestamp"))


# Coscheduling's echoes: the pod was turned away because its group was (another pod failed), not why.
ECHOES = ("failed recently", "optimistic rejection in postfilter", "rejection in unreserve")


_SIBLINGS = re.compile(r"current pods number: (\d+), minMember of group: (\d+)")


def _words(pods: list[JSON], events: list[JSON]) -> list[tuple[_dt.datetime, str]]:
    """Every scheduler message about ``pods``: (time, message), from PodScheduled=False conditions and
    FailedScheduling events (core/v1 ``involvedObject``/``message`` or events.k8s.io/v1 ``regarding``/``note``;
    time: ``series.lastObservedTime``, ``lastTimestamp``, ``eventTime`` or creation)."""
    floor = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    names = {meta_of(p).get("name") for p in pods}
    out = []
    for pod in pods:
        for cond in get_path(pod, ("status", "conditions")) or []:
            if isinstance(cond, dict) and cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                    and cond.get("message"):
                out.append((parse_time(cond.get("lastTransitionTime")) or floor, str(cond["message"])))
    for ev in events:
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        if ev.get("reason") != "FailedScheduling" or involved.get("kind") != "Pod" or involved.get("name") not in names:
            continue
        t = (parse_time(get_path(ev, ("series", "lastObservedTime"))) or parse_time(ev.get("lastTimestamp"))
             or parse_time(ev.get("eventTime")) or parse_time(meta_of(ev).get("creationTimestamp")) or floor)
        message = str(ev.get("message") or ev.get("note") or "")
        if message:
            out.append((t, message))
    return out


def is_echo(message: str) -> bool:
    """Whether ``message`` only repeats that the pod's group was turned away (:data:`ECHOES`), with no cause."""
    low = message.lower()
    return any(echo in low for echo in ECHOES) and "insufficient" not in low


def _telling(message: str, pod_count: int | None) -> bool:
    if is_echo(message):
        return False
    m = _SIBLINGS.search(message)
    return not (m and pod_count is not None and pod_count >= int(m.group(2)))


def last_word(pods: list[JSON], events: list[JSON],
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


def pending_verdict(pending: list[JSON], events: list[JSON], pod_count: int) -> tuple[str, str]:
    """The last step of a diagnosis, once nothing else explains the gang: ``(reason, message)``.

    ``pending``: the gang's live pods without a node; ``events``: FailedScheduling Events; ``pod_count``: every pod
    of the gang (:func:`last_word`'s staleness rule). The scheduler's telling word about the pending pods gives its
    :func:`classify_message` reason and the word itself; pending pods without a word are ``Waiting``; none pending is
    ``Scheduled`` with no message.
    """
    _, said, _ = last_word(pending, events, pod_count)
    if pending and said:
        return classify_message(said), said
    if pending:
        return "Waiting", f"{len(pending)} pod(s) pending; the scheduler has not reported why yet"
    return "Scheduled", ""


def one_line(text: str, limit: int = 240) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``limit`` characters with ``...``."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def workload_ref(obj: JSON) -> str:
    """``"<Kind>/<name>"`` of an object, the WORKLOAD column."""
    return f"{obj.get('kind', '')}/{meta_of(obj).get('name', '')}"


def to_int(value: Any) -> int | None:
    """``value`` (an int, or a string such as an annotation value) as an int, None when it is none."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def owner_of(pod: JSON) -> str:
    """The workload that made ``pod``: its controller; a ReplicaSet named ``<deployment>-<pod-template-hash>`` is
    shown as its Deployment (the Deployment controller's naming)."""
    meta = meta_of(pod)
    ref = controller_ref(pod)
    if ref is not None:
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        suffix = "-" + str((meta.get("labels") or {}).get("pod-template-hash", ""))
        if kind == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
            return f"Deployment/{name[: -len(suffix)]}"
        return f"{kind}/{name}"
    return f"Pod/{meta.get('name', '')}"


def waited_seconds(pending: list[JSON], now: _dt.datetime) -> float | None:
    """Seconds (one decimal) from the oldest ``creationTimestamp`` of ``pending`` to ``now``; None when none has one."""
    times = [t for p in pending if (t := parse_time(meta_of(p).get("creationTimestamp"))) is not None]
    return round((now - min(times)).total_seconds(), 1) if times else None


def scheduling_group(pod: JSON) -> str | None:
    """The PodGroup a pod names in ``spec.schedulingGroup.podGroupName`` (core/v1 ``PodSpec``: kube-scheduler's
    own gang, the workload-api backend's), or None."""
    value = get_path(pod, ("spec", "schedulingGroup", "podGroupName"))
    return value if isinstance(value, str) and value else None


def template_scheduling_group(wl: JSON) -> str | None:
    """:func:`scheduling_group` of the pods a workload makes (its pod template; a Pod's own spec)."""
    spec = get_path(wl, ("spec",) if wl.get("kind") == "Pod" else ("spec", "template", "spec"))
    return scheduling_group({"spec": spec}) if isinstance(spec, dict) else None


COLUMNS = ("NAMESPACE", "GROUP", "WORKLOAD", "MIN", "PODS", "SCHEDULED", "PENDING", "PHASE", "WAITING", "REASON")


def duration(seconds: float | None) -> str:
    """The WAITING column: ``"45s"``, ``"3m07s"``, ``"12m"``, ``"2h05m"``, ``"3d4h"``; ``"-"`` for None."""
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
                 str(r.scheduled), str(r.pending), r.phase, duration(r.waiting_seconds),
                 f"{r.reason}: {r.message}" if r.message else r.reason]
        table.append(cells if all_namespaces else cells[1:])
    widths = [max(len(c), *(len(row[i]) for row in table)) for i, c in enumerate(cols[:-1])]
    lines = ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "   " + row[-1]
             for row in [list(cols), *table]]
    retries = [f"retry {r.namespace}/{r.group} now: {r.retry}" for r in rows if r.retry]
    if retries:
        lines += ["", *retries]
    return "\n".join(line.rstrip() for line in lines)


def to_json(rows: list[GangStatus]) -> str:
    """A JSON array; keys ``namespace``, ``group``, ``workload``, ``minMember``, ``pods`` {total, scheduled,
    pending}, ``phase``, ``waitingSeconds``, ``reason``, ``message``, ``retry`` (a command, or null)."""
    return json.dumps([{"namespace": r.namespace, "group": r.group, "workload": r.workload, "minMember": r.min_member,
                        "pods": {"total": r.pods, "scheduled": r.scheduled, "pending": r.pending}, "phase": r.phase,
                        "waitingSeconds": r.waiting_seconds, "reason": r.reason, "message": r.message,
                        "retry": r.retry or None} for r in rows], indent=2)
