"""The gang plan: what admit decides about one workload, independent of its kind.

A :class:`GangPlan` is the pure result of reading a workload (Deployment, Job, TFJob, SparkApplication, Pod ...)
and its ``gang.admit.dev/*`` annotations; the kinds' resolvers live in ``admit/families/``.

Rules and their sources:

- PodGroup name = pod label value (scheduler-plugins ``PodGroupLabel``), so it must be a valid label value
  (at most 63 characters, Kubernetes "Labels and Selectors") and a valid object name (DNS-1123 subdomain):
  both hold for ``[a-z0-9]([-a-z0-9.]*[a-z0-9])?`` up to 63 characters.
- Default name = the workload's own name (the Kubeflow training-operator's convention). An object created with
  ``generateName`` only gets its name from kube-apiserver after the mutating webhooks and before the validating
  ones (``rest.BeforeCreate`` runs inside the store's create, between the two admission phases): the mutating phase
  names the group once (:func:`generated_group_name`) and writes it into the templates as the pod-group label, and
  every later reader takes the label (:func:`choose_group_name` prefers it), so both phases, the controller and
  ``admit review`` agree and the PodGroup is the one the pods point at.
- ``gang.admit.dev/schedule-timeout-seconds`` is 1..900: kube-scheduler caps a Permit wait at 15 minutes
  (``maxTimeout`` in ``pkg/scheduler/framework/runtime/framework.go``).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..config import POD_GROUP_BACKEND, Config
from ..echo import clip

__all__ = ["BelowMinMember", "below_min_member", "GangError", "NoNameYet", "generated_group_name", "GangAnnotations",
           "PodTarget", "Wave", "GangPlan", "parse_gang_annotations", "ignored_without_min_member",
           "misplaced_annotation_warnings", "label_key_warnings", "min_member_source", "counted_and_fix",
           "check_group_name", "choose_group_name", "get_path", "get_map", "int_field", "Resolver", "MEMBER"]

MAX_TIMEOUT_SECONDS = 900
MAX_MIN_MEMBER = 2**31 - 1  # PodGroup spec.minMember is an int32
#: The value of ``<prefix>/managed`` on a pod of a group whose size follows its members (``GangPlan.follows_members``).
MEMBER = "member"
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_INT_RE = re.compile(r"^[0-9]{1,12}$")  # ASCII digits only (str.isdigit() also takes "²"); 12 bound int()'s work


class GangError(Exception):
    """A workload admit must refuse: malformed annotation, replicas below minMember, a deadlocking shape.

    Attributes:
        message: text for the user; names the object, the numbers and the fix.
        code: HTTP status code for the AdmissionReview ``status.code`` (400 malformed input, 403 policy).
    """

    def __init__(self, message: str, code: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class BelowMinMember(GangError):
    """A gang whose pods are fewer than its minMember, as data (code 403): every pod would stay Pending forever.
    Raised by :func:`below_min_member`; ``backends.with_backend`` / ``backends.check_plan`` render the message with
    the scheduler of the gang's backend (:meth:`message_for`), so the families import no backend.

    Attributes:
        ref: how the message names the object (``"Deployment team/web"``).
        total / min_member: the gang's pods and its minMember.
        counted: what the pods are (``"spec.replicas=2"``, ``"1 head + 2 workers"``).
        source: where minMember came from (``"gang.admit.dev/min-member=3"``, ``"minMember"``).
        fix: which field to raise (``"Raise the replicas"``).
        lower: what to lower instead (the min-member annotation, possibly on another object).
        backend: whose scheduler to name, or ``None`` for the one the workload asks for.
    """

    def __init__(self, ref: str, total: int, counted: str, min_member: int, source: str, fix: str, lower: str,
                 backend: str | None) -> None:
        self.ref, self.total, self.counted, self.min_member = ref, total, counted, min_member
        self.source, self.fix, self.lower, self.backend = source, fix, lower, backend
        super().__init__(self.message_for("the gang scheduler"), 403)

    def message_for(self, scheduler: str) -> str:
        """The refusal naming ``scheduler`` (``"the Coscheduling plugin"``), its fix first: ``"Set spec.replicas to at
        least 3, or lower gang.admit.dev/min-member: Deployment default/web runs 2 pods (spec.replicas=2) but its gang
        needs minMember 3 (gang.admit.dev/min-member=3), so the Coscheduling plugin would keep every pod Pending
        forever"``."""
        total = self.total
        return (f"{self.fix}, or lower {self.lower}: {self.ref} runs {total} pod{'s' if total != 1 else ''} "
                f"({self.counted}) but its gang needs minMember {self.min_member} ({self.source}), so {scheduler} would "
                f"keep every pod Pending forever")


class NoNameYet(GangError):
    """Raised by :func:`choose_group_name` for an object with only ``metadata.generateName`` (``generate_name``) and
    nothing naming its group (module docstring): the mutating phase names it, anywhere else a refusal (code 400)
    naming the annotation."""

    def __init__(self, message: str, generate_name: str) -> None:
        super().__init__(message, 400)
        self.generate_name = generate_name


#: Characters kube-apiserver uses for the random suffix of generated names (``k8s.io/apiserver/pkg/storage/names``
#: ``SimpleNameGenerator``, via ``k8s.io/apimachinery/pkg/util/rand.String``: no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LEN = 5


def generated_group_name(generate_name: str, seed: str) -> str:
    """The PodGroup name for an object created with ``generateName``: the prefix (cut to 58 characters, as
    kube-apiserver cuts it) plus 5 characters derived from ``seed`` (the AdmissionReview ``request.uid``), in the
    alphabet kube-apiserver uses for generated names. The same seed gives the same name; the result may still be
    an invalid name when the prefix is (``choose_group_name`` checks it)."""
    digest = hashlib.sha256(seed.encode()).digest()
    suffix = "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:_SUFFIX_LEN])
    return generate_name[: 63 - _SUFFIX_LEN] + suffix


@dataclass(frozen=True, slots=True)
class GangAnnotations:
    """Parsed ``gang.admit.dev/*`` annotations of one object.

    Attributes:
        min_member: the annotated minMember, or ``None`` for ``auto`` (derived from the workload).
        schedule_timeout_seconds: PodGroup ``spec.scheduleTimeoutSeconds`` (seconds, 1..900), or ``None``.
        min_resources: ``True`` for ``auto`` (the default: compute ``spec.minResources``), ``False`` for ``none``.
        pod_group: explicit PodGroup name, or ``None`` for the default.
        backend: ``<prefix>/backend`` (one of ``Config.known_backends``), or ``None`` for the configured one.
    """

    min_member: int | None
    schedule_timeout_seconds: int | None = None
    min_resources: bool = True
    pod_group: str | None = None
    backend: str | None = None


_JSON_TYPES = {bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


def not_a_string_message(key: str, value: Any) -> str:
    """The refusal of an annotation whose value is not a string (``min-member: 3`` written unquoted in
    YAML). ``metadata.annotations`` is ``map[string]string`` (ObjectMeta, k8s.io/apimachinery ``types.go``):
    kube-apiserver refuses such a manifest while decoding it ("json: cannot unmarshal number into Go struct field
    ObjectMeta.metadata.annotations of type string"), before any webhook; admit only meets it in ``admit review``
    or from a client that skipped the decode."""
    shown = clip(value).lower() if isinstance(value, bool) else clip(value)  # bounded: reprlib cuts a long value
    # named as kube-apiserver's decoder names them (encoding/json UnmarshalTypeError: bool, number, array, object)
    got = f"got {_JSON_TYPES.get(type(value), type(value).__name__)} {shown}"
    if isinstance(value, (bool, int, float)):
        fix = f'quote annotation {key}: "{shown}"'
    else:
        fix = f"write annotation {key} as one quoted string"
    return (f"{fix[0].upper()}{fix[1:]}: annotation {key} must be a string, {got}. Annotation values are strings "
            "(metadata.annotations is a map of strings), and kube-apiserver refuses a manifest with an unquoted number "
            "or boolean there before any webhook sees it")


def parse_gang_annotations(annotations: dict[str, Any] | None, config: Config) -> GangAnnotations | None:
    """Read the gang annotations; ``None`` when ``<prefix>/min-member`` is absent (gang scheduling is off).

    Raises:
        GangError (code 400): values are malformed; the message names each such annotation and its accepted values,
            all of them at once (``"; "``-joined), as kube-apiserver's validation reports every field error.
    """
    if not annotations or not isinstance(annotations, dict):
        return None
    raw = annotations.get(config.min_member_key)
    if raw is None:
        return None
    for key in (config.min_member_key, config.timeout_key, config.min_resources_key, config.pod_group_key):
        value = annotations.get(key)
        if value is not None and not isinstance(value, str):
            raise GangError(not_a_string_message(key, value), 400)
    problems: list[str] = []
    mm_text = str(raw).strip()
    if mm_text.lower() == "auto":
        min_member = None
    elif _INT_RE.match(mm_text) and 1 <= int(mm_text) <= MAX_MIN_MEMBER:
        min_member = int(mm_text)
    else:
        min_member = None
        problems.append(f'Set annotation {config.min_member_key} to a positive integer (at most {MAX_MIN_MEMBER}, '
                        f'PodGroup minMember is an int32) or "auto": {clip(raw)} is invalid')
    timeout = None
    raw_t = annotations.get(config.timeout_key)
    if raw_t is not None:
        t_text = str(raw_t).strip()
        if not _INT_RE.match(t_text) or not 1 <= int(t_text) <= MAX_TIMEOUT_SECONDS:
            problems.append(f"Set annotation {config.timeout_key} to an integer number of seconds from 1 to "
                            f"{MAX_TIMEOUT_SECONDS}: {clip(raw_t)} is invalid (kube-scheduler waits at most 15 minutes "
                            "for a gang)")
        else:
            timeout = int(t_text)
    min_resources = True
    raw_r = annotations.get(config.min_resources_key)
    if raw_r is not None:
        r_text = str(raw_r).strip().lower()
        if r_text not in ("auto", "none"):
            problems.append(f'Set annotation {config.min_resources_key} to "auto" or "none": {clip(raw_r)} is invalid')
        min_resources = r_text == "auto"
    pod_group = None
    raw_g = annotations.get(config.pod_group_key)
    if raw_g is not None:
        pod_group = str(raw_g)
        problem = check_group_name(pod_group)
        if problem:
            problems.append(f'Set annotation {config.pod_group_key} to a valid name: {clip(raw_g)} is invalid: '
                            f'{problem}')
    backend = None
    raw_b = annotations.get(config.backend_key)
    if raw_b is not None:
        backend = str(raw_b).strip().lower()
        if backend not in config.known_backends:
            names = [f'"{name}"' for name in config.known_backends]
            one_of = " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))
            problems.append(f"Set annotation {config.backend_key} to {one_of} (the gang backends admit knows): "
                            f"{clip(raw_b)} is invalid")
    if problems:
        raise GangError("; ".join(problems), 400)
    return GangAnnotations(min_member, timeout, min_resources, pod_group, backend)


KNOWN_ANNOTATIONS = (
    "min-member", "schedule-timeout-seconds", "min-resources", "pod-group", "spark-executors",
    "spark-executor-resources", "owner", "group-spec", "backend",
)


def unknown_annotation_warnings(annotations: Any, config: Config) -> list[str]:
    """Warnings for annotations admit ignores although they were meant for it, each naming the key admit reads:
    unknown names under admit's prefix (``minmember``), and known names or close misspellings of them
    (:func:`_meant_name`) under a misspelt or mis-cased prefix (``gang.admit.io/minmember``,
    ``Gang.Admit.dev/min-member``: keys are case-sensitive) or without its slash (``gang.admit.dev.min-member``). The
    webhook sees only objects with a key under the prefix (the chart's ``matchConditions``), so it warns only about
    the first kind (docs/behaviour.md); ``admit review`` and ``admit status`` (``AnnotationTypo``) say them all."""
    if not isinstance(annotations, dict):
        return []
    base = config.annotation_prefix.rstrip("/")
    prefix = base + "/"
    warnings = []
    for key in annotations:
        if not isinstance(key, str):
            continue
        if key.startswith(prefix):
            if key[len(prefix):] not in KNOWN_ANNOTATIONS:
                close = difflib.get_close_matches(key[len(prefix):].strip()[:64], KNOWN_ANNOTATIONS, n=1, cutoff=0.6)
                # a key with spaces (which kube-apiserver refuses) is quoted, or the fix would read as a no-op
                shown = key[:100] if key.isprintable() and " " not in key else repr(key[:100])
                fix = f"rename annotation {shown} to {prefix}{close[0]}" if close else \
                    f"remove or correct annotation {shown}"
                warnings.append(f"{fix}: it is not one of admit's and is ignored")
            continue
        other, sep, name = key.rpartition("/")
        meant = None
        if sep and other != base and (other.lower() == base.lower() or _close_prefix(other, base)):
            meant = _meant_name(name)
        elif not sep and key.lower().startswith(base.lower()) and key[len(base):len(base) + 1] in (".", "-", "_", ":"):
            meant = _meant_name(key[len(base) + 1:])  # the slash left out or mistyped: gang.admit.dev.min-member
        if meant is not None:
            target = prefix + meant
            why = ("annotation keys are case-sensitive" if key.lower() == target.lower()
                   else f"it reads only keys under {prefix}, the prefix --annotation-prefix sets")
            warnings.append(f"rename annotation {key[:100]} to {target}: admit ignores it ({why})")
    return warnings


@functools.lru_cache(maxsize=1024)
def _close_prefix(other: str, base: str) -> bool:
    """True when prefix ``other`` is a misspelling of admit's ``base`` (``difflib`` ratio 0.75 or more). Every
    annotation key of every workload and bare pod passes here, and the same few prefixes recur
    (``kubectl.kubernetes.io``, ``app.kubernetes.io``), so the answer is remembered (1,024 prefixes at most)."""
    return difflib.SequenceMatcher(None, other.lower()[:64], base).ratio() >= 0.75


def _meant_name(name: str) -> str | None:
    """The annotation name (after the prefix) that ``name``, written under a misspelt prefix, stands for: one of
    :data:`KNOWN_ANNOTATIONS` in any case (``Min-Member``), or a close misspelling of one a user writes
    (``minmember``, ``min-members``: ``difflib`` ratio 0.75 or more, stricter than under the right prefix, where any key
    is admit's); else ``None`` (another system's key)."""
    lower = name.lower().strip()
    if lower in KNOWN_ANNOTATIONS:
        return lower
    close = difflib.get_close_matches(lower[:64], [n for n in KNOWN_ANNOTATIONS if n not in BOOKKEEPING_ANNOTATIONS],
                                      n=1, cutoff=0.75)
    return close[0] if close else None


BOOKKEEPING_ANNOTATIONS = ("owner", "group-spec", "workload-generation")
"""Annotation names (after ``<prefix>/``) admit itself writes, never a user's: ``owner`` on the objects it makes
(``backends.common.owner_annotation``), ``group-spec`` on LeaderWorkerSet pod templates (``families.lws``),
``workload-generation`` on PodGroups (``backends.coscheduling.podgroup``)."""

GANG_SETTINGS = tuple(
    name for name in KNOWN_ANNOTATIONS if name != "min-member" and name not in BOOKKEEPING_ANNOTATIONS)
"""The annotations that only tune a gang (``schedule-timeout-seconds``, ``pod-group``, ``backend`` ...): without
``<prefix>/min-member`` there is no gang and admit reads none of them."""


def ignored_without_min_member(annotations: Any, config: Config) -> list[str]:
    """The one warning for a workload whose ``metadata.annotations`` (any shape) carry gang settings
    (:data:`GANG_SETTINGS`) but no ``<prefix>/min-member``: ``["add gang.admit.dev/min-member, or remove
    gang.admit.dev/schedule-timeout-seconds: ..."]`` (every key found, in the object's order), else ``[]``."""
    if not isinstance(annotations, dict) or config.min_member_key in annotations:
        return []
    prefix = config.key_prefix
    found = [key for key in annotations
             if isinstance(key, str) and key.startswith(prefix) and key[len(prefix):] in GANG_SETTINGS]
    if not found:
        return []
    return [f"add {config.min_member_key}, or remove {', '.join(found)}: without {config.min_member_key} admit makes no "
            f"gang of this object, so {'it is' if len(found) == 1 else 'they are'} ignored"]


def template_annotation_warnings(obj: Any, config: Config, carried: tuple[str, ...] = ()) -> list[str]:
    """Warnings for gang annotations on a pod template under ``spec`` (:func:`_pod_templates`: ``spec.template``, a
    Kubeflow replica's, a JobSet's, LWS's, Ray's, a CronJob's): admit reads them from the workload's own
    ``metadata.annotations`` only. ``carried``: key path of a wrapper's carried annotations (``WorkloadKind.carry``:
    they reach the objects its operator makes), not warned about."""
    warnings = []
    for where, template in _pod_templates(obj.get("spec") if isinstance(obj, dict) else None, "spec", 0):
        annotations = get_path(template, ("metadata", "annotations"))
        if isinstance(annotations, dict) and config.min_member_key in annotations and not (
                carried and get_path(obj, carried) is annotations):
            warnings.append(
                f"move the {config.key_prefix} annotations to the {str(obj.get('kind', 'workload'))[:40]}'s own "
                f"metadata.annotations: on the pod template ({where[:80]}) they have no effect")
    return warnings


def _pod_templates(node: Any, where: str, depth: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(field path, template)`` of each pod template (a map whose ``spec.containers`` is a list) in ``node`` (at
    ``where``), not looking inside one or inside a pod spec (a bare Pod's costs one lookup); at most 8 levels and the
    first 16 items of a list deep."""
    if depth > 8:
        return
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            return
        if isinstance(get_path(node, ("spec", "containers")), list):
            yield where, node
            return
        for key, value in node.items():
            if isinstance(value, (dict, list)):
                yield from _pod_templates(value, f"{where}.{key}", depth + 1)
    elif isinstance(node, list):
        for i, item in enumerate(node[:16]):
            yield from _pod_templates(item, f"{where}[{i}]", depth + 1)


def misplaced_annotation_warnings(obj: Any, path: tuple[str, ...], config: Config) -> list[str]:
    """Warnings for annotations under admit's prefix on ``obj``'s own ``metadata.annotations`` when admit reads the
    kind's gang annotations at ``path`` instead (``WorkloadKind.annotations``: a CronJob's
    ``spec.jobTemplate.metadata.annotations``) and ``path`` carries no ``<prefix>/min-member``: they are not copied
    onto the objects the kind's controller makes and have no effect; else ``[]``."""
    if path == ("metadata", "annotations") or not isinstance(obj, dict):
        return []
    own = get_path(obj, ("metadata", "annotations"))
    prefix = config.key_prefix
    if not isinstance(own, dict) or not any(isinstance(k, str) and k.startswith(prefix) for k in own):
        return []
    there = get_path(obj, path)
    if isinstance(there, dict) and there.get(config.min_member_key) is not None:
        return []
    where = ".".join(path)
    kind = str(obj.get("kind") or "workload")
    return [f"move the {prefix} annotations to {where[:80]}: on the {kind}'s own metadata.annotations they have no "
            "effect (its controller copies only those onto each object it creates)"]


def label_key_warnings(obj: Any, config: Config) -> list[str]:
    """One warning per setting of admit (:data:`KNOWN_ANNOTATIONS` but the bookkeeping ones) written as a label of
    ``obj`` instead of an annotation (``gang.admit.dev/min-member: "3"`` in ``metadata.labels``): admit reads these
    from annotations only. Empty in the common case."""
    labels = get_path(obj, ("metadata", "labels"))
    if not isinstance(labels, dict):
        return []
    prefix = config.key_prefix
    return [f"move {key} from metadata.labels to metadata.annotations: admit reads its settings from annotations "
            "only, so this label does nothing"
            for key in labels if isinstance(key, str) and key.startswith(prefix)
            and key[len(prefix):] in KNOWN_ANNOTATIONS and key[len(prefix):] not in BOOKKEEPING_ANNOTATIONS]


def check_group_name(name: str) -> str | None:
    """Why ``name`` cannot be a PodGroup name that is also a label value, or ``None`` when it can."""
    if len(name) > 63:
        return f"a PodGroup name is also the value of a pod label and must be at most 63 characters (has {len(name)})"
    if not _NAME_RE.match(name):
        return ("a PodGroup name must be lowercase letters, digits, '-' or '.', starting and ending with a letter or "
                "digit")
    return None


@dataclass(slots=True)
class PodTarget:
    """One place in a workload that becomes pods: a pod template, a Spark driver/executor spec, or the Pod itself.

    Attributes:
        labels: key path from the object root to the pod labels map, e.g. ``("spec", "template", "metadata",
            "labels")``; ``("spec", "driver", "labels")`` for a SparkApplication.
        scheduler: key path to the pod's ``schedulerName``.
        where: human name for messages (``"pod template"``, ``"replica type Worker"``).
        immutable: the template may not change on this request (Job ``spec.template`` on UPDATE); admit warns
            instead of patching.
        group_label: put the pod-group label on this template (``False`` where one template makes pods of several
            groups, e.g. a LeaderWorkerSet's: its pods get the label one by one at pod creation).
        annotations: key path to the template's annotations map, where :attr:`GangPlan.template_annotations` go
            (``None``: none).
    """

    labels: tuple[str, ...]
    scheduler: tuple[str, ...]
    where: str = "pod template"
    immutable: bool = False
    group_label: bool = True
    annotations: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Wave:
    """Pods a workload starts on their own after its first pods, with none of those still running.

    kube-scheduler's pod informer drops finished pods (field selector ``status.phase!=Succeeded,status.phase!=Failed``,
    ``newPodInformer`` in kubernetes ``pkg/scheduler/scheduler.go``), so Coscheduling counts only the pods of a wave:
    a wave smaller than minMember never passes PreFilter ("cannot find enough sibling pods", scheduler-plugins
    ``pkg/coscheduling/core/core.go``) and waits forever.

    Attributes:
        size: pods in that wave (>= 1).
        why: where it comes from, naming the fields and numbers (``"spec.completions=5 run 4 at a time ..."``).
        fix: what to change so every wave reaches minMember (``"set spec.completions to a multiple of 4"``).
    """

    size: int
    why: str
    fix: str


@dataclass(slots=True)
class GangPlan:
    """Everything admit needs to mutate, validate and create the PodGroup for one gang workload.

    Attributes:
        kind / api_group / name / namespace: the workload (``name`` may be ``""`` for a Pod with generateName).
        group_name: PodGroup name = value of the pod-group label.
        min_member: PodGroup ``spec.minMember`` (>= 1).
        total_pods: pods the workload runs at once (replicas, parallelism, summed replicas), or ``None`` if unknown.
        total_field: where ``total_pods`` comes from, for messages (``"spec.replicas"``).
        min_resources: PodGroup ``spec.minResources`` (ResourceList) or ``None``.
        schedule_timeout_seconds: PodGroup ``spec.scheduleTimeoutSeconds`` or ``None``.
        targets: pod templates to label.
        warnings: admission warnings: what the user should change (``Warning:`` on ``kubectl apply``; ``admit review
            --strict`` fails on them).
        mutate: inject label/schedulerName (``False`` when an operator gangs the workload itself).
        create_pod_group: admit creates/patches the PodGroup (``False`` when an operator owns it).
        shared: several objects of this kind may share the group (bare Pods): the owner is the kind, not one name.
        backend: the gang backend whose objects and pod fields the plan becomes (``admit/backends/registry.py``
            ``BACKENDS``), set by ``backends.with_backend``; default the pod-group label's, which a joiner's plan keeps.
        size_known: ``min_member`` was given (annotation, or a group size another system wrote), not defaulted; a
            shared group's members whose sizes are known and differ get a warning.
        last_wave: the fewest pods the workload may later start on their own, when fewer than ``total_pods``
            (:class:`Wave`), else ``None``.
        template_annotations: annotations admit writes on every target with an ``annotations`` path (a
            LeaderWorkerSet's group spec), removed again with the gang annotation.
        extra_ops: further JSONPatch operations on the workload itself (a TrainJob's runtime patch); never undone.
        operator_notice: a setting of the workload's operator, which admit cannot read, that decides whether the
            gang is used (KubeRay's ``--batch-scheduler``), or ``""``; the PodGroup controller records it once as a
            Normal Event ``OperatorSetting`` on the workload.
        native_priority: what the gang's native Workload template and PodGroup copy from its pods
            (``{"priorityClassName": str, "preemptionPolicy": str}``, each key only when the pods set it;
            ``backends.workload_api.gang_priority``).
        refusal_note: appended to a below-minMember refusal (``backends.check_plan``) when something other than the
            user sets the counted number (Kueue's partial admission): what to change there.
        follows_members: a shared group whose minMember follows the members still to run (an Argo Workflow's step
            pods, ``admit.families.argo``): the backend's ``merge_shared`` takes the members that succeeded off
            minMember; its pods carry ``<prefix>/managed: member`` (:data:`MEMBER`).
        kept_by: ownerReferences (``{apiVersion, kind, name, uid}``, not a controller's) the gang's objects are
            created with: the object whose life they share (an Argo step's group: its Workflow, however long a
            retry waits with no member left); the controller leaves such an object to the garbage collector.
        runtime_class: the ``runtimeClassName`` of the plan's one pod template when it sets no ``spec.overhead`` and
            ``minResources`` is ``auto``, else ``None``: the class's ``overhead.podFixed`` is added to
            ``minResources`` from the controller's cache (``resources.with_runtime_overhead``).
        notes: what the user should know but need not act on, as the allowed answer's ``status.message`` (``admit
            review -v`` shows it, ``--strict`` does not fail on it); never admission warnings (docs/behaviour.md,
            "Notes and warnings").
    """

    kind: str
    api_group: str
    name: str
    namespace: str
    group_name: str
    min_member: int
    total_pods: int | None
    total_field: str
    min_resources: dict[str, str] | None = None
    schedule_timeout_seconds: int | None = None
    targets: list[PodTarget] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    mutate: bool = True
    create_pod_group: bool = True
    shared: bool = False
    backend: str = POD_GROUP_BACKEND
    size_known: bool = True
    last_wave: "Wave | None" = None
    template_annotations: dict[str, str] = field(default_factory=dict)
    operator_notice: str = ""
    extra_ops: list[dict[str, Any]] = field(default_factory=list)
    native_priority: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    refusal_note: str = ""
    runtime_class: str | None = None
    follows_members: bool = False
    kept_by: list[dict[str, Any]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        """``"<group>/<Kind>/<name>"`` (``"<group>/<Kind>"`` when ``shared``), stored on the PodGroup so that a second
        workload cannot take the same group by accident."""
        if self.shared:
            return f"{self.api_group}/{self.kind}"
        return f"{self.api_group}/{self.kind}/{self.name}"

    @property
    def ref(self) -> str:
        """``"Deployment team-a/web"`` for messages."""
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    def pod_group_spec(self) -> dict[str, Any]:
        """The PodGroup ``spec`` (``minMember``, optional ``minResources``, optional ``scheduleTimeoutSeconds``)."""
        spec: dict[str, Any] = {"minMember": self.min_member}
        if self.min_resources:
            spec["minResources"] = dict(self.min_resources)
        if self.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = self.schedule_timeout_seconds
        return spec


Resolver = Callable[[dict[str, Any], GangAnnotations, Config, str, str], GangPlan]
"""``resolver(obj, annotations, config, namespace, operation) -> GangPlan``; raises :class:`GangError`."""


def get_path(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at key ``path`` in nested dicts and lists (a list's step is its index as a decimal string, as in a
    JSON Pointer: ``("spec", "replicatedJobs", "0", "template")``), or ``None`` where a step is missing."""
    for key in path:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and key.isdigit() and int(key) < len(obj):
            obj = obj[int(key)]
        else:
            return None
    return obj


def get_map(obj: Any, path: tuple[str, ...]) -> dict[str, Any]:
    """The map at key ``path`` (:func:`get_path`), or ``{}`` where there is none (missing, or not a map)."""
    value = get_path(obj, path)
    return value if isinstance(value, dict) else {}


def int_field(obj: dict[str, Any], path: tuple[str, ...], default: int | None, what: str) -> int | None:
    """An integer field at ``path`` (``default`` when absent). Kubernetes' counts (``replicas``, ``parallelism``,
    ``completions``, Kubeflow ``replicas``) are int32: a larger number could never be stored, and is refused.

    Raises:
        GangError (code 400): present but not an integer from 0 to 2147483647; the message names ``what``.
    """
    value = get_path(obj, path)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_MIN_MEMBER:
        raise GangError(f"Set {what.rpartition(': ')[2]} to a non-negative integer (at most {MAX_MIN_MEMBER}, an "
                        f"int32): {what}={clip(value)} is not one", 400)
    return value


def choose_group_name(obj: dict[str, Any], ann: GangAnnotations, targets: list[PodTarget], config: Config, kind: str,
                      default: str) -> str:
    """PodGroup name: the annotation, else a pod-group label already on the templates, else ``default``.

    Raises:
        NoNameYet (code 400): ``default`` is empty and the object has ``generateName`` (see :func:`generated_group_name`).
        GangError (code 400): templates carry different group labels, a template label contradicts the annotation,
            or the chosen name is not a valid label value / object name (the message points to the annotation).
    """
    values = [get_path(obj, t.labels + (config.pod_group_label,)) for t in targets]
    for value in values:
        if value is not None and not isinstance(value, str):  # labels are map[string]string (ObjectMeta)
            raise GangError(f"Set the {kind} label {config.pod_group_label} to one quoted string: "
                            f"{config.pod_group_label} must be a string (labels are a map of strings), got "
                            f"{clip(value)}", 400)
    existing = {v for v in values if v is not None}
    if len(existing) > 1:
        raise GangError(f"Remove the {config.pod_group_label} labels of the {kind} pod templates or make them equal: "
                        f"they differ ({', '.join(sorted(clip(v) for v in existing))}), and a gang workload has one "
                        "PodGroup", 400)
    label = next(iter(existing)) if existing else None
    if ann.pod_group is not None:
        if label is not None and label != ann.pod_group:
            raise GangError(f"Remove the {kind} pod template label {config.pod_group_label} or make it equal to "
                            f"annotation {config.pod_group_key}: the label {clip(label)} contradicts the annotation's "
                            f"{clip(ann.pod_group)}", 400)
        return ann.pod_group
    name = str(label) if label is not None else default
    generate_name = get_path(obj, ("metadata", "generateName"))
    if name:
        problem = check_group_name(name)
    elif isinstance(generate_name, str) and generate_name:
        raise NoNameYet(f"Set annotation {config.pod_group_key} to a valid name: {kind} has only generateName "
                        f"{generate_name!r}, admit's mutating webhook names its PodGroup, and it has not labelled the "
                        "pod templates", generate_name)
    else:
        problem = "the object has no metadata.name"
    if problem:
        raise GangError(f"Set annotation {config.pod_group_key} to a valid name: {clip(name)} cannot be the PodGroup "
                        f"name: {problem}", 400)
    return name


def min_member_source(plan: GangPlan, ann: GangAnnotations, config: Config) -> str:
    """Where a plan's minMember came from, for a message: ``"gang.admit.dev/min-member=3"`` when the annotation
    sets it, else ``"minMember"`` (``auto``: the resolver's count)."""
    return f"{config.min_member_key}={plan.min_member}" if ann.min_member is not None else "minMember"


def counted_and_fix(plan: GangPlan) -> tuple[str, str]:
    """The ``counted`` and ``fix`` of :func:`below_min_member` for a plan counted by one field
    (``plan.total_field``): ``("spec.replicas=2", "Set spec.replicas to at least 3")``."""
    return f"{plan.total_field}={plan.total_pods}", f"Set {plan.total_field} to at least {plan.min_member}"


def below_min_member(plan: GangPlan, ann: GangAnnotations, config: Config, counted: str, fix: str, *,
                     ref: str | None = None, source: str | None = None, lower: str | None = None,
                     backend: str | None = None) -> None:
    """Refuse a gang whose pods (``plan.total_pods``) are fewer than its minMember (:class:`BelowMinMember`, whose
    arguments these are; every family and ``backends.check_plan`` refuse through it). By default ``ref`` is
    ``plan.ref`` (an operator's object names the user's object that made it), ``source`` :func:`min_member_source`,
    ``lower`` the min-member annotation.

    Raises:
        BelowMinMember (403): ``0 < total_pods < min_member``.
    """
    total = plan.total_pods
    if total is None or not 0 < total < plan.min_member:
        return
    raise BelowMinMember(ref or plan.ref, total, counted, plan.min_member,
                         source or min_member_source(plan, ann, config), fix, lower or config.min_member_key, backend)
