"""Every refusal admit gives reaches the user with its fix first: an imperative (set, raise, lower, scale, ...), then
a colon and why.

kubectl prints a refusal as ``Error from server (Forbidden): admission webhook "..." denied the request: <message>``
and a terminal often cuts that line at its width, so the words a user needs to act come first, as warnings' do
(``test_warnings_fit.py``). The corpus is the repository's own refused examples (``examples/denied/``),
real-shaped manifests of every kind whose gang admit refuses below its minMember, and one case for each other refusal
admit builds (malformed annotations and counts, each family's shapes, hand-written PodGroups, AdmissionReviews of the
UPDATEs a rollout or an operator would turn against the gang, TrainJobs with the runtime admit reads), through
``admit review`` (the webhook's own ``/mutate`` and ``/validate``); and the refusals of failure mode ``deny``.
"""

from __future__ import annotations

import asyncio
import copy
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from admit.cli import build_parser, config_from_args
from admit.cli.review import review_documents
from admit.config import Config
from admit.kube.client import KubeError
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import dumps, parse_review
from tests.helpers import admission_review, example

ROOT = Path(__file__).resolve().parents[2]

#: The verbs a refusal may open with: each names what the user does next.
IMPERATIVES = frozenset({"Set", "Raise", "Lower", "Scale", "Add", "Remove", "Rename", "Delete", "Use", "Run",
                         "Change", "Give", "Drop", "Create", "Keep", "Wait", "Enable", "Move", "Make", "Put",
                         "Label", "Annotate", "Split", "Quote", "Write", "Name", "Install", "Retry", "Report"})


def _statefulset(replicas: int, min_member: int) -> str:
    return f"""
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: kafka, namespace: data, annotations: {{gang.admit.dev/min-member: "{min_member}"}}}}
spec:
  replicas: {replicas}
  podManagementPolicy: Parallel
  serviceName: kafka
  selector: {{matchLabels: {{app: kafka}}}}
  template:
    metadata: {{labels: {{app: kafka}}}}
    spec: {{containers: [{{name: kafka, image: apache/kafka:3.9.0}}]}}
"""


_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: shards, namespace: ml, annotations: {gang.admit.dev/min-member: "4"}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: w, image: busybox:1.36, command: [sh, -c, "sleep 5"]}]
"""

_PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp, namespace: ml, annotations: {gang.admit.dev/min-member: "5"}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: pytorch, image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: pytorch, image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime}]}}
"""


def _denied_examples() -> list[tuple[str, list[dict[str, Any]]]]:
    cases = []
    for path in sorted((ROOT / "examples" / "denied").iterdir()):
        if path.suffix == ".yaml":
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        else:  # an AdmissionReview of a Scale: reviewed with the workload it scales
            docs = [*yaml.safe_load_all((ROOT / "examples" / "web-gang-deployment.yaml").read_text()),
                    *yaml.safe_load_all((ROOT / "examples" / "paused-gang-deployment.yaml").read_text()),
                    yaml.safe_load(path.read_text())]
        cases.append((f"examples/denied/{path.name}", [d for d in docs if d]))
    return cases


# Real-shaped manifests (the repository's examples, changed where a user gets them wrong) and AdmissionReviews of
# UPDATEs as kube-apiserver sends them, one per refusal admit builds outside a gang's size: each must reach its
# refusal and lead with the fix.

def _ex(name: str) -> dict[str, Any]:
    return example(name)


def _with(name: str, change: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """``examples/<name>``'s first document, changed in place by ``change``."""
    doc = _ex(name)
    change(doc)
    return [doc]


def _annotate(**values: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["metadata"].setdefault("annotations", {}).update(
            {f"gang.admit.dev/{k.replace('_', '-')}": v for k, v in values.items()})
    return change


def _set(path: str, value: Any, key: str | None = None) -> Callable[[dict[str, Any]], None]:
    """Set the dotted ``path`` (list indexes as numbers), or its map's ``key`` (a label or annotation key, dots and
    all); ``None`` deletes it."""
    def change(doc: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")] + ([key] if key else [])
        node: Any = doc
        for p in parents:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return change


def _both(*changes: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for c in changes:
            c(doc)
    return change


def _update(old: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """The AdmissionReview of an UPDATE of stored ``old`` by ``change``, as kube-apiserver sends it to /mutate."""
    new = copy.deepcopy(old)
    change(new)
    return [admission_review(new, "UPDATE", old=old)]


def _running_deployment() -> dict[str, Any]:
    """tests/webhook/test_rollout.py's: a Deployment as kube-apiserver stores it, 3 pods without a gang."""
    dep = _ex("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {}
    dep["spec"]["replicas"] = 3
    dep["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    return dep


def _running_statefulset() -> dict[str, Any]:
    sts = _ex("etcd-statefulset.yaml")
    sts["metadata"]["annotations"] = {}
    sts["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    return sts


def _running_raycluster() -> dict[str, Any]:
    ray = _ex("raycluster-autoscaler.yaml")
    ray["metadata"]["annotations"] = {}
    ray["spec"]["enableInTreeAutoscaling"] = False
    ray["status"] = {"state": "ready", "readyWorkerReplicas": 3}
    return ray


def _submitted_spark(annotated: bool) -> dict[str, Any]:
    app = _ex("spark-pi-scala.yaml")
    if not annotated:
        app["metadata"]["annotations"] = {}
    else:  # as admit's mutation stored it
        for role in ("driver", "executor"):
            app["spec"][role]["labels"]["scheduling.x-k8s.io/pod-group"] = "spark-pi"
            app["spec"][role]["schedulerName"] = "scheduler-plugins-scheduler"
    app["status"] = {"applicationState": {"state": "RUNNING"}}
    return app


def _torchtune_runtime(pod_group_policy: bool) -> dict[str, Any]:
    """A ClusterTrainingRuntime of Trainer's torchtune shape (manifests/base/runtimes/torchtune): two initializers
    the trainer node waits to complete."""
    def step(name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"name": name, **(extra or {}), "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name}},
            "spec": {"template": {"spec": {"containers": [{"name": name, "image": f"ghcr.io/kubeflow/trainer/{name}"}]}}}}}
    node = step("node", {"dependsOn": [{"name": "dataset-initializer", "status": "Complete"},
                                       {"name": "model-initializer", "status": "Complete"}]})
    node["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] = "trainer"
    spec: dict[str, Any] = {"mlPolicy": {"numNodes": 1, "torch": {}},
                            "template": {"spec": {"replicatedJobs": [step("dataset-initializer"),
                                                                     step("model-initializer"), node]}}}
    if pod_group_policy:
        spec["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 120}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torchtune-llama3-2-1b", "labels": {"trainer.kubeflow.org/framework": "torchtune"}},
            "spec": spec}


def _deepspeed_runtime() -> dict[str, Any]:
    """Trainer's deepspeed-distributed ClusterTrainingRuntime (manifests/base/runtimes/deepspeed_distributed.yaml):
    the launcher, the trainer step, starts once the nodes are Ready."""
    def job(name: str, step: str | None, extra: dict[str, Any]) -> dict[str, Any]:
        labels = {"trainer.kubeflow.org/trainjob-ancestor-step": step} if step else {}
        return {"name": name, **extra, "template": {"metadata": {"labels": labels}, "spec": {"template": {"spec": {
            "containers": [{"name": name, "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime"}]}}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "deepspeed-distributed", "labels": {"trainer.kubeflow.org/framework": "deepspeed"}},
            "spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                                          "runLauncherAsNode": True}},
                     "template": {"spec": {"replicatedJobs": [
                         job("node", None, {}),
                         job("launcher", "trainer", {"dependsOn": [{"name": "node", "status": "Ready"}]})]}}}}


def _trainjob(runtime: str, annotations: dict[str, str], nodes: int = 2) -> dict[str, Any]:
    job = _ex("trainjob-torch.yaml")
    job["metadata"]["annotations"] = dict(annotations)
    job["spec"]["runtimeRef"] = {"name": runtime}
    job["spec"]["trainer"]["numNodes"] = nodes
    return job


def _running_trainjob(entry: dict[str, str] | None) -> dict[str, Any]:
    """A TrainJob as stored, not suspended: with admit's runtimePatches entry carrying ``entry``, or created without
    the gang annotations (``None``)."""
    job = _trainjob("torch-distributed", {} if entry is None else entry)
    if entry is not None:
        job["spec"]["runtimePatches"] = [{"manager": "gang.admit.dev/admit", "trainingRuntimeSpec": {"template": {
            "metadata": {"annotations": entry}}}}]
    return job


def _foreign_pod_group(min_member: int) -> dict[str, Any]:
    """A PodGroup written by hand, as scheduler-plugins' own example (``pg1``)."""
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "pause", "namespace": "default"}, "spec": {"minMember": min_member}}


def _argo_step_pod() -> dict[str, Any]:
    """A step pod of examples/argo-workflow-gang-step.yaml as the Argo controller creates it, asking for auto."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-a8u7o-worker-1234567890", "namespace": "default",
        "labels": {"workflows.argoproj.io/workflow": "train-a8u7o", "workflows.argoproj.io/completed": "false"},
        "annotations": {"workflows.argoproj.io/node-name": "train-a8u7o[0].train(0:0)(0)",
                        "workflows.argoproj.io/node-id": "train-a8u7o-1234567890",
                        "gang.admit.dev/min-member": "auto"},
        "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "train-a8u7o",
                             "uid": "7b0d5f0e-3d5c-4a7e-9a43-0d2b7c1e9f10", "controller": True,
                             "blockOwnerDeletion": True}]},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "ghcr.io/example/trainer:1.0", "command": ["python", "train.py"],
             "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}


FURTHER = [
    # gang annotations a user gets wrong (gang/plan.py)
    ("min-member not a number", _with("web-gang-deployment.yaml", _annotate(min_member="three"))),
    ("min-member unquoted in YAML", _with("web-gang-deployment.yaml", _annotate(min_member=3))),
    ("schedule timeout above 15 minutes", _with("web-gang-deployment.yaml",
                                                _annotate(schedule_timeout_seconds="3600"))),
    ("min-resources neither auto nor none", _with("web-gang-deployment.yaml", _annotate(min_resources="yes"))),
    ("unknown gang backend", _with("web-gang-deployment.yaml", _annotate(backend="volcano"))),
    ("gang backend known but not enabled", _with("web-gang-deployment.yaml", _annotate(backend="workload-api"))),
    ("replicas not an integer", _with("web-gang-deployment.yaml", _set("spec.replicas", "3"))),
    ("pod-group label contradicting the annotation", _with("web-gang-deployment.yaml", _both(
        _annotate(pod_group="web"), _set("spec.template.metadata.labels", {
            "app": "web", "scheduling.x-k8s.io/pod-group": "frontend"})))),
    ("a quantity that does not parse", _with("web-gang-deployment.yaml", _set(
        "spec.template.spec.containers.0.resources", {"requests": {"cpu": "two"}}))),
    ("Kueue pod group name that cannot name a PodGroup", _with("kueue-plain-pod-group.yaml", _set(
        "metadata.labels", "Sample_Group", "kueue.x-k8s.io/pod-group-name"))),
    ("Job with a partial admission minMember cannot survive", _with("training-job.yaml", _both(
        _annotate(min_member="4"), _set("metadata.annotations", "2", "kueue.x-k8s.io/job-min-parallelism")))),
    ("CronJob whose Jobs carry a bad count", _with("cronjob-nightly-eval.yaml", _set(
        "spec.jobTemplate.spec.parallelism", "2"))),
    ("Argo step pod asking for auto", [_argo_step_pod()]),
    # a hand-written PodGroup of the same name (backends/coscheduling/podgroup.py)
    ("PodGroup of that name not made by admit", [_foreign_pod_group(3), _ex("pause-gang-deployment.yaml")]),
    ("PodGroup named that it can never fill", [
        _foreign_pod_group(5), *_with("pause-gang-deployment.yaml", _annotate(pod_group="pause"))]),
    # shapes of each family
    ("JobSet without replicatedJobs", _with("jobset-pytorch.yaml", _set("spec.replicatedJobs", []))),
    ("JobSet replicatedJob without a pod template", _with("jobset-pytorch.yaml", _set(
        "spec.replicatedJobs.1.template.spec.template", None))),
    ("JobSet exclusive placement above its leaders", _with("jobset-pytorch.yaml", _both(
        _annotate(min_member="4"), _set("metadata.annotations", "cloud.google.com/gke-nodepool",
                                        "alpha.jobset.sigs.k8s.io/exclusive-topology")))),
    ("MPIJob WaitForWorkersReady above its workers", _with("mpijob-v2beta1.yaml", _both(
        _annotate(min_member="3"), _set("spec.launcherCreationPolicy", "WaitForWorkersReady")))),
    ("MPIJob without replica specs", _with("mpijob-v2beta1.yaml", _set("spec.mpiReplicaSpecs", {}))),
    ("MPIJob Worker without a pod template", _with("mpijob-v2beta1.yaml", _set(
        "spec.mpiReplicaSpecs.Worker.template", None))),
    ("PyTorchJob elastic minReplicas above maxReplicas", _with("pytorchjob-elastic.yaml", _both(
        _set("spec.elasticPolicy.minReplicas", 5), _set("spec.elasticPolicy.maxReplicas", 3)))),
    ("TFJob minAvailable 0", _with("tfjob-ps-worker.yaml", _set("spec.runPolicy", {
        "schedulingPolicy": {"minAvailable": 0}}))),
    ("LWS naming its PodGroup", _with("leaderworkerset-vllm.yaml", _annotate(pod_group="vllm"))),
    ("LWS with a pod-group label", _with("leaderworkerset-vllm.yaml", _set(
        "spec.leaderWorkerTemplate.leaderTemplate.metadata.labels", "vllm", "scheduling.x-k8s.io/pod-group"))),
    ("LWS name too long for its last group", _with("leaderworkerset-vllm.yaml", _set(
        "metadata.name", "vllm-" + "llama-3-1-405b-instruct-" * 2))),
    ("LWS without a worker template", _with("leaderworkerset-vllm.yaml", _set(
        "spec.leaderWorkerTemplate.workerTemplate", None))),
    ("RayCluster without a head template", _with("raycluster-autoscaler.yaml", _set("spec.headGroupSpec", {}))),
    ("RayCluster worker group minReplicas above maxReplicas", _with("raycluster-autoscaler.yaml", _set(
        "spec.workerGroupSpecs.0.minReplicas", 20))),
    ("RayJob without a cluster spec", _with("rayjob-sample.yaml", _set("spec.rayClusterSpec", None))),
    ("SparkApplication memory as a fraction", _with("spark-pi-scala.yaml", _set("spec.driver.memory", "1.5g"))),
    ("SparkApplication with a fixed minMember", _with("spark-pi-scala.yaml", _annotate(min_member="5"))),
    ("SparkApplication dynamic allocation above maxExecutors", _with("spark-pi-scala.yaml", _set(
        "spec.dynamicAllocation", {"enabled": True, "initialExecutors": 6, "minExecutors": 2, "maxExecutors": 4}))),
    ("SparkApplication without an executor", _with("spark-pi-scala.yaml", _set("spec.executor", None))),
    ("spark-submit driver with a bad executor count", _with("spark-submit-pods.yaml", _annotate(
        spark_executors="four"))),
    ("SparkConnect without a server", [{**yaml.safe_load((ROOT / "tests" / "manifests" / "sparkconnect.yaml")
                                                        .read_text()), "spec": {"sparkVersion": "4.0.4",
                                                                                "executor": {"instances": 2}}}]),
    ("TrainJob on a runtime whose own gang deadlocks", [
        _torchtune_runtime(True), _trainjob("torchtune-llama3-2-1b", {"gang.admit.dev/min-member": "auto"})]),
    ("TrainJob on a runtime whose JobSet admit would refuse", [
        _deepspeed_runtime(), _trainjob("deepspeed-distributed", {"gang.admit.dev/min-member": "auto"}, nodes=3)]),
    # UPDATEs of stored objects (webhook/rollout.py and the families' running rules)
    ("Deployment rolled into a gang", _update(_running_deployment(), _annotate(min_member="3"))),
    ("StatefulSet rolled into a gang", _update(_running_statefulset(), _annotate(min_member="3"))),
    ("running RayCluster annotated", _update(_running_raycluster(), _annotate(min_member="auto"))),
    ("submitted SparkApplication annotated", _update(_submitted_spark(False), _annotate(min_member="auto"))),
    ("submitted SparkApplication un-annotated", _update(_submitted_spark(True), _set("metadata.annotations", {}))),
    ("running TrainJob created without the annotations", _update(_running_trainjob(None), _annotate(
        min_member="auto"))),
    ("running TrainJob whose gang annotations change", _update(
        _running_trainjob({"gang.admit.dev/min-member": "auto"}), _annotate(min_member="2"))),
]


CASES = [*_denied_examples(),
         ("StatefulSet below its minMember", list(yaml.safe_load_all(_statefulset(2, 3)))),
         ("Job below its minMember", list(yaml.safe_load_all(_JOB))),
         ("PyTorchJob below its minMember", list(yaml.safe_load_all(_PYTORCHJOB))),
         *FURTHER]


def _refusals(docs: list[dict[str, Any]]) -> list[str]:
    config = config_from_args(build_parser().parse_args(["review", "-"]))
    results = asyncio.run(review_documents([(f"doc#{i}", d) for i, d in enumerate(docs)], config))
    return [r["message"] for r in results if r["allowed"] is False]


def leads_with_fix(message: str) -> bool:
    """Whether ``message`` opens with an imperative of :data:`IMPERATIVES` and gives its reason after a colon."""
    first = re.match(r"[A-Za-z]+", message)
    return first is not None and first.group() in IMPERATIVES and ": " in message


@pytest.mark.parametrize("name, docs", CASES, ids=[c[0] for c in CASES])
def test_every_refusal_leads_with_an_imperative_fix_and_then_says_why(name: str, docs: list[dict[str, Any]]) -> None:
    refusals = _refusals(docs)
    assert refusals, f"{name} is no longer refused"
    for message in refusals:
        assert leads_with_fix(message), f"{name}: the fix does not come first: {message}"


class _FailingAPI:
    """An API server that answers every read and write of a PodGroup with ``error`` (an exception instance)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def get_object(self, *args: Any) -> dict[str, Any] | None:
        raise self.error

    async def create_object(self, *args: Any) -> dict[str, Any]:
        raise self.error

    async def patch_object(self, *args: Any) -> dict[str, Any]:
        raise self.error

    async def delete_object(self, *args: Any) -> None:
        raise self.error


@pytest.mark.parametrize("error, code", [
    (KubeError(0, "Timeout", "POST podgroups: no answer from the Kubernetes API within 2s"), 503),
    (KubeError(404, "NotFound", "the server could not find the requested resource"), 503),
    (RuntimeError("a bug"), 500),
], ids=["API timeout", "PodGroup CRD not installed", "a bug in admit"])
def test_a_refusal_by_failure_mode_deny_leads_with_its_fix_too(error: Exception, code: int) -> None:
    review = parse_review(dumps(admission_review(example("pause-gang-deployment.yaml"))))
    decision = asyncio.run(Admission(Config(), _FailingAPI(error)).validate(review))
    assert decision.allowed is False and decision.code == code
    assert leads_with_fix(decision.message), decision.message
    assert "failure mode 'deny'" in decision.message
