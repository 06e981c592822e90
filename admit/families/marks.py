"""admit's marks left on a workload whose gang annotation is gone: the Coscheduling group label on its pod templates
and its ``<prefix>/managed`` label. Pure.

How it happens: the annotation is removed by an UPDATE admit's webhook never saw (a namespace tool flipped the
label the webhook's ``namespaceSelector`` matches, the webhook was removed and put back, ``failurePolicy: Ignore``
during an outage), so the mutating phase never took its marks off (``mutate._ungang``). The stored workload then
still names a PodGroup, and every pod it makes carries the label: Coscheduling's Permit keeps such a pod waiting
while that PodGroup does not exist (``PodGroupNotFound``, scheduler-plugins ``pkg/coscheduling/core/core.go``).

What admit does with them (docs/behaviour.md, "What happens to a gang after admission"): the PodGroup controller
keeps the PodGroup while a stored template names it (``claims.claim_of`` gives a held claim, reported once with a
Warning Event ``GangAnnotationRemoved``); the next UPDATE through the webhook takes them off
(:func:`drop_stale_marks`); a ``*/scale`` of it is allowed with :func:`stale_message` (a Scale carries no
annotation to change).

Only the ``<prefix>/managed`` label proves the marks are admit's (admit alone writes it): a template a user labelled
by hand for a hand-written PodGroup, on a workload admit never managed, is not touched.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..gang.patch import pointer
from ..gang.plan import GangAnnotations, GangError, PodTarget, get_path
from .kinds import RESOLVERS

__all__ = ["StaleMark", "stale_marks", "stale_message", "drop_stale_marks"]

StaleMark = tuple[PodTarget, str]
"""A pod template admit labelled and the PodGroup name its label still carries."""

_TARGETS_ONLY = GangAnnotations(min_member=1, min_resources=False)


def stale_marks(obj: Any, group: str, kind: str, config: Config) -> list[StaleMark]:
    """The templates of ``obj`` (of API ``group`` and ``kind``) that still carry admit's group label although the
    object has no ``<prefix>/min-member`` annotation and carries admit's ``<prefix>/managed`` label; empty
    otherwise (the common case costs two dict lookups)."""
    if not isinstance(obj, dict) or get_path(obj, ("metadata", "labels", config.managed_label)) != "true":
        return []
    annotations = get_path(obj, ("metadata", "annotations"))
    if isinstance(annotations, dict) and annotations.get(config.min_member_key) is not None:
        return []
    resolver = RESOLVERS.get((group, kind))
    if resolver is None:
        return []
    namespace = str(get_path(obj, ("metadata", "namespace")) or "")
    try:
        plan = resolver(obj, _TARGETS_ONLY, config, namespace, "UPDATE")
    except GangError:
        return []
    values = [(t, get_path(obj, t.labels + (config.pod_group_label,))) for t in plan.targets]
    return [(t, v) for t, v in values if t.group_label and isinstance(v, str) and v]


def stale_message(kind: str, namespace: str, name: str, marks: list[StaleMark], config: Config) -> str:
    """What the user reads (Event, warning): which label names which PodGroup, why, and the two fixes (for an
    immutable template, a Job's: recreate it without the label)."""
    end = (f"recreate it without the {config.pod_group_label} label" if all(t.immutable for t, _ in marks)
           else "update it once (admit then removes its marks)")
    groups = sorted({v for _, v in marks})
    return (f"put {config.min_member_key} back on this {kind}, or {end}: its pods wait for PodGroup "
            f"{', '.join(groups)[:63]}, named by the label admit left on its pod template")


def drop_stale_marks(obj: Any, group: str, kind: str, namespace: str, name: str,
                     config: Config) -> tuple[list[dict[str, Any]], list[str]]:
    """``(JSONPatch ops, warnings)`` for an UPDATE of a workload with :func:`stale_marks` (``mutate._ungang``: its
    annotation is gone and so was the stored object's): the group label comes off its mutable templates and the
    ``<prefix>/managed`` label off the workload, saying so; an immutable template (a Job's) keeps the label, and the
    warning (:func:`stale_message`) names it and what to do. ``([], [])`` without stale marks."""
    marks = stale_marks(obj, group, kind, config)
    if not marks:
        return [], []
    kept = [(t, v) for t, v in marks if t.immutable]
    ops: list[dict[str, Any]] = [{"op": "remove", "path": pointer(t.labels + (config.pod_group_label,))}
                                 for t, _ in marks if not t.immutable]
    removed = sorted({f"{config.pod_group_label}={v}" for t, v in marks if not t.immutable})
    warnings = []
    if removed:
        ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
        warnings.append(
            f"put {config.min_member_key} back to gang it again: admit removed the {config.pod_group_label} label "
            "left on its pod template, so its new pods join no PodGroup")
    if kept:
        warnings.append(stale_message(kind, namespace, name, kept, config))
    return ops, warnings
