"""The spark-operator's SparkConnect controller (kubeflow/spark-operator v2.5.2, ``internal/controller/sparkconnect``)
and the Spark Connect server it starts, as the fake API runs them, every Pod created through the fake's admission
chain:

- **the server pod** ``<name>-server`` (``reconciler.go`` ``createOrUpdateServerPod`` -> ``mutateServerPod``): when
  the pod does not exist yet, the labels, annotations and spec of ``spec.server.template`` (a container
  ``spark-kubernetes-driver`` added when the template has none, its image ``spec.image``), then a controller
  ownerReference to the SparkConnect and the labels ``sparkoperator.k8s.io/launched-by-spark-operator: "true"``,
  ``sparkoperator.k8s.io/connect-name``, ``spark-role: connect-server``, ``spark-version`` (``util.go``
  ``GetServerSelectorLabels``), as the operator's ServiceAccount. An existing pod keeps its labels and spec: the
  template is applied only at creation. The status write ``status.server.podName`` follows
  (``updateSparkConnectStatus``);
- **the executors** the running server starts (Spark on Kubernetes in client mode; Spark's side **unconfirmed**, as
  in ``tests/emulations/spark.py``): ``spec.executor.instances`` (default 1 here) pods ``<name>-exec-<n>``
  (``spark.kubernetes.executor.podNamePrefix`` = the SparkConnect's name, ``options.go`` ``executorConfOption``) from
  ``spec.executor.template`` (``executorPodTemplateOption``: the template file), with the SparkConnect's labels
  (``spark.kubernetes.executor.label.*``), ``spark-role: executor``, ``sparkoperator.k8s.io/connect-name`` and a
  controller ownerReference to the server pod, created by the server's ServiceAccount.

Not emulated: the ConfigMap and the Service, readiness, dynamic allocation after start, the operator's SparkConnect
webhooks (defaults and validation of fields admit does not write).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .kit import OperatorEmulation, controller_ref, service_account

if TYPE_CHECKING:
    from admit.testing.fake_kube import FakeKubeAPI

__all__ = ["SparkConnectOperator", "install", "server_pod", "executor_pods"]

JSON = dict[str, Any]
API = "sparkoperator.k8s.io/v1alpha1"
CONNECT_NAME = "sparkoperator.k8s.io/connect-name"
LAUNCHED = "sparkoperator.k8s.io/launched-by-spark-operator"


def server_pod(conn: JSON) -> JSON:
    """``mutateServerPod`` for a pod not created yet."""
    spec = conn.get("spec") or {}
    template = copy.deepcopy(((spec.get("server") or {}).get("template")) or {})
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    containers = pod_spec.setdefault("containers", [])
    if not containers:
        containers.append({"name": "spark-kubernetes-driver"})
    driver = next((c for c in containers if c.get("name") == "spark-kubernetes-driver"), containers[0])
    driver.setdefault("image", spec.get("image") or "spark:4.0.4")
    labels = {**(meta.get("labels") or {}), LAUNCHED: "true", CONNECT_NAME: conn["metadata"]["name"],
              "spark-role": "connect-server", "spark-version": str(spec.get("sparkVersion") or "")}
    pod: JSON = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{conn['metadata']['name']}-server",
                              "namespace": conn["metadata"].get("namespace"), "labels": labels,
                              "ownerReferences": [controller_ref(conn)]},
                 "spec": pod_spec}
    if meta.get("annotations"):
        pod["metadata"]["annotations"] = dict(meta["annotations"])
    return pod


def executor_pods(conn: JSON, server: JSON) -> list[JSON]:
    """The executors the server starts (module docstring)."""
    spec = conn.get("spec") or {}
    executor = spec.get("executor") or {}
    template = executor.get("template") or {}
    name = conn["metadata"]["name"]
    pods = []
    for n in range(1, int(executor.get("instances") or 1) + 1):
        pod_spec = copy.deepcopy(template.get("spec") or {})
        if not pod_spec.get("containers"):
            pod_spec["containers"] = [{"name": "spark-kubernetes-executor", "image": spec.get("image") or "spark"}]
        labels = {**((template.get("metadata") or {}).get("labels") or {}), **(conn["metadata"].get("labels") or {}),
                  LAUNCHED: "true", CONNECT_NAME: name, "spark-role": "executor", "spark-exec-id": str(n)}
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{name}-exec-{n}", "namespace": conn["metadata"].get("namespace"),
                                  "labels": labels, "ownerReferences": [controller_ref(server)]},
                     "spec": pod_spec})
    return pods


class SparkConnectOperator(OperatorEmulation):
    """The SparkConnect controller of one :class:`FakeKubeAPI` (module docstring)."""

    component = "spark-connect-controller"

    def __init__(self, api: "FakeKubeAPI") -> None:
        super().__init__(api, service_account("spark-operator", "spark-operator-controller"))
        self.watch(API, "sparkconnects", self._sync)

    async def _sync(self, ns: str, name: str) -> None:
        conn = self.live(API, "sparkconnects", ns, name)
        if conn is None or self.api.get("v1", "pods", ns, f"{name}-server") is not None:
            return  # an existing server pod keeps what it was created with
        server = await self.create(conn, "v1", "pods", server_pod(conn), "SparkConnectServerPodCreationFailed")
        if server is None:
            return
        stored = self.api.get(API, "sparkconnects", ns, name)
        if stored is not None:
            stored["status"] = {"server": {"podName": server["metadata"]["name"]}}
            self.api.put(stored)
        sa = service_account(ns, str((server.get("spec") or {}).get("serviceAccountName") or "default"))
        for pod in executor_pods(conn, server):
            await self.create(server, "v1", "pods", pod, "ExecutorPodCreationFailed", user=sa)


def install(api: "FakeKubeAPI", chain: Any = None) -> SparkConnectOperator:
    """Run the SparkConnect controller on ``api`` (it has no webhook admit's writes meet)."""
    return api.add_controller(SparkConnectOperator(api))
