"""Gang backends: which objects and pod fields the same ``gang.admit.dev/*`` annotations become.

- ``coscheduling`` (default, today's behaviour): a scheduler-plugins ``PodGroup`` (scheduling.x-k8s.io), the pod
  label ``scheduling.x-k8s.io/pod-group`` and ``schedulerName`` of the Coscheduling profile
  (``backends/coscheduling/``);
- ``workload-api``: Kubernetes' native gang scheduling, a ``Workload`` and its runtime ``PodGroup``
  (scheduling.k8s.io v1alpha2 in 1.36, v1beta1 in 1.37) and pod ``spec.schedulingGroup.podGroupName``, default
  scheduler (``backends/workload_api/``).

A workload's backend is ``<prefix>/backend`` when set, else ``--gang-backend``; a backend that is not enabled
(``--gang-backend`` / ``--extra-gang-backend``, the chart grants RBAC for those only) is refused with the reason.
:func:`with_backend` wraps every resolver of ``kinds.RESOLVERS``, so mutate, validate, the scale check and the
controller all see the same ``plan.backend``.

Deferring (both backends; docs/behaviour.md, "The rules the code is built on": do not fight an operator that already
gangs its own jobs), the plan is then validated only (``mutate`` and ``create_pod_group`` off, with a warning):

- a pod template that already carries ``spec.schedulingGroup`` naming another group: the Job controller
  (``WorkloadWithJob``: "``spec.template.spec.schedulingGroup`` is set (bring-your-own PodGroup): the user manages
  the objects"), JobSet, LeaderWorkerSet, KubeRay or the user made that group (KEP-5547, "Job Controller Changes");
- a Job with ``spec.scheduling`` (1.37, KEP-5547: the Job controller compiles it into a Workload and PodGroup, and
  refuses ``spec.scheduling`` together with a template ``schedulingGroup``) or with the annotation
  ``scheduling.k8s.io/group-template-name`` (its PodGroup comes from a parent's Workload);
- a Deployment or StatefulSet with ``spec.scheduling`` (KEP-6276/KEP-6277, alpha targeted for 1.38; UNVERIFIED: not
  in the stored kubernetes sources yet): its controller makes one PodGroup per ReplicaSet / per StatefulSet;
- a JobSet or LeaderWorkerSet with ``spec.scheduling`` (alpha with Kubernetes 1.37's building blocks: JobSet
  ``keps/969-WAS-integration``, gate ``JobSetWorkloadAwareSchedulingAPI``, "when set (even to {}), the controller
  compiles a Workload"; LWS ``keps/666-gang-scheduling-in-lws``, gate ``WorkloadAwareScheduling``): its operator
  makes the Workload and PodGroups (one per LWS group). The field name is the KEPs'; their Go types are unconfirmed.

One gang mechanism per workload (:func:`native_handover`, called by ``mutate.plan_patch``): when a workload is
deferred because it became a native gang of its controller (``spec.scheduling``, possibly set by another mutating
webhook after admit's ran, such as Kueue's for Jobs: kube-apiserver then re-invokes admit's, ``reinvocationPolicy:
IfNeeded``), the marks admit put on it in an earlier pass are taken off its mutable templates: the Coscheduling
pod-group label and admit's ``schedulerName`` (else the pods would go to a scheduler waiting for a PodGroup nobody
makes), admit's own ``spec.schedulingGroup`` (the Job controller refuses it beside ``spec.scheduling``), and the
``<prefix>/managed`` label; a warning says which way the workload went. With ``--controller-gang Job``
(``Config.controller_gangs``), admit itself hands a new workload-api Job gang to the Job controller: it sets the
``spec.scheduling`` the kind's record gives (``WorkloadKind.handover``; a Job's is ``families.apps.job_scheduling``,
``schedulingPolicy.gang.minCount``) and neither ``schedulingGroup`` nor a Workload/PodGroup of its own.

Spark (SparkApplication, spark-submit drivers and their executors) stays on ``coscheduling``: the spark-operator
does not copy ``schedulingGroup`` into the pods it makes, and executors join their driver by label; admit says so in
a note. Which kinds' controllers make a native gang, which take a parent's (the Job annotation above), which admit
hands over and which kinds keep to some backends are facts of each kind's record (``WorkloadKind.controller_gang``,
``gang_from_parent``, ``handover``, ``allowed_backends``), passed in by ``admit.families.kinds``: this module names
no kind.
"""

from __future__ import annotations

from dataclasses import replace
from functools import wraps
from typing import TYPE_CHECKING, Any

from ..config import COSCHEDULING, KUBE_DEFAULT_SCHEDULER, WORKLOAD_API, Config
from ..gang.patch import pointer
from ..gang.plan import (BelowMinMember, GangAnnotations, GangError, GangPlan, PodTarget, Resolver, below_min_member,
                         counted_and_fix, get_path, min_member_source)
from . import coscheduling, workload_api
from .interface import GangBackend
from .registry import BACKENDS, backend_of
from .workload_api import not_served_message

if TYPE_CHECKING:  # the kind's record is the families' type; a backend only reads the facts passed to it
    from ..families.shared import WorkloadKind

__all__ = ["with_backend", "coscheduling_joiner", "apply_backend", "deferring_reason", "native_handover",
           "template_joined", "not_served_message",
           "scheduler_phrase", "scheduler_of", "requested_backend", "refuse_below", "render_below", "check_plan", "coscheduling", "workload_api",
           "BACKENDS", "GangBackend", "backend_of"]


def requested_backend(ann: GangAnnotations, config: Config) -> str:
    """The backend a workload asks for: annotation ``<prefix>/backend``, else ``--gang-backend``. What a resolver
    knows before :func:`apply_backend` checks it (and moves Spark to ``coscheduling``)."""
    return ann.backend if ann.backend is not None else config.gang_backend  # common.asked_backend, parsed


def scheduler_of(backend: str) -> str:
    """Who keeps an undersized gang Pending, for messages: the ``scheduler`` of the backend called ``backend``
    (``interface.GangBackend``): scheduler-plugins' Coscheduling plugin (its PreFilter rejects a pod until minMember
    pods of its PodGroup exist), or kube-scheduler's native GangScheduling plugin (its PreEnqueue waits for
    ``minCount`` pods)."""
    return BACKENDS.get(backend, coscheduling.BACKEND).scheduler


def scheduler_phrase(plan: GangPlan) -> str:
    """:func:`scheduler_of` the plan's backend."""
    return scheduler_of(plan.backend)


def refuse_below(plan: GangPlan, ann: GangAnnotations, config: Config, counted: str, fix: str, *,
                 ref: str | None = None, source: str | None = None, lower: str | None = None,
                 backend: str | None = None) -> None:
    """:func:`admit.gang.plan.below_min_member` with its message rendered at once (:func:`render_below`); the same
    arguments.

    Raises:
        GangError (403): ``0 < total_pods < min_member``.
    """
    try:
        below_min_member(plan, ann, config, counted, fix, ref=ref, source=source, lower=lower, backend=backend)
    except BelowMinMember as e:
        raise render_below(e, ann, config) from None


def render_below(e: BelowMinMember, ann: GangAnnotations, config: Config) -> GangError:
    """The refusal of a gang below its minMember (``gang.plan.BelowMinMember``), its message naming the scheduler
    of ``e.backend``, else of the backend the workload asks for (:func:`requested_backend`): the one place that
    message is rendered."""
    return GangError(e.message_for(scheduler_of(e.backend or requested_backend(ann, config))), e.code)


def check_plan(plan: GangPlan, config: Config, ann: GangAnnotations) -> None:
    """Refuse a plan whose pod count (:func:`refuse_below`), or whose last wave (``plan.last_wave``), is below its
    minMember; ``plan.backend`` is set (after :func:`apply_backend`).

    Raises:
        GangError (403): ``0 < total_pods < min_member``, or ``0 < last_wave.size < min_member``; the message names
            the fields and numbers that conflict, the scheduler that would keep the pods Pending, and says which
            field to change or which annotation to lower.
    """
    total = plan.total_pods
    try:
        refuse_below(plan, ann, config, *counted_and_fix(plan), backend=plan.backend)
    except GangError as e:
        if plan.refusal_note:
            e.message = f"{e.message}. {plan.refusal_note}"
            e.args = (e.message,)
        raise
    source = min_member_source(plan, ann, config)
    wave = plan.last_wave
    if wave is not None and total and 0 < wave.size < plan.min_member:
        raise GangError(
            f"{plan.ref}: {wave.why}, fewer than its gang minMember {plan.min_member} ({source}); kube-scheduler does "
            f"not count finished pods, so {scheduler_phrase(plan)} would keep "
            f"{'that pod' if wave.size == 1 else 'those pods'} Pending forever. {wave.fix[0].upper()}{wave.fix[1:]}, "
            f"or set {config.min_member_key} to at most {wave.size}"
        )


def deferring_reason(obj: dict[str, Any], plan: GangPlan, kind: WorkloadKind | None = None) -> str | None:
    """Why the workload's own controller, not admit, owns its native gang objects (module docstring), or ``None``.
    ``kind`` is the workload's record (``None``: a kind without one): its ``controller_gang`` (who makes its native
    gang from ``spec.scheduling``) and ``gang_from_parent`` (the annotation that says a parent's Workload makes its
    PodGroup)."""
    controller = kind.controller_gang if kind is not None else None
    if controller is not None and get_path(obj, ("spec", "scheduling")) is not None:
        return f"{plan.ref} sets spec.scheduling: {controller}; admit only checks its size"
    parent = _parent_annotation(obj, kind)
    if parent is not None:
        return f"{plan.ref} carries {parent}: its PodGroup comes from a parent's Workload; admit only checks its size"
    for target in plan.targets:
        named = workload_api.template_group(obj, target)
        if named is not None and named != plan.group_name:
            return (f"{plan.ref} {target.where} already sets spec.schedulingGroup.podGroupName={named!r}: whoever "
                    "made that PodGroup (the Job controller, an operator, you) owns it; admit only checks its size")
    return None


def apply_backend(plan: GangPlan, obj: dict[str, Any], ann: GangAnnotations, config: Config,
                  kind: WorkloadKind | None = None) -> GangPlan:
    """Set ``plan.backend`` and apply the deferring rules (module docstring); returns ``plan``.

    ``kind`` is the workload's record: its ``allowed_backends`` (a gang asking for a backend its kind cannot use
    moves to the kind's first one, Spark: ``coscheduling``, with a note), and the facts of its native gang
    (``controller_gang``, ``gang_from_parent``, ``handover``: :func:`deferring_reason`, :func:`native_handover`).

    Raises:
        GangError (code 400): the backend asked for is not enabled in admit, the API server does not serve the
            Workload API, or the group name cannot name a v1alpha2 Workload; (code 403) pod templates that
            kube-scheduler would never schedule as one native gang (``workload_api.gang_priority``).
    """
    backend = requested_backend(ann, config)
    allowed = kind.allowed_backends if kind is not None else None
    if backend not in config.allowed_backends:
        raise GangError(
            f'{plan.ref} asks for gang backend "{backend}" ({config.backend_key}), but admit runs with '
            f'--gang-backend {config.gang_backend} only; enable it with --extra-gang-backend {backend} (chart: '
            f"config.extraGangBackends) or remove the annotation", 400)
    if allowed is not None and backend not in allowed.backends and allowed.applies(obj):
        to = allowed.backends[0]
        if to not in config.allowed_backends:
            raise GangError(f"{plan.ref}: {allowed.who} gangs need the {to} backend ({allowed.why}); enable it with "
                            f"--extra-gang-backend {to} (chart: config.extraGangBackends)", 400)
        plan.notes.append(f"{plan.ref}: {allowed.who} pods stay on the {to} backend ({allowed.why})")
        backend = to
    reason = deferring_reason(obj, plan, kind)
    if reason is None and kind is not None and (handover := _handover(obj, plan, backend, config, kind)) is not None:
        reason = (f"{plan.ref} goes to the {kind.kind} controller's native gang: admit sets "
                  f"{_dotted(('spec', 'scheduling'), handover)} (--controller-gang {kind.kind}) and makes no Workload "
                  "or PodGroup of its own")
    if reason is not None:
        plan.mutate = False
        plan.create_pod_group = False
        plan.notes.append(reason)  # who owns the gang objects, explained: nothing for the user to change
    backend_of(backend).prepare(plan, obj, config, reason is not None)
    plan.backend = backend
    return plan


def _parent_annotation(obj: dict[str, Any], kind: WorkloadKind | None) -> str | None:
    """The kind's ``gang_from_parent`` annotation when ``obj`` carries it, else ``None``."""
    key = kind.gang_from_parent if kind is not None else None
    return key if key is not None and get_path(obj, ("metadata", "annotations", key)) is not None else None


def _handover(obj: dict[str, Any], plan: GangPlan, backend: str, config: Config,
              kind: WorkloadKind | None) -> dict[str, Any] | None:
    """The ``spec.scheduling`` with which admit hands a new (mutable-template, not yet managed) workload-api gang to
    its kind's own controller (the record's ``handover``, for a kind ``--controller-gang`` names), else ``None``."""
    if (backend != WORKLOAD_API or kind is None or kind.handover is None or kind.kind not in config.controller_gangs
            or not plan.targets or any(t.immutable for t in plan.targets)
            or get_path(obj, ("metadata", "labels", config.managed_label)) == "true"):
        return None
    return kind.handover(plan.min_member)


def _dotted(path: tuple[str, ...], value: Any) -> str:
    """``spec.scheduling.schedulingPolicy.gang.minCount=3`` for ``value`` ``{"schedulingPolicy": {"gang": {"minCount":
    3}}}`` at ``path``: the field a one-key-per-level map sets, for messages."""
    while isinstance(value, dict) and len(value) == 1:
        (key, value), = value.items()
        path += (key,)
    return f"{'.'.join(path)}={value}"


def native_handover(obj: dict[str, Any], plan: GangPlan, config: Config,
                    kind: WorkloadKind | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """JSONPatch operations and warnings for a workload whose gang its own controller makes (``plan.mutate`` off
    by :func:`apply_backend`; module docstring, "One gang mechanism per workload"): ``spec.scheduling`` for a Job
    admit hands over, and the removal of admit's earlier marks from a workload that became a controller's native
    gang. ``([], [])`` when neither applies (the operator-made gangs of ``deferring_reason``). ``kind``: the
    workload's record (its ``controller_gang``, ``gang_from_parent`` and ``handover``)."""
    reason = deferring_reason(obj, plan, kind)
    if reason is None:
        handover = _handover(obj, plan, plan.backend, config, kind)
        if handover is None:
            return [], []
        return [{"op": "add", "path": "/spec/scheduling", "value": handover}], []
    native = get_path(obj, ("spec", "scheduling")) is not None or _parent_annotation(obj, kind) is not None
    if not native or get_path(obj, ("metadata", "labels", config.managed_label)) != "true" or any(
            t.immutable for t in plan.targets):  # an immutable template keeps admit's marks: admit keeps its gang too
        return [], []
    ops: list[dict[str, Any]] = []
    removed: set[str] = set()
    for target in plan.targets:
        if get_path(obj, target.labels + (config.pod_group_label,)) == plan.group_name:
            ops.append({"op": "remove", "path": pointer(target.labels + (config.pod_group_label,))})
            removed.add(f"the {config.pod_group_label} label")
        if get_path(obj, target.scheduler) == config.scheduler_name != KUBE_DEFAULT_SCHEDULER:
            ops.append({"op": "replace", "path": pointer(target.scheduler), "value": KUBE_DEFAULT_SCHEDULER})
            removed.add(f"schedulerName {config.scheduler_name}")
        if workload_api.template_group(obj, target) == plan.group_name:
            ops.append({"op": "remove", "path": pointer(target.scheduler[:-1] + ("schedulingGroup",))})
            removed.add("spec.schedulingGroup")
        if target.annotations is not None:  # admit's own template annotations (an LWS's group-spec)
            for key in sorted(plan.template_annotations):
                if get_path(obj, target.annotations + (key,)) is not None:
                    ops.append({"op": "remove", "path": pointer(target.annotations + (key,))})
                    removed.add(f"the {key} annotation")
    ops.append({"op": "remove", "path": pointer(("metadata", "labels", config.managed_label))})
    what = f" and took {', '.join(sorted(removed))} off its pod templates" if removed else ""
    return ops, [f"{plan.ref} became its controller's native gang (spec.scheduling, set by you or another webhook "
                 f"such as Kueue's): admit dropped its own gang{what}, so one gang mechanism remains"]


def with_backend(resolver: Resolver, kind: WorkloadKind | None = None) -> Resolver:
    """``resolver`` followed by :func:`apply_backend` (same signature, same errors plus apply_backend's), with the
    kind's record (``admit.families.kinds`` passes it: the per-kind facts the backend choice reads)."""

    @wraps(resolver)
    def resolve(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
        try:
            plan = resolver(obj, ann, config, namespace, operation)
        except BelowMinMember as e:  # a family's refusal as data: named with the backend's scheduler here
            raise render_below(e, ann, config) from None
        if requested_backend(ann, config) == WORKLOAD_API and ann.pod_group is None and \
                get_path(obj, ("metadata", "labels", config.managed_label)) == "true":
            # admit named this gang in the mutating phase (generateName: the object had no name yet) and wrote the
            # name into spec.schedulingGroup, as the coscheduling backend writes it into the pod-group label
            named = next((g for t in plan.targets if (g := workload_api.template_group(obj, t)) is not None), None)
            if isinstance(named, str) and named != plan.group_name:
                try:
                    plan = resolver(obj, replace(ann, pod_group=named), config, namespace, operation)
                except BelowMinMember as e:
                    raise render_below(e, ann, config) from None
        return apply_backend(plan, obj, ann, config, kind)

    return resolve


def coscheduling_joiner(joiner: Any) -> Any:
    """A pod joiner (``kinds.POD_JOINERS``: Spark executors, LeaderWorkerSet group pods) whose plans stay on the
    coscheduling backend, the only one they are written for; when admit runs without it (``--gang-backend
    workload-api`` and no ``--extra-gang-backend coscheduling``) the plan is kept from mutating and creating groups,
    with a warning, instead of labelling pods for a scheduler that is not there."""

    @wraps(joiner)
    def join(pod: dict[str, Any], config: Config, namespace: str, known_groups: Any) -> Any:
        plan = joiner(pod, config, namespace, known_groups)
        if isinstance(plan, GangPlan) and COSCHEDULING not in config.allowed_backends and plan.mutate:
            plan.mutate = False
            plan.create_pod_group = False
            plan.warnings.append(f"{plan.ref} would join group {plan.group_name} through scheduler-plugins' "
                                 "Coscheduling, which admit does not run with here; it is not gang-scheduled (enable "
                                 "--extra-gang-backend coscheduling)")
        return plan

    return join


def template_joined(obj: dict[str, Any], target: PodTarget, plan: GangPlan, config: Config) -> bool:
    """True when the target's pods will wait on the plan's group (``GangBackend.joined`` of the plan's backend: the
    pod-group label for coscheduling, ``spec.schedulingGroup.podGroupName`` for workload-api)."""
    return backend_of(plan.backend).joined(obj, target, plan, config)
