"""Objects a controller makes from a gang workload: children join their parent's group and are never a gang.

An object whose **controller ownerReference** names a kind registered as its parent is a *child* (docs/behaviour.md,
"The rules the code is built on"): ``/mutate`` gives it no patch (the controller copied the parent's mutated
template), ``/validate`` no PodGroup, no ownership refusal and no minMember check of its own (a rollout scales the
old ReplicaSet down to 0 and the new one up step by step, both below minMember), also not on its ``*/scale``; the
PodGroup controller counts no claim of it. The same kind without such a controller (a ReplicaSet written by hand)
keeps the standalone rules.

Why the child carries the parent's annotations (kubernetes ``pkg/controller/deployment``): ``util/deployment_util.go``
``copyDeploymentAnnotationsToReplicaSet`` copies them onto the ReplicaSet, which ``sync.go`` ``getNewReplicaSet``
creates with ``metav1.NewControllerRef(deployment, ...)`` in the POST body, so admission sees it on CREATE. The
decision uses the controller ownerReference alone: an adopted ReplicaSet (``ClaimReplicaSets``) may lack
``pod-template-hash``.

Families declare their pairs on their kinds' records (``WorkloadKind.children``, ``pod_owned_children``);
``admit.families.kinds.PARENTS`` is the :class:`Parents` built from them (no registry here, so nothing depends on
import order). A CronJob's Jobs are not registered (each is a gang), nor a RayCluster KubeRay makes for a RayJob.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .ownerrefs import controller_ref

__all__ = ["ParentRef", "Parents", "controller_ref", "parent_of", "is_child"]

GroupKind = tuple[str, str]  # (API group, kind), "" for core: ("apps", "ReplicaSet")

@dataclass(frozen=True, slots=True)
class Parents:
    """The registry of parent kinds: which controllers' objects are children (module docstring).

    Attributes:
        plain: child kind -> the parent kinds whose controller makes it (both as ``(API group, kind)``).
        labelled: child kind -> {owner kind: the label the child must carry}: for an operator that makes an object
            owned by one of its *pods* (LeaderWorkerSet's worker StatefulSets are controlled by their group's leader
            Pod), the owner kind alone would be too broad, so the operator's own label marks the child.
    """

    plain: dict[GroupKind, set[GroupKind]] = field(default_factory=dict)
    labelled: dict[GroupKind, dict[GroupKind, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, pairs: Iterable[tuple[GroupKind, GroupKind, str | None]]) -> "Parents":
        """The registry of ``(child, parent, label or None)`` triples (see :meth:`register`)."""
        parents = cls()
        for child, parent, label in pairs:
            parents.register(child, parent, label=label)
        return parents

    def register(self, child: GroupKind, parent: GroupKind, *, label: str | None = None) -> None:
        """Declare that objects of kind ``child`` whose controller ownerReference names a ``parent`` are children
        (both ``(API group, kind)``); with ``label``, only those carrying that label key (:attr:`labelled`)."""
        if label is None:
            self.plain.setdefault(child, set()).add(parent)
        else:
            self.labelled.setdefault(child, {})[parent] = label


@dataclass(frozen=True, slots=True)
class ParentRef:
    """The parent named by a child's controller ownerReference.

    Attributes:
        group / version / kind: from the ownerReference's ``apiVersion`` and ``kind`` (``"apps"``, ``"v1"``,
            ``"Deployment"``).
        name / uid: the parent object (same namespace as the child: ownerReferences never cross namespaces).
    """

    group: str
    version: str
    kind: str
    name: str
    uid: str

    @property
    def identity(self) -> str:
        """``"<group>/<Kind>/<name>"``: the owner identity admit records (``backends.common.owner_annotation``)."""
        return f"{self.group}/{self.kind}/{self.name}"


def parent_of(obj: Any, group: str, kind: str, registry: Parents) -> ParentRef | None:
    """The parent in ``registry`` (``admit.families.kinds.PARENTS``) that controls ``obj`` (of API group ``group``,
    kind ``kind``), or None when ``obj`` is not a child: no controller ownerReference, or one naming a kind not
    registered as a parent of this kind."""
    parents = registry.plain.get((group, kind))
    labelled = registry.labelled.get((group, kind))
    if not parents and not labelled:
        return None
    ref = controller_ref(obj)
    if ref is None:
        return None
    api_version = ref.get("apiVersion")
    if not isinstance(api_version, str):
        return None
    ref_group, _, version = api_version.rpartition("/")
    ref_kind = ref.get("kind")
    if (ref_group, ref_kind) not in (parents or ()):
        label = (labelled or {}).get((ref_group, str(ref_kind)))
        labels = obj.get("metadata", {}).get("labels") if isinstance(obj.get("metadata"), dict) else None
        if label is None or not isinstance(labels, dict) or label not in labels:
            return None
    return ParentRef(ref_group, version, str(ref_kind), str(ref.get("name") or ""), str(ref.get("uid") or ""))


def is_child(obj: Any, group: str, kind: str, registry: Parents) -> bool:
    """True when ``obj`` is a child of a parent in ``registry`` (see :func:`parent_of`)."""
    return parent_of(obj, group, kind, registry) is not None
