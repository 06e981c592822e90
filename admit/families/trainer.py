"""Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``) TrainJob: the gang is the TrainJob's JobSet.

Sources: kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (``runtimeRef``, ``trainer.numNodes``,
``runtimePatches``: per-manager patches of the runtime's JobSet template, whose ``metadata`` may carry labels and
annotations), ``trainingruntime_types.go`` (``JobSetTemplateSpec``: "JobSet name and namespace is equal to the
TrainJob's name and namespace"; ``podGroupPolicy.coscheduling.scheduleTimeoutSeconds``), Trainer's coscheduling
plugin ``pkg/runtime/framework/plugins/coscheduling/coscheduling.go`` (``EnforcePodGroupPolicy``, as in
:func:`trainer_jobset`; ``Build`` makes the PodGroup named after the TrainJob, minMember = the pods of every pod set,
with a controller ownerReference to the TrainJob), and the Kubeflow docs "Job Scheduling / Coscheduling".

A TrainJob has no pod template of its own: Trainer builds a JobSet named after the TrainJob from the runtime
(``ClusterTrainingRuntime``/``TrainingRuntime``, read from the API, which admit's mutating path never calls).
So admit gangs the JobSet, not the TrainJob:

- Mutation: a ``runtimePatches`` entry with ``manager: gang.admit.dev/admit`` (:func:`patch_manager`: Trainer's
  validating webhook requires a domain-prefixed path, ``pkg/runtime/framework/plugins/jobset/jobset.go``
  ``Validate``: ``validation.IsDomainPrefixedPath(runtimePatchesPath.Child("manager"), ...)``, since v2.2.0, the first
  release with ``runtimePatches``) whose JobSet template metadata carries the TrainJob's ``gang.admit.dev/*``
  annotations. Trainer puts them on the JobSet it creates, and the JobSet family (``admit.families.jobset``) gangs
  it: one PodGroup named after the JobSet, i.e. after the TrainJob, owned by the JobSet (owned in turn by the
  TrainJob). The TrainJob itself gets no PodGroup.
- Deferring: when the runtime has a ``podGroupPolicy``, Trainer gangs the JobSet itself and the JobSet family defers
  (``jobset._trainer_ganged``).
- Older Trainer releases without ``runtimePatches`` (before v2.2) drop the entry; there, put the annotations on the
  runtime's ``spec.template.metadata.annotations`` (every JobSet of that runtime is then ganged).
- ``runtimePatches`` can change only while the TrainJob is suspended, and Trainer does not rebuild the JobSet of a
  running TrainJob (``Build``: "Do not update the JobSet if it already exists and is not suspended"): a change of
  the gang annotations that Trainer would refuse, or that could not gang the JobSet built already, is refused with
  the fix (:func:`running_trainjob`). A re-apply that drops admit's entry gets it back as stored, which Trainer takes.
- At CREATE, the validating phase reads the TrainJob's runtime (``ClusterTrainingRuntime``/``TrainingRuntime``) and
  judges the JobSet Trainer will build from it (:func:`trainer_jobset`, :func:`judge_runtime`), so that what would
  be refused at the JobSet (in Trainer's log and a ``TrainJobResourcesCreationFailed`` Event, cut to 950
  characters: ``trainjob_controller.go`` ``Reconcile``) is refused at the TrainJob instead, with fixes Trainer
  accepts at creation: a runtime whose launcher starts after the nodes are Ready (``deepspeed-distributed``,
  ``mlx-distributed``: ``dependsOn ... status: Ready``) with ``auto``, a min-member above the pods Trainer runs;
  Trainer's own ``podGroupPolicy.coscheduling`` on a runtime with initializer steps (Trainer counts every pod set,
  ``coscheduling.go`` ``Build``, while the initializers complete before the trainer starts: a deadlock). Trainer's
  Volcano gang (``podGroupPolicy.volcano``, :func:`trainer_jobset`) admit leaves alone as it does its coscheduling.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..gang.foreign import VOLCANO_GROUP_NAME
from ..gang.plan import GangAnnotations, GangError, GangPlan, get_path, parse_gang_annotations
from .shared import RunningUpdate, RunningVerdict, WorkloadKind, object_ref

__all__ = ["TRAINJOB", "KINDS", "resolve_trainjob", "patch_manager", "trainer_jobset", "judge_runtime",
           "runtime_ref", "RUNTIME_PLURALS", "ANCESTOR_LABEL", "running_trainjob"]

GROUP = "trainer.kubeflow.org"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins PodGroupLabel, which Trainer writes
RUNTIME_PLURALS = {"ClusterTrainingRuntime": "clustertrainingruntimes", "TrainingRuntime": "trainingruntimes"}


def patch_manager(config: Config) -> str:
    """admit's ``runtimePatches[*].manager``: ``<annotation prefix host>/admit`` (``gang.admit.dev/admit``), a
    domain-prefixed path as Trainer's webhook requires (apimachinery ``IsDomainPrefixedPath``)."""
    return f"{config.annotation_prefix.strip('/')}/admit"


def _gang_annotations(obj: dict[str, Any], config: Config) -> dict[str, str]:
    prefix = config.key_prefix
    annotations = get_path(obj, ("metadata", "annotations"))
    if not isinstance(annotations, dict):
        return {}
    return {k: str(v) for k, v in annotations.items() if isinstance(k, str) and k.startswith(prefix)
            and k != f"{prefix}owner"}


def _runtime_patch_ops(obj: dict[str, Any], annotations: dict[str, str], manager: str) -> list[dict[str, Any]]:
    entry = {"manager": manager,
             "trainingRuntimeSpec": {"template": {"metadata": {"annotations": annotations}}}}
    patches = get_path(obj, ("spec", "runtimePatches"))
    if not isinstance(patches, list):
        if not isinstance(obj.get("spec"), dict):
            return [{"op": "add", "path": "/spec", "value": {"runtimePatches": [entry]}}]
        return [{"op": "add", "path": "/spec/runtimePatches", "value": [entry]}]
    for i, p in enumerate(patches):
        if isinstance(p, dict) and p.get("manager") == manager:
            have = get_path(p, ("trainingRuntimeSpec", "template", "metadata", "annotations"))
            if have == annotations:
                return []
            # a change while the TrainJob runs: running_trainjob (it reads the stored TrainJob) refuses it
            return [{"op": "replace", "path": f"/spec/runtimePatches/{i}/trainingRuntimeSpec",
                     "value": entry["trainingRuntimeSpec"]}]
    return [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}]


def resolve_trainjob(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a TrainJob: no PodGroup of its own, a runtime patch that carries the gang annotations to its JobSet
    (``extra_ops``), and a note naming the JobSet's PodGroup (module docstring). Never raises beyond the
    annotation parsing done by the caller."""
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("TrainJob", namespace, name)
    runtime_kind, _, _, runtime = runtime_ref(obj, namespace)
    plan = GangPlan(kind="TrainJob", api_group=GROUP, name=name, namespace=namespace,
                    group_name=ann.pod_group or name, min_member=ann.min_member or 1, total_pods=None,
                    total_field="", create_pod_group=False)
    plan.extra_ops = _runtime_patch_ops(obj, _gang_annotations(obj, config), patch_manager(config))
    plan.notes.append(
        f"{ref}: unless {runtime_kind} {runtime or '?'} has a podGroupPolicy (then Kubeflow Trainer gangs it itself "
        f"and admit leaves it alone), its JobSet {name} is the gang: PodGroup {plan.group_name} is made when Trainer "
        "creates the JobSet (admit passes the annotations on through spec.runtimePatches)")
    return plan


def runtime_ref(trainjob: dict[str, Any], namespace: str) -> tuple[str, str, str, str]:
    """``(kind, plural, namespace, name)`` of a TrainJob's runtime; namespace ``""`` for a ClusterTrainingRuntime
    (``spec.runtimeRef``: ``kind`` defaults to ClusterTrainingRuntime, ``apiGroup`` to trainer.kubeflow.org)."""
    kind = str(get_path(trainjob, ("spec", "runtimeRef", "kind")) or "ClusterTrainingRuntime")
    name = str(get_path(trainjob, ("spec", "runtimeRef", "name")) or "")
    return kind, RUNTIME_PLURALS.get(kind, ""), "" if kind == "ClusterTrainingRuntime" else namespace, name


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def trainer_jobset(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The JobSet Kubeflow Trainer builds for ``trainjob`` from ``runtime`` (a ClusterTrainingRuntime or
    TrainingRuntime), as its plugins do (kubeflow/trainer v2.2 to v2.3.0):

    - name and namespace the TrainJob's; labels and annotations the runtime template's ``metadata`` plus every
      ``runtimePatches[*].trainingRuntimeSpec.template.metadata`` in order (``pkg/runtime/core/trainingruntime.go``
      ``newRuntimeInfo``; the TrainJob's own metadata is not copied); a controller ownerReference to the TrainJob
      (``plugins/jobset/jobset.go`` ``Build``); ``spec.suspend`` the TrainJob's;
    - the runtime's ``spec.template.spec`` as the JobSet spec (patches to the spec itself are not applied here:
      admit writes only metadata); each replicatedJob's pod count: its ``parallelism`` (default 1), or
      ``mlPolicy.numNodes`` for the ``trainjob-ancestor-step: trainer`` one when the runtime has an ``mlPolicy``
      (``newRuntimeInfo``), at least 1 (``runtime.WithPodSet``), then ``spec.trainer.numNodes`` of the TrainJob for
      that one (``EnforceMLPolicy`` of torch, jax, xgboost, and of ``plainml``, which also sizes a runtime without
      ``mlPolicy``) or, with ``mlPolicy.mpi``, for the ``node`` one (minus the launcher with ``runLauncherAsNode``:
      ``mpi.go``), written to ``parallelism`` and ``completions`` (``SyncParallelCount``); ``replicas: 1`` for the
      initializer and trainer steps (``builder.go`` ``Initializer``, ``Trainer``);
    - ``podGroupPolicy.coscheduling``: the label ``scheduling.x-k8s.io/pod-group: <TrainJob>`` on every pod
      template (``coscheduling.go`` ``EnforcePodGroupPolicy``, ``builder.go`` ``PodLabels``);
      ``podGroupPolicy.volcano``: the annotation ``scheduling.k8s.io/group-name: <TrainJob>`` (``volcano.go``).

    Pure; never raises for any shape (missing parts read as absent).
    """
    meta = trainjob.get("metadata") or {}
    rspec = rspec_v if isinstance(rspec_v := runtime.get("spec"), dict) else {}
    template = template_v if isinstance(template_v := rspec.get("template"), dict) else {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    for patch in get_path(trainjob, ("spec", "runtimePatches")) or []:
        pmeta = get_path(patch, ("trainingRuntimeSpec", "template", "metadata")) if isinstance(patch, dict) else None
        if isinstance(pmeta, dict):
            labels.update(pmeta.get("labels") or {})
            annotations.update(pmeta.get("annotations") or {})
    spec: dict[str, Any] = copy.deepcopy(spec_v if isinstance(spec_v := template.get("spec"), dict) else {})
    ml = ml_v if isinstance(ml_v := rspec.get("mlPolicy"), dict) else None
    mpi = mpi_v if isinstance(mpi_v := (ml or {}).get("mpi"), dict) else None
    num_nodes = get_path(trainjob, ("spec", "trainer", "numNodes"))
    policy = policy_v if isinstance(policy_v := rspec.get("podGroupPolicy"), dict) else {}
    name = str(meta.get("name") or "")
    for rj in spec.get("replicatedJobs") or []:
        if not isinstance(rj, dict):
            continue
        job = rj.setdefault("template", {})
        ancestor = ((job.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        job_spec = job.setdefault("spec", {})
        count = _int(job_spec.get("parallelism"), 1)
        if ancestor == "trainer" and ml is not None:
            count = _int(ml.get("numNodes"), 1)
        if isinstance(num_nodes, int) and not isinstance(num_nodes, bool):
            if mpi is not None:
                if rj.get("name") == "node":
                    count = max(num_nodes - 1, 1) if mpi.get("runLauncherAsNode") else num_nodes
            elif ancestor == "trainer":  # plainml (a runtime without mlPolicy too), torch, jax, xgboost
                count = num_nodes
        job_spec["parallelism"] = job_spec["completions"] = max(count, 1)
        if ancestor in ("trainer", "dataset-initializer", "model-initializer"):
            rj["replicas"] = 1
        pod_meta = job_spec.setdefault("template", {}).setdefault("metadata", {})
        if isinstance(policy.get("coscheduling"), dict):
            pod_meta.setdefault("labels", {})[POD_GROUP_LABEL] = name
        if isinstance(policy.get("volcano"), dict):
            pod_meta.setdefault("annotations", {})[VOLCANO_GROUP_NAME] = name
    suspend = get_path(trainjob, ("spec", "suspend"))
    if isinstance(suspend, bool):
        spec["suspend"] = suspend
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": labels, "annotations": annotations,
                     "ownerReferences": [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainJob", "name": name,
                                          "uid": meta.get("uid") or "", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec,
    }


def judge_runtime(trainjob: dict[str, Any], runtime: dict[str, Any] | None, config: Config,
                  namespace: str, notes: list[str] | None = None) -> tuple[list[str], GangError | None]:
    """``(warnings, refusal)`` for a TrainJob CREATE once its runtime is read (module docstring): the JobSet Trainer
    will build (:func:`trainer_jobset`) goes through the JobSet family's resolver, and a refusal there becomes the
    TrainJob's, named on the TrainJob. ``runtime`` None: not found (a warning: Trainer itself refuses an unknown
    runtime). ``notes`` (``shared.Read.judge``) gets who gangs the TrainJob and, when admit gangs its JobSet, the
    PodGroup, minMember and minResources its admission will give. Pure."""
    from .jobset import gang_members, replicated_jobs, resolve_jobset  # the JobSet family judges the JobSet

    name = str(get_path(trainjob, ("metadata", "name")) or "")
    ref = object_ref("TrainJob", namespace, name)
    kind, _, _, runtime_name = runtime_ref(trainjob, namespace)
    if runtime is None:
        return [f"create {kind} {str(runtime_name)[:63]} (or correct spec.runtimeRef): admit could not find it to "
                "check the JobSet Trainer builds from it"], None
    jobset = trainer_jobset(trainjob, runtime)
    policy = get_path(runtime, ("spec", "podGroupPolicy")) or {}
    if isinstance(policy, dict) and isinstance(policy.get("volcano"), dict):
        _note(notes, f"{ref}: {kind} {runtime_name} has podGroupPolicy.volcano: Kubeflow Trainer gangs it with "
                     f"Volcano PodGroup {name} itself, and admit leaves its JobSet alone (no PodGroup of its own, no "
                     "schedulerName)")
        return [f"remove the {config.key_prefix}* annotations to silence this: {kind} {str(runtime_name)[:63]} has "
                "podGroupPolicy.volcano, so Trainer gangs this TrainJob with a Volcano PodGroup and admit leaves it "
                "alone"], None
    try:
        rjobs = replicated_jobs(jobset, ref)
    except GangError as e:
        return [f"correct {kind} {str(runtime_name)[:63]}: admit could not read the JobSet Trainer builds from it: "
                f"{str(e.message)[:120]}"], None
    if isinstance(policy, dict) and isinstance(policy.get("coscheduling"), dict):
        total = sum(rj["replicas"] * rj["pods_per_job"] for rj in rjobs)
        steps, _, _ = gang_members(rjobs, False)
        if steps:
            first = sum(rj["replicas"] * rj["pods_per_job"] for rj in steps)
            return [], GangError(
                "Use a runtime without podGroupPolicy (admit then gangs the JobSet's trainer pods and leaves the steps "
                f"out), or one without the steps: {ref}: {kind} {runtime_name} has podGroupPolicy.coscheduling, so "
                f"Kubeflow Trainer makes PodGroup {name} itself with minMember {total}: every pod set counts, the "
                f"steps {', '.join(rj['name'] for rj in steps)} included (coscheduling.go Build) and labelled for it. "
                f"Those {first} pod(s) run and complete before the others are created (dependsOn status: Complete), "
                f"so they wait for a quorum of {total} that never comes: the TrainJob deadlocks in Trainer's own gang "
                f"(without the {config.annotation_prefix.rstrip('/')}/* annotations it deadlocks all the same)", 403)
        _note(notes, f"{ref}: {kind} {runtime_name} has podGroupPolicy.coscheduling: Kubeflow Trainer makes PodGroup "
                     f"{name} itself (minMember {total}), and admit leaves it alone")
        return [], None
    annotations = get_path(jobset, ("metadata", "annotations"))
    try:
        ann = parse_gang_annotations(annotations, config)
        if ann is None:
            return [], None
        plan = resolve_jobset(jobset, ann, config, namespace, "CREATE")
    except GangError as e:
        return [], GangError(f"{e.message} ({ref}: the JobSet Trainer builds from {kind} {runtime_name} would be "
                             "refused, so the TrainJob would never run)", e.code)
    resources = ", ".join(f"{k}={v}" for k, v in (plan.min_resources or {}).items())
    _note(notes, f"{ref}: from {kind} {runtime_name}, Trainer builds JobSet {name}, a gang of PodGroup "
                 f"{plan.group_name} with minMember {plan.min_member} ({plan.total_field or 'its pods'})"
                 + (f" and minResources {resources}" if resources else ""))
    return [], None  # the JobSet's own warnings come with its admission


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None:
        notes.append(text)


def _entry_annotations(obj: dict[str, Any], manager: str) -> dict[str, str] | None:
    """The annotations admit's ``runtimePatches`` entry (``manager``) carries on ``obj``, or None without one."""
    for patch in get_path(obj, ("spec", "runtimePatches")) or ():
        if isinstance(patch, dict) and patch.get("manager") == manager:
            found = get_path(patch, ("trainingRuntimeSpec", "template", "metadata", "annotations"))
            return dict(found) if isinstance(found, dict) else {}
    return None


def running_trainjob(update: RunningUpdate, plan: GangPlan, config: Config) -> RunningVerdict | None:
    """``WorkloadKind.running_update`` of a TrainJob: refuse an UPDATE whose gang annotations need a
    ``runtimePatches`` entry other than the stored one when Trainer would not let it in, or when it could not gang
    the JobSet Trainer built already.

    - The stored TrainJob has no admit entry (annotated after creation): Trainer built its JobSet at creation without
      admit's marks, and the JobSet's pod templates cannot take them now (JobSet's update webhook, module docstring of
      ``admit.families.jobset``), and while the TrainJob runs Trainer refuses the entry itself
      (``checkRuntimePatchesImmutability``). Refused with the fix: recreate the TrainJob.
    - The entry changes while the TrainJob is not suspended before nor after the update: Trainer refuses it
      (kubeflow/trainer v2.3.0 ``pkg/runtime/framework/plugins/jobset/jobset.go`` ``checkRuntimePatchesImmutability``:
      "RuntimePatches can only be modified when the TrainJob is suspended before or after the update"). Refused
      with the fix: suspend it in the same update.

    An UPDATE that removes the gang annotations (``update.removing``) is warned: admit leaves its entry (taking it
    off would be the refused change above while the TrainJob runs), so the JobSet Trainer built keeps its gang; the
    warning names the entry to remove while the TrainJob is suspended.
    """
    want = _gang_annotations(update.obj, config)
    have = _entry_annotations(update.old, patch_manager(config))
    if update.removing:
        if have is None or _entry_annotations(update.obj, patch_manager(config)) is None:
            return None  # no entry, or the user's write removes it too (Trainer's own rule then judges it)
        return RunningVerdict(
            f"remove spec.runtimePatches entry manager {patch_manager(config)} too, in an update with "
            f"spec.suspend: true, to un-gang {object_ref('TrainJob', plan.namespace, plan.name)[:120]}: admit leaves "
            "it, so its JobSet stays ganged (Trainer rebuilds the JobSet only while suspended)", False)
    if have == want:
        return None
    name = str(get_path(update.obj, ("metadata", "name")) or "")
    ref = object_ref("TrainJob", plan.namespace, name)
    prefix = config.annotation_prefix.rstrip("/")
    if have is None:
        return RunningVerdict(
            f"Delete the TrainJob and create it again with the {prefix}/* annotations: the annotations would gang "
            f"nothing now, as {ref} was created without them, so Kubeflow Trainer built its JobSet {name} without "
            f"admit's {config.pod_group_label} label, and it cannot get it now: JobSet's update webhook keeps "
            "spec.replicatedJobs immutable (schedulerName even while suspended), and Trainer refuses any change of "
            "spec.runtimePatches, through which admit passes the annotations on, while the TrainJob is not "
            "suspended", True)
    if get_path(update.old, ("spec", "suspend")) is True or get_path(update.obj, ("spec", "suspend")) is True:
        return None
    return RunningVerdict(
        "Set spec.suspend: true in this same update (or before it) and resume after, or delete and recreate the "
        f"TrainJob with the new {prefix}/* annotations: {ref} is not suspended, and Kubeflow Trainer refuses any "
        "change of spec.runtimePatches then (\"RuntimePatches can only be modified when the TrainJob is suspended "
        "before or after the update\"); admit carries the gang annotations to the JobSet through its entry there, so "
        f"they cannot change now (from {have} to {want})", True)


@dataclass(slots=True)
class RuntimeRead:
    """``shared.Read`` of a TrainJob CREATE: its runtime (:func:`runtime_ref`), judged by :func:`judge_runtime`."""

    trainjob: dict[str, Any]
    trainjob_namespace: str
    kind: str
    plural: str
    namespace: str
    name: str
    group: str = GROUP
    version: str = "v1alpha1"
    judged: str = "the JobSet Kubeflow Trainer builds from it"

    def judge(self, obj: dict[str, Any] | None, config: Config,
              notes: list[str] | None = None) -> tuple[list[str], GangError | None]:
        return judge_runtime(self.trainjob, obj, config, self.trainjob_namespace, notes)


def runtime_read(trainjob: dict[str, Any], namespace: str) -> RuntimeRead | None:
    """``WorkloadKind.admission_read`` of a TrainJob: its runtime to read, or ``None`` when it names none."""
    kind, plural, runtime_namespace, name = runtime_ref(trainjob, namespace)
    return RuntimeRead(trainjob, namespace, kind, plural, runtime_namespace, name) if plural and name else None


TRAINJOB = WorkloadKind(GROUP, "TrainJob", (("v1alpha1", "trainjobs"),), resolve_trainjob,
                        pod_joiner=None, pod_watch_selector=None, rollout=None, gang_from_parent=None, handover=None, controller_gang=None, allowed_backends=None, in_status=False,
                        running_update=running_trainjob, admission_read=runtime_read)

KINDS = (TRAINJOB,)
