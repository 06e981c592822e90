"""What both gang backends share: the owner annotation admit stamps on every object it makes, and the ownership
verdict an existing object gets. Pure.

Every object admit creates for a gang carries admit's managed-by label and owner annotation (:func:`gang_metadata`);
each backend's ``ownership`` turns an existing object into an :class:`Ownership`. A group whose size follows its
members (an Argo step's) is sized by one rule on every backend (:func:`members_left`, with the record of
:func:`succeeded_record`). The backends import this module and never each other (the independence contract in
pyproject.toml).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from ..config import BUILTIN_ENTRY_POINTS, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Config
from ..gang.ownerrefs import controller_identity
from ..gang.patch import pointer, set_keys_ops

if TYPE_CHECKING:  # the plan is read here, never built
    from ..gang.plan import GangPlan

__all__ = ["installed", "BackendUnavailable", "asked_backend", "ObjectType", "Ownership", "owner_annotation",
           "gang_metadata", "managed_ownership", "object_owner", "not_admits_message", "generation_annotation",
           "replaces_annotation", "stamp_annotations", "generation_patch", "stamped_generation", "stamped_replaces",
           "ahead_of", "members_left", "SUCCEEDED", "succeeded_annotation", "succeeded_record", "succeeded_names",
           "record_succeeded", "succeeded_ops"]

log = logging.getLogger("admit.backends")


def installed(group: str) -> dict[str, Any]:
    """``name -> object`` of the installed entry points of ``group`` (``importlib.metadata``; ``admit.gang_backends``:
    the pure halves, ``admit.gang_backend_apis``: the API halves), sorted by name: admit's built-ins, declared in
    pyproject.toml, and those of any other installed package. When the group lists none at all (admit run from a
    checkout whose package metadata predates the entry points), the built-ins' (``config.BUILTIN_ENTRY_POINTS``)
    stand in. An entry point that cannot be loaded is logged and left out: its name is then unknown to
    ``--gang-backend`` and the annotation, and admit starts without it."""
    found = {ep.name: ep for ep in entry_points(group=group)}
    if not found:
        found = {name: EntryPoint(name, value, group) for name, value in BUILTIN_ENTRY_POINTS.get(group, {}).items()}
    loaded: dict[str, Any] = {}
    for name in sorted(found):
        try:
            loaded[name] = found[name].load()
        except Exception as e:  # noqa: BLE001 - a broken package must not stop admit
            log.warning("gang backend %s (%s, entry point of %s) not loaded: %s: %s", name, found[name].value, group,
                        type(e).__name__, e)
    return loaded


class BackendUnavailable(Exception):
    """The default gang backend (``--gang-backend``) cannot run on this API server (its start-time discovery,
    ``runtime.BackendAPI.start``, found it not served); ``str(e)``: the one-line reason ``admit serve`` exits with."""


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


def generation_annotation(config: Config) -> str:
    """The annotation recording which workload ``metadata.generation`` a managed object's spec was written from
    (``gang.admit.dev/workload-generation``), stamped by the admission engine (``backends/ensure.py``).

    Why: on a spec-changing UPDATE the validating webhook patches the gang's objects from the incoming object before
    it is stored; the controller, still seeing the previous one, would patch them back, then forward again (three
    writes, and an Event that reads as if admit undid the user's change). kube-apiserver bumps
    ``metadata.generation`` on every spec change before validating admission runs (the registry strategy's
    ``PrepareForUpdate``), so the controller never writes a spec from an older generation than the stamp."""
    return f"{config.key_prefix}workload-generation"


def replaces_annotation(config: Config) -> str:
    """The annotation recording, on an object the validating webhook wrote for an UPDATE, the ``resourceVersion`` of
    the stored workload that update replaces (``gang.admit.dev/workload-replaces``).

    Why: the generation stamp alone misses an annotation-only change. kube-apiserver bumps ``metadata.generation``
    on an annotation change for a Deployment only (``pkg/registry/apps/deployment/strategy.go`` compares ``Spec``
    and ``Annotations``); a StatefulSet's, ReplicaSet's, DaemonSet's or Job's strategy compares ``Spec`` alone, a
    custom resource's everything but ``metadata`` (``customresource/strategy.go`` ``copyNonMetadata``). So after
    ``kubectl annotate statefulset web gang.admit.dev/min-member=5`` the webhook's object and the cached workload
    carry the same generation, and the controller would write the old minMember back until the update is stored.
    The object validating admission sees carries the ``resourceVersion`` of the stored version it replaces
    (kube-apiserver checks it against the stored one before it runs validating admission, and applies a patch to the
    stored object), so while the workload a controller reads still has that ``resourceVersion``, the object is ahead
    of it. The controller removes the annotation when it writes the spec itself (from a stored version)."""
    return f"{config.key_prefix}workload-replaces"


def stamp_annotations(config: Config, generation: int | None, replaces: str | None = None) -> dict[str, str]:
    """Stamp of a workload's object: ``{generation_annotation: "5", replaces_annotation: "812"}`` (each if given)."""
    out = {generation_annotation(config): str(generation)} if generation is not None else {}
    if replaces:
        out[replaces_annotation(config)] = replaces
    return out


def generation_patch(existing: dict[str, Any], generation: int | None, config: Config,
                     replaces: str | None = None) -> list[dict[str, Any]]:
    """JSONPatch ops that stamp ``existing`` as written from workload generation ``generation``
    (:func:`generation_annotation`; none when ``None`` or already set) and, for an admitted update, as ahead of the
    stored workload whose ``resourceVersion`` is ``replaces`` (:func:`replaces_annotation`; with ``None`` an
    earlier one is removed: the spec now comes from a stored version)."""
    annotations = (existing.get("metadata") or {}).get("annotations")
    want = stamp_annotations(config, generation, replaces)
    if not isinstance(annotations, dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": want}] if want else []
    ops: list[dict[str, Any]] = []
    if replaces_annotation(config) in annotations and not replaces:
        ops.append({"op": "remove", "path": pointer(("metadata", "annotations", replaces_annotation(config)))})
    ops.extend({"op": "add", "path": pointer(("metadata", "annotations", k)), "value": v} for k, v in want.items()
               if annotations.get(k) != v)
    return ops


def stamped_generation(obj: dict[str, Any], config: Config) -> int | None:
    """The workload ``metadata.generation`` a managed object's spec was last written from
    (:func:`generation_annotation`), or ``None``."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(generation_annotation(config))
    return int(value) if isinstance(value, str) and value.isdigit() else None


def stamped_replaces(obj: dict[str, Any], config: Config) -> str | None:
    """The ``resourceVersion`` of the stored workload the update an object's spec was admitted for replaces
    (:func:`replaces_annotation`), or ``None`` (written for a create, or by the controller)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(replaces_annotation(config))
    return value if isinstance(value, str) and value else None


def ahead_of(obj: dict[str, Any], claim: Any, config: Config) -> str | None:
    """How a managed object's spec is ahead of the workload ``claim`` was read from (``"from generation 5 of
    Deployment team/web; the cached one is generation 4"``), or ``None`` when it is not: its generation stamp is
    newer than the workload's (:func:`generation_annotation`), or the webhook wrote it for an update of the stored
    version the claim still is, same ``resourceVersion`` (:func:`replaces_annotation`). ``claim``:
    ``gang.claim.Claim``-shaped (``generation``, ``meta``, ``ref``)."""
    stamp = stamped_generation(obj, config)
    if stamp is not None and claim.generation is not None and stamp > claim.generation:
        return f"from generation {stamp} of {claim.ref}; the cached one is generation {claim.generation}"
    replaces = stamped_replaces(obj, config)
    if replaces is not None and replaces == claim.meta.get("resourceVersion"):
        return (f"for an update of {claim.ref} that is not stored yet (the one read is resourceVersion {replaces}, "
                "the version that update replaces)")
    return None


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


def gang_metadata(plan: GangPlan, config: Config) -> dict[str, Any]:
    """The ``metadata`` of every object a backend makes for ``plan``: ``{name, namespace, labels: {managed-by},
    annotations: {owner}}``, for a plan that follows its members with an empty :func:`succeeded_record` (each
    object's ``merge_shared`` reads only that object, so each carries its own); no ownerReferences
    (docs/behaviour.md, "The garbage-collector race") but those of ``plan.kept_by`` (an Argo step's Workflow: not a
    controller's, so admit's controller does not delete the objects as unclaimed while a retry waits out its backoff
    with no member left, and the garbage collector deletes them with the Workflow)."""
    annotations = {owner_annotation(config): plan.owner}
    if plan.follows_members:
        annotations[succeeded_annotation(config)] = ""  # filled by merge_shared (record_succeeded)
    meta: dict[str, Any] = {"name": plan.group_name, "namespace": plan.namespace,
                            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}, "annotations": annotations}
    if plan.kept_by:
        meta["ownerReferences"] = [dict(ref) for ref in plan.kept_by]
    return meta


def managed_ownership(existing: dict[str, Any], plan: GangPlan, config: Config, what: str) -> Ownership | None:
    """The verdict on an object carrying admit's managed-by label, ``None`` for any other: ``manage`` when its owner
    annotation, and its controller ownerReference if any (unless the group is shared), name ``plan``'s workload,
    else ``conflict``. ``what``: the object, for the message (``"PodGroup team-a/web"``)."""
    meta = existing.get("metadata") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
        return None
    owner = (meta.get("annotations") or {}).get(owner_annotation(config))
    ref_owner = controller_identity(existing)
    if owner == plan.owner and (ref_owner is None or ref_owner == plan.owner or plan.shared):
        return Ownership("manage")
    return Ownership("conflict", f"Set annotation {config.pod_group_key} to another name: {what} already belongs to "
                                 f"{(ref_owner or owner or 'another object').replace('//', '/')}, not to {plan.ref}")


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


def members_left(asked: int, members: list[dict[str, Any]], recorded: set[str] | None = None) -> int | None:
    """The size of a shared group whose size follows its members (``GangPlan.follows_members``: an Argo step's),
    for a member asking ``asked``, from the group's other pods ``members`` (their ``metadata.name``,
    ``status.phase`` and ``spec.nodeName``) and the names of members that succeeded ``recorded`` on the group's
    object (whose pods may be gone: Argo's ``podGC``; counted once with those listed); ``None`` while none of them
    has finished (the members then agree on the size as any shared group's do). The rule of every backend's
    ``merge_shared`` that lets such a group follow.

    kube-scheduler drops finished pods from its informer (field selector ``status.phase!=Succeeded,
    status.phase!=Failed``, kubernetes ``pkg/scheduler/scheduler.go`` ``newPodInformer``), and the gang plugins count
    only the pods it still sees (scheduler-plugins ``pkg/coscheduling/core/core.go`` PreFilter; kubernetes
    ``pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go`` ``PreEnqueue``, ``AllPodsCount()`` against
    ``gang.minCount``), so a group that keeps its size holds a retried member for ever (argo-workflows#734,
    volcano#2720). Once a member has finished, the group ran together once and a new member is a retry: the size is
    ``asked`` minus the members that succeeded, and at most the members not yet placed (pending, no node: this one
    and other retries), so a member that succeeds while a retry waits cannot leave the retry short. Once as many as
    ``asked`` have succeeded, the group starts again at ``asked`` (a later step naming the same group).
    """
    phases = [(p.get("status") or {}).get("phase") for p in members if isinstance(p, dict)]
    succeeded = len(succeeded_names(members) | (recorded or set()))
    if succeeded + phases.count("Failed") == 0:
        return None
    unplaced = sum(1 for p in members if isinstance(p, dict) and not (p.get("spec") or {}).get("nodeName")
                   and (p.get("status") or {}).get("phase") in (None, "Pending")
                   and not (p.get("metadata") or {}).get("deletionTimestamp"))
    return asked if succeeded >= asked else max(1, min(asked - succeeded, unplaced + 1))


#: :func:`succeeded_annotation` after its ``<prefix>/``.
SUCCEEDED = "members-succeeded"


def succeeded_annotation(config: Config) -> str:
    """``<prefix>/members-succeeded``: the record of the members that succeeded of a group whose size follows its
    members (``GangPlan.follows_members``), on each of its objects (a backend's ``desired_objects`` sets it empty;
    :func:`record_succeeded` fills it)."""
    return config.key_prefix + SUCCEEDED


def succeeded_record(obj: dict[str, Any]) -> tuple[str, set[str]]:
    """``(key, names)`` of the annotation :func:`succeeded_annotation` of a gang object (stored or desired, of any
    backend): the names of the group's pods that succeeded (comma-separated in the value, which may be empty);
    ``("", set())`` without it. Any shape: a value that is not a string records no one.

    Argo's pod GC (``spec.podGC`` ``OnPodSuccess``/``OnPodCompletion``, argo-workflows v4.1.2
    ``workflow/controller/pod/cleanup.go`` ``determinePodCleanupAction``) deletes a step's finished pods, so the
    pods listed no longer say who succeeded; the record does, for :func:`members_left`."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = (meta.get("annotations") if isinstance(meta, dict) else None) or {}
    if not isinstance(annotations, dict):
        return "", set()
    key = next((k for k in annotations if isinstance(k, str) and k.endswith("/" + SUCCEEDED)), "")
    value = annotations.get(key) if key else ""
    return key, {n for n in value.split(",") if n} if isinstance(value, str) else set()


def succeeded_names(members: list[dict[str, Any]]) -> set[str]:
    """The ``metadata.name`` of each pod of ``members`` in phase ``Succeeded`` (any other item is skipped)."""
    return {str((p.get("metadata") or {}).get("name")) for p in members
            if isinstance(p, dict) and (p.get("status") or {}).get("phase") == "Succeeded"}


def record_succeeded(existing: dict[str, Any], desired: dict[str, Any],
                     members: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``desired`` (a backend's desired object after its ``merge_shared``) with its :func:`succeeded_record`
    holding the names ``existing`` (the stored object) records and those of ``members`` (the group's pods as read,
    and those the controller saw deleted after they succeeded) that succeeded, sorted: the record only grows, so a
    member whose pod is gone stays counted. ``desired`` itself, unchanged, when it carries no record (a plan that
    does not follow its members) or ``members`` is ``None`` (not read). The shared rule of every backend's
    ``merge_shared``; :func:`succeeded_ops` writes it."""
    key = succeeded_record(desired)[0]
    if not key or members is None:
        return desired
    names = ",".join(sorted(succeeded_record(existing)[1] | succeeded_names(members)))
    meta = desired.get("metadata") or {}
    return {**desired, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), key: names}}}


def succeeded_ops(existing: dict[str, Any], desired: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON patch setting ``existing``'s :func:`succeeded_record` to the union of its names and ``desired``'s when
    ``desired`` records a member ``existing`` does not; ``[]`` otherwise (the record never shrinks: a later write
    that lists fewer pods, its members gone, keeps the members counted). The shared rule of every backend's
    ``update_ops``; an annotation is metadata, which every version of every gang object lets change."""
    key, names = succeeded_record(desired)
    have = succeeded_record(existing)[1]
    if not key or not names - have:
        return []
    return set_keys_ops(existing, ("metadata", "annotations"), {key: ",".join(sorted(names | have))})
