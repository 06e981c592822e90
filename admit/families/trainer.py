"""Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``) TrainJob: the gang is the TrainJob's JobSet.

Sources: kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (``runtimeRef``, ``trainer.numNodes``,
``runtimePatches``: per-manager patches of the runtime's JobSet template, whose ``metadata`` may carry labels and
annotations), ``trainingruntime_types.go`` (``JobSetTemplateSpec``: "JobSet name and namespace is equal to the
TrainJob's name and namespace"; ``podGroupPolicy.coscheduling.scheduleTimeoutSeconds``), Trainer's coscheduling
plugin ``pkg/runtime/framework/plugins/coscheduling/coscheduling.go`` (``EnforcePodGroupPolicy`` puts the label
``scheduling.x-k8s.io/pod-group: <TrainJob name>`` on the JobSet's pod templates; ``Build`` makes the PodGroup named
after the TrainJob, minMember = the pods of every pod set, with a controller ownerReference to the TrainJob), and
the Kubeflow docs "Job Scheduling / Coscheduling".

A TrainJob has no pod template of its own: Trainer builds a JobSet named after the TrainJob from the runtime
(``ClusterTrainingRuntime``/``TrainingRuntime``, read from the API, which admit's mutating path never calls).
So admit gangs the JobSet, not the TrainJob:

- Mutation: a ``runtimePatches`` entry with ``manager: gang.admit.dev`` whose JobSet template metadata carries the
  TrainJob's ``gang.admit.dev/*`` annotations. Trainer puts them on the JobSet it creates, and the JobSet family
  (``admit.families.jobset``) gangs it: one PodGroup named after the JobSet, i.e. after the TrainJob, with the
  JobSet's pods, adopted by the JobSet (owned in turn by the TrainJob, so the garbage collector removes all three
  together). The TrainJob itself gets no PodGroup.
- Deferring: when the runtime has ``podGroupPolicy.coscheduling``, Trainer labels the JobSet's pod templates with
  the pod-group label and makes the PodGroup itself; the JobSet family sees a TrainJob-owned JobSet labelled without
  admit's managed label and defers (mutates nothing, creates nothing, says so). admit cannot tell at TrainJob
  admission which runtime gangs, so the TrainJob's answer says both cases.
- Older Trainer releases without ``runtimePatches`` (before v2.2) drop the entry; there, put the annotations on the
  runtime's ``spec.template.metadata.annotations`` (every JobSet of that runtime is then ganged).
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..gang.plan import GangAnnotations, GangPlan, get_path
from .shared import WorkloadKind, object_ref

__all__ = ["TRAINJOB", "KINDS", "resolve_trainjob", "PATCH_MANAGER"]

GROUP = "trainer.kubeflow.org"
PATCH_MANAGER = "gang.admit.dev"


def _gang_annotations(obj: dict[str, Any], config: Config) -> dict[str, str]:
    prefix = config.annotation_prefix.rstrip("/") + "/"
    annotations = get_path(obj, ("metadata", "annotations"))
    if not isinstance(annotations, dict):
        return {}
    return {k: str(v) for k, v in annotations.items() if isinstance(k, str) and k.startswith(prefix)
            and k != f"{prefix}owner"}


def _runtime_patch_ops(obj: dict[str, Any], annotations: dict[str, str]) -> list[dict[str, Any]]:
    entry = {"manager": PATCH_MANAGER,
             "trainingRuntimeSpec": {"template": {"metadata": {"annotations": annotations}}}}
    patches = get_path(obj, ("spec", "runtimePatches"))
    if not isinstance(patches, list):
        if not isinstance(obj.get("spec"), dict):
            return [{"op": "add", "path": "/spec", "value": {"runtimePatches": [entry]}}]
        return [{"op": "add", "path": "/spec/runtimePatches", "value": [entry]}]
    for i, p in enumerate(patches):
        if isinstance(p, dict) and p.get("manager") == PATCH_MANAGER:
            have = get_path(p, ("trainingRuntimeSpec", "template", "metadata", "annotations"))
            if have == annotations:
                return []
            return [{"op": "replace", "path": f"/spec/runtimePatches/{i}/trainingRuntimeSpec",
                     "value": entry["trainingRuntimeSpec"]}]
    return [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}]


def resolve_trainjob(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a TrainJob: no PodGroup of its own, a runtime patch that carries the gang annotations to its JobSet
    (``extra_ops``), and a warning naming the JobSet's PodGroup (module docstring). Never raises beyond the
    annotation parsing done by the caller."""
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("TrainJob", namespace, name)
    runtime = get_path(obj, ("spec", "runtimeRef", "name")) or "?"
    runtime_kind = get_path(obj, ("spec", "runtimeRef", "kind")) or "ClusterTrainingRuntime"
    plan = GangPlan(kind="TrainJob", api_group=GROUP, name=name, namespace=namespace,
                    group_name=ann.pod_group or name, min_member=ann.min_member or 1, total_pods=None,
                    total_field="", create_pod_group=False)
    plan.extra_ops = _runtime_patch_ops(obj, _gang_annotations(obj, config))
    plan.warnings.append(
        f"{ref}: its JobSet {name} is the gang: PodGroup {plan.group_name} is made when Trainer creates the JobSet "
        f"(admit passes the annotations on through spec.runtimePatches). If {runtime_kind} {runtime} has "
        "podGroupPolicy.coscheduling, Trainer makes the PodGroup itself and admit leaves it alone")
    return plan


TRAINJOB = WorkloadKind(GROUP, "TrainJob", (("v1alpha1", "trainjobs"),), resolve_trainjob)

KINDS = (TRAINJOB,)
