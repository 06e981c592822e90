"""What every workload family shares: the kind record each family module declares (:class:`WorkloadKind`, which
``admit.families.kinds`` registers; nothing here calls the Kubernetes API), and the rules written once.

The shared rules (the same shape as Kueue's ``pkg/controller/jobframework`` and KAI Scheduler's podgrouper hub):

- **Children** (``admit.gang.children``, ``WorkloadKind.children``): a JobSet's Jobs, a RayJob's submitter Job are
  part of the parent's gang. A child that gangs on its own (a RayCluster KubeRay makes: several run at once) is not
  registered as one; its resolver reads its controller (:func:`controller_owner`) to name its group and word its
  refusals after the user's object.
- **Deferring to an operator** that makes the PodGroup itself (:func:`defer_to_operator`): two writers would fight
  over one object.
- **Pods that join a group** (:data:`PodJoiner`): where one template makes the pods of several groups.
- **Counting pods** (:func:`gang_min_member`, :func:`min_resources_of`): an explicit minMember above the pods is
  refused by ``gang.plan.below_min_member`` (the Coscheduling plugin keeps every pod Pending while fewer than
  minMember pods carry the label: scheduler-plugins ``pkg/coscheduling/core/core.go`` ``PreFilter``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Protocol

from ..gang.ownerrefs import controller_ref
from ..config import Config
from ..gang.plan import GangAnnotations, GangError, GangPlan, PodTarget, Resolver, get_path
from ..gang.resources import ResourceError, gang_min_resources, pod_requests

__all__ = [
    "WorkloadKind",
    "AllowedBackends",
    "Read",
    "PodRead",
    "Rollout",
    "RunningUpdate",
    "RunningVerdict",
    "RunningRule",
    "Carry",
    "PodJoiner",
    "controller_owner",
    "defer_to_operator",
    "template_target",
    "gang_min_member",
    "min_resources_of",
    "requests_of",
    "object_ref",
    "POD_TARGET",
]

POD_TARGET = PodTarget(("metadata", "labels"), ("spec", "schedulerName"), where="pod")
"""The target of a pod joiner's plan: the Pod's own labels and ``schedulerName``."""


PodJoiner = Callable[[dict[str, Any], Config, str, Any], Any]
"""``joiner(pod, config, namespace, known_groups) -> GangPlan | PodRead | None`` for a Pod CREATE that carries neither
the pod-group label nor gang annotations: the pod finds its group from labels its controller put on it (a Spark
executor joins its driver's, ``lws.join_lws_pod`` its LWS group's). It must not call the Kubernetes API:
``known_groups`` (``.get(namespace, name) -> dict | None``, or ``None`` offline; see ``admission.GroupCache``) is the
cache, and a :class:`PodRead` asks for a read. A joiner's plan with ``create_pod_group`` makes the pod's admission
ensure the group: the pod that always comes first (an LWS leader) creates it, the later ones find it in the cache."""


class PodRead(Protocol):
    """What a pod joiner (:data:`PodJoiner`) returns when the caches cannot tell which group the pod joins: another
    pod to read through the API first, and what the joining pod becomes once it is read (``spark.DriverLookup``).
    ``admission.Admission.finish_mutation`` does the read (one GET within ``api_timeout_seconds``), checks the uid,
    remembers :meth:`group_of` per ``(namespace, name, uid)`` and patches the joining pod with :meth:`plan`.

    Attributes:
        namespace / name: the pod to read.
        uid: the uid the joining pod expects it to have (its ownerReference's), or ``""``: a pod of that name with
            another uid was replaced, and is not read as it.
    """

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...

    def group_of(self, pod: dict[str, Any], config: Config) -> str | None:
        """The group the read pod is in (``None``: none, and the joining pod joins none)."""

    def plan(self, group: str) -> GangPlan:
        """The plan that puts the joining pod into ``group`` (patched as a joiner's plan, ``label_workload`` off)."""

    def unread(self, error: str) -> str:
        """The warning when the API did not answer the read (``error``: the API's message)."""

    def absent(self, why: str) -> str:
        """The warning when the read pod cannot be used: ``why`` is ``"was not found"``, ``"is not known (no
        Kubernetes API to read it from)"`` or ``"has another uid (...): it was replaced"``."""


class Read(Protocol):
    """An object a kind's validating admission must read through the API before it can answer, and what the answer
    becomes once it is read (``WorkloadKind.admission_read``: a TrainJob's runtime). ``admission.Admission`` does the
    read, one GET within ``api_timeout_seconds``, and a failed read follows the failure mode; the kind module stays
    pure.

    Attributes:
        group / version / plural / namespace / name: the object (namespace ``""``: cluster-scoped).
        kind: its kind, for words (``ClusterTrainingRuntime``).
        judged: what the admission judges from it, for words (``admit review`` says it when the object is not among
            the files it reviews): ``"the JobSet Kubeflow Trainer builds from it"``.
    """

    group: str
    version: str
    plural: str
    namespace: str
    name: str
    kind: str
    judged: str

    def judge(self, obj: dict[str, Any] | None, config: Config,
              notes: list[str] | None = None) -> tuple[list[str], GangError | None]:
        """``(warnings, refusal)`` once read (``obj`` ``None``: not found); a refusal is named on the admitted
        object. ``notes``, when given, gets what the read settles for the user (``admit review`` shows it)."""


@dataclass(frozen=True, slots=True)
class AllowedBackends:
    """The gang backends a kind's objects can use, when not every one can (``WorkloadKind.allowed_backends``).

    Attributes:
        backends: backend names (``admit/backends/registry.py`` ``BACKENDS``), the first is the one a gang asking
            for another moves to (``backends.apply_backend``, with a note; refused when admit runs without it).
        applies: ``applies(obj) -> bool``: which objects of the kind the rule covers (all Spark objects; of bare
            Pods only those labelled ``spark-role``).
        who / why: for the note and the refusal: ``"Spark"`` (``"Spark pods stay on ..."``, ``"Spark gangs need
            ..."``) and the reason in a parenthesis.
    """

    backends: tuple[str, ...]
    applies: Callable[[dict[str, Any]], bool]
    who: str
    why: str


@dataclass(frozen=True, slots=True)
class Rollout:
    """How a kind's controller rolls an UPDATE of its pod template out (``WorkloadKind.rollout``,
    ``admit.webhook.rollout.rollout_problem``).

    Attributes:
        at_once: ``at_once(obj, replicas) -> (new pods made before any is available, how that number comes about)``,
            or ``None`` when the update strategy is not a rolling one.
        fixes: ``fixes(min_member, replicas) -> str``: what the user can do instead, opening with the imperative
            (the refusal leads with it, then says why).
    """

    at_once: Callable[[dict[str, Any], int], tuple[int, str] | None]
    fixes: Callable[[int, int], str]


@dataclass(frozen=True, slots=True)
class RunningUpdate:
    """An UPDATE of a stored gang workload, as a kind's ``WorkloadKind.running_update`` rule sees it
    (``admit.webhook.rollout.running_problem``, called by both admission phases).

    Attributes:
        obj: the object as sent (mutating phase) or as admitted (validating phase).
        old: the stored object.
        obj_marked / old_marked: each with admit's write for this UPDATE applied (its backend's ``join_ops``; when
            ``removing``, its ``leave_ops``), or ``None`` when they cannot be computed. ``obj_marked == old_marked``
            says that the user's own write changed nothing but what admit writes; ``old_marked != old`` that
            admit's write changes the stored object.
        removing: the UPDATE removes the gang annotations, and admit's write takes its marks off (the plan is the
            stored object's): the same rule judges it, as the operator sees the same kind of change.
    """

    obj: dict[str, Any]
    old: dict[str, Any]
    obj_marked: dict[str, Any] | None
    old_marked: dict[str, Any] | None
    removing: bool = False

    def admit_alone_changes(self, path: tuple[str, ...]) -> bool:
        """True when admit's marks change ``path`` of the stored object (``old_marked`` differs from ``old`` there)
        while the user's write changes nothing else there: the operator would react to admit's write alone."""
        if self.obj_marked is None or self.old_marked is None:
            return False
        return (get_path(self.old_marked, path) != get_path(self.old, path)
                and get_path(self.obj_marked, path) == get_path(self.old_marked, path))


@dataclass(frozen=True, slots=True)
class RunningVerdict:
    """What admit does with an UPDATE whose write the kind's operator would refuse or act on
    (``WorkloadKind.running_update``).

    Attributes:
        message: what the operator would do with admit's write, and the fix (names the object and the operator's
            rule, with the upstream source).
        refuse: ``True``: admit writes nothing and the validating phase refuses the UPDATE with ``message`` (code
            403); ``False``: admit writes its marks and warns with ``message``.
    """

    message: str
    refuse: bool


RunningRule = Callable[[RunningUpdate, GangPlan, Config], "RunningVerdict | None"]
"""``rule(update, plan, config) -> RunningVerdict | None`` (``WorkloadKind.running_update``); pure; it may raise
``gang.plan.BelowMinMember``. Trainer's ``runtimePatches`` immutability (refused), the spark-operator's re-run
(refused), LWS's roll (warned)."""


@dataclass(frozen=True, slots=True)
class Carry:
    """How the gang annotations of a *wrapper* kind reach each object its controller makes from its template, when
    that controller copies none of the wrapper's annotations onto it (``WorkloadKind.carry``, ``families.wrappers``):
    admit writes them into the template at ``template + path``, the controller copies the template into the
    object's ``spec``, and at the object's CREATE admit puts them on its ``metadata.annotations``
    (``admit.families.kinds.carried_annotations``).

    Attributes:
        child: ``(API group, kind)`` of the objects the wrapper's controller makes; they name the wrapper among
            their ownerReferences (not always as controller: the spark-operator's is not).
        template: key path of the wrapper's template, copied whole into the object's ``spec``
            (``("spec", "template")``).
        path: key path, under the template and under the object's ``spec``, of an annotations map the operator
            copies on and never reads for itself (``("driver", "annotations")``: the driver pod's).
    """

    child: tuple[str, str]
    template: tuple[str, ...]
    path: tuple[str, ...]

    @property
    def in_wrapper(self) -> tuple[str, ...]:
        """Key path of the carried annotations in the wrapper."""
        return self.template + self.path


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One gang workload kind of a family.

    Attributes:
        api_group / kind: as in ``AdmissionReview.request.kind`` (``"jobset.x-k8s.io"``, ``"JobSet"``).
        versions: ``(version, plural)`` pairs the API serves, newest first; the controller watches each one (a
            version whose CRD is not installed answers 404 and is retried slowly, ``watchcache.py``). Empty for a
            kind it does not watch as a workload (bare Pods: it watches Spark drivers apart, ``controller.claims``).
        resolve: ``resolver(obj, annotations, config, namespace, operation) -> GangPlan`` (``admit.gang.plan.Resolver``).
        children: ``(API group, kind)`` of the objects this kind's controller creates that would otherwise be
            resolved as gangs of their own (``admit.families.kinds.PARENTS``).
        scalable: its ``*/scale`` subresource (of its first version) is validated as a change of replicas
            (``kubectl scale``, the HorizontalPodAutoscaler; ``admit.families.kinds.SCALABLE``).
        pod_owned_children: ``(API group, kind, label)`` of the objects this kind's controller creates owned by one
            of the kind's *pods* and carrying ``label`` (LeaderWorkerSet's worker StatefulSets, owned by the leader).

    Every other per-kind fact is a keyword a record must give (``None`` / ``False`` to say "none"), so a new kind
    cannot forget one (tests/test_architecture.py checks each):

        pod_joiner: a :data:`PodJoiner` for the kind's pods that find their group from labels at creation, or ``None``.
        pod_watch_selector: for a kind without ``versions`` whose Pods the controller still watches, that watch's
            extra label requirement (bare Pods: ``spark-role=driver``), or ``None``.
        rollout: the kind's rolling update (:class:`Rollout`), or ``None`` when an UPDATE of the template cannot
            strand running pods outside the gang.
        controller_gang: who makes the kind's native gang objects when the object sets ``spec.scheduling`` (words for
            the note, ``backends.workload_api.native.deferring_reason``), or ``None``.
        gang_from_parent: the annotation that says a parent's Workload makes the object's PodGroup (a Job's
            ``scheduling.k8s.io/group-template-name``, KEP-5547): admit then only checks its size; or ``None``.
        handover: ``handover(min_count) -> spec.scheduling`` that hands a new ``workload-api`` gang to the kind's
            own controller under ``--controller-gang <kind>`` (``backends.workload_api.native.native_handover``; a
            Job's ``JobSchedulingConfiguration``), or ``None`` when its controller takes none.
        allowed_backends: :class:`AllowedBackends`, or ``None`` when every gang backend serves the kind.
        in_status: ``admit status`` lists the kind's objects to name a gang's workload.

    Facts with a default:

        annotations: where admit reads the kind's gang annotations (default ``metadata.annotations``; a CronJob's
            ``spec.jobTemplate.metadata.annotations``, which its controller copies onto each Job); admit's
            annotations on such an object's own metadata are warned about (``gang.plan.misplaced_annotation_warnings``).
        unwatched: why the controller does not watch the kind (no gang object ever belongs to one of its objects),
            or ``None``; its ``versions`` still name its resource (``admit.families.kinds.WEBHOOK_RESOURCES``).
        carry: a wrapper's :class:`Carry`, or ``None``.
        admission_read: ``(object, namespace) -> Read | None``: the object a CREATE's validating admission reads and
            judges first (:class:`Read`: a TrainJob's runtime), or ``None``.
        running_update: a :data:`RunningRule` (the operator would refuse admit's write to a stored object, or act on
            it), or ``None``: admit's write is taken as any other.
    """

    api_group: str
    kind: str
    versions: tuple[tuple[str, str], ...]
    resolve: Resolver
    children: tuple[tuple[str, str], ...] = field(default=())
    scalable: bool = False
    pod_owned_children: tuple[tuple[str, str, str], ...] = field(default=())
    pod_joiner: PodJoiner | None = field(kw_only=True)
    pod_watch_selector: str | None = field(kw_only=True)
    rollout: Rollout | None = field(kw_only=True)
    controller_gang: str | None = field(kw_only=True)
    gang_from_parent: str | None = field(kw_only=True)
    handover: Callable[[int], dict[str, Any]] | None = field(kw_only=True)
    allowed_backends: AllowedBackends | None = field(kw_only=True)
    in_status: bool = field(kw_only=True)
    annotations: tuple[str, ...] = field(default=("metadata", "annotations"), kw_only=True)
    unwatched: str | None = field(default=None, kw_only=True)
    carry: Carry | None = field(default=None, kw_only=True)
    running_update: RunningRule | None = field(default=None, kw_only=True)
    admission_read: Callable[[dict[str, Any], str], Read | None] | None = field(default=None, kw_only=True)

    @property
    def key(self) -> tuple[str, str]:
        """``(API group, kind)``: the key of ``admit.families.kinds.RESOLVERS``."""
        return (self.api_group, self.kind)

    @property
    def plural(self) -> str:
        """The resource name: the first version's plural, else the English rule (``Pod`` -> ``pods``)."""
        if self.versions:
            return self.versions[0][1]
        lower = self.kind.lower()
        return lower + ("es" if lower.endswith("s") else "s")


def object_ref(kind: str, namespace: str, name: str) -> str:
    """``"JobSet team-a/train"`` for messages."""
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def controller_owner(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    """``(API group, kind, name)`` of ``obj``'s controller ownerReference (``ownerrefs.controller_ref``), or None."""
    ref = controller_ref(obj)
    if ref is None:
        return None
    return str(ref.get("apiVersion") or "").rpartition("/")[0], str(ref.get("kind") or ""), str(ref.get("name") or "")


def defer_to_operator(plan: GangPlan, why: str, config: Config) -> GangPlan:
    """Mark ``plan`` as ganged by the workload's own operator (KubeRay's scheduler-plugins integration, Kubeflow
    Trainer's ``podGroupPolicy.coscheduling``): no mutation, no PodGroup, one warning, and a note that says ``why``
    (which operator, which setting). Returns ``plan``."""
    plan.mutate = False
    plan.create_pod_group = False
    plan.min_resources = None
    plan.warnings.append(
        f"remove {config.min_member_key} to silence this: its operator gangs this {plan.kind} (see admit review), so "
        "admit only checks it and leaves its pods and PodGroup to that operator")
    plan.notes.append(f"{plan.ref}: {why}")
    return plan


def template_target(prefix: tuple[str, ...], where: str, *, group_label: bool = True) -> PodTarget:
    """The :class:`PodTarget` of a pod template at key path ``prefix`` (its ``metadata.labels``,
    ``spec.schedulerName`` and ``metadata.annotations``)."""
    return PodTarget(
        prefix + ("metadata", "labels"), prefix + ("spec", "schedulerName"), where=where, group_label=group_label,
        annotations=prefix + ("metadata", "annotations"),
    )


def gang_min_member(ann: GangAnnotations, total: int) -> int:
    """minMember: the annotation's number, or for ``auto`` the pods started at once (at least 1)."""
    return ann.min_member if ann.min_member is not None else max(total, 1)


def min_resources_of(
    pods: list[tuple[Any, int]], min_member: int, ann: GangAnnotations, where: str
) -> dict[str, str] | None:
    """``minResources`` of the first ``min_member`` pods of ``pods`` (``[(pod_spec, count), ...]`` in the family's start
    order; each pod's requests by the scheduler's rule, ``gang.resources.pod_requests``), or ``None`` when
    ``gang.admit.dev/min-resources: none`` or no pod requests anything.

    Raises:
        GangError (400): a quantity in a pod spec does not parse (the message names ``where``).
    """
    if not ann.min_resources:
        return None
    left = min_member
    taken: list[tuple[dict[str, Any], int]] = []
    for spec, count in pods:
        take = min(left, count)
        if take > 0 and isinstance(spec, dict):
            taken.append((spec, take))
        left -= max(take, 0)
        if left <= 0:
            break
    try:
        return gang_min_resources(taken) or None
    except ResourceError as e:
        raise GangError(f"Make the resources of {where} valid: {e}", 400) from None


def requests_of(pod_spec: Any, where: str) -> dict[str, Fraction]:
    """``admit.gang.resources.pod_requests`` of ``pod_spec`` (``{}`` when it is no object).

    Raises:
        GangError (400): a quantity does not parse (the message names ``where``).
    """
    if not isinstance(pod_spec, dict):
        return {}
    try:
        return pod_requests(pod_spec)
    except ResourceError as e:
        raise GangError(f"Make the resources of {where} valid: {e}", 400) from None
