"""SparkConnect (``sparkoperator.k8s.io/v1alpha1``, the spark-operator since v2.3): a Spark Connect server and the
executors it starts, ganged where the operator makes them.

Sources: kubeflow/spark-operator v2.5.2 ``api/v1alpha1/sparkconnect_types.go`` (``spec.server`` and
``spec.executor``: ``cores``, ``memory``, a pod ``template``; ``spec.executor.instances``, ``spec.dynamicAllocation``,
``spec.sparkConf``) and ``internal/controller/sparkconnect``:

- the **server pod** ``<name>-server`` is made by the operator itself (``reconciler.go`` ``mutateServerPod``): the
  labels, annotations and spec of ``spec.server.template``, taken once, when the pod is created, plus a controller
  ownerReference to the SparkConnect and the labels ``spark-role: connect-server``,
  ``sparkoperator.k8s.io/connect-name``; it runs ``start-connect-server.sh``, the Spark driver of the executors;
- the **executors** are made by that server (Spark on Kubernetes, client mode) from ``spec.executor.template``,
  which the operator writes to a ConfigMap and passes as ``spark.kubernetes.executor.podTemplateFile``
  (``options.go`` ``executorPodTemplateOption``), with ``spark.executor.cores`` / ``memory`` / ``instances`` and the
  dynamic allocation settings as ``--conf`` (``executorConfOption``, ``dynamicAllocationOption``).

So admit gangs a SparkConnect as it gangs a SparkApplication (``admit.families.spark``): one PodGroup named after
the SparkConnect, minMember 1 (the server starts the executors only once it runs: a larger gang deadlocks),
``minResources`` = the server pod's requests (its template: the operator sets no resources on it; ``server.cores``
and ``memory`` are the driver's JVM settings) + the executors Spark starts with (``spark.executor.*`` plus Spark's
memory overhead, as ``spark.spark_pod_resources``); the pod-group label and ``schedulerName`` go on both templates
(an executor template admit creates when there is none: Spark merges it into each executor pod).

A SparkConnect annotated while its server runs: :func:`running_spark_connect`.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..gang.plan import GangAnnotations, GangError, GangPlan, choose_group_name, get_path
from ..gang.quantity import add_resources, format_resources, scale_resources
from .shared import RunningUpdate, RunningVerdict, WorkloadKind, object_ref, requests_of, template_target
from .spark import SPARK_BACKENDS, initial_executors, one_member, spark_pod_resources

__all__ = ["SPARK_CONNECT", "KINDS", "resolve_spark_connect", "running_spark_connect"]

GROUP = "sparkoperator.k8s.io"
SERVER = template_target(("spec", "server", "template"), "server pod template")
EXECUTOR = template_target(("spec", "executor", "template"), "executor pod template")


def _as_application(obj: dict[str, Any]) -> dict[str, Any]:
    """The SparkApplication-shaped view of a SparkConnect's executor settings, for ``spark.initial_executors`` and
    ``spark.spark_pod_resources`` (the Connect server is a JVM: Scala's memory overhead factor)."""
    spec = spec_v if isinstance(spec_v := obj.get("spec"), dict) else {}
    executor = executor_v if isinstance(executor_v := spec.get("executor"), dict) else {}
    return {"spec": {"type": "Scala", "sparkConf": spec.get("sparkConf") or {},
                     "dynamicAllocation": spec.get("dynamicAllocation"),
                     "executor": {k: executor[k] for k in ("cores", "memory", "instances") if k in executor}}}


def resolve_spark_connect(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str,
                          operation: str) -> GangPlan:
    """Plan for a SparkConnect (module docstring): minMember 1, minResources = server + initial executors.

    Raises:
        GangError: 400 without ``spec.server`` / ``spec.executor`` or with a size that does not parse; 403 for a
            minMember other than 1.
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("SparkConnect", namespace, name)
    for part in ("server", "executor"):
        if not isinstance(get_path(obj, ("spec", part)), dict):
            raise GangError(f"Add spec.{part}: {ref} has none, and a SparkConnect needs spec.server and spec.executor",
                            400)
    plan = GangPlan(kind="SparkConnect", api_group=GROUP, name=name, namespace=namespace, group_name=name,
                    min_member=one_member(ann, config, ref), total_pods=None, total_field="",
                    targets=[SERVER, EXECUTOR], schedule_timeout_seconds=ann.schedule_timeout_seconds)
    plan.group_name = choose_group_name(obj, ann, plan.targets, config, "SparkConnect", name)
    app = _as_application(obj)
    executors, source = initial_executors(app, ref)
    plan.total_pods = 1 + executors
    plan.total_field = f"1 server + {source}"
    if ann.min_resources:
        server = requests_of(get_path(obj, ("spec", "server", "template", "spec")), f"{ref} spec.server.template")
        executor = spark_pod_resources(app, "executor", ref)
        plan.min_resources = format_resources(add_resources(server, scale_resources(executor, executors))) or None
    plan.notes.append(
        f"{ref}: PodGroup {plan.group_name} gangs the Connect server pod {name}-server (minMember 1) and the "
        f"executors it starts, which join it from spec.executor.template; minResources covers the server and "
        f"{executors} executor(s)")
    return plan


def running_spark_connect(update: RunningUpdate, plan: GangPlan, config: Config) -> RunningVerdict | None:
    """``WorkloadKind.running_update`` of a SparkConnect: warn when admit's write alone changes the server template
    of a SparkConnect whose server pod exists (``status.server.podName``): the operator applies the template only
    when it creates the pod (``mutateServerPod``: "Server pod not created yet"), so the running server stays outside
    the gang until the pod is re-created."""
    pod = get_path(update.old, ("status", "server", "podName"))
    if not pod or not update.admit_alone_changes(("spec", "server", "template")):
        return None
    return RunningVerdict(
        f"{plan.ref}: its server pod {pod} exists, and the spark-operator applies spec.server.template only when it "
        f"creates that pod, so the running server stays outside PodGroup {plan.group_name}: delete pod {pod} (the "
        "operator makes it again from the template, and the executors it then starts join the gang too) when the "
        "Connect sessions on it may end", False)


SPARK_CONNECT = WorkloadKind(
    GROUP, "SparkConnect", (("v1alpha1", "sparkconnects"),), resolve_spark_connect,
    pod_joiner=None, pod_watch_selector=None, rollout=None, gang_from_parent=None, handover=None, controller_gang=None,
    in_status=False, allowed_backends=SPARK_BACKENDS,
    running_update=running_spark_connect)

KINDS = (SPARK_CONNECT,)
