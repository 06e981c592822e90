"""The :class:`Claim` record: what one stored gang workload asks for (its PodGroup, or its Workload and PodGroup on
the workload-api backend). Pure: the controller's caches compute it once per stored object (``claims.claim_of``),
the controller's one decision (``backends/gangobjects.py`` ``decide_objects``) reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .plan import GangPlan

__all__ = ["Claim", "GroupKey"]

JSON = dict[str, Any]
GroupKey = tuple[str, str]  # (namespace, PodGroup name)


@dataclass(slots=True)
class Claim:
    """What one stored gang workload asks for.

    Attributes:
        workload: the workload's reference (:func:`workload_ref`: apiVersion, kind and identifying metadata; never
            the whole object).
        identity: ``"<group>/<Kind>/<name>"`` as in admit's owner annotation (``backends.common.owner_annotation``).
        plan: the gang plan without pod templates, or ``None`` with ``error``: why no plan could be made (a
            ``GangError`` message).
        problem: a plan was made but the workload breaks a rule admission enforces (replicas below minMember), or
            ``None``; reported, the PodGroup is still kept in step.
        explicit: the group was named with ``gang.admit.dev/pod-group``.
        held: no gang annotation, but a stored pod template still carries admit's group label
            (``admit.families.marks``): ``error`` says so, and the PodGroup is kept, not deleted as an orphan.
        notice: the plan's ``operator_notice`` (``GangPlan``), or ``None``.
    """

    workload: JSON
    identity: str
    plan: GangPlan | None
    error: str | None = None
    problem: str | None = None
    explicit: bool = False
    held: bool = False
    notice: str | None = None

    @property
    def meta(self) -> JSON:
        return self.workload.get("metadata") or {}

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace") or "")

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid") or "")

    @property
    def kind(self) -> str:
        return str(self.workload.get("kind") or "")

    @property
    def generation(self) -> int | None:
        """``metadata.generation`` of the workload this claim was computed from (``None`` if the object had none)."""
        gen = self.meta.get("generation")
        return gen if isinstance(gen, int) else None

    @property
    def ref(self) -> str:
        """``"Deployment team-a/web"`` for messages."""
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def key(self) -> GroupKey | None:
        """The PodGroup this claim names, or ``None`` without a plan."""
        return (self.plan.namespace, self.plan.group_name) if self.plan is not None else None
