"""Other systems' group keys: what admit reads from labels and annotations that other gang systems define. Pure.

Users arrive with objects written for another gang system or another API generation. admit reads those keys where
they say what admit needs (a group name, a group size) and never writes another system's fields (Kueue's
``schedulingGates``, its labels and annotations stay as they are).

- ``pod-group.scheduling.sigs.k8s.io`` (pod or template label; scheduler-plugins before v0.25.7, API group
  ``scheduling.sigs.k8s.io``): copied to the configured label, with a warning; a disagreeing pair is warned. The
  same the other way round for ``scheduling.x-k8s.io/pod-group`` under ``--pod-group-api scheduling.sigs.k8s.io``.
- ``kueue.x-k8s.io/pod-group-name`` (pod label, Kueue plain-pod groups): the PodGroup name of a bare pod with
  ``gang.admit.dev/min-member``; ``kueue.x-k8s.io/pod-group-total-count`` (its pod annotation): ``auto`` minMember,
  and the pod count checked against an explicit one.
- Kueue's partial admission and MultiKueue's copies of a Job (:data:`KUEUE_MIN_PARALLELISM`,
  :data:`MULTIKUEUE_MANAGED_BY`, :data:`MULTIKUEUE_ORIGIN`): ``admit.families.apps`` ``_kueue_facts``.
- Volcano's ``scheduling.k8s.io/group-name`` (pod template annotation): the mark of Kubeflow Trainer's Volcano
  gang, which admit leaves to Trainer (``admit.families.jobset``, ``admit.families.trainer``).
- KubeRay's ``--batch-scheduler`` and the ``schedulerName`` it puts on Ray pods (:data:`KUBERAY_BATCH_SCHEDULERS`):
  ``admit.families.ray``'s note and the diagnosis of ``admit status``.

Sources: scheduler-plugins ``apis/scheduling/v1alpha1/types.go`` (``PodGroupLabel``); Kueue "Run Plain Pods" (both
keys on every member; Kueue gates them with ``schedulingGates: [{name: kueue.x-k8s.io/admission}]`` and removes the
gate once the group is admitted); Volcano ``pkg/apis/scheduling/v1beta1`` (``KubeGroupNameAnnotationKey``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import LEGACY_POD_GROUP_API_GROUP, LEGACY_POD_GROUP_LABEL, POD_GROUP_API_GROUP, POD_GROUP_LABEL, Config
from .patch import set_keys_ops
from .plan import PodTarget, get_path

__all__ = ["KUEUE_GROUP_NAME", "KUEUE_TOTAL_COUNT", "VOLCANO_GROUP_NAME", "KUBERAY_BATCH_SCHEDULERS",
           "other_generation_label", "translate_group_labels", "KueueGroup", "kueue_group"]

KUEUE_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
#: Kueue's partial admission of a Job (``JobMinParallelismAnnotation``, kueue ``pkg/controller/jobs/job/
#: job_controller.go``): the podset's ``MinCount``; Kueue may admit the Job with fewer pods than
#: ``spec.parallelism``, down to this number, and writes the admitted count into ``spec.parallelism`` when it starts
#: the Job (``RunWithPodSetsInfo``): an UPDATE admit validates like any other.
KUEUE_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
#: With ``"true"``, Kueue's partial admission sets ``spec.completions`` to the admitted count too
#: (``JobCompletionsEqualParallelismAnnotation``, the same file, ``syncCompletionWithParallelism``).
KUEUE_COMPLETIONS_FOLLOW = "kueue.x-k8s.io/job-completions-equal-parallelism"
#: ``spec.managedBy`` of a Job MultiKueue dispatches (``MultiKueueControllerName``, kueue ``apis/kueue/v1beta1/
#: multikueue_types.go``): the Job controller of that cluster (the manager) leaves it alone (``JobManagedBy``,
#: KEP-4368), MultiKueue copies it to a worker cluster without ``managedBy`` (``job_multikueue_adapter.go``
#: ``SyncJob``), and only the worker's copy makes pods.
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
#: The label MultiKueue puts on a worker's copy (``MultiKueueOriginLabel``, the same file): the manager it came from.
MULTIKUEUE_ORIGIN = "kueue.x-k8s.io/multikueue-origin"
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
#: KubeRay's operator flag ``--batch-scheduler`` -> the ``schedulerName`` its plugin puts on every pod of every
#: RayCluster (ray-project/kuberay ``batchscheduler/*``: each plugin's ``Name()``, ``AddSchedulerNameToObject``).
KUBERAY_BATCH_SCHEDULERS: dict[str, str] = {"volcano": "volcano", "yunikorn": "yunikorn",
                                            "kai-scheduler": "kai-scheduler",
                                            "scheduler-plugins": "scheduler-plugins-scheduler"}

_GENERATIONS = {
    POD_GROUP_LABEL: (LEGACY_POD_GROUP_LABEL, "scheduler-plugins releases before v0.25.7", LEGACY_POD_GROUP_API_GROUP),
    LEGACY_POD_GROUP_LABEL: (POD_GROUP_LABEL, "scheduler-plugins v0.25.7 and later", POD_GROUP_API_GROUP),
}


def other_generation_label(config: Config) -> str | None:
    """The pod-group label of the other scheduler-plugins API generation, or ``None`` for a custom label."""
    other = _GENERATIONS.get(config.pod_group_label)
    return other[0] if other else None


def translate_group_labels(obj: dict[str, Any], targets: list[PodTarget], config: Config, what: str) -> tuple[
    list[dict[str, Any]], list[str], dict[str, Any]
]:
    """Copy the other generation's pod-group label to the configured one on every target (pods and templates);
    returns ``(operations, warnings, translated)``: JSONPatch operations against ``obj``, the warnings, and ``obj``
    with the operations applied (a shallow-copied path; ``obj`` is unchanged). The other label is kept (a selector
    may use it); both labels with different values get a warning; immutable targets are left alone.
    """
    other = _GENERATIONS.get(config.pod_group_label)
    if other is None:
        return [], [], obj
    other_label, generation, other_group = other
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    out = obj
    for target in targets:
        labels = get_path(obj, target.labels)
        if not isinstance(labels, dict) or other_label not in labels:
            continue
        value = labels[other_label]
        own = labels.get(config.pod_group_label)
        if own is None:
            if target.immutable or not isinstance(value, str):
                continue
            ops.extend(set_keys_ops(out, target.labels, {config.pod_group_label: value}))
            out = _with_label(out, target.labels, config.pod_group_label, value)
            warnings.append(
                f"create PodGroup {value[:63]} as {config.pod_group_api_version} (not {other_group}): admit added label "
                f"{config.pod_group_label} beside {other_label}")
        elif own != value:
            warnings.append(
                f"remove {other_label} or make it equal {config.pod_group_label}: the pods join PodGroup "
                f"{str(own)[:63]}, the one {config.pod_group_label} names")
    return ops, warnings, out


def _with_label(obj: dict[str, Any], path: tuple[str, ...], key: str, value: str) -> dict[str, Any]:
    root = dict(obj)
    node = root
    for step in path:
        node[step] = dict(child) if isinstance(child := node.get(step), dict) else {}
        node = node[step]
    node[key] = value
    return root


@dataclass(slots=True)
class KueueGroup:
    """Kueue's plain-pod group keys on one pod.

    Attributes:
        name: ``kueue.x-k8s.io/pod-group-name`` (``None`` when absent).
        total_count: ``kueue.x-k8s.io/pod-group-total-count`` as a positive integer, ``None`` when absent or
            malformed.
        warnings: what was malformed.
    """

    name: str | None = None
    total_count: int | None = None
    warnings: list[str] = field(default_factory=list)


def kueue_group(pod: dict[str, Any]) -> KueueGroup | None:
    """Kueue's plain-pod group of ``pod``, or ``None`` when the pod carries no Kueue group label."""
    labels = get_path(pod, ("metadata", "labels"))
    name = labels.get(KUEUE_GROUP_NAME) if isinstance(labels, dict) else None
    if not isinstance(name, str) or not name:
        return None
    group = KueueGroup(name=name)
    annotations = get_path(pod, ("metadata", "annotations"))
    raw = annotations.get(KUEUE_TOTAL_COUNT) if isinstance(annotations, dict) else None
    if raw is not None:
        text = str(raw).strip()
        if text.isdigit() and int(text) >= 1:
            group.total_count = int(text)
        else:
            group.warnings.append(f"annotation {KUEUE_TOTAL_COUNT}={raw!r} is not a positive integer; admit ignores it")
    return group
