"""Gang backends: which objects and pod fields the same ``gang.admit.dev/*`` annotations become.

The built-ins (``backends/coscheduling/``: a scheduler-plugins PodGroup, the pod-group label and ``schedulerName``;
``backends/workload_api/``: Kubernetes' native Workload and PodGroup, pod ``spec.schedulingGroup``) and any other
installed through the ``admit.gang_backends`` entry points (``registry.py``). A workload's backend is
``<prefix>/backend``, else ``--gang-backend``; one that is not enabled (``--gang-backend`` /
``--extra-gang-backend``: the chart grants RBAC for those only) is refused with the reason. :func:`with_backend`
wraps every resolver of ``kinds.RESOLVERS``, so mutate, validate, the scale check and the controller see the same
``plan.backend``.

Deferring: a workload whose gang someone else makes (its own controller from ``spec.scheduling``, a parent's
Workload, a group its templates name) is validated only (``mutate`` and ``create_pod_group`` off, with a note), as
the registered backends' ``deferring_reason`` hooks say; such a plan gets the ops of their ``native_handover`` hooks
(:func:`handover_ops`). The per-kind facts come with the kind's record (:func:`apply_backend`): this module names
no kind and no backend.
"""

from __future__ import annotations

from dataclasses import replace
from functools import wraps
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..gang.plan import (BelowMinMember, GangAnnotations, GangError, GangPlan, Resolver, below_min_member,
                         counted_and_fix, min_member_source)
from .interface import GangBackend
from .registry import BACKENDS, backend_of, hook_of, hooks

if TYPE_CHECKING:  # the kind's record is the families' type; a backend only reads the facts passed to it
    from ..families.shared import WorkloadKind

__all__ = ["with_backend", "with_joiner_backend", "apply_backend", "handover_ops", "scheduler_of",
           "requested_backend", "render_below", "check_plan", "BACKENDS", "GangBackend", "backend_of"]


def requested_backend(ann: GangAnnotations, config: Config) -> str:
    """The backend a workload asks for: annotation ``<prefix>/backend``, else ``--gang-backend``. What a resolver
    knows before :func:`apply_backend` checks it (and moves Spark to ``coscheduling``)."""
    return ann.backend if ann.backend is not None else config.gang_backend  # common.asked_backend, parsed


def scheduler_of(backend: str) -> str:
    """Who keeps an undersized gang Pending, for messages: backend ``backend``'s ``interface.GangBackend.scheduler``."""
    found = BACKENDS.get(backend)
    return found.scheduler if found is not None else "the gang scheduler"


def render_below(e: BelowMinMember, ann: GangAnnotations, config: Config) -> GangError:
    """The refusal of a gang below its minMember (``gang.plan.BelowMinMember``), the one place its message is rendered:
    it names the scheduler of ``e.backend``, else of the backend asked for (:func:`requested_backend`)."""
    return GangError(e.message_for(scheduler_of(e.backend or requested_backend(ann, config))), e.code)


def check_plan(plan: GangPlan, config: Config, ann: GangAnnotations) -> None:
    """Refuse a plan whose pod count (``gang.plan.below_min_member``), or whose last wave (``plan.last_wave``), is below its
    minMember; ``plan.backend`` is set (after :func:`apply_backend`).

    Raises:
        GangError (403): ``0 < total_pods < min_member``, or ``0 < last_wave.size < min_member``; the message names
            the fields and numbers that conflict, the scheduler that would keep the pods Pending, and says which
            field to change or which annotation to lower.
    """
    try:
        below_min_member(plan, ann, config, *counted_and_fix(plan), backend=plan.backend)
    except BelowMinMember as e:
        refusal = render_below(e, ann, config)
        if plan.refusal_note:
            refusal.message = f"{refusal.message}. {plan.refusal_note}"
            refusal.args = (refusal.message,)
        raise refusal from None
    source = min_member_source(plan, ann, config)
    wave = plan.last_wave
    if wave is not None and plan.total_pods and 0 < wave.size < plan.min_member:
        raise GangError(
            f"{wave.fix[0].upper()}{wave.fix[1:]}, or set {config.min_member_key} to at most {wave.size}: "
            f"{plan.ref}: {wave.why}, fewer than its gang minMember {plan.min_member} ({source}); kube-scheduler does "
            f"not count finished pods, so {scheduler_of(plan.backend)} would keep "
            f"{'that pod' if wave.size == 1 else 'those pods'} Pending forever"
        )


def apply_backend(plan: GangPlan, obj: dict[str, Any], ann: GangAnnotations, config: Config,
                  kind: WorkloadKind | None = None) -> GangPlan:
    """Set ``plan.backend`` and apply the deferring rules (module docstring); returns ``plan``.

    ``kind`` is the workload's record: its ``allowed_backends`` (a gang asking for a backend its kind cannot use
    moves to the kind's first one, Spark: ``coscheduling``, with a note), and the facts of its native gang
    (``controller_gang``, ``gang_from_parent``, ``handover``, read by the backends' ``deferring_reason`` hooks).

    Raises:
        GangError (code 400): the backend asked for is not enabled in admit, the API server does not serve the
            Workload API, or the group name cannot name a v1alpha2 Workload; (code 403) pod templates that
            kube-scheduler would never schedule as one native gang (``workload_api.gang_priority``), a member of a
            group whose size follows its members on a backend that cannot lower it (:func:`_refuse_unfollowed`).
    """
    backend = requested_backend(ann, config)
    allowed = kind.allowed_backends if kind is not None else None
    if backend not in config.allowed_backends:
        raise GangError(
            f"Enable gang backend {backend} with --extra-gang-backend {backend} (chart: config.extraGangBackends), "
            f'or remove annotation {config.backend_key}: {plan.ref} asks for gang backend "{backend}", but admit runs '
            f"with --gang-backend {config.gang_backend} only", 400)
    if allowed is not None and backend not in allowed.backends and allowed.applies(obj):
        to = allowed.backends[0]
        if to not in config.allowed_backends:
            raise GangError(f"Enable the {to} backend with --extra-gang-backend {to} (chart: "
                            f"config.extraGangBackends): {plan.ref}: {allowed.who} gangs need it ({allowed.why})", 400)
        plan.notes.append(f"{plan.ref}: {allowed.who} pods stay on the {to} backend ({allowed.why})")
        backend = to
    reason = next((r for reason_of in hooks("deferring_reason")
                   if (r := reason_of(obj, plan, backend, config, kind)) is not None), None)
    if reason is not None:
        plan.mutate = False
        plan.create_pod_group = False
        plan.notes.append(reason)  # who owns the gang objects, explained: nothing for the user to change
    backend_of(backend).prepare(plan, obj, config, reason is not None)
    plan.backend = backend
    if plan.follows_members and reason is None:
        _refuse_unfollowed(plan, config)
    return plan


def _cannot_follow(name: str, plan: GangPlan, config: Config) -> str | None:
    """Why backend ``name`` cannot lower ``plan``'s group as its members finish, or ``None``: it has no
    ``merge_shared`` hook (nothing sizes the group to the members still to run), or its ``update_ops`` cannot take
    one of its objects from a size one higher down to the plan's (the Workload API's v1alpha2 ``minCount``,
    immutable: kubernetes v1.36 ``pkg/apis/scheduling/validation/validation.go`` ``validatePodGroupSpecUpdate``,
    ``ValidateImmutableField`` of ``spec.schedulingPolicy``)."""
    backend = BACKENDS[name]
    if hook_of(name, "merge_shared") is None:
        return f"the {name} backend cannot lower a group's {backend.size_name}"
    higher = replace(plan, backend=name, min_member=plan.min_member + 1)
    for have, want in zip(backend.desired_objects(higher, config), backend.desired_objects(plan, config)):
        if backend.update_ops(have, want, str(have["apiVersion"]).rpartition("/")[2]) is None:
            return f"a {have['apiVersion']} {have['kind']}'s {backend.size_name} cannot change once created"
    return None


def _refuse_unfollowed(plan: GangPlan, config: Config) -> None:
    """Refuse (403) a member of a group whose size follows its members (``plan.follows_members``, an Argo step's)
    when its backend cannot lower the group (:func:`_cannot_follow`): the first attempt would run, and a retry wait
    for ever for the members that succeeded. The fix leads: the registered backend that can, enabled first."""
    why = _cannot_follow(plan.backend, plan, config)
    if why is None:
        return
    able = [n for n in BACKENDS if n != plan.backend and _cannot_follow(n, plan, config) is None]
    to = next((n for n in able if n in config.allowed_backends), next(iter(able), None))
    enable = "" if to is None or to in config.allowed_backends else \
        f" (enable it with --extra-gang-backend {to}, chart: config.extraGangBackends)"
    fix = f"Set annotation {config.backend_key}: {to}" if to is not None else \
        f"Use a gang backend ({config.backend_key}) whose group size can change"
    raise GangError(
        f"{fix} in the step template's metadata.annotations{enable}: {plan.ref}'s group {plan.group_name} must shrink "
        "as its members finish, or a retried member waits for ever for those that succeeded (kube-scheduler no "
        f"longer counts finished pods), and {why}", 403)


def handover_ops(obj: dict[str, Any], plan: GangPlan, config: Config,
                 kind: WorkloadKind | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """``(JSONPatch ops, warnings)`` for a workload whose gang someone else makes (``plan.mutate`` off by
    :func:`apply_backend`; ``kind``: its record): those of the backends' ``native_handover`` hooks, or ``([], [])``."""
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for handover in hooks("native_handover"):
        more, said = handover(obj, plan, config, kind)
        ops.extend(more)
        warnings.extend(said)
    return ops, warnings


def with_backend(resolver: Resolver, kind: WorkloadKind | None = None) -> Resolver:
    """``resolver`` followed by :func:`apply_backend` (same signature, same errors plus apply_backend's), with the
    kind's record (``admit.families.kinds`` passes it: the per-kind facts the backend choice reads)."""

    @wraps(resolver)
    def resolve(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
        try:
            plan = resolver(obj, ann, config, namespace, operation)
            written = hook_of(requested_backend(ann, config), "written_group") if ann.pod_group is None else None
            # a generateName object's group, named in the mutating phase (interface.BackendHooks.written_group)
            named = written(obj, plan, config) if written is not None else None
            if named is not None:
                plan = resolver(obj, replace(ann, pod_group=named), config, namespace, operation)
        except BelowMinMember as e:  # a family's refusal as data: named with the backend's scheduler here
            raise render_below(e, ann, config) from None
        return apply_backend(plan, obj, ann, config, kind)

    return resolve


def with_joiner_backend(joiner: Any) -> Any:
    """A pod joiner (``kinds.POD_JOINERS``: Spark executors, LeaderWorkerSet group pods) whose plans stay on the backend
    they are written for (``plan.backend``: the model's default, the pod-group label's); when admit runs without it the
    plan neither mutates nor creates groups, and warns, rather than label pods for an absent scheduler."""

    @wraps(joiner)
    def join(pod: dict[str, Any], config: Config, namespace: str, known_groups: Any) -> Any:
        plan = joiner(pod, config, namespace, known_groups)
        if isinstance(plan, GangPlan) and plan.backend not in config.allowed_backends and plan.mutate:
            plan.mutate = False
            plan.create_pod_group = False
            plan.warnings.append(f"enable --extra-gang-backend {plan.backend} to gang this {plan.kind}: it would join "
                                 f"group {str(plan.group_name)[:63]} through {scheduler_of(plan.backend)}, which admit "
                                 "does not run with here")
        return plan

    return join
