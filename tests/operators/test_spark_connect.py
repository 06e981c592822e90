"""The spark-operator's SparkConnect end to end on the fake API (tests/emulations/spark_connect.py): the user's
annotated SparkConnect goes in, the operator makes the Connect server pod from its template, the server makes the
executors from theirs, each through admission, and the gang is checked as a user would."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes_asyncio import client as k8s

from admit.config import Config
from tests.emulations import spark_connect
from tests.helpers import eventually
from tests.operator_stack import PG, gang_problems, lost, operator_cluster, pod_groups_of

CONFIG = Config()
NS = "default"
API = ("sparkoperator.k8s.io", "v1alpha1", NS, "sparkconnects")


def connect(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """kubeflow/spark-operator v2.5.2 ``examples/sparkconnect/spark-connect.yaml``, annotated."""
    return {"apiVersion": "sparkoperator.k8s.io/v1alpha1", "kind": "SparkConnect",
            "metadata": {"name": "spark-connect", "namespace": NS, "labels": {"team": "bi"},
                         "annotations": {"gang.admit.dev/min-member": "auto"} if annotations is None else annotations},
            "spec": {"sparkVersion": "4.0.4",
                     "server": {"template": {
                         "metadata": {"labels": {"key1": "value1"}, "annotations": {"key3": "value3"}},
                         "spec": {"containers": [{"name": "spark-kubernetes-driver",
                                                  "image": "docker.io/apache/spark:4.0.4",
                                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                                "limits": {"cpu": "1", "memory": "1Gi"}}}],
                                  "serviceAccount": "spark-operator-spark"}}},
                     "executor": {"instances": 2, "cores": 1, "memory": "512m", "template": {
                         "metadata": {"labels": {"key1": "value1"}},
                         "spec": {"containers": [{"name": "spark-kubernetes-executor",
                                                  "image": "docker.io/apache/spark:4.0.4"}]}}}}}


def pods(fake: Any) -> list[dict[str, Any]]:
    return [p for p in fake.objects("pods", NS)
            if (p["metadata"].get("labels") or {}).get(spark_connect.CONNECT_NAME) == "spark-connect"]


async def test_a_spark_connect_server_and_its_executors_are_one_gang_sized_by_their_resources(aiohttp_server):
    # SparkConnect was no kind of admit's: its annotations were never read and its pods never ganged.
    async with operator_cluster(aiohttp_server, CONFIG, spark_connect.install) as (fake, op, user):
        written = connect()
        await k8s.CustomObjectsApi(user).create_namespaced_custom_object(*API[:3], API[3], copy.deepcopy(written))
        await eventually(lambda: len(pods(fake)) == 3)
        await op.idle()
        made = pods(fake)
        assert sorted(p["metadata"]["labels"]["spark-role"] for p in made) == ["connect-server", "executor", "executor"]
        assert gang_problems(fake, NS, made, CONFIG) == [] and pod_groups_of(fake, NS) == ["spark-connect"]
        pg = fake.get(*PG, NS, "spark-connect")
        # the server's template requests + 2 executors of 1 core and 512m + Spark's 384Mi overhead
        assert pg["spec"] == {"minMember": 1, "minResources": {"cpu": "3", "memory": "2816Mi"}}
        stored = fake.get("sparkoperator.k8s.io/v1alpha1", "sparkconnects", NS, "spark-connect")
        assert lost(written, stored) == {} and op.errors == []


async def test_annotating_a_spark_connect_whose_server_runs_warns_that_the_server_joins_when_re_created(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, spark_connect.install) as (fake, op, user):
        api = k8s.CustomObjectsApi(user)
        await api.create_namespaced_custom_object(*API[:3], API[3], connect(annotations={}))
        await eventually(lambda: len(pods(fake)) == 3)
        await op.idle()
        stored = fake.get("sparkoperator.k8s.io/v1alpha1", "sparkconnects", NS, "spark-connect")
        stored["metadata"]["annotations"] = {"gang.admit.dev/min-member": "auto"}
        await api.replace_namespaced_custom_object(*API[:3], API[3], "spark-connect", stored)
        warnings = " ".join(w for _, _, w in fake.admission.warnings)
        assert "its server pod spark-connect-server exists" in warnings and "delete pod spark-connect-server" in warnings
        server = fake.get("v1", "pods", NS, "spark-connect-server")
        assert "scheduling.x-k8s.io/pod-group" not in server["metadata"]["labels"]  # as the operator leaves it
