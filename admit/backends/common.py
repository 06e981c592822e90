"""What both gang backends share: the owner annotation admit stamps on every object it makes, and the ownership
verdict an existing object gets. Pure.

Every object admit creates for a gang (a scheduler-plugins PodGroup, a native Workload or PodGroup) carries the
label ``app.kubernetes.io/managed-by: admit`` and the annotation ``<prefix>/owner`` = ``"<group>/<Kind>/<name>"`` of
the workload; each backend's ``ownership`` turns an existing object into an :class:`Ownership`. The backends import
this module and never each other (the independence contract in pyproject.toml).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..config import MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config

__all__ = ["asked_backend", "ObjectType", "Ownership", "owner_annotation", "object_owner", "not_admits_message"]

_OWNER_RE = re.compile(r"^([a-z0-9.-]*)/([A-Za-z0-9]+)(?:/([a-z0-9]([-a-z0-9.]*[a-z0-9])?))?$")


@dataclass(frozen=True, slots=True)
class ObjectType:
    """A kind of object a backend writes: what the chart's RBAC grants, what the controller watches and the fake API
    serves. ``version`` is the served version (the workload-api backend's depends on the cluster)."""

    group: str
    version: str
    kind: str
    plural: str


def asked_backend(annotations: Any, config: Config) -> str:
    """The gang backend a workload asks for: its annotation ``<prefix>/backend`` (``annotations``: its
    ``metadata.annotations``, any shape), else ``--gang-backend``. The one place this rule is written; the value is
    not checked (``gang.plan.parse_gang_annotations`` refuses an unknown one)."""
    value = annotations.get(config.backend_key) if isinstance(annotations, dict) else None
    return config.gang_backend if value is None else value


def owner_annotation(config: Config) -> str:
    """The annotation key recording which workload an object admit made belongs to (``gang.admit.dev/owner``)."""
    return f"{config.annotation_prefix.rstrip('/')}/owner"


@dataclass(slots=True)
class Ownership:
    """How admit may treat an existing gang object (a PodGroup, a Workload) for a plan.

    Attributes:
        action: ``"manage"`` (ours: keep its spec in step), ``"use"`` (a PodGroup admit did not create, named
            explicitly: use as is), ``"operator"`` (made by the workload's own operator: leave alone), or
            ``"conflict"`` (belongs to something else: refuse).
        message: the denial text for ``conflict``.
        warnings: admission warnings.
        code: the HTTP code of that denial (409 for a name that belongs to something else; 403 for a PodGroup the
            workload could never fill).
    """

    action: str
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    code: int = 409


def object_owner(obj: dict[str, Any], config: Config) -> str | None:
    """The owner annotation of an object admit made (a PodGroup, a Workload) when it is well formed
    (``"<group>/<Kind>/<name>"`` or, for groups bare Pods share, ``"<group>/<Kind>"``), else ``None``."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(owner_annotation(config))
    if isinstance(value, str) and _OWNER_RE.match(value):
        return value
    return None


def not_admits_message(what: str, config: Config) -> str:
    """Why the controllers leave ``what`` (``"PodGroup team-a/web"``) alone: it carries admit's managed-by label but
    no well-formed owner annotation (:func:`object_owner`), so admit did not create it."""
    return (f"{what} carries {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} but no valid {owner_annotation(config)} "
            "annotation: admit did not create it and leaves it alone")
