"""What Kubeflow Trainer builds from a TrainJob and its runtime: the JobSet and the PodGroup, written from
kubeflow/trainer **v2.3.0** (``pkg/runtime/core/trainingruntime.go``, ``pkg/runtime/framework/core/framework.go``
and the plugins of ``pkg/runtime/framework/plugins``), in Trainer's order:

1. ``TrainingRuntime.newRuntimeInfo``: the JobSet's labels and annotations are the runtime template's ``metadata``
   plus each ``runtimePatches[*].trainingRuntimeSpec.template.metadata`` in order (:func:`propagated_metadata`);
   ``mergeRuntimePatches`` strategic-merges each patch's ``template.spec`` into the JobSet spec and restores the
   runtime's order of the replicatedJobs; then one **pod set** per replicatedJob, whose ``count`` is the Job's
   ``parallelism`` (default 1), or ``mlPolicy.numNodes`` (default 1) for the ``trainjob-ancestor-step: trainer``
   Job **when the runtime has an ``mlPolicy``**, at least 1 (``runtime.WithPodSet``: ``max(count, 1)``);
   ``trainer.resourcesPerNode`` is merged into the ``node`` container of the trainer Job (with an ``mlPolicy``) or,
   with MPI's ``runLauncherAsNode``, of the Job named ``node`` (``MergeResourceRequirements``: per key).
2. ``RunEnforceMLPolicyPlugins`` (``EnforceMLPolicy``), the counts only (their environment variables are not
   emulated): ``plainml`` (no ``mlPolicy``, or one with none of ``torch``, ``mpi``, ``jax``: the trainer pod set's
   count = ``trainer.numNodes``), ``torch``, ``jax``, ``xgboost`` (the same), ``mpi`` (the pod set named ``node``:
   ``numNodes``, or ``max(numNodes - 1, 1)`` with ``runLauncherAsNode``).
3. ``RunEnforcePodGroupPolicyPlugins``: ``coscheduling`` puts ``scheduling.x-k8s.io/pod-group: <trainjob>`` in the
   pods' labels, ``volcano`` ``scheduling.k8s.io/group-name: <trainjob>`` in their annotations.
4. ``RunComponentBuilderPlugins``: ``jobset.go`` ``SyncParallelCount`` (each replicatedJob named like a pod set gets
   ``parallelism`` = ``completions`` = its count), then ``Build`` with ``builder.go``: ``Initializer``
   (``replicas: 1`` for the dataset and model initializers; ``STORAGE_URI``, ``env`` and ``secretRef`` of
   ``spec.initializer``), ``Trainer`` (``replicas: 1`` for the trainer Job; ``image``, ``command``, ``args`` of
   ``spec.trainer`` on its ``node`` container, ``env`` there and on MPI's launcher-as-node ``node`` container),
   ``PodLabels``, ``PodAnnotations``, ``Suspend`` (the TrainJob's), a controller ownerReference to the TrainJob;
   ``coscheduling.go`` / ``volcano.go`` ``Build``: the PodGroup ``<trainjob>``, minMember the sum of the pod sets'
   counts (a replicatedJob's ``replicas`` is not counted: kubeflow/trainer#2318), minResources each pod set's
   ``PodRequests`` times its count.

Not emulated: the runtime snapshot ConfigMap (``snapshot.go``), the environment variables, volumes and ports of the
ML plugins (torch's ``PET_*``, MPI's SSH Secret and hostfile, JAX, XGBoost, Flux), ``IdentifyPodNetwork``, the
Volcano PodGroup's queue, priority class and network topology.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from admit.testing.fake_kube import strategic_merge_patch
from .quantity import canonical, pod_requests, scaled, summed

__all__ = ["GROUP", "ANCESTOR", "RUNTIME_PLURALS", "runtime_ref", "runtime_info", "trainjob_jobset", "pod_group",
           "propagated_metadata", "Info", "PodSet"]

JSON = dict[str, Any]
GROUP = "trainer.kubeflow.org"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"  # constants.LabelTrainJobAncestor
TRAINER, DATASET, MODEL, NODE = "trainer", "dataset-initializer", "model-initializer", "node"  # pkg/constants
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins PodGroupLabel
VOLCANO_GROUP = "scheduling.k8s.io/group-name"  # volcano KubeGroupNameAnnotationKey
RUNTIME_PLURALS = {"ClusterTrainingRuntime": "clustertrainingruntimes", "TrainingRuntime": "trainingruntimes"}


@dataclass
class PodSet:
    """``runtime.PodSet``: a replicatedJob's ``name``, its ancestor label, its pod ``count`` and its pod spec."""

    name: str
    ancestor: str | None
    count: int
    pod_spec: JSON


@dataclass
class Info:
    """``runtime.Info``: what the plugins read and write before the JobSet is built."""

    labels: JSON
    annotations: JSON
    ml_policy: JSON | None
    pod_group_policy: JSON | None
    spec: JSON
    pod_sets: list[PodSet]
    pod_labels: JSON = field(default_factory=dict)
    pod_annotations: JSON = field(default_factory=dict)


def _dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def runtime_ref(trainjob: JSON) -> tuple[str, str, str | None, str]:
    """``(kind, plural, namespace, name)`` of the TrainJob's runtime: ``spec.runtimeRef``, ``kind`` defaulting to
    ``ClusterTrainingRuntime`` (the CRD's ``+kubebuilder:default``); namespace None for a cluster-scoped one; plural
    ``""`` for a kind Trainer does not know."""
    ref = _dict(_dict(trainjob.get("spec")).get("runtimeRef"))
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    namespace = None if kind == "ClusterTrainingRuntime" else _dict(trainjob.get("metadata")).get("namespace")
    return kind, RUNTIME_PLURALS.get(kind, ""), namespace, str(ref.get("name") or "")


def _patches(trainjob: JSON) -> list[JSON]:
    return [p for p in _dict(trainjob.get("spec")).get("runtimePatches") or [] if isinstance(p, dict)]


def propagated_metadata(trainjob: JSON, template: JSON) -> tuple[JSON, JSON]:
    """``newRuntimeInfo``'s ``propagationLabels`` and ``propagationAnnotations``: the runtime template's, then each
    runtime patch's ``trainingRuntimeSpec.template.metadata`` over them, in order."""
    meta = _dict(template.get("metadata"))
    labels, annotations = dict(_dict(meta.get("labels"))), dict(_dict(meta.get("annotations")))
    for patch in _patches(trainjob):
        pmeta = _dict(_dict(_dict(patch.get("trainingRuntimeSpec")).get("template")).get("metadata"))
        labels.update(_dict(pmeta.get("labels")))
        annotations.update(_dict(pmeta.get("annotations")))
    return labels, annotations


def _merged_spec(trainjob: JSON, template: JSON) -> JSON:
    """``mergeRuntimePatches``: each patch's ``template.spec`` strategic-merged into the JobSet spec (replicatedJobs
    by ``name``), then the runtime's order of the replicatedJobs restored."""
    spec = copy.deepcopy(_dict(template.get("spec")))
    order = {rj.get("name"): i for i, rj in enumerate(spec.get("replicatedJobs") or []) if isinstance(rj, dict)}
    for patch in _patches(trainjob):
        pspec = _dict(_dict(patch.get("trainingRuntimeSpec")).get("template")).get("spec")
        if isinstance(pspec, dict):
            spec = strategic_merge_patch(spec, pspec) or {}
    if isinstance(spec.get("replicatedJobs"), list):
        spec["replicatedJobs"].sort(key=lambda rj: order.get(_dict(rj).get("name"), len(order)))
    return spec


def _pod_spec(rj: JSON) -> JSON:
    """The pod spec of a replicatedJob (created empty where absent, as the apply configuration's builders do)."""
    job = rj.setdefault("template", {})
    return job.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})


def _ancestor(rj: JSON) -> str | None:
    value = _dict(_dict(_dict(rj.get("template")).get("metadata")).get("labels")).get(ANCESTOR)
    return None if value is None else str(value)


def _merge_resources(pod_spec: JSON, per_node: JSON) -> None:
    """``MergeResourceRequirements`` of ``trainer.resourcesPerNode`` into the ``node`` container: requests and
    limits per key, the TrainJob's over the runtime's."""
    for container in pod_spec.get("containers") or []:
        if isinstance(container, dict) and container.get("name") == NODE:
            resources = container.setdefault("resources", {})
            for part in ("limits", "requests"):
                if _dict(per_node.get(part)):
                    resources[part] = {**_dict(resources.get(part)), **per_node[part]}
            return


def new_runtime_info(trainjob: JSON, runtime: JSON) -> Info:
    """``TrainingRuntime.newRuntimeInfo`` (module docstring, step 1)."""
    rspec = _dict(runtime.get("spec"))
    template = _dict(rspec.get("template"))
    ml = rspec.get("mlPolicy") if isinstance(rspec.get("mlPolicy"), dict) else None
    trainer = _dict(_dict(trainjob.get("spec")).get("trainer"))
    labels, annotations = propagated_metadata(trainjob, template)
    spec = _merged_spec(trainjob, template)
    mpi = _dict((ml or {}).get("mpi"))
    pod_sets = []
    for rj in spec.get("replicatedJobs") or []:
        if not isinstance(rj, dict):
            continue
        parallelism = _dict(_dict(rj.get("template")).get("spec")).get("parallelism")
        count = parallelism if isinstance(parallelism, int) else 1
        ancestor = _ancestor(rj)
        if ancestor == TRAINER and ml is not None:
            num_nodes = ml.get("numNodes")
            count = num_nodes if isinstance(num_nodes, int) else 1
        launcher_as_node = mpi.get("runLauncherAsNode") is True and rj.get("name") == NODE
        if isinstance(trainer.get("resourcesPerNode"), dict) and (
                (ancestor == TRAINER and ml is not None) or launcher_as_node):
            _merge_resources(_pod_spec(rj), trainer["resourcesPerNode"])
        pod_sets.append(PodSet(str(rj.get("name") or ""), ancestor, max(count, 1), copy.deepcopy(_pod_spec(rj))))
    return Info(labels, annotations, ml, _dict(rspec.get("podGroupPolicy")) or None, spec, pod_sets)


def enforce_ml_policy(info: Info, trainjob: JSON) -> None:
    """The ``EnforceMLPolicy`` plugins' pod counts (module docstring, step 2)."""
    num_nodes = _dict(_dict(trainjob.get("spec")).get("trainer")).get("numNodes")
    if not isinstance(num_nodes, int):
        return
    ml = info.ml_policy or {}
    if isinstance(ml.get("mpi"), dict):  # mpi.go: the pod set named node
        for ps in info.pod_sets:
            if ps.name == NODE:
                ps.count = max(num_nodes - 1, 1) if ml["mpi"].get("runLauncherAsNode") is True else num_nodes
                break
        return
    # plainml.go (no mlPolicy, or none of torch/mpi/jax), torch.go, jax.go, xgboost.go: the trainer pod set
    trainer = next((ps for ps in info.pod_sets if ps.ancestor == TRAINER), None)
    if trainer is not None:
        trainer.count = num_nodes


def enforce_pod_group_policy(info: Info, trainjob: JSON) -> None:
    """``coscheduling.go`` / ``volcano.go`` ``EnforcePodGroupPolicy`` (module docstring, step 3)."""
    name = _dict(trainjob.get("metadata")).get("name")
    policy = info.pod_group_policy or {}
    if isinstance(policy.get("coscheduling"), dict):
        info.pod_labels[POD_GROUP_LABEL] = name
    if isinstance(policy.get("volcano"), dict):
        info.pod_annotations[VOLCANO_GROUP] = name


def runtime_info(trainjob: JSON, runtime: JSON) -> Info:
    """``TrainingRuntime.RuntimeInfo``: :func:`new_runtime_info`, then the ML and pod-group policy plugins."""
    info = new_runtime_info(trainjob, runtime)
    enforce_ml_policy(info, trainjob)
    enforce_pod_group_policy(info, trainjob)
    return info


def _upsert_env(container: JSON, env: Any) -> None:
    """``apply.UpsertEnvVars``: each variable replaces the one of its name, or is appended."""
    have = container.setdefault("env", [])
    for var in env if isinstance(env, list) else []:
        if isinstance(var, dict):
            have[:] = [v for v in have if _dict(v).get("name") != var.get("name")] + [copy.deepcopy(var)]


def _initializer(rj: JSON, which: str, spec: JSON) -> None:
    """``Builder.Initializer`` for the dataset or model initializer Job."""
    rj["replicas"] = 1
    source = _dict(_dict(spec.get("initializer")).get("dataset" if which == DATASET else "model"))
    if not source:
        return
    for container in _pod_spec(rj).get("containers") or []:
        if isinstance(container, dict) and container.get("name") == which:
            if source.get("storageUri") is not None:
                _upsert_env(container, [{"name": "STORAGE_URI", "value": source["storageUri"]}])
            _upsert_env(container, source.get("env"))
            if _dict(source.get("secretRef")).get("name"):
                container.setdefault("envFrom", []).append({"secretRef": {"name": source["secretRef"]["name"]}})


def _trainer(rj: JSON, trainer_step: bool, spec: JSON) -> None:
    """``Builder.Trainer`` for the trainer Job (``trainer_step``) or MPI's launcher-as-node ``node`` Job."""
    trainer = _dict(spec.get("trainer"))
    if trainer_step:
        rj["replicas"] = 1
    for container in _pod_spec(rj).get("containers") or []:
        if not isinstance(container, dict) or container.get("name") != NODE or not trainer:
            continue
        if trainer_step:
            container.update({k: copy.deepcopy(trainer[k]) for k in ("image", "command", "args")
                              if trainer.get(k) is not None})
        _upsert_env(container, trainer.get("env"))


def build_jobset(info: Info, trainjob: JSON) -> JSON:
    """``SyncParallelCount`` and ``JobSet.Build`` with its ``Builder`` (module docstring, step 4)."""
    meta, tspec = _dict(trainjob.get("metadata")), _dict(trainjob.get("spec"))
    spec = copy.deepcopy(info.spec)
    rjobs = [rj for rj in spec.get("replicatedJobs") or [] if isinstance(rj, dict)]
    for ps in info.pod_sets:
        for rj in rjobs:
            if rj.get("name") == ps.name:
                job_spec = rj.setdefault("template", {}).setdefault("spec", {})
                job_spec["parallelism"] = job_spec["completions"] = ps.count
                break
    launcher_as_node = _dict((info.ml_policy or {}).get("mpi")).get("runLauncherAsNode") is True
    for rj in rjobs:
        ancestor = _ancestor(rj)
        if ancestor in (DATASET, MODEL):
            _initializer(rj, ancestor, tspec)
        if ancestor == TRAINER or (launcher_as_node and rj.get("name") == NODE):
            _trainer(rj, ancestor == TRAINER, tspec)
        pod_meta = rj["template"]["spec"].setdefault("template", {}).setdefault("metadata", {})
        if info.pod_labels:
            pod_meta["labels"] = {**_dict(pod_meta.get("labels")), **info.pod_labels}
        if info.pod_annotations:
            pod_meta["annotations"] = {**_dict(pod_meta.get("annotations")), **info.pod_annotations}
    spec.pop("suspend", None)  # Builder.Suspend: the TrainJob's, unset when it has none
    if tspec.get("suspend") is not None:
        spec["suspend"] = tspec["suspend"]
    metadata: JSON = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    if info.labels:
        metadata["labels"] = dict(info.labels)
    if info.annotations:
        metadata["annotations"] = dict(info.annotations)
    metadata["ownerReferences"] = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainJob", "name": meta.get("name"),
                                    "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata, "spec": spec}


def trainjob_jobset(trainjob: JSON, runtime: JSON) -> JSON:
    """The JobSet Trainer builds for ``trainjob`` (a stored TrainJob) from ``runtime`` (a stored
    ClusterTrainingRuntime or TrainingRuntime): :func:`runtime_info` then :func:`build_jobset`."""
    return build_jobset(runtime_info(trainjob, runtime), trainjob)


def pod_group(info: Info, trainjob: JSON) -> JSON | None:
    """``coscheduling.go`` / ``volcano.go`` ``Build``: the PodGroup of ``trainjob``, or None without either policy."""
    policy = info.pod_group_policy or {}
    volcano = isinstance(policy.get("volcano"), dict)
    if not volcano and not isinstance(policy.get("coscheduling"), dict):
        return None
    members, total = 0, {}  # type: tuple[int, dict[str, Any]]
    for ps in info.pod_sets:
        members += ps.count
        total = summed(total, scaled(pod_requests(ps.pod_spec), ps.count))
    spec: JSON = {"minMember": members, "minResources": canonical(total)}
    if not volcano:
        timeout = _dict(policy["coscheduling"]).get("scheduleTimeoutSeconds")
        spec["scheduleTimeoutSeconds"] = timeout if isinstance(timeout, int) else 60  # the CRD's default
    meta = _dict(trainjob.get("metadata"))
    return {"apiVersion": "scheduling.volcano.sh/v1beta1" if volcano else "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "ownerReferences": [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "TrainJob",
                                              "name": meta.get("name"), "uid": meta.get("uid"), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": spec}
