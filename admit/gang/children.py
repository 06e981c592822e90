"""Objects a controller makes from a gang workload: children join their parent's group and are never a gang.

The rule (docs/behaviour.md, "The rules the code is built on"): an object whose **controller ownerReference** names a
kind that is registered here as its parent is a *child*. admit treats it as part of its parent's gang, not as a gang of
its own:

- ``/mutate``: no patch. The parent's template already carries the pod-group label and ``schedulerName`` admit put
  there, and the controller copied that template into the child;
- ``/validate``: no PodGroup of its own, no ownership refusal (the parent's PodGroup names the parent, not the
  child), no minMember check against the child's own replicas (a rollout scales the old ReplicaSet down to 0 and the
  new one up step by step, both below the parent's minMember), also not on the child's ``*/scale``;
- the PodGroup controller does not count it as a gang workload (no claim, so it never competes with the parent for
  the group and is never the reason a PodGroup is kept or deleted).

An object of the same kind without such a controller (a ReplicaSet written by hand) keeps the standalone rules.

Why the child carries the parent's annotations at all (sources, kubernetes ``pkg/controller/deployment``):

- ``util/deployment_util.go``: ``SetNewReplicaSetAnnotations`` first runs ``copyDeploymentAnnotationsToReplicaSet``,
  which copies **every** annotation of the Deployment onto the ReplicaSet except ``annotationsToSkip``
  (``kubectl.kubernetes.io/last-applied-configuration``, ``deployment.kubernetes.io/revision``,
  ``revision-history``, ``desired-replicas``, ``max-replicas``, and the selector-overlap markers). So
  ``gang.admit.dev/min-member`` arrives on every ReplicaSet, on its CREATE and on the UPDATEs that sync annotations;
- ``sync.go``, ``getNewReplicaSet``: the new ReplicaSet is named ``<deployment>-<pod-template-hash>``, its labels and
  template are the Deployment's template plus the label ``pod-template-hash``, and its ownerReferences hold
  ``metav1.NewControllerRef(deployment, apps/v1 Deployment)`` (``controller: true``, ``blockOwnerDeletion: true``);
  it is created with that ownerReference in the POST body, so admission sees it on CREATE.
- ``rolling.go`` / ``sync.go`` ``scaleReplicaSet``: replicas of old and new ReplicaSets change by UPDATEs of the
  ReplicaSet itself (not through ``replicasets/scale``), with ``deployment.kubernetes.io/desired-replicas``.

The decision uses the controller ownerReference alone. ``pod-template-hash`` corroborates that a ReplicaSet came
from a Deployment, but a ReplicaSet the Deployment controller adopted (``ClaimReplicaSets`` patches the
ownerReference onto a matching orphan) may lack it, and such a ReplicaSet is as much the Deployment's as a new one.

Families declare their pairs on their kinds' records (``WorkloadKind.children``, ``pod_owned_children``), and
``admit.families.kinds.PARENTS`` is the :class:`Parents` value built from them; :func:`parent_of` and
:func:`is_child` take that value as an argument (this module keeps no registry of its own, so nothing depends on
what was imported first): a Deployment's ReplicaSets, a JobSet's Jobs, a RayJob's submitter Job. A CronJob's Jobs
are not registered: each is a gang of its own (``admit.families.apps.resolve_cronjob``). An object a controller
makes that must gang on its own (a RayCluster KubeRay makes for a RayService upgrade or a RayJob retry) is not
registered: its resolver reads the ownerReference itself (``admit.families.shared``, "A child that gangs on its own").
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
        """Declare that objects of kind ``child`` whose controller ownerReference names a ``parent`` are children.

        Args:
            child / parent: ``(API group, kind)``, e.g. ``("apps", "ReplicaSet")`` / ``("apps", "Deployment")``.
            label: only a child carrying this label key (in ``metadata.labels``) is one (:attr:`labelled`).
        """
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
        """``"<group>/<Kind>/<name>"``: the owner identity admit records on a PodGroup (``podgroup.owner_annotation``)."""
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
