"""Which resolver handles which kind: the registry of gang workload kinds.

Keys are ``(API group, kind)`` as in ``AdmissionReview.request.kind`` (``("apps", "Deployment")``, ``("", "Pod")``).
``SCALABLE`` maps the ``*/scale`` subresources admit validates (``request.resource`` group and plural, as
``kubectl scale`` and the HorizontalPodAutoscaler send them) to the parent workload's group, version and kind.
"""

from __future__ import annotations

from typing import Any, Callable

from ..backends import coscheduling_joiner, with_backend
from ..config import Config
from ..gang.children import register_parent
from ..gang.plan import Resolver
from . import FAMILY_KINDS
from .lws import join_lws_pod
from .spark import join_spark_executor

__all__ = ["RESOLVERS", "SCALABLE", "POD_JOINERS", "PodJoiner", "WATCHED_RESOURCES"]

# Every resolver also picks the gang backend (coscheduling or workload-api) and defers to an owner of native gang
# objects (admit/backends/__init__.py), so each caller sees the same plan.backend.
RESOLVERS: dict[tuple[str, str], Resolver] = {k.key: with_backend(k.resolve) for k in FAMILY_KINDS}

for _k in FAMILY_KINDS:  # the child rule (children.py): a Deployment's ReplicaSets, a JobSet's Jobs, a RayJob's Job
    for _child in _k.children:
        register_parent(_child, _k.key)
    for _group, _kind, _label in _k.pod_owned_children:  # LWS's worker StatefulSets, owned by a leader Pod
        register_parent((_group, _kind), ("", "Pod"), label=_label)

WATCHED_RESOURCES: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    k.key: k.versions for k in FAMILY_KINDS if k.versions}
"""``(API group, kind) -> ((version, plural), ...)`` of every watched kind, for the PodGroup controller's watches (a
kind whose CRD is not installed answers 404 and is retried slowly, ``watchcache.py``). LeaderWorkerSets and
TrainJobs claim no PodGroup themselves (their groups belong to leader pods and JobSets); watching them costs one
idle watch each and keeps every registered kind watched."""

SCALABLE: dict[tuple[str, str], tuple[str, str, str]] = {
    (k.api_group, k.versions[0][1]): (k.api_group, k.versions[0][0], k.kind) for k in FAMILY_KINDS if k.scalable}
"""``(API group, plural)`` of a ``*/scale`` request -> the parent's ``(API group, version, kind)``."""

PodJoiner = Callable[[dict[str, Any], Config, str, Any], Any]
"""``joiner(pod, config, namespace, known_groups) -> GangPlan | lookup | None`` for a Pod CREATE that carries neither
the pod-group label nor gang annotations (e.g. a Spark executor joining its driver's group). It must not call the
Kubernetes API: ``known_groups`` (``.get(namespace, name) -> dict | None``, or ``None`` offline; see
``admission.GroupCache``) is the cache. A lookup (``spark.DriverLookup``) asks ``admission.Admission`` to read what
the cache does not know."""

POD_JOINERS: list[PodJoiner] = [coscheduling_joiner(j) for j in (join_spark_executor, join_lws_pod)]
