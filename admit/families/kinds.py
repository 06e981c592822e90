"""Which resolver handles which kind: the registry of gang workload kinds.

Keys are ``(API group, kind)`` as in ``AdmissionReview.request.kind`` (``("apps", "Deployment")``, ``("", "Pod")``).
"""

from __future__ import annotations

from typing import Any, Callable

from ..backends import with_backend, with_joiner_backend
from ..gang.children import Parents
from ..config import Config
from ..gang.plan import Resolver, get_path
from . import FAMILY_KINDS
from .argo import step_pod
from .shared import Carry, PodJoiner, Read, WorkloadKind

__all__ = ["KINDS", "PARENTS", "RESOLVERS", "SCALABLE", "READS", "POD_JOINERS", "PodJoiner", "WATCHED_RESOURCES", "WEBHOOK_RESOURCES",
           "annotations_path", "carried_path", "CARRIED", "carried_annotations",
           "gangs_on_its_own"]

KINDS: dict[tuple[str, str], WorkloadKind] = {k.key: k for k in FAMILY_KINDS}
"""``(API group, kind) -> WorkloadKind``: every per-kind fact, for the modules that read one (``webhook.rollout``,
``controller.claims``, ``cli.status``, ``cli.review``)."""

def annotations_path(group: str, kind: str) -> tuple[str, ...]:
    """Where admit reads the gang annotations of an object of ``(group, kind)``: ``WorkloadKind.annotations``, else
    ``metadata.annotations``. One dict lookup, for ``webhook.mutate``, ``webhook.validate`` and ``cli.status``."""
    known = KINDS.get((group, kind))
    return known.annotations if known is not None else ("metadata", "annotations")


def carried_path(group: str, kind: str) -> tuple[str, ...]:
    """Key path of the annotations a wrapper kind ``(group, kind)`` carries to the objects its operator makes
    (``Carry.in_wrapper``: a RayCronJob's ``spec.jobTemplate.rayClusterSpec.headGroupSpec.template.metadata
    .annotations``), ``()`` for every other kind."""
    known = KINDS.get((group, kind))
    return known.carry.in_wrapper if known is not None and known.carry is not None else ()


CARRIED: dict[tuple[str, str], tuple[tuple[tuple[str, str], Carry], ...]] = {}
"""``(API group, kind)`` of an object a wrapper's controller makes -> ``((wrapper's (API group, kind), Carry), ...)``
(``WorkloadKind.carry``: a ScheduledSparkApplication's SparkApplications, a RayCronJob's RayJobs)."""
for _k in FAMILY_KINDS:
    if _k.carry is not None:
        CARRIED[_k.carry.child] = CARRIED.get(_k.carry.child, ()) + ((_k.key, _k.carry),)


def carried_annotations(obj: Any, group: str, kind: str, config: Config) -> dict[str, str] | None:
    """The gang annotations a wrapper's template carried into ``obj`` (of ``(group, kind)``; ``WorkloadKind.carry``):
    those under admit's prefix at the carry's path in ``obj``, when one of ``obj``'s ownerReferences names a wrapper
    kind that carries into this kind and they hold ``<prefix>/min-member``; else ``None`` (one dict lookup for every
    other kind). ``webhook.mutate`` puts them on ``obj``'s own ``metadata.annotations`` at its CREATE."""
    carriers = CARRIED.get((group, kind))
    if not carriers or not isinstance(obj, dict):
        return None
    refs = get_path(obj, ("metadata", "ownerReferences"))
    owners = {(str(r.get("apiVersion") or "").rpartition("/")[0], r.get("kind"))
              for r in (refs if isinstance(refs, list) else []) if isinstance(r, dict)}
    for wrapper, carry in carriers:
        found = get_path(obj, ("spec",) + carry.path)
        if wrapper in owners and isinstance(found, dict) and found.get(config.min_member_key) is not None:
            return {k: v for k, v in found.items() if isinstance(k, str) and k.startswith(config.key_prefix)
                    and isinstance(v, str)}
    return None


def gangs_on_its_own(pod: Any) -> bool:
    """A Pod that has a controller but is ganged by its own annotations, as a bare pod: a step pod of an Argo
    Workflow (``families.argo.step_pod``), whose controller is no gang workload a user could annotate."""
    return step_pod(pod)


# Every resolver also picks the gang backend (coscheduling or workload-api) and defers to an owner of native gang
# objects (admit/backends/__init__.py), so each caller sees the same plan.backend.
RESOLVERS: dict[tuple[str, str], Resolver] = {
    k.key: with_backend(k.resolve, k) for k in FAMILY_KINDS}

PARENTS: Parents = Parents.of(
    [(child, k.key, None) for k in FAMILY_KINDS for child in k.children]
    + [((group, kind), ("", "Pod"), label) for k in FAMILY_KINDS for group, kind, label in k.pod_owned_children])
"""The child rule's registry (``admit.gang.children``): a Deployment's ReplicaSets, a JobSet's Jobs, a RayJob's Job
(``WorkloadKind.children``), LWS's worker StatefulSets owned by a leader Pod (``pod_owned_children``). Callers pass
it to ``children.is_child``."""

WATCHED_RESOURCES: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    k.key: k.versions for k in FAMILY_KINDS if k.versions and k.unwatched is None}
"""``(API group, kind) -> ((version, plural), ...)`` of every watched kind, for the PodGroup controller's watches:
every registered kind (LeaderWorkerSets and TrainJobs too, one idle watch each) but the ``unwatched`` ones."""

WEBHOOK_RESOURCES: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    k.key: k.versions for k in FAMILY_KINDS if k.versions}
"""``(API group, kind) -> ((version, plural), ...)`` of every kind the workload webhooks are called for (the chart's
``admit.workloadRules``, the fake API's resources): the watched kinds and the ``unwatched`` ones (CronJob)."""

SCALABLE: dict[tuple[str, str], tuple[str, str, str]] = {
    (k.api_group, k.versions[0][1]): (k.api_group, k.versions[0][0], k.kind) for k in FAMILY_KINDS if k.scalable}
"""``(API group, plural)`` of a ``*/scale`` request -> the parent's ``(API group, version, kind)``."""

READS: dict[tuple[str, str], Callable[[dict[str, Any], str], Read | None]] = {
    k.key: k.admission_read for k in FAMILY_KINDS if k.admission_read is not None}
"""``(API group, kind) -> WorkloadKind.admission_read`` of the kinds that have one, for ``webhook.validate``."""

POD_JOINERS: list[PodJoiner] = [with_joiner_backend(k.pod_joiner) for k in FAMILY_KINDS if k.pod_joiner is not None]
"""Every kind's ``WorkloadKind.pod_joiner`` (Spark executors, LeaderWorkerSet group pods), in registration order, kept
on the backend they are written for (``backends.with_joiner_backend``)."""
